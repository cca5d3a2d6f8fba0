#!/usr/bin/env python3
"""malloc arenas: the trainer's one glibc arena at --threads 1 against glibc's default, side by side.

With --threads 1 the trainer keeps glibc's malloc to one arena (disttrain_trainer/malloc_arenas.py says why).
This runs each configuration twice in a row, once as the trainer sets it ("one arena") and once with
glibc's default restored through the environment (MALLOC_ARENA_MAX = 8 x cores, glibc's own default on a
64-bit host; the trainer leaves a limit the user set alone), alternating which goes first, and reports the
steady seconds per epoch (each worker's mean over epochs 2.., the slower worker's) of each:
  MobileNetV2 on the time-to-accuracy benchmark's distorted digits (16,000 images of 32x32, batch 64):
    2 independent processes (the two-process ceiling); multiworker, 2 workers;
  the movie-reviews text model (batch 64): 1 process; multiworker, 2 workers; parameterserver, 2 workers
    and 1 parameter server;
every process with 1 thread (other thread counts keep glibc's default in the trainer).
The goal: no configuration slower by more than the noise (3 %), multiworker faster.

    .venv/bin/python bench/malloc_arenas.py      (BENCH_QUICK=1: one repetition; default two)
Results: results/malloc_arenas.json; the table is in bench/README.md (report.py).
"""

import json
import os
import sys

from common import BIN, QUICK, Bench, command_line, median, reps, start, steady_epoch_sec, tail, tmpdir, wait_measured
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
GLIBC_DEFAULT = {"MALLOC_ARENA_MAX": str(8 * os.cpu_count())}
VARIANTS = {"one_arena": {}, "glibc_default": GLIBC_DEFAULT}  # (one arena: the trainer's own setting)


def commands(name, dirs, run_dir):
    """A configuration's trainer argvs and --out directories, as the time-to-accuracy benchmark runs its row
    (on free ports)."""
    task_name, strategy, workers, threads, epochs = CONFIGS[name]
    task = {**tta.TASKS[task_name], "epochs": epochs}
    row = {"strategy": strategy, "workers": workers, "options": {**task["options"], "threads": threads}}
    return tta.row_commands(row, task, tta.row_workdir(row, dirs), run_dir, free_port_block(tta.processes(row)), shaped=False)


def run(base, name, variant, repetition, dirs):
    run_dir = os.path.join(base, f"run-{len(os.listdir(base))}")
    os.makedirs(run_dir)
    env = {**{k: v for k, v in os.environ.items() if k not in ("MALLOC_ARENA_MAX", "GLIBC_TUNABLES")}, **VARIANTS[variant]}
    argvs, outs = commands(name, dirs, run_dir)
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
    base = tmpdir("malloc-arenas")
    repetitions = reps(2)
    config = {"configs": {name: dict(zip(("task", "strategy", "workers", "threads", "epochs"), c)) for name, c in CONFIGS.items()},
              "variants": VARIANTS, "repetitions": repetitions, "batch": tta.BATCH, "seed": tta.SEED}
    with Bench("malloc_arenas", config) as bench:
        data = {task: tta.workdirs(base, task, tta.TASKS[task]) for task in (IMAGES, TEXT)}
        seconds = {name: {variant: [] for variant in VARIANTS} for name in CONFIGS}
        for repetition in range(repetitions):
            for name in CONFIGS:
                order = list(VARIANTS) if repetition % 2 == 0 else list(reversed(VARIANTS))
                for variant in order:
                    seconds[name][variant].append(run(base, name, variant, repetition, data[CONFIGS[name][0]]))
        summary = {}
        for name, by_variant in seconds.items():
            mine, glibc = median(by_variant["one_arena"]), median(by_variant["glibc_default"])
            summary[name] = {"one_arena_sec_per_epoch": mine, "glibc_default_sec_per_epoch": glibc,
                             "change_pct": 100 * (mine - glibc) / glibc, "runs": by_variant}
            print(f"  {name}: {mine:.2f} s/epoch with one arena, {glibc:.2f} glibc's default ({summary[name]['change_pct']:+.1f} %)",
                  file=sys.stderr, flush=True)
        bench.results = {"summary": summary, "quick": QUICK}


if __name__ == "__main__":
    command_line(__doc__)
    main()
