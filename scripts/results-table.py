#!/usr/bin/env python3
"""Measure the README's results table: the demo pipeline (scripts/run-local.sh,
without the server) for each task, with 2 workers in both strategies and the
1-worker baseline on all the data. Prints a markdown table; writes the raw
numbers to results/demo-results.json. Run it with the venv's Python (.venv/bin/python
scripts/results-table.py): it reads each report through the contract's typed Report."""

import json
import os
import subprocess
import sys
import time

from disttrain_contract.layout import REPORT_FILE
from disttrain_contract.report import Report
from disttrain_contract.strategies import NAMES, STRATEGIES
from disttrain_contract.tasks import TASKS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the dataset's task of each demo task (movie reviews are text, digits images)
DEMO_TASKS = {"movie-reviews": "text", "digits": "image", "faces": "faces"}
RUNS = [
    (task, workers, strategy)
    for task in DEMO_TASKS
    for workers, strategy in ((1, NAMES[0]), *((2, name) for name in NAMES))
    # faces' in-batch triplet mining needs whole batches: not with parameter servers
    if TASKS[DEMO_TASKS[task]].parameter_server or not STRATEGIES[strategy].parameter_servers
]
# the per-worker column of a strategy whose group trains one model
ONE_MODEL = {
    "multiworker": "(one synchronised model)",
    "localsgd": "(one model, averaged every H steps)",
    "parameterserver": "(one model on the parameter server)",
}


def run(task, workers, strategy):
    workdir = os.path.join(ROOT, "workdir", "results", f"{task}-{workers}-{strategy}")
    # --force: the table shows every combination's result, also those the quality gate refuses
    # (faces, 2 workers, average); the report records the gate's verdict either way
    env = dict(
        os.environ,
        TASK=task,
        WORKERS=str(workers),
        STRATEGY=strategy,
        WORKDIR=workdir,
        SERVE="0",
        BIN=os.path.join(ROOT, ".venv", "bin"),
        AGGREGATOR_ARGS="--force",
    )
    started = time.monotonic()
    subprocess.run(
        [os.path.join(ROOT, "scripts", "run-local.sh")], env=env, check=True, cwd=ROOT, stdout=subprocess.DEVNULL
    )
    wall = time.monotonic() - started
    report = Report.read(os.path.join(workdir, "final", REPORT_FILE))
    final = report.final
    return {
        "task": task,
        "workers": workers,
        "strategy": strategy,
        "pipeline_wall_sec": round(wall, 1),
        "training_wall_sec": round(report.training_wall_time_sec, 1),
        "epochs": report.epochs,
        "worker_accuracy": [round(w["test_accuracy"], 4) for w in report.workers if w.get("test_accuracy") is not None],
        "final_accuracy": round(final["test_accuracy"], 4),
        "test_examples": report.test_examples,
        **(
            {
                "same_person_distance": round(final["test_same_person_distance"], 3),
                "different_person_distance": round(final["test_different_person_distance"], 3),
            }
            if report.task == "faces"
            else {}
        ),
    }


def main():
    rows = []
    for task, workers, strategy in RUNS:
        print(f"running {task} workers={workers} {strategy} ...", file=sys.stderr, flush=True)
        rows.append(run(task, workers, strategy))
    os.makedirs(os.path.join(ROOT, "results"), exist_ok=True)
    with open(os.path.join(ROOT, "results", "demo-results.json"), "w") as fh:
        json.dump(rows, fh, indent=2)
    baseline = {r["task"]: r["final_accuracy"] for r in rows if r["workers"] == 1}
    print(
        "| task | workers | strategy | epochs | per-worker held-out acc. | final acc. | 1-worker baseline | training s | pipeline s |"
    )
    # faces: "accuracy" is top-1 retrieval of people never seen in training (see README, Faces)
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        strategy = STRATEGIES[r["strategy"]]
        per_worker = (
            ", ".join(f"{a:.3f}" for a in r["worker_accuracy"])
            if strategy.model_per_worker
            else ONE_MODEL[strategy.name]
        )
        workers = f"{r['workers']} + 1 ps + chief" if strategy.parameter_servers else r["workers"]
        print(
            f"| {r['task']} | {workers} | {r['strategy']} | {r['epochs']} | {per_worker} | {r['final_accuracy']:.3f} "
            f"| {baseline[r['task']]:.3f} | {r['training_wall_sec']} | {r['pipeline_wall_sec']} |"
        )
    print()
    print("| faces | workers | strategy | top-1 (held-out people) | same-person distance | different-person distance |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if r["task"] == "faces":
            print(
                f"| | {r['workers']} | {r['strategy']} | {r['final_accuracy']:.3f} | {r['same_person_distance']} "
                f"| {r['different_person_distance']} |"
            )


if __name__ == "__main__":
    main()
