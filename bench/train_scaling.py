#!/usr/bin/env python3
"""Training scaling: 1 vs 2 workers, both strategies, both tasks, same total data and epochs.

Every worker runs with --threads 1 (one intra-op and one inter-op thread), so 2 workers on this
2-core machine use at most the cores one worker would leave idle. For each repetition every
configuration runs once, in turn (side by side: drift in the machine's load hits all of them).
The copier runs once per task and shard count; each run trains into its own --out and is
aggregated into its own --savefile, so the held-out split is the same for every row of a task.

Reported per configuration (median over repetitions):
  seconds per epoch  (steady state: the median of epochs 2.. of each worker, the slower worker's; epoch 1
                      separately, it includes tf.function tracing), examples/s over all workers, step time,
  speedup (1-worker sec/epoch / 2-worker sec/epoch, same strategy), process wall time (start-up,
  cluster join, training, saving), CPU seconds of all trainer processes (less sensitive than wall
  time to other load on the machine), the held-out accuracy of the final model.
Then a collective-cost probe (collective.py): the per-step all-reduce of the gradients and of a scalar.
"""

import json
import os
import shutil
import sys

from common import BIN, Bench, median, reps, run_measured, start, tail, tmpdir, wait_measured
from stages import free_port_block

PY = sys.executable
HERE = os.path.dirname(os.path.abspath(__file__))
TASKS = {"movie-reviews": ("sample:movie-reviews", 5), "digits": ("sample:digits", 20)}
CONFIGS = [(1, "average"), (2, "average"), (1, "multiworker"), (2, "multiworker")]
BATCH = 64


def copier(base, task, workers):
    workdir = os.path.join(base, f"{task}-{workers}")
    if not os.path.exists(os.path.join(workdir, "data", "_SUCCESS")):
        r = run_measured([os.path.join(BIN, "disttrain-copier"), "--source", TASKS[task][0], "--n-shards", workers,
                          "--workdir", workdir], log=os.path.join(base, f"copier-{task}-{workers}.log"))
        if r["rc"]:
            raise SystemExit(f"copier failed: {tail(os.path.join(base, f'copier-{task}-{workers}.log'))}")
    return workdir


def train_once(base, task, workers, strategy, rep, epochs, batch=BATCH):
    workdir = copier(base, task, workers)
    run_dir = os.path.join(workdir, "runs", f"{strategy}-r{rep}" + ("" if batch == BATCH else f"-b{batch}"))
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    out = os.path.join(run_dir, "train")
    port = free_port_block(workers)
    import time

    started = time.monotonic()
    procs = [start([os.path.join(BIN, "disttrain-trainer"), "--workdir", workdir, "--out", out, "--worker-index", i,
                    "--workers", workers, "--epochs", epochs, "--batch", batch, "--strategy", strategy, "--seed", 42,
                    "--port", port, "--threads", 1], os.path.join(run_dir, f"worker-{i}.log"))
             for i in range(workers)]
    usage = [wait_measured(p) for p in procs]
    wall = time.monotonic() - started
    for i, u in enumerate(usage):
        if u["rc"]:
            raise SystemExit(f"{task} {workers} {strategy}: worker {i} failed:\n{tail(os.path.join(run_dir, f'worker-{i}.log'))}")
    agg = run_measured([os.path.join(BIN, "disttrain-aggregator"), "--workdir", workdir, "--dir", out, "--expect", workers,
                        "--timeout", 60, "--savefile", os.path.join(run_dir, "final", "model.keras")],
                       log=os.path.join(run_dir, "aggregator.log"))
    if agg["rc"]:
        raise SystemExit(f"aggregator failed:\n{tail(os.path.join(run_dir, 'aggregator.log'))}")
    with open(os.path.join(run_dir, "final", "report.json")) as fh:
        report = json.load(fh)
    metrics = []
    for i in range(workers):
        with open(os.path.join(out, f"worker-{i:05d}", "metrics.json")) as fh:
            metrics.append(json.load(fh))
    # examples per epoch over all workers: average = each worker's own count summed;
    # multiworker = the chief's count, which is already the sum over replicas
    per_worker_examples = [m[-1]["examples"] for m in metrics]
    total_examples = per_worker_examples[0] if strategy == "multiworker" else sum(per_worker_examples)
    steps = per_worker_examples[0] // (batch * (workers if strategy == "multiworker" else 1))
    # average: the workers are not in step (one may be evaluating while the other trains), so each
    # worker's own steady epoch time, and the slower worker's; multiworker: they are in step anyway
    walls = [[e["wall_time_sec"] for e in m] for m in metrics]
    steady = max(median(w[1:]) if epochs > 1 else w[0] for w in walls)
    cpu = [u["user_sec"] + u["sys_sec"] for u in usage]
    return {
        "task": task, "workers": workers, "strategy": strategy, "rep": rep, "epochs": epochs, "batch_per_worker": batch,
        "steps_per_epoch": steps, "examples_per_epoch": total_examples,
        "first_epoch_sec": max(w[0] for w in walls), "sec_per_epoch": steady, "epoch_wall_sec": walls,
        "examples_per_sec": total_examples / steady, "step_ms": steady / steps * 1000,
        "process_wall_sec": wall, "worker_cpu_sec": cpu, "cpu_sec": sum(cpu),
        "worker_max_rss_mb": [u["max_rss_mb"] for u in usage],
        "final_accuracy": report["final"]["test_accuracy"],
        "worker_accuracy": [w["test_accuracy"] for w in report["workers"]],
        "test_examples": report["test_examples"],
        "curves": [[e["test_accuracy"] for e in m] for m in metrics],
        "run_dir": run_dir, "loadavg_1min_after": os.getloadavg()[0],
    }


def collective_probe(model_path, base, label):
    port = free_port_block(2)
    logs = [os.path.join(base, f"collective-{label}-{i}.log") for i in range(2)]
    procs = [start([PY, os.path.join(HERE, "collective.py"), "--model", model_path, "--index", i, "--port", port], logs[i])
             for i in range(2)]
    for p in procs:
        wait_measured(p, timeout=300)
    for line in tail(logs[0], 100000).splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    print(f"collective probe failed ({label}):\n{tail(logs[0])}", file=sys.stderr)
    return None


def summarise(runs):
    rows = []
    for task in TASKS:
        for workers, strategy in CONFIGS:
            rs = [r for r in runs if (r["task"], r["workers"], r["strategy"]) == (task, workers, strategy)]
            if not rs:
                continue
            rows.append({"task": task, "workers": workers, "strategy": strategy, "reps": len(rs), "epochs": rs[0]["epochs"],
                         "steps_per_epoch": rs[0]["steps_per_epoch"], "examples_per_epoch": rs[0]["examples_per_epoch"],
                         **{k: median([r[k] for r in rs]) for k in ("sec_per_epoch", "first_epoch_sec", "examples_per_sec",
                                                                   "step_ms", "process_wall_sec", "cpu_sec", "final_accuracy")},
                         "sec_per_epoch_all": [round(r["sec_per_epoch"], 3) for r in rs]})
    for row in rows:
        one = next(r for r in rows if r["task"] == row["task"] and r["strategy"] == row["strategy"] and r["workers"] == 1)
        base = next(r for r in rows if r["task"] == row["task"] and r["strategy"] == "average" and r["workers"] == 1)
        row["speedup_vs_1_worker_same_strategy"] = one["sec_per_epoch"] / row["sec_per_epoch"]
        row["speedup_vs_1_worker_average"] = base["sec_per_epoch"] / row["sec_per_epoch"]
    return rows


def main():
    n = reps(full=3, quick=1)
    base = tmpdir("train")
    config = {"tasks": {t: {"source": s, "epochs": e} for t, (s, e) in TASKS.items()}, "configs": CONFIGS,
              "batch_per_worker": BATCH, "threads_per_worker": 1, "repetitions": n, "seed": 42}
    with Bench("train_scaling", config) as bench:
        runs = []
        try:
            for rep in range(n):
                for task, (_, epochs) in TASKS.items():
                    for workers, strategy in CONFIGS:
                        print(f"  rep {rep + 1}/{n}: {task} {workers} worker(s) {strategy} ...", file=sys.stderr, flush=True)
                        r = train_once(base, task, workers, strategy, rep, epochs)
                        print(f"    {r['sec_per_epoch']:.3f} s/epoch, {r['examples_per_sec']:.0f} ex/s, step {r['step_ms']:.1f} ms, "
                              f"acc {r['final_accuracy']:.3f}, wall {r['process_wall_sec']:.1f}s", file=sys.stderr, flush=True)
                        runs.append(r)
            probes = {}
            for task in TASKS:
                model = os.path.join(base, f"{task}-1", "runs", "average-r0", "final", "model.keras")
                print(f"  collective probe: {task} model ...", file=sys.stderr, flush=True)
                probes[task] = collective_probe(model, base, task)
        finally:
            if not os.environ.get("BENCH_KEEP"):
                shutil.rmtree(base, ignore_errors=True)
        for r in runs:
            r.pop("run_dir")
        bench.results = {"summary": summarise(runs), "collective": probes, "runs": runs}
        bench.notes.append("sec_per_epoch: each worker's median of epochs 2.. (epoch 1 includes tf.function tracing), the slower worker's; "
                           "excludes the per-epoch held-out evaluation and checkpointing. process_wall_sec: trainer processes "
                           "start to exit (TensorFlow import, cluster join, all epochs, evaluation, saving).")


if __name__ == "__main__":
    main()
