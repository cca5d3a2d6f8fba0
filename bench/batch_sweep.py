#!/usr/bin/env python3
"""Why multiworker is slower here: the per-step all-reduce against the compute per step.

movie-reviews (5.1 MB of gradients a step), `--threads 1`, 1 worker vs 2 workers in `multiworker`,
at batch 64, 256 and 1024 per worker (3 epochs). A larger batch per worker means more compute per
step for the same all-reduce, so the 2-worker run should catch up with the 1-worker one as the batch
grows; the batch where it does tells how big the work per step must be before synchronous data
parallelism pays on the host measured. (Larger batches also change the optimisation: fewer steps per
epoch, so the accuracy column is shown, not compared.) Same runner as train_scaling.py.
"""

import os
import shutil
import sys

from common import Bench, command_line, median, reps, tmpdir
from train_scaling import train_once

TASK, EPOCHS = "movie-reviews", 3
BATCHES = (64, 256, 1024)


def summarise(runs):
    summary = []
    for batch in BATCHES:
        row = {"batch_per_worker": batch}
        for workers in (1, 2):
            rs = [r for r in runs if r["batch_per_worker"] == batch and r["workers"] == workers]
            row[f"w{workers}"] = {
                k: median([r[k] for r in rs])
                for k in ("sec_per_epoch", "step_ms", "steps_per_epoch", "cpu_sec", "final_accuracy")
            }
        row["speedup"] = row["w1"]["sec_per_epoch"] / row["w2"]["sec_per_epoch"]
        row["step_overhead_ms"] = row["w2"]["step_ms"] - row["w1"]["step_ms"]
        summary.append(row)
    return summary


def main():
    n = reps(full=3, quick=1)
    base = tmpdir("sweep")
    config = {
        "task": TASK,
        "epochs": EPOCHS,
        "batches_per_worker": BATCHES,
        "strategy": "multiworker",
        "workers": [1, 2],
        "threads_per_worker": 1,
        "repetitions": n,
    }
    with Bench("batch_sweep", config) as bench:
        runs = []
        try:
            for rep in range(n):
                for batch in BATCHES:
                    for workers in (1, 2):
                        print(
                            f"  rep {rep + 1}/{n}: batch {batch} x {workers} worker(s) ...", file=sys.stderr, flush=True
                        )
                        r = train_once(base, TASK, workers, "multiworker", rep, EPOCHS, batch)
                        r.pop("run_dir")
                        print(
                            f"    {r['sec_per_epoch']:.3f} s/epoch, step {r['step_ms']:.1f} ms, acc {r['final_accuracy']:.3f}",
                            file=sys.stderr,
                            flush=True,
                        )
                        runs.append(r)
        finally:
            if not os.environ.get("BENCH_KEEP"):
                shutil.rmtree(base, ignore_errors=True)
        summary = summarise(runs)
        bench.results = {"summary": summary, "runs": runs}


if __name__ == "__main__":
    command_line(__doc__)
    main()
