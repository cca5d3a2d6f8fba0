"""A client nobody here wrote: the kserve SDK's InferenceRESTClient (pinned in requirements-kserve.txt)
talking V1 (TF Serving's :predict) and V2 (the Open Inference Protocol) to the real
`disttrain-server` under gunicorn, on the text model and then, published over it, the digits model.

The SDK runs in its own virtualenv (.venv-kserve, built by `make venv-kserve`; see kserve_client_calls.py
for why), as a separate process: the checks are in kserve_client_calls.py, and this test fails
with that script's output when any of them fails."""

import os
import subprocess
import sys
import time

import numpy as np

from kserve_venv import KSERVE_PYTHON, run_with_kserve
from server.serving import NEGATIVE, POSITIVE, http, publish, running_server

CALLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kserve_client_calls.py")


def kserve_calls(*args):
    done = run_with_kserve(CALLS, *args)
    sys.stdout.write(done.stdout)
    assert done.returncode == 0, (
        f"the kserve SDK's checks failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr[-4000:]}"
    )
    assert "every check passed" in done.stdout


def test_kserve_sdk_rest_client_v1_and_v2_against_gunicorn(text_model, image_model, digits_test, tmp_path):
    publish(text_model, tmp_path)
    with running_server(tmp_path, "--workers", "1", "--reload-interval", "0.5") as (base, proc, log):
        kserve_calls("text", base, POSITIVE, NEGATIVE)
        version = int(http("GET", base + "/readyz")[1]["version"])
        publish(image_model, tmp_path, mtime=version + 10)
        deadline = time.monotonic() + 60
        while http("GET", base + "/v2/models/disttrain")[1]["inputs"][0]["name"] != "image":
            assert time.monotonic() < deadline, "the worker did not load the published image model"
            time.sleep(0.2)
        digits = tmp_path / "digits.npy"
        np.save(digits, np.ascontiguousarray(digits_test[0][:6]), allow_pickle=False)
        kserve_calls("image", base, digits)


def test_kserve_sdk_is_not_in_the_dev_venv():
    """The reason for the separate venv: the dev venv keeps the protobuf TensorFlow's resolution
    picks (the images' one), not the older one every kserve release pins."""
    import google.protobuf

    assert int(google.protobuf.__version__.split(".")[0]) >= 7, google.protobuf.__version__
    done = subprocess.run(
        [KSERVE_PYTHON, "-c", "import google.protobuf, kserve; print(google.protobuf.__version__)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and int(done.stdout.split(".")[0]) < 7, (done.stdout, done.stderr[-2000:])
