#!/usr/bin/env python3
"""The built-in tasks through the task registry against the trainer before it: the same speed, the same model.

The trainer now builds every model through one interface (disttrain_trainer/tasks/: the built-in text,
image, faces and table tasks, and a user's own model). This benchmark trains each built-in task with the
trainer of this tree and with the trainer of an earlier revision (--before, default: the last revision
before the registry), one worker, --threads 1, the same seed and data, in turns (ABAB...: drift in the
machine's speed hits both), and reports per task:
  seconds per epoch  (steady: the mean of epochs 2.., epoch 1 traces the step), before and after, and their ratio
                     (goal: within 5 %);
  held-out accuracy  before and after (goal: the same);
  final weights      whether the two trainers end with the same weights (sha256 of every weight, from the markers):
                     the strongest form of "the same model".
The earlier revision is checked out with `git worktree` into a scratch directory and imported through
PYTHONPATH (the stages' packages resolve there first), so both trainers run in the same venv.
"""

import json
import os
import shutil
import subprocess
import sys

from common import BIN, ROOT, Bench, command_line, median, reps, run_measured, steady_epoch_sec, tmpdir

# the last commit whose trainer had no task registry (task == branches in main.py)
BEFORE = "000eb55"
# task -> (source, epochs, batch, extra trainer flags)
TASKS = {
    "movie-reviews": ("sample:movie-reviews", 5, 64, ()),
    "digits": ("sample:digits", 20, 64, ()),
    "digits-mobilenetv2": ("sample:digits", 3, 64, ("--model", "mobilenetv2", "--image-size", "32")),
    "faces": ("sample:faces", 6, 32, ()),
}
COMPONENTS = ("contract", "copier", "trainer", "advisor", "aggregator", "server", "sweep")


def checkout(revision, where):
    subprocess.run(
        ["git", "-C", ROOT, "worktree", "add", "--detach", "--force", where, revision], check=True, capture_output=True
    )
    return where


def pythonpath(tree):
    return os.pathsep.join(os.path.join(tree, "components", c) for c in COMPONENTS)


def train(tree, data_dir, out, epochs, batch, extra, log):
    env = {**os.environ, "PYTHONPATH": pythonpath(tree)}
    cmd = [
        sys.executable,
        "-m",
        "disttrain_trainer.main",
        "--data",
        data_dir,
        "--out",
        out,
        "--worker-index",
        0,
        "--workers",
        1,
        "--epochs",
        epochs,
        "--batch",
        batch,
        "--threads",
        1,
        "--seed",
        42,
        *extra,
    ]
    measured = run_measured(cmd, log=log, env=env, timeout=3600)
    if measured["rc"] != 0:
        raise SystemExit(f"trainer ({tree}) failed: see {log}")
    worker = os.path.join(out, "worker-00000")
    metrics = json.load(open(os.path.join(worker, "metrics.json")))
    marker = json.load(open(os.path.join(worker, "_SUCCESS")))
    return {
        "epoch_sec": steady_epoch_sec([[m["wall_time_sec"] for m in metrics]]),
        "test_accuracy": metrics[-1].get("test_accuracy"),
        "weights": marker["final_weights_sha256"],
        "wall_sec": measured["wall_sec"],
    }


def in_turns(label, repetitions, old_tree, scratch, run):
    """`run(tree, out)` (a dict with epoch_sec, test_accuracy and weights) with the trainer of `old_tree` and of this
    tree, in turns ABAB... (drift in the machine's speed hits both sides): the row of before/after medians, their
    ratio and whether the final weights were the same, each run's own dict under "runs"."""
    runs = {"before": [], "after": []}
    for rep in range(repetitions):
        sides = (("before", old_tree), ("after", ROOT))
        for side, tree in sides if rep % 2 == 0 else sides[::-1]:
            out = os.path.join(scratch, f"{label}-{side}-{rep}")
            runs[side].append(run(tree, out))
            shutil.rmtree(out, ignore_errors=True)
            print(f"{label} {side} rep {rep}: {runs[side][-1]}", flush=True)
    before_sec, after_sec = (median([r["epoch_sec"] for r in runs[s]]) for s in ("before", "after"))
    row = {
        "epoch_sec_before": before_sec,
        "epoch_sec_after": after_sec,
        "ratio": after_sec / before_sec,
        "test_accuracy_before": median([r["test_accuracy"] for r in runs["before"]]),
        "test_accuracy_after": median([r["test_accuracy"] for r in runs["after"]]),
        "same_weights": all(a["weights"] == b["weights"] for a, b in zip(runs["before"], runs["after"])),
        "runs": runs,
    }
    print(
        f"{label}: s/epoch {before_sec:.3f} -> {after_sec:.3f} ({100 * (after_sec / before_sec - 1):+.1f} %), "
        f"accuracy {row['test_accuracy_before']} -> {row['test_accuracy_after']}, same weights: {row['same_weights']}",
        flush=True,
    )
    return row


def compare(name, before, tasks, purpose):
    """Train each task with the trainer of `before` and of this tree in turns; write results/<name>.json."""
    repetitions = reps(3)
    scratch = tmpdir(name.replace("_", "-"))
    old_tree = checkout(before, os.path.join(scratch, "before"))
    rows = {}
    try:
        with Bench(
            name,
            {
                "before": before,
                "purpose": purpose,
                "tasks": {t: TASKS[t] for t in tasks},
                "repetitions": repetitions,
                "threads": 1,
            },
        ) as bench:
            for task in tasks:
                source, epochs, batch, extra = TASKS[task]
                data = os.path.join(scratch, f"data-{task}")
                subprocess.run(
                    [os.path.join(BIN, "disttrain-copier"), "--source", source, "--n-shards", "1", "--out", data],
                    check=True,
                    capture_output=True,
                )
                rows[task] = in_turns(
                    task,
                    repetitions,
                    old_tree,
                    scratch,
                    lambda tree, out: train(tree, data, out, epochs, batch, extra, out + ".log"),
                )
                bench.results = rows
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", old_tree], capture_output=True)
        shutil.rmtree(scratch, ignore_errors=True)


def compare_from_command_line(doc, name, before, tasks, purpose):
    """`compare` with --before (default `before`) and --tasks (default `tasks`) from the command line."""
    args = command_line(
        doc,
        lambda p: (
            p.add_argument("--before", default=before, help=f"the revision to compare with (default {before})"),
            p.add_argument("--tasks", default=",".join(tasks), help="comma-separated subset of " + ", ".join(tasks)),
        ),
    )
    compare(name, args.before, [t for t in args.tasks.split(",") if t], purpose)


def main():
    compare_from_command_line(__doc__, "task_interface", BEFORE, TASKS, "the task registry")


if __name__ == "__main__":
    main()
