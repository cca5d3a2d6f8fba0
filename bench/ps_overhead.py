#!/usr/bin/env python3
"""The ClusterCoordinator's own cost per scheduled call, on loopback: chief + 1 ps + 2 workers,
each a separate process (the ps and workers are bare tf.distribute.Servers).

  pipelined  schedule N calls, then join: the per-call cost when the queue is never empty
             (how disttrain's parameterserver strategy runs an epoch);
  round trip schedule one call and fetch its result, N times: the latency of one call.

Two trivial calls: `noop` returns a constant (the scheduling and RPC alone); `ps_add` adds 1 to a
variable on the parameter server (plus one read-modify-write on the ps). Compare with a training
step of ~5 ms (text, batch 64, one thread) and --steps-per-call 32 steps per call.

    .venv/bin/python bench/ps_overhead.py [--calls 300]
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from stages import free_port_block  # noqa: E402

SERVER = """
import json, os, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
cluster, job, index = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=job, task_index=index, protocol="grpc", start=True)
while True:
    time.sleep(3600)
"""


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=300)
    args = p.parse_args()
    port = free_port_block(4)
    cluster = {
        "chief": [f"127.0.0.1:{port}"],
        "ps": [f"127.0.0.1:{port + 1}"],
        "worker": [f"127.0.0.1:{port + 2}", f"127.0.0.1:{port + 3}"],
    }
    servers = [
        subprocess.Popen([sys.executable, "-c", SERVER, json.dumps(cluster), job, str(i)], stderr=subprocess.DEVNULL)
        for job, i in (("ps", 0), ("worker", 0), ("worker", 1))
    ]
    try:
        os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}})
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        strategy = tf.distribute.ParameterServerStrategy(tf.distribute.cluster_resolver.TFConfigClusterResolver())
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
        with strategy.scope():
            counter = tf.Variable(0, dtype=tf.int64)

        @tf.function
        def noop():
            return tf.constant(1, tf.int64)

        @tf.function
        def ps_add():
            return counter.assign_add(1)

        results = {}
        for name, fn in (("noop", noop), ("ps_add", ps_add)):
            for _ in range(20):  # warm-up: tracing, function registration on both workers
                coordinator.schedule(fn)
            coordinator.join()
            started = time.perf_counter()
            values = [coordinator.schedule(fn) for _ in range(args.calls)]
            coordinator.join()
            pipelined = (time.perf_counter() - started) / args.calls
            [v.fetch() for v in values]
            started = time.perf_counter()
            for _ in range(args.calls // 3):
                coordinator.schedule(fn).fetch()
            round_trip = (time.perf_counter() - started) / (args.calls // 3)
            results[name] = {
                "pipelined_ms_per_call": round(pipelined * 1000, 3),
                "round_trip_ms": round(round_trip * 1000, 3),
            }
        print(
            json.dumps(
                {
                    "calls": args.calls,
                    "cluster": "chief + 1 ps + 2 workers, separate processes, loopback",
                    "results": results,
                },
                indent=2,
            )
        )
    finally:
        for s in servers:
            s.kill()
            s.wait()


if __name__ == "__main__":
    main()
