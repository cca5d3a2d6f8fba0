#!/usr/bin/env python3
"""progress: what the trainer's live progress file costs (the goal: under 1 % of training time).

Two measurements:
  end to end  the same 1-worker `average` run on digits (seed 42, batch 64), with progress.json
              written at the default interval (--progress-interval 1) and not at all (0), the two
              alternating, repeated; the training time is the sum of metrics.json's wall_time_sec
              (the steps alone, where the writes happen), the cycle time adds each epoch's
              evaluation, checkpoint and end-of-epoch write. The difference of the medians, as % of
              the run without progress, is the cost; on a shared machine it is within the noise,
              which the min-max spread of each side shows.
  one write   the median time of one write of a finished run's progress.json (the same
              atomic_write_bytes the trainer uses: a temporary file, then a rename, no fsync) in the run's own
              directory; at one write a second that is the cost as a share of each second of training.

    .venv/bin/python bench/progress_overhead.py      (BENCH_QUICK=1: fewer epochs and repetitions)
Results: results/progress_overhead.json; the table is in bench/README.md (report.py).
"""

import json
import os
import statistics
import sys
import time

from common import BIN, QUICK, Bench, command_line, median, reps, run_measured, tail, tmpdir

EPOCHS = 15 if QUICK else 40
INTERVAL = 1.0  # the trainer's default
WRITES = 200  # one-write timing samples


def train(work, out, interval, log):
    """One fresh run (its own --out: a used one would resume, and train nothing)."""
    r = run_measured(
        [
            os.path.join(BIN, "disttrain-trainer"),
            "--workdir",
            work,
            "--out",
            out,
            "--worker-index",
            0,
            "--workers",
            1,
            "--epochs",
            EPOCHS,
            "--batch",
            64,
            "--seed",
            42,
            "--progress-interval",
            interval,
        ],
        log=log,
    )
    if r["rc"]:
        raise SystemExit(tail(log))
    worker = os.path.join(out, "worker-00000")
    with open(os.path.join(worker, "metrics.json")) as fh:
        history = json.load(fh)
    progress = None
    if interval:
        with open(os.path.join(worker, "progress.json")) as fh:
            progress = json.load(fh)
    return {
        "training_sec": sum(e["wall_time_sec"] for e in history),
        "cycle_sec": sum(e["cycle_sec"] for e in history),
        "process_wall_sec": r["wall_sec"],
        "writes": progress["writes"] if progress else 0,
        "progress_file": progress,
    }


def one_write_ms(directory, state, fsync=False):
    from disttrain_contract import atomic_write_bytes

    path = os.path.join(directory, "progress-timing.json")
    times = []
    for _ in range(WRITES):
        started = time.perf_counter()
        atomic_write_bytes(
            path, json.dumps(state, separators=(",", ":")).encode(), fsync=fsync
        )  # False: as the trainer writes it
        times.append(time.perf_counter() - started)
    os.remove(path)
    return statistics.median(times) * 1000, len(json.dumps(state, separators=(",", ":")))


def main():
    base = tmpdir("progress")
    work = os.path.join(base, "work")
    repetitions = reps(5, quick=2)
    config = {
        "task": "digits",
        "workers": 1,
        "strategy": "average",
        "epochs": EPOCHS,
        "batch": 64,
        "seed": 42,
        "interval_sec": INTERVAL,
        "repetitions": repetitions,
        "one_write_samples": WRITES,
    }
    with Bench("progress_overhead", config) as bench:
        copier = run_measured(
            [os.path.join(BIN, "disttrain-copier"), "--source", "sample:digits", "--n-shards", 1, "--workdir", work],
            log=os.path.join(base, "copier.log"),
        )
        if copier["rc"]:
            raise SystemExit(tail(os.path.join(base, "copier.log")))
        runs = {"on": [], "off": []}
        for rep in range(repetitions):
            for name, interval in (
                (("on", INTERVAL), ("off", 0.0)) if rep % 2 == 0 else (("off", 0.0), ("on", INTERVAL))
            ):
                print(f"  repetition {rep + 1}/{repetitions}, progress {name} ...", file=sys.stderr, flush=True)
                run = train(
                    work,
                    os.path.join(base, f"train-{name}-{rep}"),
                    interval,
                    os.path.join(base, f"trainer-{name}-{rep}.log"),
                )
                runs[name].append(run)
                print(
                    f"   training {run['training_sec']:.2f} s, cycle {run['cycle_sec']:.2f} s, writes {run['writes']}",
                    file=sys.stderr,
                    flush=True,
                )
        write_ms, file_bytes = one_write_ms(
            os.path.join(base, f"train-on-{repetitions - 1}", "worker-00000"), runs["on"][-1]["progress_file"]
        )
        summary = {}
        for key in ("training_sec", "cycle_sec", "process_wall_sec"):
            on, off = median([r[key] for r in runs["on"]]), median([r[key] for r in runs["off"]])
            summary[key] = {
                "on": on,
                "off": off,
                "cost_pct": 100 * (on - off) / off,
                "on_min_max": [min(r[key] for r in runs["on"]), max(r[key] for r in runs["on"])],
                "off_min_max": [min(r[key] for r in runs["off"]), max(r[key] for r in runs["off"])],
            }
        writes = median([r["writes"] for r in runs["on"]])
        summary["writes_per_run"] = writes
        summary["one_write_ms"] = write_ms
        summary["one_write_with_fsync_ms"] = one_write_ms(
            os.path.join(base, f"train-on-{repetitions - 1}", "worker-00000"),
            runs["on"][-1]["progress_file"],
            fsync=True,
        )[0]
        summary["progress_file_bytes"] = file_bytes
        # every write of a run, at the measured one-write time, as a share of the run's training time
        summary["writes_cost_pct"] = 100 * writes * write_ms / 1000 / summary["cycle_sec"]["on"]
        for r in runs["on"]:
            r.pop("progress_file")
        bench.results = {"runs": runs, "summary": summary}
        print(
            f"  progress.json: {writes:g} writes a run, {write_ms:.3f} ms each = {summary['writes_cost_pct']:.3f} % of the run; "
            f"training time with/without {summary['training_sec']['on']:.2f}/{summary['training_sec']['off']:.2f} s "
            f"({summary['training_sec']['cost_pct']:+.2f} %)",
            file=sys.stderr,
            flush=True,
        )


if __name__ == "__main__":
    command_line(__doc__)
    main()
