#!/usr/bin/env python3
"""malloc settings: the trainer's glibc malloc settings against glibc's defaults, side by side.

The trainer tunes glibc's malloc (--malloc tuned, the default; disttrain_trainer/malloc_settings.py says why):
large blocks stay in the heap (fixed mmap and trim thresholds) and, with --threads 1, one arena. This runs
each configuration three times in a row: as the trainer sets it ("tuned"), with one arena alone (--malloc
glibc and MALLOC_ARENA_MAX=1: the trainer's setting before the thresholds), and with glibc's defaults
(--malloc glibc), alternating the order from one repetition to the next, and reports the steady seconds per
epoch (each worker's mean over epochs 2.., the slower worker's) of each:
  MobileNetV2 on the time-to-accuracy benchmark's distorted digits (16,000 images of 32x32, batch 64):
    2 independent processes (the two-process ceiling); multiworker, 2 workers;
  the movie-reviews text model (batch 64): 1 process; multiworker, 2 workers; parameterserver, 2 workers
    and 1 parameter server;
every process with 1 thread.
The goal: tuned no slower than either other variant by more than the noise (3 %) in any configuration.

    .venv/bin/python bench/malloc_settings.py      (BENCH_QUICK=1: one repetition; default two)
Results: results/malloc_settings.json; the table is in bench/README.md (report.py).
"""

import json
import os
import sys

from common import BIN, QUICK, Bench, command_line, median, reps, start, steady_epoch_sec, tail, tmpdir, wait_measured
from disttrain_trainer.malloc_settings import ENVIRONMENT
from stages import free_port_block

import time_to_accuracy as tta

IMAGES = "digits-distorted-mobilenetv2"
TEXT = "movie-reviews"
# name -> (task, strategy, workers (the time-to-accuracy benchmark's row: ceiling = 2 independent processes),
#          threads per process, epochs)
CONFIGS = {
    "MobileNetV2, 2 independent processes (the ceiling)": (IMAGES, "ceiling", 2, 1, 3),
    "MobileNetV2, multiworker, 2 workers": (IMAGES, "multiworker", 2, 1, 3),
    "text, 1 process": (TEXT, "single", 1, 1, 6),
    "text, multiworker, 2 workers": (TEXT, "multiworker", 2, 1, 6),
    "text, parameterserver, 2 workers and 1 parameter server": (TEXT, "parameterserver", 2, 1, 6),
}
# variant -> (the trainer's --malloc, the environment's additions)
VARIANTS = {"tuned": ("tuned", {}), "one_arena": ("glibc", {"MALLOC_ARENA_MAX": "1"}), "glibc_default": ("glibc", {})}


def commands(name, variant, dirs, run_dir):
    """A configuration's trainer argvs and --out directories, as the time-to-accuracy benchmark runs its row
    (on free ports), with the variant's --malloc."""
    task_name, strategy, workers, threads, epochs = CONFIGS[name]
    task = {**tta.TASKS[task_name], "epochs": epochs}
    row = {
        "strategy": strategy,
        "workers": workers,
        "options": {**task["options"], "threads": threads, "malloc": VARIANTS[variant][0]},
    }
    return tta.row_commands(
        row, task, tta.row_workdir(row, dirs), run_dir, free_port_block(tta.processes(row)), shaped=False
    )


def run(base, name, variant, repetition, dirs):
    run_dir = os.path.join(base, f"run-{len(os.listdir(base))}")
    os.makedirs(run_dir)
    env = {**{k: v for k, v in os.environ.items() if k not in ENVIRONMENT}, **VARIANTS[variant][1]}
    argvs, outs = commands(name, variant, dirs, run_dir)
    logs = [os.path.join(run_dir, f"trainer-{i}.log") for i in range(len(argvs))]
    procs = [start([os.path.join(BIN, "disttrain-trainer"), *argv], log, env=env) for argv, log in zip(argvs, logs)]
    for proc, log in zip(procs, logs):
        if wait_measured(proc)["rc"]:
            raise SystemExit(f"{name} ({variant}) failed: {tail(log)}")
    epochs_of = []
    for out in outs:
        for worker in sorted(os.listdir(out)):
            path = os.path.join(out, worker, "metrics.json")
            if os.path.exists(path):
                with open(path) as fh:
                    epochs_of.append([e["wall_time_sec"] for e in json.load(fh)])
    seconds = steady_epoch_sec(epochs_of)
    print(f"  {name}, {variant}, repetition {repetition + 1}: {seconds:.2f} s/epoch", file=sys.stderr, flush=True)
    return seconds


def main():
    base = tmpdir("malloc-settings")
    repetitions = reps(2)
    config = {
        "configs": {
            name: dict(zip(("task", "strategy", "workers", "threads", "epochs"), c)) for name, c in CONFIGS.items()
        },
        "variants": {name: {"malloc": flag, "environment": env} for name, (flag, env) in VARIANTS.items()},
        "repetitions": repetitions,
        "batch": tta.BATCH,
        "seed": tta.SEED,
    }
    with Bench("malloc_settings", config) as bench:
        data = {task: tta.workdirs(base, task, tta.TASKS[task]) for task in (IMAGES, TEXT)}
        seconds = {name: {variant: [] for variant in VARIANTS} for name in CONFIGS}
        for repetition in range(repetitions):
            for name in CONFIGS:
                order = (
                    list(VARIANTS) if repetition % 2 == 0 else list(reversed(VARIANTS))
                )  # (each config's runs in a row)
                for variant in order:
                    seconds[name][variant].append(run(base, name, variant, repetition, data[CONFIGS[name][0]]))
        summary = {}
        for name, by_variant in seconds.items():
            medians = {variant: median(values) for variant, values in by_variant.items()}
            summary[name] = {
                "sec_per_epoch": medians,
                "runs": by_variant,
                "tuned_change_pct": {
                    variant: 100 * (medians["tuned"] - value) / value
                    for variant, value in medians.items()
                    if variant != "tuned"
                },
            }
            print(
                f"  {name}: " + ", ".join(f"{variant} {value:.2f}" for variant, value in medians.items()) + " s/epoch",
                file=sys.stderr,
                flush=True,
            )
        bench.results = {"summary": summary, "quick": QUICK}


if __name__ == "__main__":
    command_line(__doc__)
    main()
