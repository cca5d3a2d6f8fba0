#!/usr/bin/env python3
"""Training over a shaped network: 2 workers in their own network namespaces, joined by a veth
pair whose both ends are limited with `tc qdisc ... tbf` to 10 Gbit/s, 1 Gbit/s and 50 Mbit/s.

This reproduces the shape of the reference table (single worker 14 s/epoch, multi-worker on a
LAN 18 s, multi-worker over a VPN 635 s) for the strategies that talk: `multiworker` (the
gradients every step) and `localsgd` (the weights every H steps), against plain 1-worker
training on the host. Bandwidth only: `netem` (added delay) is not available on this kernel,
so the runs have loopback-like latency at the given rate.

Traffic goes only to the two namespaces this script creates (10.233.0.1 and .2 on the veth
pair), which it deletes at the end, also after a failure. Needs root (ip netns, tc).
Movie reviews, 5 epochs, batch 64 per worker, one TensorFlow thread per worker, as train_scaling.py.
"""

import json
import os
import shutil
import sys
import time

import netns
from common import (
    BIN,
    Bench,
    command_line,
    median,
    reps,
    run_measured,
    start,
    steady_epoch_sec,
    tail,
    tmpdir,
    wait_measured,
)
from disttrain_contract.layout import REPORT_FILE
from disttrain_contract.report import Report

NAMESPACES = ("dtbench-w0", "dtbench-w1")
ADDRESSES = (netns.address(0), netns.address(1))
RATES = ("10gbit", "1gbit", "50mbit")
# (label, strategy, extra flags): local SGD at its default H, and averaging once at the end of the
# run (H longer than the run's 400 steps) with float16 on the wire: what a slow link calls for
STRATEGIES = (
    ("multiworker", "multiworker", []),
    ("localsgd", "localsgd", []),
    ("localsgd H=400 float16", "localsgd", ["--sync-every", "400", "--allreduce-dtype", "float16"]),
)
SOURCE, EPOCHS, BATCH, PORT = "sample:movie-reviews", 5, 64, 24100


def teardown():
    netns.teardown(NAMESPACES)


def setup(rate):
    """Two namespaces, one veth pair between them, both ends shaped to `rate`."""
    netns.pair(NAMESPACES, rate)


def train(workdir, out, strategy, extra, namespaced):
    """The trainers of one run; returns per-worker metrics and the process wall time."""
    shutil.rmtree(out, ignore_errors=True)
    workers = 2 if namespaced else 1
    cluster = {"worker": [f"{a}:{PORT}" for a in ADDRESSES]}
    procs = []
    started = time.monotonic()
    for i in range(workers):
        cmd = [
            os.path.join(BIN, "disttrain-trainer"),
            "--workdir",
            workdir,
            "--out",
            out,
            "--worker-index",
            str(i),
            "--workers",
            str(workers),
            "--epochs",
            str(EPOCHS),
            "--batch",
            str(BATCH),
            "--strategy",
            strategy,
            "--threads",
            "1",
            *extra,
        ]
        env = dict(os.environ)
        if namespaced:
            env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})
            cmd = netns.exec_in(NAMESPACES[i], cmd)
        procs.append(start(cmd, os.path.join(out + f"-{i}.log"), env=env))
    usage = [wait_measured(p, timeout=3600) for p in procs]
    wall = time.monotonic() - started
    for i, u in enumerate(usage):
        if u["rc"]:
            raise SystemExit(f"{strategy} worker {i} failed:\n{tail(out + f'-{i}.log')}")
    metrics = [json.load(open(os.path.join(out, f"worker-{i:05d}", "metrics.json"))) for i in range(workers)]
    return metrics, wall


def aggregate(workdir, out, workers):
    final = out + "-final"
    r = run_measured(
        [
            os.path.join(BIN, "disttrain-aggregator"),
            "--workdir",
            workdir,
            "--dir",
            out,
            "--expect",
            str(workers),
            "--timeout",
            "60",
            "--savefile",
            os.path.join(final, "model.keras"),
            "--force",
        ],  # measured either way
        log=out + "-aggregator.log",
    )
    if r["rc"]:
        raise SystemExit(f"aggregator failed:\n{tail(out + '-aggregator.log')}")
    return Report.read(os.path.join(final, REPORT_FILE)).final["test_accuracy"]


def measure(base, network, workdir, label, strategy, extra, namespaced, rep):
    out = os.path.join(base, f"{network}-{label.replace(' ', '_')}-r{rep}")
    metrics, wall = train(workdir, out, strategy, extra, namespaced)
    walls = [[e["wall_time_sec"] for e in m] for m in metrics]
    return {
        "network": network,
        "strategy": label,
        "workers": len(metrics),
        "rep": rep,
        "sec_per_epoch": steady_epoch_sec(walls),
        "epoch_wall_sec": walls,
        "first_epoch_sec": max(m[0]["wall_time_sec"] for m in metrics),
        "process_wall_sec": wall,
        "final_accuracy": aggregate(workdir, out, len(metrics)),
    }


def main():
    if os.geteuid() != 0:
        raise SystemExit("network_shaped.py needs root (ip netns, tc)")
    n = reps(full=3, quick=1)
    base = tmpdir("net")
    config = {
        "source": SOURCE,
        "epochs": EPOCHS,
        "batch_per_worker": BATCH,
        "threads_per_worker": 1,
        "rates": RATES,
        "strategies": {label: [strategy, *extra] for label, strategy, extra in STRATEGIES},
        "repetitions": n,
        "shaping": "tc tbf on both veth ends; no added delay",
    }
    with Bench("network_shaped", config) as bench:
        runs = []
        try:
            one, two = os.path.join(base, "one"), os.path.join(base, "two")
            for workdir, shards in ((one, 1), (two, 2)):
                r = run_measured(
                    [
                        os.path.join(BIN, "disttrain-copier"),
                        "--source",
                        SOURCE,
                        "--n-shards",
                        str(shards),
                        "--workdir",
                        workdir,
                    ],
                    log=os.path.join(base, f"copier-{shards}.log"),
                )
                if r["rc"]:
                    raise SystemExit(f"copier failed: {tail(os.path.join(base, f'copier-{shards}.log'))}")
            for rep in range(n):
                print(f"  rep {rep + 1}/{n}: 1 worker (no network) ...", file=sys.stderr, flush=True)
                runs.append(measure(base, "none", one, "average", "average", [], False, rep))
                for rate in RATES:
                    setup(rate)
                    for label, strategy, extra in STRATEGIES:
                        print(f"  rep {rep + 1}/{n}: {rate} {label} ...", file=sys.stderr, flush=True)
                        runs.append(measure(base, rate, two, label, strategy, extra, True, rep))
                        print(
                            f"    {runs[-1]['sec_per_epoch']:.3f} s/epoch, acc {runs[-1]['final_accuracy']:.3f}",
                            file=sys.stderr,
                            flush=True,
                        )
        finally:
            teardown()
            if not os.environ.get("BENCH_KEEP"):
                shutil.rmtree(base, ignore_errors=True)
        baseline = median([r["sec_per_epoch"] for r in runs if r["network"] == "none"])
        summary = []
        for label in ("none",) + RATES:
            for strategy in ("average",) + tuple(label for label, _, _ in STRATEGIES):
                rs = [r for r in runs if (r["network"], r["strategy"]) == (label, strategy)]
                if rs:
                    row = {
                        "network": label,
                        "strategy": strategy,
                        "workers": rs[0]["workers"],
                        "reps": len(rs),
                        **{
                            k: median([r[k] for r in rs])
                            for k in ("sec_per_epoch", "first_epoch_sec", "process_wall_sec", "final_accuracy")
                        },
                    }
                    row["speedup_vs_1_worker"] = baseline / row["sec_per_epoch"]
                    summary.append(row)
        bench.results = {"summary": summary, "runs": runs}
        bench.notes.append(
            "sec_per_epoch: the slower worker's mean of epochs 2.. (common.steady_epoch_sec); the 1-worker row runs on the host "
            "(no network); tbf limits bandwidth only (netem, for delay, is not available here)"
        )


if __name__ == "__main__":
    command_line(__doc__)
    main()
