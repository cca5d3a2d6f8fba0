"""GET /progress.json and /progress/report.png: no run, a run in progress (hand-written progress files),
a finished run, the newest run-N of --runs-dir; concurrent requests while the files are rewritten."""

import json
import os
import threading

import cv2
import numpy as np
import pytest

from disttrain_contract import atomic_write_json
from disttrain_server.app import create_app
from disttrain_server.runs_data import MAX_PROGRESS_BYTES
from server.serving import error_of


def client(workdir, runs_dir=None, **config):
    app = create_app(
        {
            "MODEL_PATH": os.path.join(workdir, "final", "model.keras"),
            "WORKDIR": str(workdir),
            "RUNS_DIR": runs_dir and str(runs_dir),
            # (beside the run, not in it: a run directory that does not exist must stay so)
            "GALLERY_DIR": os.path.join(os.path.dirname(workdir), f"gallery-{os.path.basename(workdir)}"),
            "TESTING": True,
            **config,
        }
    )
    return app.test_client()


def progress_state(worker, step, time, epochs=5, steps=10, history=()):
    return {
        "worker": worker,
        "tag": f"worker {worker}/2",
        "strategy": "average",
        "state": "training",
        "epoch": len(history) + 1,
        "epochs": epochs,
        "step": step,
        "steps_per_epoch": steps,
        "global_step": len(history) * steps + step,
        "total_steps": epochs * steps,
        "loss": 0.4,
        "accuracy": 0.85,
        "examples_per_sec": 1234.5,
        "eta_sec": 12.0,
        "time": time,
        "writes": 3,
        "history": list(history),
    }


def write_progress(workdir, index, state):
    atomic_write_json(os.path.join(workdir, "train", f"worker-{index:05d}", "progress.json"), state)


def png_bytes():
    ok, data = cv2.imencode(".png", np.full((30, 40, 3), 200, np.uint8))
    assert ok
    return data.tobytes()


def get_progress(c):
    response = c.get("/progress.json")
    assert response.status_code == 200 and response.is_json
    assert response.headers["Cache-Control"] == "no-store"
    return response.get_json()


def test_no_run(tmp_path):
    body = get_progress(client(tmp_path / "never-created"))
    assert (body["run"], body["state"], body["workers"], body["report"]) == (None, "none", [], None)
    body = get_progress(client(tmp_path, runs_dir=tmp_path))  # a volume without any run-N yet
    assert body["state"] == "none"
    assert "no published report.png" in error_of(client(tmp_path / "never-created").get("/progress/report.png"), 404)


def test_a_run_that_has_not_begun_training(tmp_path):
    (tmp_path / "data").mkdir()
    body = get_progress(client(tmp_path))
    assert (body["run"], body["state"], body["workers"]) == (tmp_path.name, "starting", [])


def test_a_run_in_progress(tmp_path):
    now = 1_800_000_000.0
    history = [{"epoch": 1, "loss": 0.6, "accuracy": 0.7, "test_accuracy": 0.72, "examples_per_sec": 1000.0}]
    write_progress(tmp_path, 0, progress_state(0, 4, now - 0.5, history=history))
    write_progress(tmp_path, 1, progress_state(7, 9, now - 1.25))  # the directory names the worker, not the file
    # a worker whose file is too large, one whose file is not JSON, one without a file yet, stray names
    big = tmp_path / "train" / "worker-00002"
    big.mkdir()
    (big / "progress.json").write_bytes(b" " * (MAX_PROGRESS_BYTES + 1))
    broken = tmp_path / "train" / "worker-00003"
    broken.mkdir()
    (broken / "progress.json").write_text('{"epoch": 1, "step"')
    (tmp_path / "train" / "worker-00004").mkdir()
    (tmp_path / "train" / "worker-x").mkdir()
    (tmp_path / "train" / "notes.txt").write_text("not a worker")
    (tmp_path / "final").mkdir()
    (tmp_path / "final" / "report.png").write_bytes(png_bytes())  # no marker: not published yet

    import disttrain_server.progress as progress_module

    body = progress_module.run_progress(str(tmp_path), now=now)
    assert (body["run"], body["state"], body["report"], body["time"]) == (tmp_path.name, "training", None, now)
    workers = body["workers"]
    assert [w["worker"] for w in workers] == [0, 1, 2, 3]
    assert (
        workers[0]["history"] == history
        and workers[0]["global_step"] == 14
        and workers[0]["age_sec"] == pytest.approx(0.5)
    )
    assert workers[1]["tag"] == "worker 7/2" and workers[1]["age_sec"] == pytest.approx(1.25)
    assert workers[2] == {"worker": 2, "error": f"larger than {MAX_PROGRESS_BYTES} bytes: not read"}
    assert workers[3] == {"worker": 3, "error": "not JSON"}
    # the same through HTTP (the real clock: ages are positive)
    body = get_progress(client(tmp_path))
    assert [w["worker"] for w in body["workers"]] == [0, 1, 2, 3] and body["state"] == "training"
    assert error_of(client(tmp_path).get("/progress/report.png"), 404)  # (it is there, but the run is not finished)


def test_a_finished_run_shows_its_report(tmp_path):
    write_progress(tmp_path, 0, {**progress_state(0, 10, 1.0), "state": "done"})
    (tmp_path / "final").mkdir()
    (tmp_path / "final" / "report.png").write_bytes(png_bytes())
    (tmp_path / "final" / "_SUCCESS").write_text("{}")
    c = client(tmp_path)
    body = get_progress(c)
    assert body["state"] == "finished" and body["workers"][0]["state"] == "done"
    mtime = int((tmp_path / "final" / "report.png").stat().st_mtime)
    assert body["report"] == f"/progress/report.png?v={mtime}"
    response = c.get(body["report"])
    assert response.status_code == 200 and response.mimetype == "image/png"
    assert response.get_data() == png_bytes()


def test_runs_dir_shows_the_newest_run(tmp_path):
    for name in ("run-2", "run-10", "run-9", "run-x", "run-11.tmp"):
        (tmp_path / name).mkdir()
    (tmp_path / "run-12").write_text("a file, not a run")
    write_progress(tmp_path / "run-10", 0, progress_state(0, 3, 1.0))
    write_progress(tmp_path / "run-9", 0, progress_state(0, 8, 1.0))
    body = get_progress(client(tmp_path / "run-9", runs_dir=tmp_path))  # the server's own run is 9: it shows 10
    assert body["run"] == "run-10" and body["workers"][0]["step"] == 3
    assert get_progress(client(tmp_path / "run-9"))["workers"][0]["step"] == 8  # without --runs-dir: its own


def test_progress_is_open_when_every_api_call_needs_the_token(tmp_path):
    write_progress(tmp_path, 0, progress_state(0, 3, 1.0))
    c = client(tmp_path, API_TOKEN=b"s3cret-token", TOKEN_REQUIRED_FOR="all")
    assert get_progress(c)["workers"][0]["step"] == 3  # like the page and /report: no gallery data, no predictions
    assert c.get("/v1/models/disttrain").status_code == 401


def test_the_page_has_the_progress_view(tmp_path):
    c = client(tmp_path)
    page = c.get("/").get_data(as_text=True)
    assert 'id="progress-card"' in page and 'data-url="/progress.json"' in page and "progress.js" in page
    assert c.get("/static/progress.js").status_code == 200


def test_concurrent_requests_while_the_trainers_rewrite_their_files(tmp_path):
    """8 request threads x 40 requests, started together, while 2 writers rewrite both files: every
    answer is whole (200, both workers, no unreadable entry) and steps only move forward."""
    for index in (0, 1):
        write_progress(tmp_path, index, progress_state(index, 0, 1.0, epochs=1000, steps=1000))
    app_client = client(tmp_path)
    barrier, stop = threading.Barrier(8 + 2), threading.Event()
    problems = []

    def rewrite(index):
        barrier.wait()
        step = 0
        while not stop.is_set():
            step += 1
            write_progress(tmp_path, index, progress_state(index, step, 1.0, epochs=1000, steps=1000))

    def request():
        c = app_client.application.test_client()
        last = [-1, -1]
        barrier.wait()
        for _ in range(40):
            response = c.get("/progress.json")
            body = response.get_json(silent=True)
            if response.status_code != 200 or body is None or [w.get("worker") for w in body["workers"]] != [0, 1]:
                problems.append((response.status_code, response.get_data()[:200]))
                continue
            steps = [w.get("step") for w in body["workers"]]
            if any(s is None or s < before for s, before in zip(steps, last)):
                problems.append(("went back or broken", steps, last))
            last = steps

    writers = [threading.Thread(target=rewrite, args=(i,)) for i in (0, 1)]
    readers = [threading.Thread(target=request) for _ in range(8)]
    for t in writers + readers:
        t.start()
    for t in readers:
        t.join()
    stop.set()
    for t in writers:
        t.join()
    assert not problems, problems[:3]
    final = json.loads((tmp_path / "train" / "worker-00000" / "progress.json").read_text())
    assert final["step"] > 0
