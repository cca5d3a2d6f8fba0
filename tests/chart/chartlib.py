"""Helpers for the Helm chart tests: a pinned helm, rendering, and walking the manifests.

helm comes from tests/chart/get_helm.sh (helm on PATH, else a pinned static
binary extracted into .cache/bin/helm). No cluster is needed: everything is
`helm lint` / `helm template` plus offline schema validation.

The renderings of the ci/ values files as they are come from pytest-helm's session fixtures
(conftest.py: `defaults_manifest`, `tfserving_manifest`, ... and `ManifestIndex.get("Kind/name")`,
with the names in NAMES below). What stays here is what pytest-helm does not do:
* renderings with per-test `--set` values, another --kube-version, extra flags (its fixtures are
  built from one fixed command at import time), cached and rendered in parallel (prerender: the
  validity tests render 14 variants x 10 Kubernetes versions; helm's start-up dominates each);
* Helm 3 next to Helm 4 (helm_path(3)) and renderings that must fail (render_error: pytest-helm
  raises on a failed helm, without a way to read the message it should contain);
* walking every manifest of a rendering (workloads, containers, find): pytest-helm's ManifestIndex
  only answers `.get(selector)` and has no public way to list what it holds.
"""

import functools
import os
import pathlib
import subprocess
import sys

import pytest

yaml = pytest.importorskip("yaml", reason="the chart tests need PyYAML (pip install kubernetes-validate brings it)")

# libyaml's parser (PyYAML's C extension, in its wheels): the pure-Python one spent about half of the chart
# tests' time parsing helm's output. The same documents either way; the pure-Python one if a build lacks it.
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "disttrain"
CI_VALUES = CHART / "ci"
RELEASE = "dt"
NAMESPACE = "ml"

# The rendered variants: name -> values file in charts/disttrain/ci/.
VARIANTS = {
    "defaults": "default-values.yaml",
    "one-worker": "one-worker-values.yaml",
    "eight-workers": "eight-workers-values.yaml",
    "multiworker": "multiworker-values.yaml",
    "localsgd": "localsgd-values.yaml",
    "parameterserver": "parameterserver-values.yaml",
    "existing-claim": "existing-claim-values.yaml",
    "no-class": "no-class-values.yaml",
    "external-nfs": "external-nfs-values.yaml",
    "nfs-server": "nfs-server-values.yaml",
    "faces": "faces-values.yaml",
    "shared-cluster": "shared-cluster-values.yaml",
    "gpu": "gpu-values.yaml",
    "tfserving": "tfserving-values.yaml",
    "own-model": "own-model-values.yaml",
    "object-store": "object-store-values.yaml",
}

# Resources of release dt at revision 1, as pytest-helm selectors (ManifestIndex.get).
NAMES = {
    "copier": f"Job/{RELEASE}-disttrain-copier-r1",
    "trainer": f"Job/{RELEASE}-disttrain-trainer-r1",
    "aggregator": f"Job/{RELEASE}-disttrain-aggregator-r1",
    "server": f"Deployment/{RELEASE}-disttrain-server",
    "service": f"Service/{RELEASE}-disttrain-server",
    "claim": f"PersistentVolumeClaim/{RELEASE}-disttrain-workdir",
    "test": f"Pod/{RELEASE}-disttrain-test",
}


def policy_of(index, suffix):
    """The NetworkPolicy <release>-disttrain-<suffix> of a pytest-helm ManifestIndex."""
    return index.get(f"NetworkPolicy/{RELEASE}-disttrain-{suffix}")


def stage_container(index, stage):
    """The main container of a stage (copier, trainer, aggregator, server) in a pytest-helm ManifestIndex."""
    (container,) = [c for c in pod_spec(index.get(NAMES[stage]))["containers"] if c["name"] == stage]
    return container


# Kubernetes versions the manifests are validated against (kubernetes-validate's schemas).
KUBE_VERSIONS = ["1.29.0", "1.30.0", "1.31.0", "1.32.0", "1.33.0", "1.34.0", "1.35.0"]
# Older versions rendered to exercise the capability branches of the trainer Job.
OLD_KUBE_VERSIONS = ["1.25.0", "1.26.0", "1.28.0"]
DEFAULT_KUBE = "1.33.0"


@functools.lru_cache(maxsize=None)
def helm_path(major=4):
    """helm from tests/chart/get_helm.sh: Helm 4 (PATH or pinned), or the pinned Helm 3."""
    env = dict(os.environ, PYTHON=sys.executable)
    out = subprocess.run(
        ["sh", str(ROOT / "tests" / "chart" / "get_helm.sh"), str(major)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if out.returncode != 0:
        raise RuntimeError(f"tests/chart/get_helm.sh {major} failed:\n{out.stderr}")
    return out.stdout.strip().splitlines()[-1]


def helm(*args, check=True, major=4):
    out = subprocess.run([helm_path(major), *args], capture_output=True, text=True, timeout=120)
    if check and out.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({out.returncode}):\n{out.stderr}")
    return out


def values_args(variant=None, values=None, sets=()):
    args = []
    if variant:
        args += ["-f", str(CI_VALUES / VARIANTS[variant])]
    if values:
        args += ["-f", str(values)]
    for s in sets:
        args += ["--set", s]
    return args


@functools.lru_cache(maxsize=None)
def _render(variant, sets, kube_version, show_only, extra):
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", kube_version]
    args += values_args(variant, sets=sets) + list(extra)
    if show_only:
        args += ["--show-only", show_only]
    return helm(*args).stdout


def prerender(variants, kube_versions, workers=4):
    """Fill the rendering cache in parallel (helm's start-up dominates each rendering)."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        jobs = [pool.submit(_render, v, (), k, None, ()) for v in variants for k in kube_versions]
        for job in jobs:
            job.result()


def render(variant="defaults", sets=(), kube_version=DEFAULT_KUBE, show_only=None, extra=()):
    """The manifests of one rendering, as a list of dicts (hooks such as the test pod included)."""
    return load_all(_render(variant, tuple(sets), kube_version, show_only, tuple(extra)))


def load_all(text):
    """The documents of a multi-document YAML text (helm's output), empty ones left out."""
    return [d for d in yaml.load_all(text, Loader=YAML_LOADER) if d]


def render_error(variant=None, sets=(), extra=(), major=4):
    """stderr of a rendering that must fail."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE] + values_args(variant, sets=sets) + list(extra)
    out = helm(*args, check=False, major=major)
    assert out.returncode != 0, f"helm template {args} should have failed; it rendered:\n{out.stdout[:2000]}"
    return out.stderr


def find(docs, kind, name_part=None):
    found = [d for d in docs if d["kind"] == kind and (name_part is None or name_part in d["metadata"]["name"])]
    return found


def one(docs, kind, name_part=None):
    found = find(docs, kind, name_part)
    assert len(found) == 1, f"expected one {kind} {name_part or ''}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def pod_spec(doc):
    """The pod spec of a Pod, Job or Deployment."""
    if doc["kind"] == "Pod":
        return doc["spec"]
    return doc["spec"]["template"]["spec"]


def workloads(docs):
    return [d for d in docs if d["kind"] in ("Job", "Deployment", "Pod")]


def containers(spec, init=True):
    return (spec.get("initContainers", []) if init else []) + spec["containers"]


def wait_containers(doc):
    """The wait-for-marker init containers of a workload (the server also has gallery-dir)."""
    return [c for c in pod_spec(doc).get("initContainers", []) if c["name"].startswith("wait-for-")]


def is_nfs_server(doc):
    return doc["metadata"]["labels"].get("app.kubernetes.io/component") == "nfs-server"


def stage_of(doc):
    return doc["metadata"]["labels"].get("app.kubernetes.io/component")


def main_container(docs, stage):
    kinds = {"copier": "Job", "sweep": "Job", "trainer": "Job", "aggregator": "Job", "server": "Deployment"}
    doc = one([d for d in docs if stage_of(d) == stage], kinds[stage])
    (container,) = [c for c in pod_spec(doc)["containers"] if c["name"] == stage]
    return container


def arg(container, flag):
    """The value after `flag` in a container's args."""
    args = container["args"]
    assert flag in args, f"{flag} missing from {container['name']} args {args}"
    return args[args.index(flag) + 1]


def load_values(variant):
    """Chart defaults merged with a variant's values file (enough for the tests' expectations)."""
    return merged_values([CI_VALUES / VARIANTS[variant]])


def merged_values(values_files):
    """Chart defaults merged with values files in order, as `helm template -f A -f B` merges them (maps key by
    key, anything else replaced)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def merge(a, b):
        for k, v in (b or {}).items():
            if isinstance(v, dict) and isinstance(a.get(k), dict):
                merge(a[k], v)
            else:
                a[k] = v

    for path in values_files:
        merge(values, yaml.safe_load(pathlib.Path(path).read_text()))
    return values
