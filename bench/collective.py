#!/usr/bin/env python3
"""One worker of the collective-cost probe (train_scaling.py starts 2 of them on loopback).

Joins a MultiWorkerMirroredStrategy cluster exactly like the trainer does (TF_CONFIG,
127.0.0.1:port+i, one intra- and one inter-op thread) and times, per call:
  * an all-reduce of tensors shaped like the model's trainable variables (= the gradients
    the trainer all-reduces every step),
  * an all-reduce of one scalar (the latency floor of one collective; the trainer also
    reduces loss, hits and count every step),
  * the same gradient-shaped all-reduce under the default (1-replica, no network) strategy;
  * what the trainer really sends each step (collectives.Wire, float32 and float16 on the wire):
    for a model with an embedding, its gradient as --rows touched rows (a batch-64 step of the
    text model touches ~1,300 unique tokens), the rest dense.
The chief prints one JSON line with the medians.
"""

import argparse
import json
import os
import statistics
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--rows", type=int, default=1300, help="touched embedding rows per step (sparse models)")
    args = p.parse_args()
    os.environ["TF_CONFIG"] = json.dumps(
        {
            "cluster": {"worker": [f"127.0.0.1:{args.port + i}" for i in range(args.workers)]},
            "task": {"type": "worker", "index": args.index},
        }
    )
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    model = keras.models.load_model(args.model, compile=False)
    shapes = [tuple(v.shape) for v in model.trainable_variables]
    n_params = sum(int(tf.reduce_prod(s).numpy()) if s else 1 for s in shapes)
    SUM = tf.distribute.ReduceOp.SUM

    def grads_fn():
        return tf.distribute.get_replica_context().all_reduce(SUM, [tf.ones(s) for s in shapes])

    def scalar_fn():
        return tf.distribute.get_replica_context().all_reduce(SUM, tf.constant(1.0))

    @tf.function
    def grads_step():
        return strategy.run(grads_fn)

    @tf.function
    def scalar_step():
        return strategy.run(scalar_fn)

    def timed(fn):
        for _ in range(5):
            fn()
        times = []
        for _ in range(args.iters):
            t = time.perf_counter()
            out = fn()
            tf.nest.map_structure(lambda x: x.numpy() if hasattr(x, "numpy") else x, out)
            times.append(time.perf_counter() - t)
        return statistics.median(times) * 1000

    result = {
        "params": n_params,
        "gradient_mb": n_params * 4 / 1e6,
        "allreduce_gradients_ms": timed(grads_step),
        "allreduce_scalar_ms": timed(scalar_step),
    }
    local = tf.distribute.get_strategy()

    @tf.function
    def local_step():
        return local.run(grads_fn)

    result["local_reduce_gradients_ms"] = timed(local_step)

    from disttrain_trainer.collectives import Wire

    variables = model.trainable_variables
    sparse = next((i for i, v in enumerate(variables) if "embedding" in v.path and len(v.shape) == 2), None)

    def wire_step(dtype):
        wire = Wire(dtype)

        def fn():
            grads = [tf.ones(s) for s in shapes]
            if sparse is not None:  # the other worker touches half the same rows, half others
                rows = tf.range(args.rows) + args.index * (args.rows // 2)
                grads[sparse] = tf.IndexedSlices(
                    tf.ones([args.rows, shapes[sparse][1]]), rows, tf.constant(shapes[sparse], tf.int64)
                )
            return wire.all_reduce_sum(grads)

        return tf.function(lambda: strategy.run(fn))

    result["sparse_rows"] = args.rows if sparse is not None else None
    for dtype in ("float32", "float16"):
        step = wire_step(dtype)
        result[f"wire_{dtype}_ms"] = timed(lambda: [g.values if isinstance(g, tf.IndexedSlices) else g for g in step()])
    if args.index == 0:
        print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
