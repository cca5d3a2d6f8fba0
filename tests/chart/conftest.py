"""pytest-helm session fixtures: one rendering of each ci/ values file, indexed by kind and name.

`<variant>_manifest` (dashes as underscores, e.g. `defaults_manifest`, `tfserving_manifest`) is a
pytest-helm ManifestIndex: `.get("Deployment/dt-disttrain-server")` returns that one manifest (a
python-box Box, a dict), and fails with the names that exist when it is not there. Its parser
refuses a rendering with two resources of the same apiVersion, kind and name
(DuplicateManifestError), which `helm install` would refuse too.
What pytest-helm does not do stays in chartlib.py (renderings with per-test --set values, other
Kubernetes versions, Helm 3, expected failures); its docstring says why.
"""

import functools

from pytest_helm import manifest_fixture

from chartlib import CHART, CI_VALUES, DEFAULT_KUBE, NAMESPACE, RELEASE, ROOT, VARIANTS

HELM = str(ROOT / "tests" / "chart" / "helm.sh")

# kubernetes-validate reads and parses its schema files (a 1.4 MB _definitions.json among them) again on
# every validate call, and the chart tests validate thousands of manifests: a fifth of their time. The
# files are its packaged data, the same for the whole run, and jsonschema only reads them: read each once.
try:
    import kubernetes_validate.utils as _kubernetes_validate
except ImportError:  # the tests that need it skip themselves
    pass
else:
    _kubernetes_validate.schema_contents = functools.lru_cache(maxsize=None)(_kubernetes_validate.schema_contents)


def template_command(variant):
    """The same rendering as chartlib.render(variant): release dt, namespace ml, DEFAULT_KUBE."""
    return [
        HELM,
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--kube-version",
        DEFAULT_KUBE,
        "-f",
        str(CI_VALUES / VARIANTS[variant]),
    ]


for _variant in VARIANTS:
    _name = f"{_variant.replace('-', '_')}_manifest"
    globals()[_name] = manifest_fixture(_name, template_command(_variant))
