"""The run dashboard: GET /runs (the runs on --runs-dir, newest first, compared by their final held-out
metric), GET /runs.json (the same rows as JSON), GET /runs/<run> (one run: parameters, per-worker and
final held-out metrics, report.png, analysis.png, training curves per worker) and GET /runs/<run>/<file>.

Which runs: with --runs-dir (the chart passes its volume, one run-N directory per release revision),
every run-N there; without it, only the served run (the one whose final/model.keras is served), which the
URLs call "served" whatever its directory is named. A run's report is the one in final/ once the
aggregator has published (its marker), else the newest one in rejected/<time>/ (the quality gate refused
the model); a run with neither is training (a worker's progress.json exists) or has no report.

No path from the request reaches the filesystem unchecked: a run name must be "served" or match
^run-[0-9]+$ (progress.RUN_DIR) and name a directory of --runs-dir, a file must be one of FILES, and
the report's directory is chosen here, not by the request; anything else is a 404.

Cheap to list: each run costs a few stats and one open of its report.json, whose parsed summary is
cached by (inode, mtime, size) (ReportCache); a report is read up to MAX_REPORT_BYTES, a larger or
broken one is a row that says "unreadable report", not a 500. The aggregator writes every file
atomically (a temporary name, then a rename), so a read sees a whole file.

Shared by request threads: the ReportCache in app.extensions (locked, see its docstring); everything
else is read from the files on each request.
"""

import json
import math
import os
import re
import threading
from collections import OrderedDict

from flask import Blueprint, current_app, render_template, send_file, url_for

from disttrain_contract.layout import MARKER, PROGRESS_FILE, Workdir
from disttrain_server.errors import ApiError
from disttrain_server.shared import runs_dir, served_run_dir
from disttrain_server.progress import MAX_WORKERS, RUN_DIR, WORKER_DIR, is_run_dir, read_progress

bp = Blueprint("runs", __name__)

CACHE_KEY = "disttrain.reports"
SERVED = "served"  # the served run's name in URLs when it is not a run-N of --runs-dir
# The only files served, and as what. report.json is the aggregator's whole report (a few tens of KB).
FILES = {"report.json": "application/json", "report.png": "image/png", "analysis.png": "image/png"}
# A real report.json is 10-60 KB (its analysis section grows with the labels); 2 MB is far past any real
# one, and 200 runs of it would still be read once each, then served from the cache.
MAX_REPORT_BYTES = 2 * 1024 * 1024
CACHE_ENTRIES = 1024  # parsed summaries kept (a few KB each): every run of a large volume, and more
MAX_RUNS = 1000  # newest run-N listed; older ones are counted, not read
MAX_CURVE_WORKERS = 64  # workers whose progress.json the run page draws (one line each)
# Line colours of the per-worker curves (matplotlib's tab10, as report.png draws them).
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
REJECTED_DIR = re.compile(r"\d{8}T\d{6}\.\d{9}Z")  # a refused model's rejected/<time>/ (aggregator main.py)
STATUS_TEXT = {"finished": "finished", "rejected": "refused by the quality gate", "training": "training",
               "none": "no report"}


def openapi_paths(context):
    """This blueprint's part of /openapi.json (openapi.build_spec; a new dict each time: the builder adds to it)."""
    run = {"name": "run", "in": "path", "required": True,
           "schema": {"type": "string", "pattern": f"^(?:{SERVED}|run-[0-9]+)$"},
           "description": f"run-N of --runs-dir, or '{SERVED}' (the served model's run)"}
    html = {"200": {"description": "HTML page.", "content": {"text/html": {"schema": {"type": "string"}}}}}
    missing = {"description": "No such run (or no such file in it).",
               "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    return {
        "/runs": {"get": {"summary": "The run dashboard: every run on --runs-dir (or only the served one), newest first, "
                                     "with its status, strategy, workers and final held-out metric.", "responses": html}},
        "/runs.json": {"get": {"summary": "The dashboard's rows as JSON.", "responses": {
            "200": {"description": "The runs.", "content": {"application/json": {"schema": {"type": "object"}}}}}}},
        "/runs/{run}": {"get": {"summary": "One run: its parameters, per-worker and final held-out metrics, plots and "
                                           "training curves.", "parameters": [run], "responses": {**html, "404": missing}}},
        "/runs/{run}/{name}": {"get": {
            "summary": "One of the run's report files: report.json, report.png or analysis.png.",
            "parameters": [run, {"name": "name", "in": "path", "required": True,
                                 "schema": {"type": "string", "enum": sorted(FILES)}}],
            "responses": {"200": {"description": "The file.", "content": {kind: {"schema": {"type": "string"}}
                                                                          for kind in sorted(set(FILES.values()))}},
                          "404": missing}}},
    }


class ReportCache:
    """Parsed report.json summaries by path, each valid while the file's (inode, mtime_ns, size) is
    unchanged; at most `max_entries`, the least recently used dropped first.

    Thread-safe: gunicorn --threads runs one process's requests in several threads, which share this
    cache (one per app). An OrderedDict is not safe to reorder (move_to_end, popitem) from several
    threads at once, and the counters are read-modify-writes, so every access to them holds the lock.
    The file is read and parsed outside the lock, so a slow read (NFS) never holds up another thread's
    hit; two threads missing the same file at once both read it and store equal summaries."""

    def __init__(self, max_entries=CACHE_ENTRIES):
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._entries = OrderedDict()  # path -> (key, summary)
        self.hits = self.misses = self.bytes_read = 0

    def __len__(self):
        with self._lock:
            return len(self._entries)

    def get(self, path):
        """The summary of the report at `path` (see summarize); None if there is no file."""
        try:
            fh = open(path, "rb")
        except FileNotFoundError:
            return None
        except OSError as err:
            return {"error": f"unreadable report: {err.strerror}"}
        with fh:
            # The open file's own identity: what is read below is what the key names, even if the
            # aggregator renames a new report into place meanwhile.
            st = os.fstat(fh.fileno())
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
            with self._lock:
                entry = self._entries.get(path)
                if entry is not None and entry[0] == key:
                    self._entries.move_to_end(path)
                    self.hits += 1
                    return entry[1]
            if st.st_size > MAX_REPORT_BYTES:
                summary, read = {"error": f"unreadable report: larger than {MAX_REPORT_BYTES} bytes, not read"}, 0
            else:
                data = fh.read(MAX_REPORT_BYTES + 1)
                summary, read = summarize_bytes(data), len(data)
        with self._lock:
            self.misses += 1
            self.bytes_read += read
            self._entries[path] = (key, summary)
            self._entries.move_to_end(path)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return summary


def number(value):
    """A finite JSON number, else None (booleans are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


def metric_columns(task):
    """(key, title) of the held-out metrics the tables show: the aggregator's own table (print_table)."""
    if task == "faces":
        return [("test_accuracy", "top-1 retrieval"), ("test_same_person_distance", "same-person distance"),
                ("test_different_person_distance", "other-person distance")]
    return [("test_accuracy", "accuracy"), ("test_loss", "loss")]


def summarize_bytes(data):
    """What the dashboard shows of a report.json's bytes: a small dict, or {"error": "unreadable report: ..."}."""
    if len(data) > MAX_REPORT_BYTES:
        return {"error": f"unreadable report: larger than {MAX_REPORT_BYTES} bytes, not read"}
    try:
        report = json.loads(data)
    except (ValueError, RecursionError):
        return {"error": "unreadable report: not JSON"}
    try:
        return summarize(report)
    except (KeyError, TypeError, AttributeError, ValueError) as err:
        return {"error": f"unreadable report: {type(err).__name__} {err} (not a disttrain report.json)"}


def summarize(report):
    """The parts of an aggregator report the pages show, checked (KeyError, TypeError: not a report)."""
    if not isinstance(report, dict):
        raise TypeError("not a JSON object")
    task, strategy = str(report["task"]), str(report["strategy"])
    columns = metric_columns(task)
    rows = []
    for row in report["workers"][:MAX_WORKERS]:
        rows.append({"name": str(row["name"]), "examples": number(row.get("examples")),
                     "metrics": [number(row.get(key)) for key, _ in columns]})
    final = report["final"]
    final_value = number(final["test_accuracy"])
    if final_value is None:
        raise ValueError("final test_accuracy is not a number")
    combine = report.get("combine") or {}
    gate = report.get("gate") or {}
    data = report.get("data") or {}
    parameters = report.get("training_parameters") or {}
    origin = report.get("parameters_origin") or {}
    return {
        "task": task, "strategy": strategy, "source": report.get("source"), "seed": report.get("seed"),
        "split_seed": report.get("split_seed"), "labels": len(report.get("labels") or []),
        "workers": len(report["workers"]), "missing_workers": [m.get("worker_index") for m in report.get("missing_workers") or []],
        "epochs": number(report.get("epochs")), "test_examples": number(report.get("test_examples")),
        "training_wall_time_sec": number(report.get("training_wall_time_sec")),
        "created_at": number(report.get("created_at")),
        "parameters": {str(k): v for k, v in sorted(parameters.items()) if number(v) is not None or isinstance(v, str)},
        "parameters_from": "the hyper-parameter sweep" + (f" (trial {origin.get('trial')})" if origin.get("trial") is not None else "")
                           if origin.get("source") == "sweep" else "the trainer's flags" if parameters else None,
        "combine": combine.get("published"),
        "columns": [title for _, title in columns],
        "metric": columns[0][1],
        "rows": rows,
        "final": {"name": f"final ({combine.get('published', 'average')})" if strategy == "average" else "final (promoted)",
                  "examples": number(final.get("examples")), "metrics": [number(final.get(key)) for key, _ in columns]},
        "final_value": final_value,
        "gate": {"passed": gate.get("passed"), "forced": bool(gate.get("forced")),
                 "reasons": [str(r) for r in gate.get("reasons") or []]} if gate else None,
        "data_passed": data.get("passed") if isinstance(data, dict) else None,
    }


def served_name():
    """The served run's name in URLs: its run-N when it is a run of --runs-dir, else SERVED."""
    run_dir, runs = served_run_dir(), runs_dir()
    name = os.path.basename(run_dir)
    if runs and os.path.dirname(run_dir) == os.path.abspath(runs) and RUN_DIR.fullmatch(name) and os.path.isdir(run_dir):
        return name
    return SERVED


def resolve(name):
    """The directory of the run a URL names, or a 404: "served", or a run-N directory of --runs-dir."""
    if name == SERVED:
        return served_run_dir()
    runs = runs_dir()
    if runs and RUN_DIR.fullmatch(name):
        if is_run_dir(runs, name):
            return os.path.join(runs, name)
    raise ApiError(404, f"no run {name!r} here: a run is '{SERVED}' or a run-N directory of --runs-dir"
                   + ("" if runs else " (this server has no --runs-dir)"))


def report_dir(run_dir):
    """(status, directory of the run's report or None): finished (final/ with its marker), rejected (the
    newest rejected/<time>/ with a report.json), training (a worker's progress.json), or none."""
    final = Workdir(run_dir).final
    if os.path.exists(os.path.join(final, MARKER)):
        return "finished", final
    rejected = os.path.join(run_dir, "rejected")
    try:
        # the aggregator's <UTC time>.<ns>Z names (not its temporary ones, still being written): newest last
        for name in sorted((n for n in os.listdir(rejected) if REJECTED_DIR.fullmatch(n)), reverse=True):
            if os.path.isfile(os.path.join(rejected, name, "report.json")):
                return "rejected", os.path.join(rejected, name)
    except OSError:
        pass
    if worker_progress_files(run_dir, limit=1):
        return "training", None
    return "none", None


def worker_progress_files(run_dir, limit=MAX_WORKERS):
    """(worker index, path) of the run's workers' progress.json files that exist, at most `limit`."""
    train = Workdir(run_dir).train
    try:
        names = sorted(name for name in os.listdir(train) if WORKER_DIR.fullmatch(name))
    except OSError:
        return []
    found = []
    for name in names:
        path = os.path.join(train, name, PROGRESS_FILE)
        if os.path.isfile(path):
            found.append((int(name.split("-")[1]), path))
            if len(found) >= limit:
                break
    return found


def file_url(name, directory, filename):
    """The URL of a report file, with its mtime so that a browser asks again when the file is replaced;
    None if the run has no such file."""
    try:
        mtime = int(os.stat(os.path.join(directory, filename)).st_mtime)
    except OSError:
        return None
    return url_for("runs.run_file", run=name, name=filename, v=mtime)


def run_row(name, run_dir, served):
    """One row of the list: the run's status and its report's summary (cached)."""
    status, directory = report_dir(run_dir)
    report = current_app.extensions[CACHE_KEY].get(os.path.join(directory, "report.json")) if directory else None
    if directory and report is None:
        report = {"error": "unreadable report: report.json went away"}
    return {"run": name, "status": status, "status_text": STATUS_TEXT[status], "served": served,
            "url": url_for("runs.run_page", run=name), "report": report}


def list_runs():
    """(rows newest first, runs beyond MAX_RUNS not listed) of --runs-dir; without it the served run only."""
    runs, served = runs_dir(), served_name()
    if not runs:
        return [run_row(SERVED, served_run_dir(), True)], 0
    try:
        names = os.listdir(runs)
    except OSError:
        names = []
    numbered = sorted(((int(m.group(1)), name) for name in names if (m := RUN_DIR.fullmatch(name))), reverse=True)
    numbered = [(n, name) for n, name in numbered if is_run_dir(runs, name)]
    rows = [run_row(name, os.path.join(runs, name), name == served) for _, name in numbered[:MAX_RUNS]]
    if served == SERVED:  # the served model is not one of the runs (a --model elsewhere): listed first
        rows.insert(0, run_row(SERVED, served_run_dir(), True))
    return rows, max(0, len(numbered) - MAX_RUNS)


def curves(run_dir):
    """The per-epoch curves of the run's workers (their progress.json histories, bounded reads):
    {"loss": chart, "accuracy": chart, "test_accuracy": chart}, a chart being None when no worker has that metric."""
    series = []
    for index, path in worker_progress_files(run_dir, limit=MAX_CURVE_WORKERS):
        progress = read_progress(path)
        history = progress.get("history") if isinstance(progress, dict) else None
        if isinstance(history, list):
            series.append((index, [entry for entry in history if isinstance(entry, dict)]))
    return {key: svg_chart(series, key, title) for key, title in
            (("loss", "training loss"), ("accuracy", "training accuracy"), ("test_accuracy", "held-out accuracy"))}


def svg_chart(series, key, title, width=420, height=220):
    """What the template needs to draw one line per worker as inline SVG (no script: the CSP allows none
    inline, and the page must work offline): polyline points in pixels, axis ticks, colours."""
    lines = []
    for index, history in series:
        points = [(number(e.get("epoch")), number(e.get(key))) for e in history]
        points = [(x, y) for x, y in points if x is not None and y is not None]
        if points:
            lines.append((index, points))
    if not lines:
        return None
    left, right, top, bottom = 48, 10, 10, 30
    xs = [x for _, points in lines for x, _ in points]
    ys = [y for _, points in lines for _, y in points]
    x0, x1 = min(xs), max(xs)
    y0, y1 = (0.0, 1.0) if "accuracy" in key and min(ys) >= 0 and max(ys) <= 1 else (min(ys), max(ys))
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5

    def px(x, y):
        return (left + (x - x0) / (x1 - x0) * (width - left - right), top + (y1 - y) / (y1 - y0) * (height - top - bottom))

    y_ticks = [(px(x0, v)[1], f"{v:.3g}") for v in (y0 + (y1 - y0) * i / 4 for i in range(5))]
    x_ticks = [(px(v, y0)[0], f"{v:g}") for v in sorted({round(x0 + (x1 - x0) * i / 4) for i in range(5)}) if x0 <= v <= x1]
    return {
        "title": title, "width": width, "height": height, "left": left, "bottom": height - bottom, "right": width - right,
        "top": top, "y_ticks": y_ticks, "x_ticks": x_ticks,
        "lines": [{"label": f"worker {index}", "color": COLORS[i % len(COLORS)],
                   "points": " ".join(f"{a:.1f},{b:.1f}" for a, b in (px(x, y) for x, y in points)),
                   "dots": [px(x, y) for x, y in points] if len(points) == 1 else []}
                  for i, (index, points) in enumerate(lines)],
    }


def run_links(run_dir, finished):
    """For /progress.json: the dashboard URL of the run in `run_dir` and, once finished, its analysis.png's
    (None, None: the run is neither the served one nor a run-N of --runs-dir)."""
    run_dir, runs = os.path.abspath(run_dir), runs_dir()
    if run_dir == served_run_dir():
        name = served_name()
    elif runs and os.path.dirname(run_dir) == os.path.abspath(runs) and RUN_DIR.fullmatch(os.path.basename(run_dir)):
        name = os.path.basename(run_dir)
    else:
        return None, None
    return url_for("runs.run_page", run=name), file_url(name, Workdir(run_dir).final, "analysis.png") if finished else None


def enable_hint():
    return ("This server has no --runs-dir, so it shows the served run only. Start it with --runs-dir DIR "
            "(a directory of run-N runs) to list and compare them; the chart does so with server.dashboard.enabled.")


@bp.get("/runs")
def runs_page():
    rows, older = list_runs()
    best = max((r["report"]["final_value"] for r in rows if r["report"] and "error" not in r["report"]), default=None)
    return render_template("runs.html", rows=rows, older=older, best=best, runs_dir=runs_dir(),
                           hint=None if runs_dir() else enable_hint(), name=current_app.config["MODEL_NAME"])


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
    report = current_app.extensions[CACHE_KEY].get(os.path.join(directory, "report.json")) if directory else None
    files = {name: file_url(run, directory, name) for name in FILES} if directory else {}
    return render_template("run.html", run=run, status=status, status_text=STATUS_TEXT[status], report=report,
                           served=run in (SERVED, served_name()), files=files, curves=curves(run_dir),
                           hint=None if runs_dir() else enable_hint(), name=current_app.config["MODEL_NAME"])


@bp.get("/runs/<run>/<name>")
def run_file(run, name):
    if name not in FILES:
        raise ApiError(404, f"no file {name!r}: a run's files here are {', '.join(sorted(FILES))}")
    _status, directory = report_dir(resolve(run))
    path = directory and os.path.join(directory, name)
    try:
        if not path:
            raise FileNotFoundError
        # send_file opens the fixed path read-only; a request's ?v= only defeats stale browser caches
        return send_file(path, mimetype=FILES[name], max_age=0)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise ApiError(404, f"run {run!r} has no {name} (the aggregator writes it when it publishes or refuses a model)") from None


def init_app(app):
    app.extensions[CACHE_KEY] = ReportCache()
    app.register_blueprint(bp)

