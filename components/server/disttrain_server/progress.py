"""The run in progress: GET /progress.json (every worker's progress.json) and GET /progress/report.png.

The page (static/progress.js) polls /progress.json twice a second while a run trains and draws a
bar per worker and the per-epoch curves; once the run's aggregator has published (its final
marker), it shows the run's report.png instead.

Which run: with --runs-dir (the chart passes its volume, where each revision trains in its own
run-N directory), the newest run-N there: while revision N trains, the pods of revision N-1 still
serve (revision N's wait for its model), and their page shows run N. Without it, the server's own
--workdir (a local pipeline).

No path from the request reaches the filesystem: neither route takes a parameter; the run is the
newest directory named run-<digits>, the files are WORKDIR/train/worker-NNNNN/progress.json and
WORKDIR/final/report.png. Each progress file is read up to runs_data.MAX_PROGRESS_BYTES; a larger or
unreadable one is reported as such, not read. The trainers replace the files atomically (a
temporary name, then a rename), so a read sees a whole file.

Shared by request threads: the RunFinder (runs_data), immutable after create_app (two paths); every
request lists and reads the files anew, so there is no cache to keep consistent.
"""

import os
import time

from flask import Blueprint, current_app, send_file

from disttrain_contract.layout import MARKER, PROGRESS_FILE, Workdir
from disttrain_server.errors import ApiError
from disttrain_server.runs_data import MAX_WORKERS, WORKER_DIR, read_progress, run_links
from disttrain_server.shared import run_finder

bp = Blueprint("progress", __name__)


def openapi_paths(context):
    """This blueprint's part of /openapi.json (openapi.build_spec): a new dict each time, since the spec's
    builder adds responses to it."""
    return {
        "/progress.json": {
            "get": {
                "summary": "The training run in progress: each worker's progress.json (epoch, step, loss, accuracy, examples/s, "
                "ETA, per-epoch history) and the run's state (none, starting, training, finished).",
                "responses": {
                    "200": {
                        "description": "The run's progress.",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    }
                },
            }
        },
        "/progress/report.png": {
            "get": {
                "summary": "The finished run's plots (the aggregator's report.png).",
                "responses": {
                    "200": {
                        "description": "PNG image.",
                        "content": {"image/png": {"schema": {"type": "string", "format": "binary"}}},
                    },
                    "404": {
                        "description": "The run has no report.png yet.",
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                    },
                },
            }
        },
    }


def run_progress(run_dir, now=None):
    """The /progress.json answer for the run in `run_dir` (None: no run)."""
    now = time.time() if now is None else now
    if run_dir is None or not os.path.isdir(run_dir):
        return {"run": None, "state": "none", "time": now, "workers": [], "report": None}
    workdir = Workdir(run_dir)
    workers = []
    try:
        names = sorted(name for name in os.listdir(workdir.train) if WORKER_DIR.fullmatch(name))[:MAX_WORKERS]
    except OSError:
        names = []
    for name in names:
        progress = read_progress(os.path.join(workdir.train, name, PROGRESS_FILE))
        if progress is None:
            continue
        progress["worker"] = int(name.split("-")[1])  # the directory's, whatever the file says
        if isinstance(progress.get("time"), (int, float)):
            progress["age_sec"] = max(0.0, now - progress["time"])
        workers.append(progress)
    finished = os.path.exists(os.path.join(workdir.final, MARKER))
    if finished:
        state = "finished"
    elif workers:
        state = "training"
    else:
        state = "starting"  # the copier (or the sweep) is still at work, or the trainers have not begun
    report = None
    if finished:
        try:  # the file's mtime in the URL: a browser asks again when the aggregator replaces it
            report = f"/progress/report.png?v={int(os.stat(os.path.join(workdir.final, 'report.png')).st_mtime)}"
        except OSError:
            pass  # (the aggregator ran with --no-plot, or an older one)
    return {"run": os.path.basename(run_dir), "state": state, "time": now, "workers": workers, "report": report}


@bp.get("/progress.json")
def progress_json():
    run_dir = run_finder().run_dir()
    body = run_progress(run_dir)
    # the run's dashboard page, and the finished run's analysis.png beside its report.png (or why it is left out)
    body["dashboard"], body["analysis"], body["analysis_withheld"] = (
        run_links(run_dir, body["state"] == "finished") if body["run"] else (None, None, None)
    )
    response = current_app.json.response(body)
    response.headers["Cache-Control"] = "no-store"  # always the newest
    return response


@bp.get("/progress/report.png")
def report_png():
    run_dir = run_finder().run_dir()
    final = run_dir and Workdir(run_dir).final
    try:
        if not final or not os.path.exists(os.path.join(final, MARKER)):
            raise FileNotFoundError  # (a report.png without the marker: the aggregator is still publishing)
        return send_file(os.path.join(final, "report.png"), mimetype="image/png", max_age=0)
    except (FileNotFoundError, IsADirectoryError):
        raise ApiError(
            404, "the run has no published report.png yet (the aggregator writes it when it publishes)"
        ) from None
