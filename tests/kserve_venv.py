"""KServe's own packages in their own virtualenvs (make test builds both):

* .venv-kserve: the kserve SDK (`make venv-kserve`, requirements-kserve.txt). Every kserve release pins
  protobuf<7 and python-dateutil<3, older than what TensorFlow's own resolution and our images take,
  so the SDK cannot share the dev venv.
* .venv-kserve-storage: kserve-storage, KServe's storage initializer (`make venv-kserve-storage`,
  requirements-kserve-storage.txt): what downloads an InferenceService's storageUri, run as KServe
  runs it, with its own pinned boto3 rather than ours.

Tests that need one run a script of theirs with that venv's python, as a separate process, and fail
with the script's output."""

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KSERVE_PYTHON = os.environ.get("DISTTRAIN_KSERVE_PYTHON", os.path.join(ROOT, ".venv-kserve", "bin", "python"))
KSERVE_STORAGE_PYTHON = os.environ.get(
    "DISTTRAIN_KSERVE_STORAGE_PYTHON", os.path.join(ROOT, ".venv-kserve-storage", "bin", "python")
)


def run_with_kserve(script, *args, stdin=None, timeout=300):
    """Run `script` with the kserve venv's python; the CompletedProcess (text)."""
    assert os.path.exists(KSERVE_PYTHON), f"no kserve virtualenv at {KSERVE_PYTHON}: run `make venv-kserve`"
    return subprocess.run(
        [KSERVE_PYTHON, script, *map(str, args)], input=stdin, capture_output=True, text=True, timeout=timeout
    )


def run_with_kserve_storage(script, *args, env=None, timeout=300):
    """Run `script` with the kserve-storage venv's python; the CompletedProcess (text)."""
    assert os.path.exists(KSERVE_STORAGE_PYTHON), (
        f"no kserve-storage virtualenv at {KSERVE_STORAGE_PYTHON}: run `make venv-kserve-storage`"
    )
    return subprocess.run(
        [KSERVE_STORAGE_PYTHON, script, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env
    )
