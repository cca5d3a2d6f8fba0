#!/usr/bin/env python3
"""The training step on a typed table against the numeric table's, in one process, one thread (about a minute).

The table: tests/typed_table_data.py's (7 typed columns, text and missing values), 2,400 rows. Three ways to
train the same MLP (2 x 64 relu, softmax) with the trainer's compiled call (step.make_train_call, 32 steps per
call, batch 64, Adam):
  numeric    the model on float32 vectors of the preprocessing block's width, as the task "table" trains (the
             reference: today's numeric path);
  encoded    what the trainer does for a typed table with the block: the block applied to the rows once
             (preprocessing.encode, timed apart), then the same step on its vectors;
  in_step    the block inside the model, on batches of the raw columns (strings, NaN): what the trainer would
             pay had it put the block in every step.
Reported: steady ms per step (the median of REPEATS timed repeats of each, in turns, after a warm-up call that traces) and the
one-off encode seconds, timed in turns. Goal: encoded within 10 % of numeric.

    .venv/bin/python bench/typed_table_step.py [--steps 320] [--json out.json]
"""

import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPEATS = 7


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=320, help="steps per timed repeat (default 320)")
    p.add_argument("--json", help="also write the results here")
    return p.parse_args(argv)


def timed_ms_per_step(runs, steps, per_call=32):
    """{name: median ms per step} of runs {name: (train_call, iterator)}, timed in turns (one repeat of each per
    round), so a change in the machine's load hits every one alike."""
    for train_call, iterator in runs.values():
        train_call(iterator, per_call)  # (traces)
    samples = {name: [] for name in runs}
    for _ in range(REPEATS):
        for name, (train_call, iterator) in runs.items():
            started = time.perf_counter()
            for _ in range(steps // per_call):
                train_call(iterator, per_call)
            samples[name].append((time.perf_counter() - started) * 1000 / steps)
    return {name: statistics.median(values) for name, values in samples.items()}


def main(argv=None):
    args = parse_args(argv)
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import keras
    import numpy as np

    from disttrain_contract.typed_table import column_array, encoded_width
    from disttrain_trainer import preprocessing
    from disttrain_trainer.data import shuffled_batches
    from disttrain_trainer.step import make_train_call
    from typed_table_data import generate, table_spec

    values, labels = generate(2400, seed=0)
    table = table_spec(values)
    columns = {c.name: column_array(c, values[c.name]) for c in table.columns}
    started = time.perf_counter()
    vectors = preprocessing.encode(table, columns)
    encode_sec = time.perf_counter() - started
    width = encoded_width(table)

    def mlp():
        keras.utils.set_random_seed(0)
        inputs = keras.Input(shape=(width,), name="features")
        x = keras.layers.Dense(64, activation="relu")(inputs)
        x = keras.layers.Dense(64, activation="relu")(x)
        return keras.Model(inputs, keras.layers.Dense(2, activation="softmax")(x))

    def loss_and_hits(y, out):
        per_example = keras.losses.sparse_categorical_crossentropy(y, out)
        return per_example, tf.cast(tf.equal(tf.argmax(out, axis=-1), y), tf.float32)

    def run(model, x):
        optimizer = keras.optimizers.Adam(1e-3)
        optimizer.build(model.trainable_variables)
        call = make_train_call(tf.distribute.get_strategy(), model, optimizer, loss_and_hits)
        return call, iter(shuffled_batches(x, labels, 64, 0).prefetch(2))

    rng = np.random.default_rng(1)
    numeric = rng.normal(size=vectors.shape).astype(np.float32)  # (the numeric path's data: the same shape)
    runs = {
        "numeric": run(mlp(), numeric),
        "encoded": run(mlp(), vectors),
        "in_step": run(preprocessing.with_block(table, mlp()), columns),
    }
    timed = timed_ms_per_step(runs, args.steps)
    results = {
        "columns": len(table.columns),
        "width": width,
        "rows": len(labels),
        "encode_sec": round(encode_sec, 4),
        **{f"{name}_ms_per_step": ms for name, ms in timed.items()},
    }
    results["encoded_vs_numeric"] = results["encoded_ms_per_step"] / results["numeric_ms_per_step"] - 1
    results["in_step_vs_numeric"] = results["in_step_ms_per_step"] / results["numeric_ms_per_step"] - 1
    print(json.dumps(results, indent=2))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
