"""SIGTERM to exit of training workers (disttrain_trainer/preemption.py): the seconds a trainer pod
needs between the signal and its exit, which the chart's trainer.terminationGracePeriodSeconds
must cover with a margin.

For each model (text: sample:movie-reviews; mobilenetv2: sample:digits with --model mobilenetv2
--image-size 32) and strategy (average: worker 0 of 2 shards alone; multiworker: a pair), --runs
times: start the trainer(s) with the chart's defaults (--batch 64, --steps-per-call 32), wait
until worker 0 is into epoch 3, wait a random part of an epoch more (seeded), send SIGTERM to
worker 0, and time until every worker has exited. Records each run's exit codes, seconds, and the
steps between the signal and the stop (from the trainer's "preempted:" line); writes
bench/results/preemption.json (provisional when other processes used the CPU meanwhile: the
measurement then includes their contention, which is what a shared node does too).

    .venv/bin/python bench/preemption.py [--runs 5] [--models text,mobilenetv2] [--strategies average,multiworker]
"""

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
sys.path.insert(0, os.path.join(BENCH, "..", "tests"))

MODELS = {
    "text": ("sample:movie-reviews", []),
    "mobilenetv2": ("sample:digits", ["--model", "mobilenetv2", "--image-size", "32"]),
}
EXIT_CODE = 75  # disttrain_contract.errors.PREEMPTED_EXIT_CODE
STOPPED = re.compile(r"preempted: SIGTERM at step (\d+), stopped at step (\d+) \(\d+ steps and ([\d.]+) s later\)")
EPOCHS = 10  # the signal lands in epoch 3 or 4: long before the last


def read_json(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def one_run(work, source, model_args, strategy, delay_fraction, timeout=900):
    from common import BIN
    from stages import free_port_block

    subprocess.run(
        [os.path.join(BIN, "disttrain-copier"), "--source", source, "--n-shards", "2", "--workdir", work],
        check=True,
        capture_output=True,
    )
    workers = 2 if strategy == "multiworker" else 1
    port = free_port_block(2)
    logs = [os.path.join(work, f"worker-{i}.log") for i in range(workers)]
    procs = [
        subprocess.Popen(
            [
                os.path.join(BIN, "disttrain-trainer"),
                "--workdir",
                work,
                "--workers",
                "2",
                "--worker-index",
                str(i),
                "--strategy",
                strategy,
                "--epochs",
                str(EPOCHS),
                "--batch",
                "64",
                "--steps-per-call",
                "32",
                "--port",
                str(port),
                "--progress-interval",
                "0.05",
                *model_args,
            ],
            stdout=open(logs[i], "w"),
            stderr=subprocess.STDOUT,
        )
        for i in range(workers)
    ]
    progress_path = os.path.join(work, "train", "worker-00000", "progress.json")
    deadline = time.monotonic() + timeout
    epoch_2 = None
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            break
        progress = read_json(progress_path) or {}
        if progress.get("epoch", 0) >= 3 and progress.get("state") == "training":
            # epoch 2's whole cycle (epoch 1's includes tracing): how long an epoch lasts
            metrics = read_json(os.path.join(work, "train", "worker-00000", "metrics.json")) or [{}, {}]
            epoch_2 = metrics[1].get("cycle_sec") or 1.0
            break
        time.sleep(0.02)
    if epoch_2 is None:
        for p in procs:
            p.kill()
        return {"ok": False, "why": "never reached epoch 3", "log": open(logs[0]).read()[-2000:]}
    time.sleep(delay_fraction * epoch_2)
    procs[0].send_signal(15)
    signalled = time.monotonic()
    codes = [p.wait(timeout=timeout) for p in procs]
    seconds = time.monotonic() - signalled
    text = open(logs[0]).read()
    found = STOPPED.search(text)
    per_epoch = re.search(r"(\d+) steps/epoch", text)
    return {
        "ok": codes == [EXIT_CODE] * workers,
        "exit_codes": codes,
        "sigterm_to_exit_sec": round(seconds, 2),
        "delay_after_epoch_3_start_sec": round(delay_fraction * epoch_2, 2),
        "step_at_signal": int(found.group(1)) if found else None,
        "stopped_at_step": int(found.group(2)) if found else None,
        "signal_to_stop_sec": float(found.group(3)) if found else None,
        "steps_per_epoch": int(per_epoch.group(1)) if per_epoch else None,
        "epoch_2_cycle_sec": round(epoch_2, 2),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--models", default="text,mobilenetv2")
    p.add_argument("--strategies", default="average,multiworker")
    p.add_argument("--seed", type=int, default=7, help="seed of the delays before the signal")
    args = p.parse_args()
    models = args.models.split(",")
    strategies = args.strategies.split(",")
    for name in models:
        if name not in MODELS:
            p.error(f"--models: unknown {name!r} (known: {', '.join(MODELS)})")

    from common import Bench

    draw = random.Random(args.seed)
    root = tempfile.mkdtemp(prefix="preemption-")
    with Bench("preemption", {**vars(args), "epochs": EPOCHS, "batch": 64, "steps_per_call": 32}) as bench:
        bench.notes.append(
            "SIGTERM to worker 0 a random part of an epoch after it entered epoch 3; seconds until "
            "every worker of the run exited (average: 1 process, multiworker: 2); signal_to_stop_sec: the "
            "trainer's own count in its 'preempted:' line, from when its Python saw the signal (after the "
            "compiled call running then) to the saved stop: less than sigterm_to_exit_sec by the rest of "
            "that call"
        )
        for model in models:
            source, model_args = MODELS[model]
            for strategy in strategies:
                runs = []
                for n in range(args.runs):
                    work = os.path.join(root, f"{model}-{strategy}-{n}")
                    result = one_run(work, source, model_args, strategy, draw.random())
                    runs.append(result)
                    print(f"{model} {strategy} run {n}: {json.dumps(result)[:300]}", flush=True)
                good = [r["sigterm_to_exit_sec"] for r in runs if r["ok"]]
                bench.results[f"{model}/{strategy}"] = {
                    "runs": runs,
                    "ok": len(good),
                    "max_sec": max(good, default=None),
                    "median_sec": sorted(good)[len(good) // 2] if good else None,
                }
                print(
                    f"{model} {strategy}: {len(good)}/{len(runs)} exited {EXIT_CODE}; SIGTERM to exit "
                    f"max {max(good, default=float('nan')):.2f} s",
                    flush=True,
                )
    print(f"logs in {root}")
    return 0 if all(r["ok"] == len(r["runs"]) for r in bench.results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
