"""charts/disttrain/examples/kserve-inferenceservice.yaml: KServe's InferenceService on the run's SavedModel.

No KServe CRD schema is available offline (kubernetes-validate ships the built-in kinds only, which
the first test shows), so the example is checked field by field against the types of KServe's own
Python SDK (kserve==0.21.0, requirements-kserve.txt), by kserve_types_check.py run in the SDK's own
venv (tests/kserve_venv.py says why): every key must be a field of the SDK's model class at that
place, with a value of the field's type. Then its storageUri is checked against the chart: the
claim the chart creates and the base path TF Serving gets there. The README shows the same YAML.
"""

import json
import os
import re
import textwrap

import pytest

from chartlib import CHART, NAMES, ROOT, yaml
from kserve_venv import run_with_kserve

EXAMPLE = CHART / "examples" / "kserve-inferenceservice.yaml"
CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kserve_types_check.py")


@pytest.fixture(scope="module")
def isvc():
    return yaml.safe_load(EXAMPLE.read_text())


def sdk_verdicts(documents):
    """One run of the SDK's type check over several documents: None (fits) or the message, each."""
    done = run_with_kserve(CHECK, stdin=json.dumps(documents), timeout=120)
    assert done.returncode == 0, f"kserve_types_check.py failed (exit {done.returncode}): {done.stderr[-3000:]}"
    return json.loads(done.stdout)


BAD = [
    (
        {"predictor": {"model": {"modelFormat": {"name": "tensorflow"}, "storageURI": "pvc://x"}}},
        "'storageURI' is not a field of V1beta1ModelSpec",
    ),
    (
        {"predictor": {"tensorflow": {"storageUri": "pvc://x"}, "replicas": 1}},
        "'replicas' is not a field of V1beta1PredictorSpec",
    ),
    ({"predictor": {"model": {"resources": {"limits": ["1"]}}}}, "spec.predictor.model.resources.limits: not a map"),
]


def test_kubernetes_validate_has_no_kserve_schema(isvc):
    """Why the SDK's types are used: kubernetes-validate knows the built-in kinds only."""
    import kubernetes_validate

    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(isvc, "1.33.0", strict=True)


def test_the_example_fits_kserves_sdk_types_and_the_check_can_fail(isvc):
    """The example fits; a misspelt field, a field at the wrong place, a wrong type and a wrong
    apiVersion do not (the check itself can fail)."""
    wrong_api = dict(isvc, apiVersion="serving.kserve.io/v1alpha1")
    bad = [{"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "spec": spec} for spec, _ in BAD]
    verdicts = sdk_verdicts([isvc, wrong_api, *bad])
    assert verdicts[0] is None, verdicts[0]
    assert "apiVersion/kind serving.kserve.io/v1alpha1/InferenceService are not the SDK's" in verdicts[1]
    for (_, message), verdict in zip(BAD, verdicts[2:]):
        assert verdict is not None and message in verdict, (message, verdict)


def test_the_example_serves_the_charts_saved_model_with_tf_serving(isvc, tfserving_manifest):
    model = isvc["spec"]["predictor"]["model"]
    assert model["modelFormat"] == {"name": "tensorflow"}
    claim = tfserving_manifest.get(NAMES["claim"])["metadata"]["name"]
    (container,) = tfserving_manifest.get(NAMES["server"])["spec"]["template"]["spec"]["containers"]
    base = dict(a.removeprefix("--").split("=", 1) for a in container["args"])["model_base_path"]
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "workdir")
    assert model["storageUri"] == f"pvc://{claim}/{base.removeprefix(mount + '/')}"
    assert model["storageUri"] == "pvc://dt-disttrain-workdir/run-1/final/saved_model"
    assert isvc["metadata"]["name"] == "disttrain" == container["args"][0].removeprefix("--model_name=")
    assert "namespace" not in isvc["metadata"]  # applied in the release's namespace, where the claim is


def test_the_readme_shows_the_example():
    readme = (CHART / "README.md").read_text()
    body = "\n".join(line for line in EXAMPLE.read_text().splitlines() if not line.startswith("#"))
    (block,) = re.findall(r"\n( *)```yaml\n(.*?)\n\1```", readme, re.S)  # in a list item: indented
    assert textwrap.dedent(block[1]) == body
    assert (
        "charts/disttrain/examples/kserve-inferenceservice.yaml" in (ROOT / "docs" / "serving.md").read_text()
    )  # the serving page tells it
