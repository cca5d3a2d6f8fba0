"""The real thing: `disttrain-server` under gunicorn with two worker processes."""

import base64
import os
import time

import cv2
import numpy as np

from server.serving import NEGATIVE, POSITIVE, http, publish, running_server, stop


def test_gunicorn_serves_reloads_and_stops_cleanly(text_model, flipped_text_model, tmp_path):
    publish(text_model, tmp_path)
    with running_server(tmp_path, "--workers", "2", "--reload-interval", "1") as (base, proc, log):
        with open(log) as fh:
            assert f"serving 'disttrain' at {base}/" in fh.read()
        # No preload: TensorFlow lives in the workers only, never in the forking master.
        with open(f"/proc/{proc.pid}/maps") as fh:
            assert "tensorflow" not in fh.read()

        status, body = http("POST", base + "/v1/models/disttrain:predict", {"instances": [POSITIVE, NEGATIVE]})
        assert status == 200
        (positive, negative) = body["predictions"]
        assert positive[1] > 0.5 > negative[1]
        assert http("GET", base + "/healthz") == (200, {"status": "ok"})
        status, body = http("POST", base + "/v1/models/disttrain:predict", b"{oops")
        assert status == 400 and "not valid JSON" in body["error"]

        # A new publication reaches every worker without a restart.
        old_version = http("GET", base + "/readyz")[1]["version"]
        publish(flipped_text_model, tmp_path, mtime=int(old_version) + 10)
        deadline, fresh = time.monotonic() + 90, 0
        while fresh < 6:  # six fresh answers in a row: both workers have reloaded
            assert time.monotonic() < deadline, "workers did not pick up the new model"
            status, body = http("POST", base + "/v1/models/disttrain:predict", {"instances": [POSITIVE]})
            fresh = fresh + 1 if status == 200 and body["predictions"][0][1] < 0.5 else 0
            time.sleep(0.2)
        assert http("GET", base + "/readyz")[1]["version"] == str(int(old_version) + 10)

        assert stop(proc) == 0  # SIGTERM: graceful shutdown, exit status 0


def test_gunicorn_refuses_decompression_bombs_and_big_bodies(image_model, tmp_path):
    publish(image_model, tmp_path)
    # 8000x8000 pixels = 64 M > the server's 40 M OPENCV_IO_MAX_IMAGE_PIXELS, in a ~60 KB PNG
    ok, bomb = cv2.imencode(".png", np.zeros((8000, 8000), dtype=np.uint8))
    with running_server(tmp_path, "--workers", "1", "--max-upload-mb", "1") as (base, proc, log):
        url = base + "/v1/models/disttrain:predict"
        status, body = http("POST", url, {"instances": [{"b64": base64.b64encode(bomb.tobytes()).decode()}]})
        assert status == 422 and "not a decodable image" in body["error"]
        status, body = http("POST", url, {"instances": [np.zeros((8, 8)).tolist()] * 10})
        assert status == 200 and len(body["predictions"]) == 10
        # 1.5 MB > 1 MB: the server reads the excess before answering, so the client gets the 413, not a reset
        status, body = http("POST", url, b'{"instances": ["' + b"x" * (1536 * 1024) + b'"]}')
        assert status == 413 and "1048576 byte limit" in body["error"]
