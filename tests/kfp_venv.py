"""The Kubeflow Pipelines SDK's own virtualenv (.venv-kfp: `make venv-kfp`, requirements-kfp.txt; make test and
make test-images build it). kfp 2.17 pins protobuf<7 and kubernetes<31, older than TensorFlow's resolution and our
images take, so it cannot share the dev venv. Tests run a script with its python, as a separate process."""

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KFP_PYTHON = os.environ.get("DISTTRAIN_KFP_PYTHON", os.path.join(ROOT, ".venv-kfp", "bin", "python"))
PIPELINE_DIR = os.path.join(ROOT, "pipelines", "kfp")


def run_with_kfp(*args, timeout=300):
    """Run `python ARGS...` with the kfp venv's python; the CompletedProcess (text)."""
    assert os.path.exists(KFP_PYTHON), f"no kfp virtualenv at {KFP_PYTHON}: run `make venv-kfp`"
    return subprocess.run([KFP_PYTHON, *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
