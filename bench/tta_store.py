"""The time-to-accuracy benchmark's rows: when a run first reached its target, and the resumable file
they are kept in (bench/results/time_to_accuracy.json). No TensorFlow, no processes: unit-tested
(tests/unit/test_time_to_accuracy.py).

A row is one (task, link, strategy, workers, options) run; `row_key` is its identity. The file is
    {"benchmark", "machine": {...facts of the host, as every result file...}, "config", "rows": [row, ...],
     "sittings": {sitting id: {"started", "machine", "probes": {task: the advisor's probe document},
                               "links": {shaped link: its measured payload rate (bench/goodput.py)}}},
     "earlier_rows": [a row a later sitting measured again, ...],
     "remeasured_rows": [a row its own sitting measured again (--rerun --continue-sitting), ...]}
and is rewritten whole (temporary file, then rename) each time a row finishes, so an interrupted
benchmark keeps every row it finished and a rerun skips them (`RowStore.done`).

A sitting is one invocation of the benchmark: its rows carry its id ("sitting"), and it keeps the advisor
probe it took of each task it ran. The plan is longer than any sitting, and hosts differ 2-3x in speed
from one sitting to the next, so a prediction is checked against the rows of the sitting its probe was
taken in (bench/advisor_accuracy.py), and ratios between rows are only read within a sitting.
"""

import json
import os

# a row that needs no rerun; "failed" and "not available" rows are run again (a fixed trainer, new flags)
FINAL_STATUSES = ("ok", "capped")


LINK_ORDER = ("loopback", "1gbit", "100mbit", "50mbit", "10mbit")
STRATEGY_ORDER = ("single", "ceiling", "average", "multiworker", "localsgd", "parameterserver")


def row_order(row):
    """Where a row goes in tables and plots: link, strategy, plain local SGD before DiLoCo, H, the wire."""
    o = row["options"]
    return (
        _place(LINK_ORDER, row["link"]),
        _place(STRATEGY_ORDER, row["strategy"]),
        "outer_optimizer" in o,
        o.get("sync_every", 0),
        str(o.get("allreduce_dtype", "")),
        json.dumps(o, sort_keys=True),
    )


# the options that say how every worker trains (the task's model, threads), not how the workers talk:
# the same for every row of a task, so the tables and plots leave them out of a row's label
TASK_OPTIONS = ("threads", "model", "image_size", "batch", "optimizer", "width", "steps_per_call", "learning_rate")


def strategy_options(options):
    """A row's options without the task's (TASK_OPTIONS): sync_every, outer_optimizer, allreduce_dtype, ..."""
    return {k: v for k, v in options.items() if k not in TASK_OPTIONS}


def _place(names, name):
    return names.index(name) if name in names else len(names)


def row_key(row):
    """The identity of a row: rows with equal keys measure the same thing."""
    return (
        row["task"],
        row["link"],
        row["strategy"],
        int(row["workers"]),
        json.dumps(row.get("options") or {}, sort_keys=True),
    )


def first_reach(curve, target, higher_is_better=True):
    """Seconds at which the held-out metric first reached `target`, or None.

    curve: [(seconds since the run's start, metric), ...] in the order the evaluations happened
    (a metric of None, an evaluation that failed to give one, never counts). "Reached" means at
    least the target (at most, for a metric where lower is better), so a run that touches the
    target and falls back counts from its first touch: that model existed, and was checkpointed."""
    for seconds, value in curve:
        if value is None:
            continue
        if (value >= target) if higher_is_better else (value <= target):
            return seconds
    return None


def outcome(curve, target, capped, higher_is_better=True):
    """(reached, time_to_target_seconds, status) of a run that did not fail. A run stopped at its cap
    before reaching the target is "capped"; one that reached it (before the cap, or having finished
    its epochs without) is "ok"."""
    seconds = first_reach(curve, target, higher_is_better)
    if seconds is not None:
        return True, seconds, "ok"
    return False, None, "capped" if capped else "ok"


def ceiling_time_to_target(rows, task):
    """The two-process ceiling of a task's time to the target, measured: (seconds, epochs), or None.

    1 worker reached the target at its evaluation of epoch E. Two processes that never talk and each
    train on half the data (`average`'s two workers) have between them taken the same examples after
    their own epoch E; the ceiling is when the slower of them had evaluated it (each evaluates after
    every epoch). Start-up, tracing and E evaluations are inside it, as in every row's time, at the
    host's two-process speed, with no cluster to join and no collective: no 2-worker run that takes
    the examples 1 worker took can reach the target sooner. (The throughput ratio, the ceiling's
    speedup over 1 worker's, divides start-up by it too, which no run of two processes does.)"""
    single = next((r for r in rows if r["task"] == task and r["strategy"] == "single" and r.get("reached")), None)
    average = next(
        (r for r in rows if r["task"] == task and r["strategy"] == "average" and r.get("worker_curves")), None
    )
    if single is None or average is None:
        return None
    epochs = first_reach([(e, v) for _, e, v in single["curve"]], single["target"])  # (the epoch in place of the time)
    times = [next((t for t, e, _ in curve if e == epochs), None) for curve in average["worker_curves"]]
    if epochs is None or None in times:  # (worker_curves is non-empty: checked above)
        return None
    return max(times), epochs


def sitting_references(task, sitting, rows, earlier=()):
    """(1-worker row, ceiling row, ceiling's time to target) that `sitting` measured for `task` (sitting None: the
    rows from before the benchmark kept sittings), from the rows and the earlier rows (rows measured again since).
    Hosts differ 2-3x in speed from one sitting to the next: a row's ratios are against its own sitting's
    references. A sitting that ran none (one row run again beside the references of an earlier sitting) takes
    those of the last sitting before it that ran them, not whichever sitting measured them last; None when no
    sitting before it ran a 1-worker row of the task."""
    own = [x for x in (*rows, *earlier) if x["task"] == task and x.get("sitting") == sitting]
    single = next((x for x in own if x["strategy"] == "single"), None)
    if single is None and sitting is None:
        return None
    if single is None:
        before = [
            x["sitting"]
            for x in (*rows, *earlier)
            if x["task"] == task
            and x["strategy"] == "single"
            and x.get("sitting") is not None
            and x["sitting"] < sitting
        ]
        return sitting_references(task, max(before), rows, earlier) if before else None
    return single, next((x for x in own if x["strategy"] == "ceiling"), None), ceiling_time_to_target(own, task)


class RowStore:
    """The rows on disk. `put` adds or replaces a row (same key) and rewrites the file atomically."""

    def __init__(self, path, machine=None, config=None, benchmark="time_to_accuracy"):
        self.path = path
        self.doc = {"benchmark": benchmark, "machine": machine or {}, "config": config or {}, "rows": []}
        if os.path.exists(path):
            with open(path) as fh:
                stored = json.load(fh)
            if not isinstance(stored, dict) or not isinstance(stored.get("rows"), list):
                raise ValueError(f"{path} is not a time-to-accuracy result file (no \"rows\" list)")
            self.doc = stored
            # the host's facts are the first run's; a later session's are kept beside them
            if machine and stored.get("machine") and _facts(stored["machine"]) != _facts(machine):
                self.doc.setdefault("other_machines", []).append(machine)
            # the run's configuration, over the stored one; a task of the file the run does not name keeps its own
            if config:
                before = stored.get("config", {})
                self.doc["config"] = {
                    **before,
                    **config,
                    "tasks": {**before.get("tasks", {}), **config.get("tasks", {})},
                }

    @property
    def rows(self):
        return self.doc["rows"]

    def get(self, key):
        return next((r for r in self.rows if row_key(r) == key), None)

    def done(self, key):
        """Whether a row with this key is stored with a final status (it needs no rerun)."""
        row = self.get(key)
        return row is not None and row.get("status") in FINAL_STATUSES

    def start_sitting(self, machine, now=None, boot=None):
        """A new sitting's id (its start, UTC, to the second; a suffix if one started in the same second). `boot`:
        the host's boot id, which a later run must share to continue the sitting (continue_sitting)."""
        import time

        sittings = self.doc.setdefault("sittings", {})
        base = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
        sitting = base
        while sitting in sittings:
            sitting = f"{base}-{len(sittings)}"
        sittings[sitting] = {
            "started": base,
            "machine": machine or {},
            "probes": {},
            **({"boot": boot} if boot else {}),
        }
        self.write()
        return sitting

    def continue_sitting(self, boot, sitting=None):
        """The id of a sitting to add rows to (`sitting`, or the newest): (id, None), or (None, why not). Only on
        the host that ran it, not restarted since (the same boot id): a sitting's rows are read against each
        other, and hosts of one kind differ 2-3x in speed."""
        sittings = self.doc.get("sittings") or {}
        if not sittings:
            return None, "the results hold no sitting to continue"
        newest = max(sittings, key=lambda s: (sittings[s]["started"], s))
        if sitting is not None and sitting not in sittings:
            return None, f"the results hold no sitting {sitting} (the newest is {newest})"
        chosen = sitting or newest
        recorded = sittings[chosen].get("boot")
        if not boot or recorded != boot:
            why = "it kept no boot id" if not recorded else "it ran on another host, or before this one restarted"
            named = f"the newest sitting, {chosen}," if sitting is None else f"sitting {chosen}"
            return None, f"{named} cannot be continued here: {why}"
        return chosen, None

    def put_probe(self, sitting, task, probe_document):
        """Keep the advisor's probe (`disttrain-advise --json`'s document) of a task taken in a sitting."""
        self.doc["sittings"][sitting]["probes"][task] = probe_document
        self.write()

    @property
    def earlier_rows(self):
        return self.doc.get("earlier_rows", [])

    def put_link(self, sitting, link, goodput):
        """Keep what a shaped link carried in a sitting (bench/goodput.py's document)."""
        self.doc["sittings"][sitting].setdefault("links", {})[link] = goodput
        self.write()

    def put(self, row):
        """Add the row, replacing the stored one of its key. A replaced row of another sitting is kept in
        "earlier_rows": the rows (and the reports) hold each key's newest measurement, while the advisor's
        check still needs every sitting whole, beside the probe taken in it. A replaced row of the same sitting
        goes to "remeasured_rows", which no check reads (the sitting would otherwise count that configuration
        twice) but which keeps every measurement: the docs report a row measured again beside the first."""
        key = row_key(row)
        replaced = [r for r in self.rows if row_key(r) == key]
        kept = [r for r in replaced if r.get("sitting") != row.get("sitting")]  # (None: a row from before sittings)
        if kept:
            self.doc["earlier_rows"] = self.earlier_rows + kept
        again = [r for r in replaced if r.get("sitting") is not None and r.get("sitting") == row.get("sitting")]
        if again:
            self.doc["remeasured_rows"] = self.doc.get("remeasured_rows", []) + again
        self.doc["rows"] = [r for r in self.rows if row_key(r) != key] + [row]
        self.write()

    def write(self):
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(self.doc, fh, indent=1)
        os.replace(tmp, self.path)


def sitting_probe(doc, sitting, task):
    """The advisor's probe document of `task` taken in `sitting`, or None (no such sitting, no probe, or a
    probe that failed: stored as {"error": why})."""
    document = (((doc or {}).get("sittings") or {}).get(sitting) or {}).get("probes", {}).get(task)
    return document if isinstance(document, dict) and "probe" in document else None


def sitting_link(doc, sitting, link):
    """The measured payload rate of a shaped link in `sitting` (bench/goodput.py's document), or None."""
    return ((((doc or {}).get("sittings") or {}).get(sitting) or {}).get("links") or {}).get(link)


def _facts(machine):
    """What identifies a host in a machine record (not the load, not the time)."""
    return {k: machine.get(k) for k in ("nproc", "cpu", "mem_total_mb", "kernel")}
