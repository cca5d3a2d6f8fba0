"""The kserve SDK's own virtualenv (.venv-kserve, built by `make venv-kserve` from requirements-kserve.txt; make test does).

Every kserve release pins protobuf<7 and python-dateutil<3, older than what TensorFlow's own
resolution and our images take, so the SDK cannot share the dev venv. Tests that need it (its REST
client, its InferenceService types) run a script of theirs with this venv's python, as a separate
process, and fail with the script's output."""

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KSERVE_PYTHON = os.environ.get("DISTTRAIN_KSERVE_PYTHON", os.path.join(ROOT, ".venv-kserve", "bin", "python"))


def run_with_kserve(script, *args, stdin=None, timeout=300):
    """Run `script` with the kserve venv's python; the CompletedProcess (text)."""
    assert os.path.exists(KSERVE_PYTHON), f"no kserve virtualenv at {KSERVE_PYTHON}: run `make venv-kserve`"
    return subprocess.run([KSERVE_PYTHON, script, *map(str, args)], input=stdin, capture_output=True, text=True, timeout=timeout)
