#!/usr/bin/env python3
"""What two independent single-thread processes get from the host, by kind of work: the
ceiling under every 2-worker row of train_scaling.py, measured without TensorFlow.

Two `average` workers never talk, yet on some hosts they are far from 2x one worker (text 1.29x
on one 2-core host, 1.76x on another; MobileNetV2 1.8x on both). This probe separates the cause
from our code: numpy, one thread, one process alone and then two at once (started together),
each kind of work for SECONDS:
  * compute: a 96x96 float32 matmul, in cache (what MobileNetV2's convolutions mostly are);
  * memory: an Adam-like update streamed over three arrays (parameter, first and second moment)
    of a total working set of 0.5, 4, 16 and 64 MB -- the text model's dense Adam state is
    3 x 5.1 MB, digits' 3 x 0.15 MB.
Throughput ratio = (both processes' work together) / (one process alone). 2.0x means the two
cores are independent for that work; less means they share what the work needs (caches, memory
bandwidth, or an SMT core).
"""

import argparse
import os
import subprocess
import sys
import time

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"  # one thread per process, as the trainers (before numpy is imported)

SECONDS = 2.0
WORKLOADS = [("compute", 0)] + [("memory", mb) for mb in (0.5, 4, 16, 64)]


def work(kind, mb, start_at, seconds):
    """One process: wait for start_at (so two start together), then count iterations for `seconds`."""
    import numpy as np

    if kind == "compute":
        a, b = np.random.rand(96, 96).astype(np.float32), np.random.rand(96, 96).astype(np.float32)
        step, unit = (lambda: a @ b), 2 * 96**3 / 1e9  # GFLOP per iteration
    else:
        n = int(mb * 2**20 / 4 / 3)  # three float32 arrays: parameter, m, v
        p, m, v = (np.random.rand(n).astype(np.float32) for _ in range(3))
        g = np.float32(0.01)

        def step():  # in place, no temporaries
            m.__imul__(0.9)
            m.__iadd__(0.1 * g)
            v.__imul__(0.999)
            v.__iadd__(0.001 * g * g)
            np.subtract(p, m, out=p)

        unit = 11 * n * 4 / 1e9  # GB moved per iteration: 4 passes read+write m or v (8), p -= m reads 2 writes 1
    step()
    while time.time() < start_at:
        pass
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        step()
        count += 1
    return count * unit / (time.perf_counter() - started)


def run(kind, mb, processes):
    start_at = time.time() + 1.5  # after every process imported numpy and allocated
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--work", kind, str(mb), str(start_at)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(processes)
    ]
    rates = [float(p.communicate()[0]) for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"a {kind} process failed")
    return sum(rates)


def main():
    from common import Bench, median, reps

    n = reps(3)
    rows = []
    with Bench("contention", {"seconds": SECONDS, "reps": n, "workloads": WORKLOADS}) as bench:
        for kind, mb in WORKLOADS:
            alone, both = [], []
            for _ in range(n):
                alone.append(run(kind, mb, 1))
                both.append(run(kind, mb, 2))
            unit = "GFLOP/s" if kind == "compute" else "GB/s"
            row = {
                "kind": kind,
                "working_set_mb": mb or None,
                "unit": unit,
                "alone": round(median(alone), 2),
                "two_processes": round(median(both), 2),
                "ratio": round(median(both) / median(alone), 2),
            }
            rows.append(row)
            label = "compute (in cache)" if kind == "compute" else f"memory, {mb} MB"
            print(
                f"  {label:20} alone {row['alone']:8.2f} {unit}, two processes {row['two_processes']:8.2f} {unit}: {row['ratio']:.2f}x",
                flush=True,
            )
        bench.results = {"rows": rows}
        bench.notes.append(
            "numpy, one thread per process; ratio = both processes together / one alone (2.0 = independent cores)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--work", nargs=3, metavar=("KIND", "MB", "START_AT"), help="(internal) one measuring process of main()"
    )
    args = parser.parse_args()
    if args.work:
        print(work(args.work[0], float(args.work[1]), float(args.work[2]), SECONDS))
    else:
        main()
