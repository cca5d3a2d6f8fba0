"""The Makefile as a newcomer meets it: `make help` names every target, WORKDIR reaches make sweep,
make demo does not build the kserve test venv, and a step that needs root tells a user who is not
root the one command to run first. `make -n` prints recipes without running them."""

import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make(*args, env=None):
    done = subprocess.run(["make", "-s", "-C", ROOT, *args], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def makefile_targets():
    """(.PHONY's targets, every rule's target that is not a file path or a pattern)."""
    with open(os.path.join(ROOT, "Makefile")) as fh:
        text = fh.read()
    phony = set(re.search(r"^\.PHONY:(.*)$", text, re.M).group(1).split())
    rules = {m.group(1) for m in re.finditer(r"^([a-z][a-z0-9-]*):(?!=)", text, re.M)}
    return phony, rules


def test_help_lists_every_target():
    phony, rules = makefile_targets()
    assert rules <= phony, f"targets missing from .PHONY: {sorted(rules - phony)}"
    listed = set(re.findall(r"^make ([a-z][a-z0-9-]*)", make("help"), re.M))
    assert phony <= listed, f"targets missing from make help: {sorted(phony - listed)}"
    assert listed <= phony, f"make help names targets that do not exist: {sorted(listed - phony)}"


def test_help_lists_every_variable_of_the_pipeline_targets():
    """make demo's, pipeline's and sweep's variables (the block from "make demo variables" on), the quality gate's too."""
    with open(os.path.join(ROOT, "Makefile")) as fh:
        text = fh.read()
    block = text[text.index("# make demo variables") : text.index("# every one of these")]
    variables = re.findall(r"^([A-Z_]+) \?=", block, re.M)
    assert {"MIN_GAIN_VS_TRIVIAL", "MIN_RELATIVE_GAIN_VS_TRIVIAL", "MAX_REGRESSION", "FORCE"} <= set(variables)
    listed = make("help")
    assert [v for v in variables if not re.search(rf"\b{v}\b", listed)] == []


@pytest.mark.parametrize("target", ["demo", "pipeline", "sweep", "demo-s3"])
def test_the_quality_gates_variables_reach_the_pipeline(target):
    printed = make("-n", target, "MIN_GAIN_VS_TRIVIAL=2.5", "MAX_RELATIVE_REGRESSION=7", "FORCE=1")
    assert "MIN_GAIN_VS_TRIVIAL=2.5" in printed and "MAX_RELATIVE_REGRESSION=7" in printed and "FORCE=1" in printed
    assert "MIN_RELATIVE_GAIN_VS_TRIVIAL= " in printed  # unset: the aggregator's default


def sweep_workdir(*args, env=None):
    return re.search(r"WORKDIR=(\S+)", make("-n", "sweep", *args, env=env)).group(1)


def test_sweep_honours_workdir():
    assert sweep_workdir() == "workdir/sweep-movie-reviews"
    assert sweep_workdir("TASK=digits") == "workdir/sweep-digits"
    assert sweep_workdir("WORKDIR=/tmp/my-sweep", "TASK=digits") == "/tmp/my-sweep"
    assert sweep_workdir(env={**os.environ, "WORKDIR": "/tmp/env-sweep"}) == "/tmp/env-sweep"
    assert re.search(r"WORKDIR=(\S+)", make("-n", "demo", "WORKDIR=/tmp/my-demo")).group(1) == "/tmp/my-demo"


@pytest.mark.parametrize(
    "target, builds",
    [("demo", False), ("pipeline", False), ("sweep", False), ("lint", False), ("test", True), ("test-long", True)],
)
def test_only_the_tests_build_the_kserve_venv(target, builds):
    # a KSERVE_BIN that does not exist: a target that depends on the kserve venv prints its build
    printed = make("-n", target, "KSERVE_BIN=/nonexistent-kserve/bin")
    assert ("/nonexistent-kserve/bin/pip" in printed) == builds, printed


@pytest.mark.parametrize(
    "target, builds",
    [
        ("demo", False),
        ("pipeline", False),
        ("lint", False),
        ("test", True),
        ("test-images", True),
        ("kfp-pipeline", True),
    ],
)
def test_the_tests_and_the_compile_build_the_kfp_venv(target, builds):
    printed = make("-n", target, "KFP_BIN=/nonexistent-kfp/bin")
    assert ("/nonexistent-kfp/bin/pip install --quiet --no-deps -r requirements-kfp.txt" in printed) == builds, printed


def fake_path(tmp_path, uid):
    """A PATH where `id` says `uid`, apt-get only records that it ran, and no chromium, curl, docker or debootstrap exist."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, script in {
        "id": f'[ "$1" = -un ] && echo someone || echo {uid}',
        "apt-get": f'echo "$@" >> {tmp_path}/apt-get.log',
    }.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{script}\n")
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": str(bin_dir)}


def test_browser_deps_names_the_sudo_command_for_a_user_who_is_not_root(tmp_path):
    done = subprocess.run(
        ["/usr/bin/make", "-s", "-C", ROOT, "browser-deps"],
        capture_output=True,
        text=True,
        timeout=60,
        env=fake_path(tmp_path, 1000),
    )
    assert done.returncode != 0
    assert "run `sudo apt-get install -y chromium curl` first" in done.stderr, done.stderr
    assert not (tmp_path / "apt-get.log").exists()  # apt-get was not tried


def test_ensure_docker_names_the_sudo_command_for_a_user_who_is_not_root(tmp_path):
    done = subprocess.run(
        ["/bin/bash", os.path.join(ROOT, "docker", "ensure-docker.sh")],
        capture_output=True,
        text=True,
        timeout=60,
        env=fake_path(tmp_path, 1000),
    )
    assert done.returncode == 1
    assert "run `sudo apt-get install -y docker.io debootstrap` first" in done.stderr, done.stderr
    assert not (tmp_path / "apt-get.log").exists()
