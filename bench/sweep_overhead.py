#!/usr/bin/env python3
"""The sweep's own cost against a trial's: Optuna's study storage (the journal file on the
working directory, its lock), scheduling (the budget decision, ask, the stale-trial check) and
per-epoch reporting and pruning, measured inside disttrain-sweep around every Optuna call
(trials.csv: optuna_sec), against the trial's wall time (trial_sec: the disttrain-trainer
process from start to exit, TensorFlow's start-up included).

Also the whole process: wall time x processes minus the trials' time, which adds the sweep's
start-up (Python, Optuna's import, the validation split, the study) and the final outputs
(best.json, trials.csv, three plots). Goal: the search's own overhead under 5 % of a
trial's time.

    .venv/bin/python bench/sweep_overhead.py [--trials 8] [--processes 2] [--epochs 5]
"""

import argparse
import csv
import os
import subprocess
import sys
import time

from common import BIN, Bench, median, reps, tmpdir


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=reps(8, 4))
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--epochs", default="5", help="the trials' epochs (a sweep --epochs value; default 5)")
    args = p.parse_args()
    config = {
        "task": "digits",
        "trials": args.trials,
        "processes": args.processes,
        "epochs": args.epochs,
        "pruner": "median",
    }
    with Bench("sweep_overhead", config) as bench:
        work = tmpdir("sweep-overhead")
        subprocess.run(
            [os.path.join(BIN, "disttrain-copier"), "--source", "sample:digits", "--n-shards", "2", "--workdir", work],
            check=True,
            capture_output=True,
        )
        started = time.monotonic()
        procs = [
            subprocess.Popen(
                [
                    os.path.join(BIN, "disttrain-sweep"),
                    "--workdir",
                    work,
                    "--trials",
                    str(args.trials),
                    "--epochs",
                    args.epochs,
                    "--process-index",
                    str(i),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for i in range(args.processes)
        ]
        for proc in procs:
            out = proc.communicate()[0]
            if proc.returncode:
                sys.exit(f"disttrain-sweep failed:\n{out[-3000:]}")
        wall = time.monotonic() - started
        with open(os.path.join(work, "sweep", "trials.csv")) as fh:
            rows = list(csv.DictReader(fh))
        trial_sec = [float(r["trial_sec"]) for r in rows]
        optuna_sec = [float(r["optuna_sec"]) for r in rows]
        process_overhead = wall * args.processes - sum(trial_sec)
        bench.results = {
            "trials": len(rows),
            "states": sorted({r["state"] for r in rows}),
            "trial_sec_median": round(median(trial_sec), 2),
            "optuna_sec_per_trial_median": round(median(optuna_sec), 4),
            "optuna_sec_per_trial_max": round(max(optuna_sec), 4),
            "optuna_share_of_trial_pct": round(100 * sum(optuna_sec) / sum(trial_sec), 3),
            "sweep_wall_sec": round(wall, 1),
            "process_overhead_sec": round(process_overhead, 1),
            "process_overhead_share_pct": round(100 * process_overhead / sum(trial_sec), 2),
        }
        r = bench.results
        print(
            f"{r['trials']} trials, {args.processes} processes: trial {r['trial_sec_median']} s (median), "
            f"Optuna {r['optuna_sec_per_trial_median'] * 1000:.0f} ms per trial (max {r['optuna_sec_per_trial_max'] * 1000:.0f} ms) "
            f"= {r['optuna_share_of_trial_pct']:.2f} % of the trials' time; with the processes' start-up and outputs "
            f"{r['process_overhead_sec']} s = {r['process_overhead_share_pct']:.1f} %"
        )


if __name__ == "__main__":
    main()
