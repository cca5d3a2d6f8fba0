"""The runs on the volume as plain data, for the run dashboard (runs.py) and /progress.json (progress.py):
which runs there are, where each one's report is, what its report.json and its workers' progress.json
files say.

Which runs: with --runs-dir (the chart passes its volume, one run-N directory per release revision),
every run-N there; without it, only the served run (the one whose final/model.keras is served), which
the URLs call "served" whatever its directory is named. A run's report is the one in final/ once the
aggregator has published (its marker), else the newest one in rejected/<time>/ (the quality gate
refused the model); a run with neither is training (a worker's progress.json exists) or has no report.
The run /progress.json shows is the newest run-N (RunFinder), or --workdir without --runs-dir.

Cheap to list: each run costs a few stats and one open of its report.json, whose parsed summary is
cached by (inode, mtime, size) (ReportCache); a report is read up to MAX_REPORT_BYTES, a progress file
up to MAX_PROGRESS_BYTES; a larger or broken one is data that says so ("unreadable report", {"error":
...}), not a 500. The aggregator and the trainers write every file atomically (a temporary name, then
a rename), so a read sees a whole file.

Shared by request threads: the ReportCache in app.extensions (locked, see its docstring) and the
RunFinder (immutable); everything else is read from the files on each call.
"""

import json
import os
import re
import threading
from collections import OrderedDict

from flask import current_app, url_for

from disttrain_contract.layout import MARKER, PROGRESS_FILE, REPORT_FILE, Workdir
from disttrain_contract.progress import Progress
from disttrain_contract.records import RecordError, finite_number
from disttrain_contract.report import Report
from disttrain_server import heldout
from disttrain_server.shared import runs_dir, served_run_dir

CACHE_KEY = "disttrain.reports"
SERVED = "served"  # the served run's name in URLs when it is not a run-N of --runs-dir
# A real report.json is 10-60 KB (its analysis section grows with the labels); 2 MB is far past any real
# one, and 200 runs of it would still be read once each, then served from the cache.
MAX_REPORT_BYTES = 2 * 1024 * 1024
CACHE_ENTRIES = 1024  # parsed summaries kept (a few KB each): every run of a large volume, and more
MAX_PROGRESS_BYTES = 256 * 1024  # a progress file keeps its newest 500 epochs (disttrain_trainer.progress): ~60 KB
MAX_WORKERS = 1024  # worker directories listed; the chart refuses more than 256 workers
RUN_DIR = re.compile(r"run-([0-9]{1,9})")  # ASCII digits: \d would take other scripts' digits too
WORKER_DIR = re.compile(r"worker-([0-9]{5})")
REJECTED_DIR = re.compile(r"[0-9]{8}T[0-9]{6}\.[0-9]{9}Z")  # a refused model's rejected/<time>/ (aggregator main.py)


class RunFinder:
    """Where the run to show lives. Immutable: request threads share it read-only."""

    def __init__(self, workdir, runs_dir=None):
        self.workdir, self.runs_dir = os.path.abspath(workdir), runs_dir and os.path.abspath(runs_dir)

    def run_dir(self):
        """The newest run-N of --runs-dir (None: there is none yet), else --workdir."""
        if not self.runs_dir:
            return self.workdir
        runs = numbered_runs(self.runs_dir)
        return os.path.join(self.runs_dir, runs[0][1]) if runs else None


def numbered_runs(runs):
    """(N, name) of the run-N directories of `runs` (--runs-dir), newest first; none if it cannot be listed."""
    try:
        names = os.listdir(runs)
    except OSError:
        return []
    numbered = sorted(((int(m.group(1)), name) for name in names if (m := RUN_DIR.fullmatch(name))), reverse=True)
    return [(n, name) for n, name in numbered if is_run_dir(runs, name)]


def is_run_dir(runs_dir, name):
    """A directory of the runs dir itself, not a file or a symbolic link that leads elsewhere (the
    dashboard lists and serves the same ones that RunFinder picks from)."""
    path = os.path.join(runs_dir, name)
    return os.path.isdir(path) and not os.path.islink(path)


def read_progress(path):
    """A worker's progress file as a dict (contract progress.Progress's JSON, checked); None if there is none;
    {"error": ...} if it cannot be used."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_PROGRESS_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as err:
        return {"error": f"unreadable: {err.strerror}"}
    if len(data) > MAX_PROGRESS_BYTES:
        return {"error": f"larger than {MAX_PROGRESS_BYTES} bytes: not read"}
    try:
        progress = json.loads(data)
    except ValueError:
        return {"error": "not JSON"}
    if not isinstance(progress, dict):
        return {"error": "not a JSON object"}
    try:
        return Progress.from_json(progress).to_json()
    except RecordError as err:
        return {"error": str(err)}


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
    return finite_number(value)


def summarize_bytes(data):
    """What the dashboard shows of a report.json's bytes: a small dict, or {"error": "unreadable report: ..."}."""
    if len(data) > MAX_REPORT_BYTES:
        return {"error": f"unreadable report: larger than {MAX_REPORT_BYTES} bytes, not read"}
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):
        return {"error": "unreadable report: not JSON"}
    try:
        return summarize(Report.from_json(obj))
    except RecordError as err:  # a field not of the contract's form: named in one line
        return {"error": f"unreadable report: {err} (not a disttrain report.json)"}
    except (KeyError, TypeError, AttributeError, ValueError) as err:  # inside a section another module defines
        return {"error": f"unreadable report: {type(err).__name__} {err} (not a disttrain report.json)"}


def summarize(report):
    """The parts of an aggregator report (contract report.Report) the pages show; RecordError if the final
    model has no value of the primary metric."""
    primary = report.metric  # the metric runs are compared by, in its direction
    columns = report.columns
    final_value = number(report.final.get(primary.key))
    if final_value is None:
        raise RecordError(f"{REPORT_FILE}: final.{primary.key} is not a number")
    rows = [
        {"name": row.name, "examples": number(row.examples), "metrics": [number(row.get(c.key)) for c in columns]}
        for row in report.workers[:MAX_WORKERS]
    ]
    combine = report.combine or {}
    gate = report.gate or {}
    data = report.data or {}
    parameters = report.training_parameters or {}
    origin = report.parameters_origin or {}
    return {
        "task": report.task,
        "strategy": report.strategy,
        "source": report.source,
        "seed": report.seed,
        "split_seed": report.split_seed,
        "labels": len(report.labels or []),
        "workers": len(report.workers),
        "missing_workers": [m.get("worker_index") for m in report.missing_workers or []],
        "epochs": number(report.epochs),
        "test_examples": number(report.test_examples),
        "training_wall_time_sec": number(report.training_wall_time_sec),
        "created_at": number(report.created_at),
        "parameters": {str(k): v for k, v in sorted(parameters.items()) if number(v) is not None or isinstance(v, str)},
        "parameters_from": "the hyper-parameter sweep"
        + (f" (trial {origin.get('trial')})" if origin.get("trial") is not None else "")
        if origin.get("source") == "sweep"
        else "the trainer's flags"
        if parameters
        else None,
        "combine": combine.get("published"),
        "columns": [c.title for c in columns],
        "metric": columns[0].title,
        "metric_key": primary.key,
        "direction": primary.direction,
        "fraction": primary.unit == "fraction",
        "problem": report.problem,
        "rows": rows,
        "final": {
            "name": report.final_label,
            "examples": number(report.final.examples),
            "metrics": [number(report.final.get(c.key)) for c in columns],
        },
        "final_value": final_value,
        "gate": {
            "passed": gate.get("passed"),
            "forced": bool(gate.get("forced")),
            "reasons": [str(r) for r in gate.get("reasons") or []],
        }
        if gate
        else None,
        "data_passed": data.get("passed"),
        # a differentially private run's budget, shown beside its accuracy: with a private vocabulary, ε and δ are
        # the total (training plus vocabulary, added), and the parts are shown beside it
        "privacy": {
            "epsilon": number(report.privacy.epsilon),
            "delta": number(report.privacy.delta),
            "accountant": str(report.privacy.details.get("accountant") or ""),
            **privacy_parts(report.privacy.details),
        }
        if report.privacy
        else None,
    }


def privacy_parts(details):
    """The ε of the training and of the private vocabulary when the run's ε is their sum, else nothing."""
    training, vocabulary = details.get("training"), details.get("vocabulary")
    if not (isinstance(training, dict) and isinstance(vocabulary, dict)):
        return {}
    return {
        "training_epsilon": number(training.get("epsilon")),
        "vocabulary_epsilon": number(vocabulary.get("epsilon")),
    }


def served_report(path, run_dir):
    """report.json at `path` as the server serves it to this request: without what heldout.withheld
    leaves out (held-out values, people's names: the request's opt-in and token decide), and with every
    value that is an absolute path (the copier's statistics and plot, say) relative to the run's working
    directory `run_dir` (data/stats.png), or its file name alone when it lies outside the run; the
    server's volume layout stays its own. JSON bytes; FileNotFoundError/IsADirectoryError as open()
    raises them. A file that is not JSON (a report being replaced is renamed into place whole, so this is
    a damaged one) is served as it is: it has no analysis to leave out."""
    with open(path, "rb") as fh:
        raw = fh.read()
    try:
        report = json.loads(raw)
    except (ValueError, RecursionError):
        return raw
    report, _ = heldout.withheld(report)
    root = os.path.abspath(run_dir)

    def relative(value):
        if isinstance(value, dict):
            return {key: relative(item) for key, item in value.items()}
        if isinstance(value, list):
            return [relative(item) for item in value]
        if isinstance(value, str) and value.startswith("/") and "\n" not in value and " " not in value:
            inside = os.path.commonpath([root, os.path.abspath(value)]) == root
            return os.path.relpath(value, root) if inside else os.path.basename(value)
        return value

    return json.dumps(relative(report), indent=2).encode()


def served_name():
    """The served run's name in URLs: its run-N when it is a run of --runs-dir, else SERVED."""
    run_dir, runs = served_run_dir(), runs_dir()
    name = os.path.basename(run_dir)
    if (
        runs
        and os.path.dirname(run_dir) == os.path.abspath(runs)
        and RUN_DIR.fullmatch(name)
        and os.path.isdir(run_dir)
    ):
        return name
    return SERVED


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
            if os.path.isfile(os.path.join(rejected, name, REPORT_FILE)):
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


def worker_histories(run_dir, limit):
    """(worker index, its progress.json's per-epoch history entries) of the run's first `limit` workers
    that have one (bounded reads)."""
    series = []
    for index, path in worker_progress_files(run_dir, limit=limit):
        progress = read_progress(path)
        if progress and "history" in progress:  # (Progress checked that every entry is an object with an epoch)
            series.append((index, progress["history"]))
    return series


# ------------------------------------------------------------------ the dashboard's URLs (runs.py's routes)
def file_url(name, directory, filename):
    """The URL of a report file, with its mtime so that a browser asks again when the file is replaced;
    None if the run has no such file."""
    try:
        mtime = int(os.stat(os.path.join(directory, filename)).st_mtime)
    except OSError:
        return None
    return url_for("runs.run_file", run=name, name=filename, v=mtime)


def analysis_refusal(directory):
    """None if this request may have the analysis.png in `directory` (a report's directory); else
    (status, why), from the report.json beside it (heldout.plot_refusal; its summary, cached)."""
    summary = current_app.extensions[CACHE_KEY].get(os.path.join(directory, REPORT_FILE))
    return heldout.plot_refusal(summary)


def run_links(run_dir, finished):
    """For /progress.json: (the dashboard URL of the run in `run_dir`, once finished its analysis.png's, why
    that is left out or None). (None, None, None): the run is neither the served one nor a run-N of --runs-dir."""
    run_dir, runs = os.path.abspath(run_dir), runs_dir()
    if run_dir == served_run_dir():
        name = served_name()
    elif runs and os.path.dirname(run_dir) == os.path.abspath(runs) and RUN_DIR.fullmatch(os.path.basename(run_dir)):
        name = os.path.basename(run_dir)
    else:
        return None, None, None
    page, final = url_for("runs.run_page", run=name), Workdir(run_dir).final
    if not finished:
        return page, None, None
    analysis = file_url(name, final, "analysis.png")
    refused = analysis and analysis_refusal(final)
    return (page, None, refused[1]) if refused else (page, analysis, None)
