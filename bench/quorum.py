#!/usr/bin/env python3
"""What a quorum costs (aggregator --min-workers): 4 `average` workers, one of them lost for good, against all 4.

Per task: the copier makes 4 shards; 4 trainer processes start (each lingering for the others,
as the chart runs them with trainer.minWorkers: 3); worker 3 is killed with SIGKILL after its
first epoch and not restarted; the aggregator publishes the average of the 3 with
--min-workers 3. Then worker 3 is restarted (it resumes from its checkpoint, ending as an
undisturbed run would: tests/faults/test_kill_trainer.py) and a second aggregator run averages
all 4 into another directory: the full run, from the same seed. `average` workers never talk to
each other, so the kill changes nothing for the other three.

Goal: the quorum model within 1 point of the full run's held-out accuracy.

    .venv/bin/python bench/quorum.py
"""

import json
import os
import signal
import sys
import time

from common import BIN, Bench, command_line, start, tail, tmpdir
from disttrain_contract.layout import REPORT_FILE
from disttrain_contract.report import Report

WORKERS, MIN_WORKERS, SEED = 4, 3, 42
# the integration tests' settings (tests/integration/test_pipeline.py): (epochs, batch)
TASKS = {"sample:digits": (20, 32), "sample:movie-reviews": (4, 64)}
TASKS = {
    k: v for k, v in TASKS.items() if not os.environ.get("QUORUM_TASKS") or k in os.environ["QUORUM_TASKS"].split(",")
}


def run(name, *args, log):
    return start([os.path.join(BIN, f"disttrain-{name}"), *args], log)


def check(proc, log, timeout=1800):
    code = proc.wait(timeout=timeout)
    if code != 0:
        sys.exit(f"{proc.args} exited {code}:\n{tail(log)}")


def one_task(source, epochs, batch):
    work = tmpdir("quorum")
    logs = os.path.join(work, "logs")
    os.makedirs(logs)
    log = os.path.join(logs, "copier.log")
    check(run("copier", "--source", source, "--n-shards", WORKERS, "--workdir", work, log=log), log)

    def trainer(i, label):
        log = os.path.join(logs, f"worker-{i}-{label}.log")
        return run(
            "trainer",
            "--workdir",
            work,
            "--worker-index",
            i,
            "--workers",
            WORKERS,
            "--epochs",
            epochs,
            "--batch",
            batch,
            "--seed",
            SEED,
            "--linger-for-peers",
            5,
            log=log,
        ), log

    procs = [trainer(i, "first") for i in range(WORKERS)]
    lost = WORKERS - 1
    metrics = os.path.join(work, "train", f"worker-{lost:05d}", "metrics.json")
    while True:  # after its first epoch
        try:
            if json.load(open(metrics)):
                break
        except (OSError, ValueError):
            pass
        if procs[lost][0].poll() is not None:
            sys.exit(f"worker {lost} ended before it could be killed:\n{tail(procs[lost][1])}")
        time.sleep(0.05)
    procs[lost][0].send_signal(signal.SIGKILL)
    procs[lost][0].wait()
    for proc, log in procs[:lost]:
        check(proc, log)

    def aggregate(label, *flags):
        log = os.path.join(logs, f"aggregator-{label}.log")
        out = os.path.join(work, label)
        check(
            run(
                "aggregator",
                "--workdir",
                work,
                "--expect",
                WORKERS,
                "--savefile",
                os.path.join(out, "model.keras"),
                "--timeout",
                600,
                "--force",
                *flags,
                log=log,
            ),
            log,
        )  # measured either way; the gate's verdict is recorded
        return Report.read(os.path.join(out, REPORT_FILE)).to_json()

    quorum = aggregate("final-quorum", "--min-workers", MIN_WORKERS, "--straggler-wait", 1)
    proc, log = trainer(lost, "restarted")
    check(proc, log)
    full = aggregate("final-all")
    row = {
        "source": source,
        "epochs": epochs,
        "batch": batch,
        "workers": WORKERS,
        "min_workers": MIN_WORKERS,
        "left_out": quorum["missing_workers"],
        "quorum_accuracy": quorum["final"]["test_accuracy"],
        "full_accuracy": full["final"]["test_accuracy"],
        "quorum_examples": quorum["final"]["examples"],
        "full_examples": full["final"]["examples"],
        "worker_accuracies": [w["test_accuracy"] for w in full["workers"]],
        "quality_gate_passed": {"quorum": quorum["gate"]["passed"], "full": full["gate"]["passed"]},
        "test_examples": full["test_examples"],
    }
    row["points_lost"] = round(100 * (row["full_accuracy"] - row["quorum_accuracy"]), 2)
    row["within_1_point"] = row["points_lost"] <= 1.0
    print(json.dumps(row), flush=True)
    return row


def main():
    config = {"workers": WORKERS, "min_workers": MIN_WORKERS, "seed": SEED, "tasks": TASKS}
    with Bench("quorum", config) as bench:
        bench.results = {"rows": [one_task(source, *settings) for source, settings in TASKS.items()]}
        bench.notes.append(
            "accuracy only: the average strategy's workers are deterministic from the seed, so the "
            "numbers do not depend on the machine's load"
        )


if __name__ == "__main__":
    command_line(__doc__)
    main()
