"""charts/disttrain/examples/kserve-inferenceservice.yaml: KServe's InferenceService on the run's SavedModel.

No KServe CRD schema is available offline (kubernetes-validate ships the built-in kinds only, which
the first test shows), so the example is checked field by field against the types of KServe's own
Python SDK (kserve==0.21.0, pinned in requirements-dev.txt): every key must be a field of the
SDK's model class at that place (V1beta1InferenceService, V1beta1ModelSpec, the Kubernetes
client's V1ResourceRequirements, ...), with a value of the field's type. Then its storageUri is
checked against the chart: the claim the chart creates and the base path TF Serving gets there.
The README shows the same YAML.
"""

import re
import textwrap

import pytest

from chartlib import CHART, NAMES, ROOT, yaml

EXAMPLE = CHART / "examples" / "kserve-inferenceservice.yaml"
kserve = pytest.importorskip("kserve", reason="the kserve SDK is pinned in requirements-dev.txt")


@pytest.fixture(scope="module")
def isvc():
    return yaml.safe_load(EXAMPLE.read_text())


def sdk_class(name):
    import kubernetes.client

    for module in (kserve, kubernetes.client):
        if hasattr(module, name):
            return getattr(module, name)
    raise AssertionError(f"no SDK model class {name}")


PRIMITIVES = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object}


def check(value, type_name, where):
    """Raise AssertionError naming the path of the first value that the SDK's types do not allow."""
    if type_name in PRIMITIVES:
        assert isinstance(value, PRIMITIVES[type_name]), f"{where}: {value!r} is not {type_name}"
        return
    if m := re.fullmatch(r"[lL]ist\[(.+)\]", type_name):
        assert isinstance(value, list), f"{where}: not a list"
        for i, item in enumerate(value):
            check(item, m.group(1), f"{where}[{i}]")
        return
    if m := re.fullmatch(r"dict\(str, (.+)\)|Dict\[str, (.+)\]", type_name):  # the kubernetes client's and KServe's spellings
        assert isinstance(value, dict), f"{where}: not a map"
        for key, item in value.items():
            check(item, m.group(1) or m.group(2), f"{where}.{key}")
        return
    cls = sdk_class(type_name)
    assert isinstance(value, dict), f"{where}: not an object ({type_name})"
    by_key = {key: attr for attr, key in cls.attribute_map.items()}
    for key, item in value.items():
        assert key in by_key, f"{where}: {key!r} is not a field of {type_name} (fields: {sorted(by_key)})"
        check(item, cls.openapi_types[by_key[key]], f"{where}.{key}")


def test_kubernetes_validate_has_no_kserve_schema(isvc):
    """Why the SDK's types are used: kubernetes-validate knows the built-in kinds only."""
    import kubernetes_validate

    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(isvc, "1.33.0", strict=True)


def test_the_example_fits_kserves_sdk_types(isvc):
    check(isvc, "V1beta1InferenceService", "InferenceService")
    assert isvc["apiVersion"] == kserve.constants.KSERVE_V1BETA1 and isvc["kind"] == kserve.constants.KSERVE_KIND_INFERENCESERVICE


@pytest.mark.parametrize("bad, message", [
    ({"predictor": {"model": {"modelFormat": {"name": "tensorflow"}, "storageURI": "pvc://x"}}}, "'storageURI' is not a field of V1beta1ModelSpec"),
    ({"predictor": {"tensorflow": {"storageUri": "pvc://x"}, "replicas": 1}}, "'replicas' is not a field of V1beta1PredictorSpec"),
    ({"predictor": {"model": {"resources": {"limits": ["1"]}}}}, "spec.predictor.model.resources.limits: not a map"),
])
def test_the_check_refuses_what_kserve_does_not_know(bad, message):
    """The check itself can fail: a misspelt field, a field at the wrong place, a wrong type."""
    with pytest.raises(AssertionError, match=re.escape(message)):
        check({"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "spec": bad}, "V1beta1InferenceService", "InferenceService")


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
    assert "charts/disttrain/examples/kserve-inferenceservice.yaml" in (ROOT / "README.md").read_text()
