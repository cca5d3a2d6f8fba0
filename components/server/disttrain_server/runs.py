"""The run dashboard: GET /runs (the runs on --runs-dir, newest first, compared by their final held-out
metric), GET /runs.json (the same rows as JSON), GET /runs/<run> (one run: parameters, per-worker and
final held-out metrics, report.png, analysis.png, training curves per worker) and GET /runs/<run>/<file>.

The views only: which runs there are and what their reports say is runs_data's (plain data, cached),
the curves' drawing svg's.

No path from the request reaches the filesystem unchecked: a run name must be "served" or match
^run-[0-9]+$ (runs_data.RUN_DIR) and name a directory of --runs-dir, a file must be one of FILES, and
the report's directory is chosen by runs_data.report_dir, not by the request; anything else is a 404.

What of a report is served is heldout's to say: report.json without a regression's held-out values or
a face run's people's names, and in place of an analysis.png that draws them a note on the page and a
403 (401: it takes the token) for the file, unless the operator opted in.

Shared by request threads: the ReportCache in app.extensions (runs_data, locked); everything else is
read from the files on each request.
"""

import os

from flask import Blueprint, current_app, render_template, send_file, url_for

from disttrain_server import heldout
from disttrain_server.heldout import REPORT_HEADERS
from disttrain_server.errors import ApiError
from disttrain_contract.layout import REPORT_FILE
from disttrain_server.runs_data import (
    CACHE_KEY,
    RUN_DIR,
    SERVED,
    ReportCache,
    analysis_refusal,
    file_url,
    is_run_dir,
    numbered_runs,
    report_dir,
    served_name,
    served_report,
    worker_histories,
)
from disttrain_server.security import Unauthorized
from disttrain_server.shared import runs_dir, served_run_dir
from disttrain_server.svg import svg_chart

bp = Blueprint("runs", __name__)

# The only files served, and as what. report.json is the aggregator's whole report (a few tens of KB).
FILES = {REPORT_FILE: "application/json", "report.png": "image/png", "analysis.png": "image/png"}
MAX_RUNS = 1000  # newest run-N listed; older ones are counted, not read
MAX_CURVE_WORKERS = 64  # workers whose progress.json the run page draws (one line each)
STATUS_TEXT = {
    "finished": "finished",
    "rejected": "refused by the quality gate",
    "training": "training",
    "none": "no report",
}


def openapi_paths(context):
    """This blueprint's part of /openapi.json (openapi.build_spec; a new dict each time: the builder adds to it)."""
    run = {
        "name": "run",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": f"^(?:{SERVED}|run-[0-9]+)$"},
        "description": f"run-N of --runs-dir, or '{SERVED}' (the served model's run)",
    }
    html = {"200": {"description": "HTML page.", "content": {"text/html": {"schema": {"type": "string"}}}}}
    missing = {
        "description": "No such run (or no such file in it).",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
    return {
        "/runs": {
            "get": {
                "summary": "The run dashboard: every run on --runs-dir (or only the served one), newest first, "
                "with its status, strategy, workers and final held-out metric.",
                "responses": html,
            }
        },
        "/runs.json": {
            "get": {
                "summary": "The dashboard's rows as JSON.",
                "responses": {
                    "200": {"description": "The runs.", "content": {"application/json": {"schema": {"type": "object"}}}}
                },
            }
        },
        "/runs/{run}": {
            "get": {
                "summary": "One run: its parameters, per-worker and final held-out metrics, plots and training curves.",
                "parameters": [run],
                "responses": {**html, "404": missing},
            }
        },
        "/runs/{run}/{name}": {
            "get": {
                "summary": "One of the run's report files: report.json, report.png or analysis.png. report.json "
                "leaves out a regression's held-out (actual, predicted) pairs and a face run's people's names, and "
                "analysis.png, which draws them, is refused, unless --show-heldout-examples (and, where the token "
                "rules guard that data, the request's API token); the report's 'withheld' object names what is left out.",
                "parameters": [
                    run,
                    {
                        "name": "name",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "enum": sorted(FILES)},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "The file.",
                        "content": {kind: {"schema": {"type": "string"}} for kind in sorted(set(FILES.values()))},
                    },
                    "401": {
                        "description": "analysis.png draws data this request needs the API token for.",
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                    },
                    "403": {
                        "description": "analysis.png draws single held-out examples or people by name: "
                        "served with --show-heldout-examples.",
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                    },
                    "404": missing,
                },
            }
        },
    }


def resolve(name):
    """The directory of the run a URL names, or a 404: "served", or a run-N directory of --runs-dir."""
    if name == SERVED:
        return served_run_dir()
    runs = runs_dir()
    if runs and RUN_DIR.fullmatch(name):
        if is_run_dir(runs, name):
            return os.path.join(runs, name)
    raise ApiError(
        404,
        f"no run {name!r} here: a run is '{SERVED}' or a run-N directory of --runs-dir"
        + ("" if runs else " (this server has no --runs-dir)"),
    )


def run_row(name, run_dir, served):
    """One row of the list: the run's status and its report's summary (cached)."""
    status, directory = report_dir(run_dir)
    report = current_app.extensions[CACHE_KEY].get(os.path.join(directory, REPORT_FILE)) if directory else None
    if directory and report is None:
        report = {"error": "unreadable report: report.json went away"}
    return {
        "run": name,
        "status": status,
        "status_text": STATUS_TEXT[status],
        "served": served,
        "url": url_for("runs.run_page", run=name),
        "report": report,
    }


def list_runs():
    """(rows newest first, runs beyond MAX_RUNS not listed) of --runs-dir; without it the served run only."""
    runs, served = runs_dir(), served_name()
    if not runs:
        return [run_row(SERVED, served_run_dir(), True)], 0
    numbered = numbered_runs(runs)
    rows = [run_row(name, os.path.join(runs, name), name == served) for _, name in numbered[:MAX_RUNS]]
    if served == SERVED:  # the served model is not one of the runs (a --model elsewhere): listed first
        rows.insert(0, run_row(SERVED, served_run_dir(), True))
    return rows, max(0, len(numbered) - MAX_RUNS)


def curves(run_dir):
    """The per-epoch curves of the run's workers (their progress.json histories, bounded reads):
    {"loss": chart, "accuracy": chart, "test_accuracy": chart, "mae": chart, "test_rmse": chart}, a chart being
    None when no worker has that metric (a regression's workers have the last two instead of the accuracies)."""
    series = worker_histories(run_dir, MAX_CURVE_WORKERS)
    return {
        key: svg_chart(series, key, title)
        for key, title in (
            ("loss", "training loss"),
            ("accuracy", "training accuracy"),
            ("test_accuracy", "held-out accuracy"),
            ("mae", "training MAE"),
            ("test_rmse", "held-out RMSE"),
        )
    }


def enable_hint():
    return (
        "This server has no --runs-dir, so it shows the served run only. Start it with --runs-dir DIR "
        "(a directory of run-N runs) to list and compare them; the chart does so with server.dashboard.enabled."
    )


@bp.get("/runs")
def runs_page():
    rows, older = list_runs()
    mark_best(rows)
    return render_template(
        "runs.html",
        rows=rows,
        older=older,
        runs_dir=runs_dir(),
        hint=None if runs_dir() else enable_hint(),
        name=current_app.config["MODEL_NAME"],
    )


def mark_best(rows):
    """report["best"]: the run's final value is the best among the runs judged by the same metric (accuracy: the
    highest; a regression's RMSE: the lowest)."""
    reports = [r["report"] for r in rows if r["report"] and "error" not in r["report"]]
    for report in reports:
        peers = [p["final_value"] for p in reports if p.get("metric_key") == report.get("metric_key")]
        best = max(peers) if report.get("direction", "max") == "max" else min(peers)
        report["best"] = report["final_value"] == best


@bp.get("/runs.json")
def runs_json():
    rows, older = list_runs()
    response = current_app.json.response({"runs_dir": bool(runs_dir()), "runs": rows, "not_listed": older})
    response.headers["Cache-Control"] = "no-store"
    return response


@bp.get("/runs/<run>")
def run_page(run):
    run_dir = resolve(run)
    status, directory = report_dir(run_dir)
    report = current_app.extensions[CACHE_KEY].get(os.path.join(directory, REPORT_FILE)) if directory else None
    files = {name: file_url(run, directory, name) for name in FILES} if directory else {}
    # what the served report.json leaves out, and analysis.png if it draws that (a note instead of each)
    refused = heldout.refusal(heldout.kind_of(report))
    plot_refused = files.get("analysis.png") and analysis_refusal(directory)
    if plot_refused:
        files["analysis.png"] = None
    return render_template(
        "run.html",
        run=run,
        status=status,
        status_text=STATUS_TEXT[status],
        report=report,
        withheld=refused and refused[1],
        analysis_withheld=plot_refused and plot_refused[1],
        served=run in (SERVED, served_name()),
        files=files,
        curves=curves(run_dir),
        hint=None if runs_dir() else enable_hint(),
        name=current_app.config["MODEL_NAME"],
    )


@bp.get("/runs/<run>/<name>")
def run_file(run, name):
    if name not in FILES:
        raise ApiError(404, f"no file {name!r}: a run's files here are {', '.join(sorted(FILES))}")
    _status, directory = report_dir(resolve(run))
    path = directory and os.path.join(directory, name)
    try:
        if not path:
            raise FileNotFoundError
        refused = name == "analysis.png" and os.path.exists(path) and analysis_refusal(directory)
        if refused:
            status, why = refused
            raise Unauthorized(why, None) if status == 401 else ApiError(status, why)
        if name == REPORT_FILE:  # its paths relative to the run, as /report serves it
            body = served_report(path, resolve(run))
            return current_app.response_class(body, mimetype=FILES[name], headers=REPORT_HEADERS)
        # send_file opens the fixed path read-only; a request's ?v= only defeats stale browser caches
        response = send_file(path, mimetype=FILES[name], max_age=0)
        response.vary.add("Authorization")
        return response
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise ApiError(
            404, f"run {run!r} has no {name} (the aggregator writes it when it publishes or refuses a model)"
        ) from None


def init_app(app):
    app.extensions[CACHE_KEY] = ReportCache()
    app.register_blueprint(bp)
