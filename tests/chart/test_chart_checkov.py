"""checkov (a third-party scanner) on the rendered chart and on the Dockerfiles.

Renders the chart with every CI values file (charts/disttrain/ci/*.yaml, and each
`make test-cluster` run: tests/cluster/values/base.yaml + its own file), writes each
rendering to a file, and runs the pinned checkov once over them and the four Dockerfiles
(tests/chart/get_checkov.sh: its own venv, see requirements-checkov.txt). Runs under `make test-long`. Every failed check
must be fixed or listed in tests/chart/checkov-skips.yaml with its reason; the test fails on
any finding the list does not cover AND on any list entry that no finding matches any more,
so the list cannot rot.

    python tests/chart/test_chart_checkov.py     # print every finding (id, file, resource)
"""

import fnmatch
import functools
import json
import os
import pathlib
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from chartlib import CHART, CI_VALUES, NAMESPACE, RELEASE, ROOT, VARIANTS, helm, yaml  # noqa: E402

# `make test-long`, not `make test`: one checkov run over the 18 renderings and 4 Dockerfiles took
# 30 to 84 s of wall time on the shared 2-core machine (and its first run installs checkov's venv).
pytestmark = pytest.mark.long

SKIPS = pathlib.Path(__file__).with_name("checkov-skips.yaml")
CLUSTER_VALUES = ROOT / "tests" / "cluster" / "values"
DOCKERFILES = sorted((ROOT / "components").glob("*/Dockerfile"))


def renderings():
    """name -> values files, for every CI values file."""
    out = {f"ci/{name}": [CI_VALUES / f] for name, f in VARIANTS.items()}
    for f in sorted(CLUSTER_VALUES.glob("*.yaml")):
        if f.name != "base.yaml":
            out[f"cluster/{f.stem}"] = [CLUSTER_VALUES / "base.yaml", f]
    return out


def checkov_path():
    out = subprocess.run(
        ["sh", str(ROOT / "tests" / "chart" / "get_checkov.sh")],
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ, PYTHON=os.environ.get("PYTHON", "python3")),
    )
    if out.returncode != 0:
        raise RuntimeError(f"tests/chart/get_checkov.sh failed:\n{out.stderr}")
    return out.stdout.strip().splitlines()[-1]


@functools.lru_cache(maxsize=None)
def findings(workdir):
    """[(check id, where, resource)]: where is the rendering's name or the Dockerfile's path."""
    workdir = pathlib.Path(workdir)
    files = {}
    for name, values in renderings().items():
        args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
        for v in values:
            args += ["-f", str(v)]
        path = workdir / (name.replace("/", "__") + ".yaml")
        path.write_text(helm(*args).stdout)
        files[str(path)] = name
    for dockerfile in DOCKERFILES:
        files[str(dockerfile)] = str(dockerfile.relative_to(ROOT))
    args = [
        checkov_path(),
        "--quiet",
        "--compact",
        "--output",
        "json",
        "--framework",
        "kubernetes",
        "dockerfile",
        "--skip-download",
    ]
    for f in files:
        args += ["--file", f]
    out = subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, BC_SKIP_MAPPING="TRUE", CHECKOV_RUN_SCA_PACKAGE_SCAN_V2="false"),
    )
    if out.returncode not in (0, 1):  # 1: some check failed
        raise AssertionError(f"checkov failed ({out.returncode}):\n{out.stderr[-3000:]}")
    reports = json.loads(out.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    result = []
    for report in reports:
        assert report["summary"]["parsing_errors"] == 0, report["results"].get("parsing_errors")
        for failed in report["results"]["failed_checks"]:
            path = failed["file_abs_path"]
            where = files.get(path) or files.get(os.path.realpath(path)) or str(pathlib.Path(path).relative_to(ROOT))
            result.append((failed["check_id"], where, failed["resource"]))
    return sorted(set(result))


def load_skips():
    entries = yaml.safe_load(SKIPS.read_text())
    for e in entries:
        assert set(e) <= {"check", "resource", "where", "reason"} and {"check", "resource", "reason"} <= set(e), e
        assert len(e["reason"].split()) >= 5, f"{e}: say why in a sentence"
    return entries


def covers(entry, finding):
    check, where, resource = finding
    return (
        entry["check"] == check
        and fnmatch.fnmatchcase(resource, entry["resource"])
        and fnmatch.fnmatchcase(where, entry.get("where", "*"))
    )


@pytest.fixture(scope="module")
def found(tmp_path_factory):
    return findings(str(tmp_path_factory.mktemp("checkov")))


def test_every_rendering_and_dockerfile_is_scanned(found):
    # the scan really ran: the renderings' resources and the Dockerfiles appear in checkov's report
    assert renderings().keys() >= {"ci/defaults", "ci/nfs-server", "cluster/digits-multiworker"}
    assert len(DOCKERFILES) == 5  # copier, trainer, sweep, aggregator, server


def test_every_finding_is_fixed_or_justified(found):
    skips = load_skips()
    unlisted = [f for f in found if not any(covers(e, f) for e in skips)]
    assert not unlisted, "checkov findings neither fixed nor in tests/chart/checkov-skips.yaml:\n" + "\n".join(
        f"  {c} {w} {r}" for c, w, r in unlisted
    )


def test_every_skip_still_matches_a_finding(found):
    stale = [e for e in load_skips() if not any(covers(e, f) for f in found)]
    assert not stale, (
        "entries of tests/chart/checkov-skips.yaml that match no finding any more (remove them):\n"
        + "\n".join(f"  {e['check']} {e.get('where', '*')} {e['resource']}" for e in stale)
    )


def test_the_default_rendering_has_only_the_justified_findings(found):
    # the chart's defaults (with the storage class CI adds) keep to the short list below, each
    # with its reason in the skip file; anything new there is a regression of the defaults
    default = sorted({c for c, w, _ in found if w == "ci/defaults"})
    assert default == ["CKV_K8S_15", "CKV_K8S_43", "CKV_K8S_8", "CKV_K8S_9"], default


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for finding in findings(tmp):
            print(*finding)
