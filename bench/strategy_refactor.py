#!/usr/bin/env python3
"""Every strategy through its registry entry, its package and the typed TrainConfig, against the trainer before
them: the same speed, the same model.

The method of task_interface.py (the trainer of an earlier revision, --before, checked out with `git worktree`
and imported through PYTHONPATH; both trainers in the same venv, in turns ABAB... so that drift in the machine's
speed hits both), extended from one worker to a strategy's whole group: digits in two shards, two workers (a
parameter-server group: the chief, one parameter server and two workers), --threads 1, the same seed and data.
Per strategy:
  seconds per epoch  worker 0's steady epochs (the mean of epochs 2..; epoch 1 traces the step), before and
                     after, and their ratio (goal: within 5 %);
  held-out accuracy  worker 0's last epoch, before and after (goal: the same; parameterserver, whose workers
                     apply their steps asynchronously: within its usual spread, shown by the repetitions);
  final weights      whether the two trainers end with the same weights (sha256 from the markers; goal: yes for
                     every strategy but parameterserver).

    .venv/bin/python bench/strategy_refactor.py [--before REVISION] [--tasks average,localsgd]
    .venv/bin/python bench/strategy_refactor.py --text     # the movie reviews (epochs of seconds), 5 epochs
Results: results/strategy_refactor.json (--text: strategy_refactor_text.json); the tables in
docs/benchmarks/results.md (bench/report.py).
"""

import json
import os
import shutil
import subprocess
import sys

from common import BIN, ROOT, Bench, command_line, reps, start, steady_epoch_sec, tmpdir, wait_measured
from task_interface import checkout, in_turns, pythonpath

sys.path.insert(0, os.path.join(ROOT, "components", "contract"))
from disttrain_contract.ports import free_port_block  # noqa: E402

# the last revision before the strategy registry, the strategies' packages and TrainConfig
BEFORE = "5fc012c"
EPOCHS, BATCH = 10, 64
# name -> (processes of the group, the trainer's flags)
STRATEGIES = {
    "average": (2, ("--strategy", "average")),
    "multiworker": (2, ("--strategy", "multiworker")),
    "localsgd": (2, ("--strategy", "localsgd", "--sync-every", "8")),
    "diloco-eager-int8": (
        2,
        (
            "--strategy",
            "localsgd",
            "--sync-every",
            "8",
            "--outer-optimizer",
            "nesterov",
            "--outer-overlap",
            "eager",
            "--allreduce-dtype",
            "int8",
        ),
    ),
    "parameterserver": (4, ("--strategy", "parameterserver", "--ps", "1")),
}


def train_group(tree, data_dir, out, processes, flags, log, epochs=EPOCHS):
    """One run of a strategy's group with the trainer of `tree`; worker 0's steady s/epoch, accuracy and weights."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "JOB_COMPLETION_INDEX")}
    env["PYTHONPATH"] = pythonpath(tree)
    port = free_port_block(processes)
    procs = []
    for index in range(processes):
        cmd = [
            sys.executable,
            "-m",
            "disttrain_trainer.main",
            "--data",
            data_dir,
            "--out",
            out,
            "--workers",
            2,
            "--worker-index",
            index,
            "--epochs",
            epochs,
            "--batch",
            BATCH,
            "--threads",
            1,
            "--seed",
            42,
            "--port",
            port,
            "--progress-interval",
            0,
            *flags,
        ]
        procs.append(start([str(c) for c in cmd], f"{log}.{index}", env=env))
    measured = [wait_measured(proc, timeout=3600) for proc in procs]
    if any(m["rc"] != 0 for m in measured):
        raise SystemExit(f"trainer ({tree}) failed: see {log}.*")
    worker = os.path.join(out, "worker-00000")
    metrics = json.load(open(os.path.join(worker, "metrics.json")))
    marker = json.load(open(os.path.join(worker, "_SUCCESS")))
    return {
        "epoch_sec": steady_epoch_sec([[m["wall_time_sec"] for m in metrics]]),
        "test_accuracy": metrics[-1].get("test_accuracy"),
        "weights": marker["final_weights_sha256"],
    }


def main():
    args = command_line(
        __doc__,
        lambda p: (
            p.add_argument("--before", default=BEFORE, help=f"the revision to compare with (default {BEFORE})"),
            p.add_argument(
                "--tasks", default=",".join(STRATEGIES), help="comma-separated subset of " + ", ".join(STRATEGIES)
            ),
            p.add_argument(
                "--text",
                action="store_true",
                help="the movie reviews, 5 epochs (digits' epochs are too short to show a few per cent)",
            ),
        ),
    )
    source, epochs, result = (
        ("sample:movie-reviews", 5, "strategy_refactor_text")
        if args.text
        else ("sample:digits", EPOCHS, "strategy_refactor")
    )
    chosen = [t for t in args.tasks.split(",") if t]
    repetitions = reps(3)
    scratch = tmpdir("strategy-refactor")
    old_tree = checkout(args.before, os.path.join(scratch, "before"))
    data = os.path.join(scratch, "data")
    subprocess.run(
        [os.path.join(BIN, "disttrain-copier"), "--source", source, "--n-shards", "2", "--out", data],
        check=True,
        capture_output=True,
    )
    rows = {}
    try:
        with Bench(
            result,
            {
                "source": source,
                "before": args.before,
                "strategies": {s: STRATEGIES[s] for s in chosen},
                "epochs": epochs,
                "batch": BATCH,
                "repetitions": repetitions,
                "threads": 1,
            },
        ) as bench:
            for name in chosen:
                processes, flags = STRATEGIES[name]
                rows[name] = in_turns(
                    name,
                    repetitions,
                    old_tree,
                    scratch,
                    lambda tree, out: train_group(tree, data, out, processes, flags, out + ".log", epochs),
                )
                bench.results = rows
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", old_tree], capture_output=True)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
