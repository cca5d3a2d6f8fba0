"""What the images are built from, checked without Docker: the dependency locks agree with the
pins, the Dockerfiles follow the conventions, the server HEALTHCHECK finds the port."""

import importlib.util
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load(name, filename):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "docker", filename))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


locks = load("disttrain_docker_locks", "locks.py")
healthcheck = load("disttrain_docker_healthcheck", "server-healthcheck.py")


@pytest.mark.parametrize("component", locks.COMPONENTS)
def test_lock_pins_the_direct_dependencies_as_requirements_txt(component):
    locked = locks.read_pins(locks.lock_path(component))
    for line in locks.direct_requirements(component):
        name, _ = locks.split_requirement(line)
        version = line.split("==", 1)[1].strip()
        assert locked.get(name) == f"{name}=={version}", (
            f"docker/requirements/{component}.txt has {locked.get(name)!r} for {line!r}: run docker/lock-requirements.sh"
        )
    assert all("==" in line for line in locked.values()), "every locked package has an exact version"


def test_copier_lock_has_no_tensorflow():
    assert not [name for name in locks.read_pins(locks.lock_path("copier")) if name.startswith("tensorflow")]


@pytest.mark.parametrize("component", locks.COMPONENTS)
def test_dockerfile_conventions(component):
    with open(os.path.join(ROOT, "components", component, "Dockerfile"), encoding="utf-8") as fh:
        text = fh.read()
    assert "ARG BASE_IMAGE=python:3.11-slim" in text
    assert f"docker/requirements/{component}.txt" in text
    assert "USER 10001:10001" in text
    assert f'ENTRYPOINT ["disttrain-{component}"]' in text
    for env in ("HOME=/tmp", "MPLCONFIGDIR=/tmp", "PYTHONDONTWRITEBYTECODE=1", "TF_CPP_MIN_LOG_LEVEL=2"):
        assert env in text
    assert all("--no-cache-dir" in line for line in re.findall(r"pip (?:install|download)[^\n]*", text))
    assert ("HEALTHCHECK" in text) == (component == "server")
    # the locked dependencies are installed only if every wheel matches the lock's sha256: the whole lock, or
    # (a TensorFlow image) the runtime's lines, then the rest of the image's lock
    if component in locks.runtime_components():
        assert re.search(r"pip install [^\n]*--require-hashes[^\n]*-r /tmp/wheels/runtime\.txt", text)
        assert f"grep -vxF -f /tmp/wheels/runtime.txt /tmp/wheels/{component}.txt > /tmp/own.txt" in text
        assert re.search(r"pip install [^\n]*--require-hashes --no-deps[^\n]*\\\n[^\n]*-r /tmp/own\.txt", text)
    else:
        assert re.search(rf"pip install [^\n]*--require-hashes[^\n]*-r /tmp/wheels/{component}\.txt", text)


RUNTIME_STAGE = re.compile(r"^ARG BASE_IMAGE=.*?^# ---- \(end of the TensorFlow runtime\)$", re.S | re.M)


def test_the_tensorflow_images_open_with_the_same_runtime_stage():
    """Docker's build cache shares a stage between images only when it is the same, instruction for
    instruction: the four TensorFlow images build their runtime once (docker/build-images.sh)."""
    stages = {}
    for component in locks.runtime_components():
        with open(os.path.join(ROOT, "components", component, "Dockerfile"), encoding="utf-8") as fh:
            text = fh.read()
        stage = RUNTIME_STAGE.search(text)
        assert stage, f"components/{component}/Dockerfile has no TensorFlow runtime stage"
        stages[component] = stage.group(0)
        # the image's title is its last line: a layer of its own before the shared ones would end the cache
        assert text.rstrip().splitlines()[-1] == f'LABEL org.opencontainers.image.title="disttrain-{component}"'
    assert set(locks.runtime_components()) == {"trainer", "sweep", "aggregator", "server"}
    assert len(set(stages.values())) == 1, "the runtime stages differ: " + ", ".join(stages)


def test_the_runtime_lock_is_the_lines_every_tensorflow_lock_shares():
    _, lines = locks.runtime_lines()
    assert locks.locked_lines(locks.lock_path(locks.RUNTIME)) == lines, (
        "docker/requirements/runtime.txt is out of date: run docker/lock-requirements.sh (or python3 docker/locks.py runtime)"
    )
    assert any(line.startswith("tensorflow-cpu==") for line in lines)


@pytest.mark.parametrize("component", (*locks.COMPONENTS, locks.RUNTIME))
def test_every_locked_package_has_a_wheel_hash(component):
    hashes = locks.read_hashes(locks.lock_path(component))
    assert hashes and all(len(h) == 1 for h in hashes.values()), (
        f"docker/requirements/{component}.txt: a line without exactly one --hash=sha256: run docker/lock-requirements.sh"
    )


@pytest.mark.parametrize(
    "argv, port",
    [
        (
            ["/opt/venv/bin/python3", "/opt/disttrain/app/bin/disttrain-server", "--host", "0.0.0.0", "--port", "9000"],
            9000,
        ),
        (["python3", "disttrain-server", "--port=7001"], 7001),
        (["python3", "disttrain-server", "--workdir", "/workdir"], 8080),
        ([], 8080),
    ],
)
def test_healthcheck_reads_the_servers_port(argv, port):
    assert healthcheck.server_port(argv) == port


def test_lock_hashes_match_the_downloaded_wheels():
    """The local build installs docker/wheels (docker/download-wheels.sh) with --require-hashes:
    every locked wheel there must have the lock's sha256."""
    import hashlib

    wheels_dir = os.path.join(ROOT, "docker", "wheels")
    # (.stamp is written once the download has finished: CI builds the images while make test runs)
    if not os.path.isfile(os.path.join(wheels_dir, ".stamp")):
        pytest.skip(
            "no complete docker/wheels (docker/download-wheels.sh has not run, or not to its end, in this clone)"
        )
    found = {}
    for name in os.listdir(wheels_dir):
        if name.endswith(".whl"):
            dist, version = name.split("-")[:2]
            with open(os.path.join(wheels_dir, name), "rb") as fh:
                found[(locks.canonical(dist), version)] = hashlib.sha256(fh.read()).hexdigest()
    for component in locks.COMPONENTS:
        hashes = locks.read_hashes(locks.lock_path(component))
        for name, line in locks.read_pins(locks.lock_path(component)).items():
            version = line.split("==", 1)[1]
            if (name, version) in found:
                assert found[(name, version)] == hashes[name][0], (
                    f"docker/wheels: {name} {version} differs from docker/requirements/{component}.txt"
                )


def test_the_locks_agree_on_every_package_they_share():
    """docker/download-wheels.sh fetches every lock's wheels in one pip call: a package pinned to two
    versions in two locks makes that call fail (ResolutionImpossible) before any image is built."""
    versions = {}
    for component in locks.COMPONENTS:
        for name, pin in locks.read_pins(locks.lock_path(component)).items():
            versions.setdefault(name, {}).setdefault(pin, []).append(component)
    conflicts = {name: pins for name, pins in versions.items() if len(pins) > 1}
    assert not conflicts, conflicts
