#!/usr/bin/env python3
"""Training scaling: plain 1-worker training vs 2 workers of every strategy, on text, digits and a
compute-bound image model (MobileNetV2 from scratch on digits resized to 32x32), same data and epochs.

Every worker runs with --threads 1 (one intra-op and one inter-op thread), so 2 workers on a
2-core machine use at most the cores one worker would leave idle. For each repetition every
configuration runs once, in turn (side by side: drift in the machine's load hits all of them).
The copier runs once per task and shard count; each run trains into its own --out and is
aggregated into its own --savefile, so the held-out split is the same for every row of a task.

Reported per configuration (median over repetitions):
  seconds per epoch  (steady state: the mean of epochs 2.. of each worker, the slower worker's; epoch 1
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

from common import (
    BIN,
    Bench,
    load_result,
    median,
    reps,
    run_measured,
    start,
    steady_epoch_sec,
    tail,
    tmpdir,
    wait_measured,
    write_result,
    command_line,
)
from stages import free_port_block
from disttrain_contract.layout import REPORT_FILE
from disttrain_contract.report import Report

PY = sys.executable
HERE = os.path.dirname(os.path.abspath(__file__))
# task -> (source, epochs, extra trainer flags)
# movie-reviews-lazyadam: the same text task with --optimizer lazyadam (only the touched embedding rows
# updated: a much shorter step, so the per-epoch and per-sync costs weigh more)
TASKS = {
    "movie-reviews": ("sample:movie-reviews", 5, ()),
    "movie-reviews-lazyadam": ("sample:movie-reviews", 5, ("--optimizer", "lazyadam")),
    "digits": ("sample:digits", 20, ()),
    "digits-mobilenetv2": ("sample:digits", 10, ("--model", "mobilenetv2", "--image-size", 32)),
}
# plain 1-worker training is the baseline of every row (1 worker of `average` = no communication at all)
# parameterserver: 2 workers + 1 parameter server + the chief, 4 processes
CONFIGS = [(1, "average"), (2, "average"), (2, "multiworker"), (2, "localsgd"), (2, "parameterserver")]
PS = {"parameterserver": 1}  # parameter servers per strategy (the others: none)
# local SGD's H and wire dtype, measured on movie reviews (the trainer's defaults: 32, float32)
SYNC_EVERY = ((8, "float32"), (32, "float32"), (32, "float16"), (128, "float32"), (400, "float32"))
BATCH = 64


def copier(base, task, workers):
    workdir = os.path.join(base, f"{task}-{workers}")
    if not os.path.exists(os.path.join(workdir, "data", "_SUCCESS")):
        r = run_measured(
            [
                os.path.join(BIN, "disttrain-copier"),
                "--source",
                TASKS[task][0],
                "--n-shards",
                workers,
                "--workdir",
                workdir,
            ],
            log=os.path.join(base, f"copier-{task}-{workers}.log"),
        )
        if r["rc"]:
            raise SystemExit(f"copier failed: {tail(os.path.join(base, f'copier-{task}-{workers}.log'))}")
    return workdir


def train_once(base, task, workers, strategy, rep, epochs, batch=BATCH, extra=()):
    workdir = copier(base, task, workers)
    run_dir = os.path.join(
        workdir, "runs", f"{strategy}-r{rep}" + ("" if batch == BATCH else f"-b{batch}") + "".join(map(str, extra))
    )
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    out = os.path.join(run_dir, "train")
    ps = PS.get(strategy, 0)
    tasks = workers + (1 + ps if ps else 0)  # parameterserver: the chief and the ps are processes too
    port = free_port_block(tasks)
    import time

    started = time.monotonic()
    procs = [
        start(
            [
                os.path.join(BIN, "disttrain-trainer"),
                "--workdir",
                workdir,
                "--out",
                out,
                "--worker-index",
                i,
                "--workers",
                workers,
                "--epochs",
                epochs,
                "--batch",
                batch,
                "--strategy",
                strategy,
                "--seed",
                42,
                "--port",
                port,
                "--threads",
                1,
                *(("--ps", ps) if ps else ()),
                *TASKS[task][2],
                *extra,
            ],
            os.path.join(run_dir, f"worker-{i}.log"),
        )
        for i in range(tasks)
    ]
    usage = [wait_measured(p) for p in procs]
    wall = time.monotonic() - started
    for i, u in enumerate(usage):
        if u["rc"]:
            raise SystemExit(
                f"{task} {workers} {strategy}: worker {i} failed:\n{tail(os.path.join(run_dir, f'worker-{i}.log'))}"
            )
    agg = run_measured(
        [
            os.path.join(BIN, "disttrain-aggregator"),
            "--workdir",
            workdir,
            "--dir",
            out,
            "--expect",
            workers,
            "--timeout",
            60,
            "--savefile",
            os.path.join(run_dir, "final", "model.keras"),
            "--force",
        ],  # measured either way (MobileNetV2's average fails the quality gate)
        log=os.path.join(run_dir, "aggregator.log"),
    )
    if agg["rc"]:
        raise SystemExit(f"aggregator failed:\n{tail(os.path.join(run_dir, 'aggregator.log'))}")
    report = Report.read(os.path.join(run_dir, "final", REPORT_FILE)).to_json()
    metrics = []
    for i in range(1 if ps else workers):  # parameterserver: only the chief trains (and keeps metrics)
        with open(os.path.join(out, f"worker-{i:05d}", "metrics.json")) as fh:
            metrics.append(json.load(fh))
    # examples per epoch over all workers: average, localsgd = each worker's own count summed;
    # multiworker = the chief's count, which is already the sum over the workers
    per_worker_examples = [m[-1]["examples"] for m in metrics]
    own_counts = strategy in ("average", "localsgd")
    total_examples = sum(per_worker_examples) if own_counts else per_worker_examples[0]
    # parameterserver: every step is one worker's batch, so an epoch is examples / batch steps of the group
    steps = per_worker_examples[0] // (batch * (1 if own_counts or strategy == "parameterserver" else workers))
    # average: the workers are not in step (one may be evaluating while the other trains), so each
    # worker's own steady epoch time, and the slower worker's; multiworker: they are in step anyway
    walls = [[e["wall_time_sec"] for e in m] for m in metrics]
    # the whole cycle of an epoch (training, held-out evaluation, checkpoint), the same way
    cycles = [[e["cycle_sec"] for e in m] for m in metrics]
    cpu = [u["user_sec"] + u["sys_sec"] for u in usage]
    return with_steady_figures(
        {
            "task": task,
            "workers": workers,
            "strategy": strategy,
            "rep": rep,
            "epochs": epochs,
            "batch_per_worker": batch,
            "steps_per_epoch": steps,
            "examples_per_epoch": total_examples,
            "first_epoch_sec": max(w[0] for w in walls),
            "epoch_wall_sec": walls,
            "epoch_cycle_sec": cycles,
            "process_wall_sec": wall,
            "worker_cpu_sec": cpu,
            "cpu_sec": sum(cpu),
            "worker_max_rss_mb": [u["max_rss_mb"] for u in usage],
            "final_accuracy": report["final"]["test_accuracy"],
            "worker_accuracy": [w["test_accuracy"] for w in report["workers"]],
            "test_examples": report["test_examples"],
            "curves": [[e["test_accuracy"] for e in m if "test_accuracy" in e] for m in metrics],
            "run_dir": run_dir,
            "loadavg_1min_after": os.getloadavg()[0],
        }
    )


def with_steady_figures(run):
    """The run's steady figures, from its per-epoch times (so stored runs can be summarised again)."""
    steady = steady_epoch_sec(run["epoch_wall_sec"])
    return dict(
        run,
        sec_per_epoch=steady,
        cycle_sec_per_epoch=steady_epoch_sec(run["epoch_cycle_sec"]),
        examples_per_sec=run["examples_per_epoch"] / steady,
        step_ms=steady / run["steps_per_epoch"] * 1000,
    )


def measured(base, task, workers, strategy, rep, epochs, n, extra=()):
    print(
        f"  rep {rep + 1}/{n}: {task} {workers} worker(s) {strategy} {' '.join(map(str, extra))} ...",
        file=sys.stderr,
        flush=True,
    )
    r = train_once(base, task, workers, strategy, rep, epochs, extra=extra)
    print(
        f"    {r['sec_per_epoch']:.3f} s/epoch ({r['cycle_sec_per_epoch']:.3f} s with evaluation and checkpoint), {r['examples_per_sec']:.0f} ex/s, step {r['step_ms']:.1f} ms, "
        f"acc {r['final_accuracy']:.3f}, wall {r['process_wall_sec']:.1f}s",
        file=sys.stderr,
        flush=True,
    )
    return r


def collective_probe(model_path, base, label):
    port = free_port_block(2)
    logs = [os.path.join(base, f"collective-{label}-{i}.log") for i in range(2)]
    procs = [
        start([PY, os.path.join(HERE, "collective.py"), "--model", model_path, "--index", i, "--port", port], logs[i])
        for i in range(2)
    ]
    for p in procs:
        wait_measured(p, timeout=300)
    for line in tail(logs[0], 100000).splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    print(f"collective probe failed ({label}):\n{tail(logs[0])}", file=sys.stderr)
    return None


def summarise(runs, configs=CONFIGS, key=lambda r: (r["workers"], r["strategy"])):
    rows = []
    for task in TASKS:
        for config in configs:
            rs = [r for r in runs if r["task"] == task and key(r) == config]
            if not rs:
                continue
            rows.append(
                {
                    "task": task,
                    "workers": rs[0]["workers"],
                    "strategy": rs[0]["strategy"],
                    "sync_every": rs[0].get("sync_every"),
                    "allreduce_dtype": rs[0].get("allreduce_dtype"),
                    "reps": len(rs),
                    "epochs": rs[0]["epochs"],
                    "steps_per_epoch": rs[0]["steps_per_epoch"],
                    "examples_per_epoch": rs[0]["examples_per_epoch"],
                    **{
                        k: median([r[k] for r in rs])
                        for k in (
                            "sec_per_epoch",
                            "cycle_sec_per_epoch",
                            "first_epoch_sec",
                            "examples_per_sec",
                            "step_ms",
                            "process_wall_sec",
                            "cpu_sec",
                            "final_accuracy",
                        )
                    },
                    "sec_per_epoch_all": [round(r["sec_per_epoch"], 3) for r in rs],
                }
            )
    return rows


def add_speedups(rows, baselines):
    """Speedup of each row against plain 1-worker training of its task, in steady state (s/epoch)
    and in the training stage's wall time (start-up, evaluation, saving included)."""
    for row in rows:
        base = next(
            r for r in baselines if r["task"] == row["task"] and r["strategy"] == "average" and r["workers"] == 1
        )
        row["speedup_vs_1_worker"] = base["sec_per_epoch"] / row["sec_per_epoch"]
        row["cycle_speedup_vs_1_worker"] = base["cycle_sec_per_epoch"] / row["cycle_sec_per_epoch"]
        row["wall_speedup_vs_1_worker"] = base["process_wall_sec"] / row["process_wall_sec"]
        row["accuracy_vs_1_worker"] = row["final_accuracy"] - base["final_accuracy"]
    return rows


def main(strategies=None):
    """strategies: only these (with the 1-worker baseline) and no H sweep, into results/train_scaling-<names>.json:
    re-measuring a few rows after a change without replacing the full run's file."""
    n = reps(full=3, quick=1)
    base = tmpdir("train")
    configs = [c for c in CONFIGS if c == (1, "average") or strategies is None or c[1] in strategies]
    config = {
        "tasks": {t: {"source": s, "epochs": e, "flags": list(map(str, x))} for t, (s, e, x) in TASKS.items()},
        "configs": configs,
        "sync_every_and_dtype": SYNC_EVERY if strategies is None else [],
        "batch_per_worker": BATCH,
        "threads_per_worker": 1,
        "repetitions": n,
        "seed": 42,
    }
    with Bench("train_scaling" + ("" if strategies is None else "-" + "-".join(strategies)), config) as bench:
        runs, sweep = [], []
        try:
            for rep in range(n):
                for task, (_, epochs, _) in TASKS.items():
                    for workers, strategy in configs:
                        runs.append(measured(base, task, workers, strategy, rep, epochs, n))
                for h, dtype in config["sync_every_and_dtype"]:
                    r = measured(
                        base,
                        "movie-reviews",
                        2,
                        "localsgd",
                        rep,
                        TASKS["movie-reviews"][1],
                        n,
                        ("--sync-every", h, "--allreduce-dtype", dtype),
                    )
                    sweep.append(dict(r, sync_every=h, allreduce_dtype=dtype))
            probes = {}
            for task in ("movie-reviews", "digits"):
                model = os.path.join(base, f"{task}-1", "runs", "average-r0", "final", "model.keras")
                print(f"  collective probe: {task} model ...", file=sys.stderr, flush=True)
                probes[task] = collective_probe(model, base, task)
        finally:
            if not os.environ.get("BENCH_KEEP"):
                shutil.rmtree(base, ignore_errors=True)
        for r in runs + sweep:
            r.pop("run_dir")
        bench.results = dict(summaries(runs, sweep), collective=probes)
        bench.notes.append(STEADY_NOTE)


# the definition of the steady figures, in every result file
STEADY_NOTE = (
    "sec_per_epoch: each worker's mean of epochs 2.. (epoch 1 includes tf.function tracing), the slower worker's; "
    "excludes the per-epoch held-out evaluation and checkpointing. cycle_sec_per_epoch: the same over each epoch's whole cycle "
    "(training, evaluation, checkpoint: epoch start to epoch start). process_wall_sec: trainer processes "
    "start to exit (TensorFlow import, cluster join, all epochs, evaluation, saving)."
)


def summaries(runs, sweep):
    summary = add_speedups(summarise(runs), summarise(runs))
    sync_every = add_speedups(
        summarise(sweep, SYNC_EVERY, key=lambda r: (r["sync_every"], r["allreduce_dtype"])), summary
    )
    return {"summary": summary, "sync_every": sync_every, "runs": runs, "sweep": sweep}


def resummarise():
    """--resummarise: recompute every steady figure and summary of results/train_scaling.json from
    its stored per-epoch times (after a change of definition), without training again; the
    machine facts and the raw times stay those of the run that measured them."""
    doc = load_result("train_scaling")
    results = doc["results"]
    runs = [with_steady_figures(r) for r in results["runs"]]
    sweep = [with_steady_figures(r) for r in results["sweep"]]
    doc["results"] = dict(summaries(runs, sweep), collective=results["collective"])
    doc["notes"] = [STEADY_NOTE]
    write_result("train_scaling", doc)
    print("train_scaling: summaries recomputed from the stored per-epoch times", file=sys.stderr)


def options(parser):
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--resummarise",
        action="store_true",
        help="recompute the summaries from the stored per-epoch times; train nothing",
    )
    which.add_argument(
        "--only", metavar="STRATEGIES", help="run these rows again, e.g. average,localsgd (default: the full benchmark)"
    )


if __name__ == "__main__":
    args = command_line(__doc__, options)
    if args.resummarise:
        resummarise()
    else:
        main(args.only.split(",") if args.only else None)
