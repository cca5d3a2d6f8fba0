"""The image dependency locks and Dockerfiles agree with the pins (no Docker needed)."""

import importlib.util
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location("disttrain_docker_locks", os.path.join(ROOT, "docker", "locks.py"))
locks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(locks)


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
