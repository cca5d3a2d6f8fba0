"""The real thing: `disttrain-server` under gunicorn with two worker processes, one server for the whole story."""

import base64
import time

import cv2
import numpy as np

from server.concurrent_requests import Call, connection
from server.serving import NEGATIVE, POSITIVE, http, publish, running_server, stop


def wait_until_all_workers_answer(url, body, is_fresh, timeout=90):
    """Poll until several answers in a row come from the new model: every worker has reloaded."""
    deadline, fresh = time.monotonic() + timeout, 0
    while fresh < 6:
        assert time.monotonic() < deadline, "workers did not pick up the new model"
        status, answer = http("POST", url, body)
        fresh = fresh + 1 if is_fresh(status, answer) else 0
        time.sleep(0.2)


def test_gunicorn_serves_reloads_refuses_bad_input_and_stops_cleanly(
    text_model, flipped_text_model, image_model, tmp_path
):
    publish(text_model, tmp_path)
    # --max-request-pixels above the bomb below, so that OpenCV's own guard (set by main in the workers'
    # environment) is what refuses it; the per-request budget in front of it: test_server_security.py.
    with running_server(tmp_path, "--workers", "2", "--reload-interval", "1", "--max-request-pixels", "100000000") as (
        base,
        proc,
        log,
    ):
        url = base + "/v1/models/disttrain:predict"
        with open(log) as fh:
            assert f"serving 'disttrain' at {base}/" in fh.read()
        # No preload: TensorFlow lives in the workers only, never in the forking master.
        with open(f"/proc/{proc.pid}/maps") as fh:
            assert "tensorflow" not in fh.read()

        status, body = http("POST", url, {"instances": [POSITIVE, NEGATIVE]})
        assert status == 200
        (positive, negative) = body["predictions"]
        assert positive[1] > 0.5 > negative[1]
        assert http("GET", base + "/healthz") == (200, {"status": "ok"})
        # A kept-alive connection idle past gunicorn's own 2 s still answers (--keepalive, default 75 s): a client
        # or proxy sending on it as the server closes it would get no answer.
        conn = connection(base)
        try:
            assert Call("GET", "/healthz").send(conn)[0] == 200
            time.sleep(3)
            assert Call("GET", "/healthz").send(conn)[0] == 200
        finally:
            conn.close()
        status, body = http("POST", url, b"{oops")
        assert status == 400 and "not valid JSON" in body["error"]

        # A new publication reaches every worker without a restart.
        version = int(http("GET", base + "/readyz")[1]["version"])
        publish(flipped_text_model, tmp_path, mtime=version + 10)
        wait_until_all_workers_answer(
            url, {"instances": [POSITIVE]}, lambda s, b: s == 200 and b["predictions"][0][1] < 0.5
        )
        assert http("GET", base + "/readyz")[1]["version"] == str(version + 10)

        # Even a different kind of model: the digits image model.
        publish(image_model, tmp_path, mtime=version + 20)
        pixels = np.zeros((8, 8)).tolist()
        wait_until_all_workers_answer(
            url, {"instances": [pixels] * 10}, lambda s, b: s == 200 and len(b["predictions"][0]) == 10
        )
        # 8000x8000 = 64 M pixels > the server's 40 M OPENCV_IO_MAX_IMAGE_PIXELS, in a ~60 KB PNG
        ok, bomb = cv2.imencode(".png", np.zeros((8000, 8000), dtype=np.uint8))
        status, body = http("POST", url, {"instances": [{"b64": base64.b64encode(bomb.tobytes()).decode()}]})
        assert status == 422 and "not a decodable image" in body["error"]
        ok, png = cv2.imencode(
            ".png", np.zeros((12000, 9000), dtype=np.uint8)
        )  # 108 M pixels: over the budget, never decoded
        status, body = http("POST", url, {"instances": [{"b64": base64.b64encode(png.tobytes()).decode()}]})
        assert status == 413 and "--max-request-pixels" in body["error"]
        # 9 MB > 8 MB: the server reads the excess before answering, so the client gets the 413, not a reset
        status, body = http("POST", url, b'{"instances": [{"b64": "' + b"A" * (9 * 1024 * 1024) + b'"}]}')
        assert status == 413 and "8388608 byte limit" in body["error"]

        assert stop(proc) == 0  # SIGTERM: graceful shutdown, exit status 0
