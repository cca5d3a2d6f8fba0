#!/usr/bin/env python3
"""combine: the aggregator's three candidates (--combine) on digits and movie reviews, 2 and 3 workers.

Each run: copier --n-shards W, W `average` trainers in parallel (seed 42, the task's make-demo
epochs and batch, --validation-fraction 0.1: every candidate trains on the same 90 % of each
shard), then `disttrain-aggregator --combine average --force`, whose report.json evaluates the
weight average, the ensemble of the W worker models and the best worker by validation accuracy on
the held-out split, with each one's single-instance latency (combine.latencies_per_instance:
the model compiled as one graph, interleaved calls, median). Results: results/combine.json,
plots/combine.png; the table is in the README's "Combining the worker models" section.
"""

import os
import sys

from common import BIN, ROOT, Bench, command_line, run_measured, start, tail, tmpdir, wait_measured
from disttrain_contract.layout import REPORT_FILE
from disttrain_contract.report import Report

TASKS = (("digits", "sample:digits", 20), ("movie-reviews", "sample:movie-reviews", 5))  # scripts/run-local.sh's epochs
WORKERS = (2, 3)
VALIDATION = 0.1


def one_run(base, task, source, epochs, workers):
    work = os.path.join(base, f"{task}-{workers}")
    r = run_measured(
        [os.path.join(BIN, "disttrain-copier"), "--source", source, "--n-shards", workers, "--workdir", work],
        log=os.path.join(base, f"{task}-{workers}-copier.log"),
    )
    if r["rc"]:
        raise SystemExit(tail(os.path.join(base, f"{task}-{workers}-copier.log")))
    logs = [os.path.join(base, f"{task}-{workers}-worker-{i}.log") for i in range(workers)]
    procs = [
        start(
            [
                os.path.join(BIN, "disttrain-trainer"),
                "--workdir",
                work,
                "--worker-index",
                i,
                "--workers",
                workers,
                "--epochs",
                epochs,
                "--batch",
                64,
                "--seed",
                42,
                "--validation-fraction",
                VALIDATION,
            ],
            log,
        )
        for i, log in enumerate(logs)
    ]
    for proc, log in zip(procs, logs):
        if wait_measured(proc)["rc"]:
            raise SystemExit(tail(log))
    log = os.path.join(base, f"{task}-{workers}-aggregator.log")
    r = run_measured(
        [
            os.path.join(BIN, "disttrain-aggregator"),
            "--workdir",
            work,
            "--expect",
            workers,
            "--timeout",
            60,
            "--combine",
            "average",
            "--force",
        ],
        log=log,
    )  # --force: measured whatever the gate says
    if r["rc"]:
        raise SystemExit(tail(log))
    report = Report.read(os.path.join(work, "final", REPORT_FILE)).to_json()
    candidates = report["combine"]["candidates"]
    return {
        "task": task,
        "workers": workers,
        "epochs": epochs,
        "test_examples": report["test_examples"],
        "workers_test_accuracy": [w["test_accuracy"] for w in report["workers"]],
        "candidates": {
            name: {k: c[k] for k in ("test_accuracy", "latency_ms_per_instance", "forward_passes")}
            | (
                {"worker_index": c["worker_index"], "validation_accuracy": c["validation_accuracy"]}
                if name == "best"
                else {}
            )
            for name, c in candidates.items()
        },
        "latency_method": report["combine"]["latency_method"],
    }


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names, colors = ("average", "ensemble", "best"), ("#fc8d62", "#66c2a5", "#8da0cb")
    labels = [f"{r['task']}\n{r['workers']} workers" for r in rows]
    x = np.arange(len(rows))
    fig, (acc, lat) = plt.subplots(1, 2, figsize=(12, 4))
    for i, (name, color) in enumerate(zip(names, colors)):
        values = [r["candidates"][name]["test_accuracy"] for r in rows]
        acc.bar(x + (i - 1) * 0.27, values, 0.27, label=name, color=color)
        for xi, v in zip(x, values):
            acc.text(xi + (i - 1) * 0.27, v, f"{v:.3f}", ha="center", va="bottom", fontsize=7)
        lat.bar(
            x + (i - 1) * 0.27,
            [r["candidates"][name]["latency_ms_per_instance"] for r in rows],
            0.27,
            label=name,
            color=color,
        )
    low = min(r["candidates"][n]["test_accuracy"] for r in rows for n in names)
    acc.set_ylim(max(0, low - 0.05), 1.0)
    acc.set_xticks(x, labels)
    acc.set_ylabel("held-out accuracy")
    acc.set_title("held-out accuracy of each candidate")
    acc.legend(fontsize=8)
    lat.set_xticks(x, labels)
    lat.set_ylabel("ms per single-instance call (median)")
    lat.set_title("serving latency (measured under load: shared machine)")
    lat.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main():
    base = tmpdir("combine")
    config = {
        "tasks": [t for t, _, _ in TASKS],
        "workers": list(WORKERS),
        "strategy": "average",
        "seed": 42,
        "batch": 64,
        "validation_fraction": VALIDATION,
        "epochs": {t: e for t, _, e in TASKS},
    }
    with Bench("combine", config) as bench:
        rows = []
        for task, source, epochs in TASKS:
            for workers in WORKERS:
                print(f"  {task}, {workers} workers x {epochs} epochs ...", file=sys.stderr, flush=True)
                row = one_run(base, task, source, epochs, workers)
                rows.append(row)
                print(
                    "   "
                    + ", ".join(
                        f"{n} {c['test_accuracy']:.4f} ({c['latency_ms_per_instance']:.3f} ms)"
                        for n, c in row["candidates"].items()
                    ),
                    file=sys.stderr,
                    flush=True,
                )
        bench.results = {"runs": rows}
        os.makedirs(os.path.join(ROOT, "bench", "plots"), exist_ok=True)
        plot(rows, os.path.join(ROOT, "bench", "plots", "combine.png"))


if __name__ == "__main__":
    command_line(__doc__)
    main()
