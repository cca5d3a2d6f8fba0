#!/usr/bin/env python3
"""Face search under concurrency: :search requests/s and wrong answers, by face-detector sharing policy.

The server runs with its defaults (gunicorn, 2 workers x 8 threads) and a gallery of 8 people; each
request searches another view of one of 4 enrolled people (the face tests' queries). Three policies
for OpenCV's CascadeClassifier (bench/search_variant.py), each in its own server:
  per-thread  one cascade per request thread (shipped)
  lock        one cascade per process, detection serialised by a lock
  shared      one cascade per process, unguarded: the code before per-thread cascades
Every answer is compared with the serial answer the same server gave for that photo before the load:
a "wrong" answer is any byte difference in the JSON body (box, faces found, matches, distances) or a
non-200 (e.g. 422 "no face found"). Load: C = 1 and 8 client threads on loopback, each rep runs every
(concurrency, policy) pair in turn.
"""

import argparse
import base64
import http.client
import json
import os
import shutil
import subprocess
import sys

from common import BIN, Bench, QUICK, median, reps, run_measured, stop_and_remove, tail, tmpdir
from server_bench import run_load, wait_http
from stages import free_port_block

HERE = os.path.dirname(os.path.abspath(__file__))
PATH = "/v1/models/disttrain:search"
POLICIES = ("per-thread", "lock", "shared")
CONCURRENCY = (1, 8)
SEEDED = (4, 15, 33, 50, 60, 70, 80, 90)  # lfw_subset people in the gallery
QUERIED = (50, 4, 15, 33)  # another view of each is a query


def prepare(base):
    """A faces model published in base/final (copier, 1 trainer, aggregator) and a gallery seed folder."""
    steps = [
        ["copier", "--source", "sample:faces", "--n-shards", 1, "--workdir", base],
        ["trainer", "--workdir", base, "--worker-index", 0, "--epochs", 30, "--batch", 32],
        ["aggregator", "--workdir", base],
    ]
    for s in steps:
        log = os.path.join(base, f"{s[0]}.log")
        r = run_measured([os.path.join(BIN, f"disttrain-{s[0]}"), *s[1:]], log=log)
        if r["rc"]:
            raise SystemExit(f"{s[0]} failed:\n{tail(log)}")
    from server.face_photos import lfw_photos, other_view, png, write_seed

    photos = lfw_photos()
    seed = write_seed(os.path.join(base, "seed"), {f"lfw-{i:03d}": [photos[i]] for i in SEEDED})
    bodies = [
        json.dumps({"image": {"b64": base64.b64encode(png(other_view(photos[i]))).decode()}, "k": 5}).encode()
        for i in QUERIED
    ]
    return seed, bodies


def post(conn, body):
    conn.request("POST", PATH, body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    return resp.status, resp.read()


def search_factory(port, bodies, expected, wrong):
    """Each thread's call(i) posts query i % 4 and counts (in `wrong`) every answer unlike the serial one."""

    def factory():
        conn = [None]

        def call(i):
            if conn[0] is None:
                conn[0] = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            try:
                status, data = post(conn[0], bodies[i % len(bodies)])
            except (http.client.HTTPException, OSError):
                conn[0].close()
                conn[0] = None
                raise
            if (status, data) != expected[i % len(bodies)]:
                wrong.append((i % len(bodies), status, data[:160]))  # list.append is atomic under the GIL

        return call

    return factory


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=200 if QUICK else 800)
    p.add_argument("--time-limit", type=float, default=30 if QUICK else 90)
    args = p.parse_args()
    n = reps(full=3, quick=1)
    base = tmpdir("search")
    config = {
        "concurrency": CONCURRENCY,
        "requests_per_point": args.requests,
        "time_limit_sec": args.time_limit,
        "repetitions": n,
        "server": "with its defaults (2 workers x 8 threads)",
        "gallery": f"{len(SEEDED)} lfw_subset people",
        "queries": "other_view of lfw 50, 4, 15, 33, k=5",
        "policies": {
            "per-thread": "one cascade per thread (shipped)",
            "lock": "one cascade per process + lock",
            "shared": "one unguarded cascade per process (the code before per-thread cascades)",
        },
    }
    procs = []
    with Bench("search", config) as bench:
        try:
            seed, bodies = prepare(base)
            servers = {}
            for policy in POLICIES:
                workdir = os.path.join(base, f"serve-{policy}")
                os.makedirs(os.path.join(workdir, "final"))
                shutil.copy(os.path.join(base, "final", "model.keras"), os.path.join(workdir, "final", "model.keras"))
                port, log = free_port_block(1), os.path.join(base, f"{policy}.log")
                procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            os.path.join(HERE, "search_variant.py"),
                            policy,
                            "--",
                            "--workdir",
                            workdir,
                            "--port",
                            str(port),
                            "--gallery-seed",
                            seed,
                        ],
                        stdout=open(log, "w"),
                        stderr=subprocess.STDOUT,
                    )
                )
                wait_http(f"http://127.0.0.1:{port}/readyz", proc=procs[-1], log=log)
                # The serial answers, then a warm-up that reaches both gunicorn workers (each loads lazily).
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                expected = [post(conn, body) for body in bodies]
                conn.close()
                bad = [(i, s, d[:200]) for i, (s, d) in enumerate(expected) if s != 200]
                if bad:
                    raise SystemExit(f"{policy}: serial searches failed: {bad}")
                servers[policy] = (port, expected)
                run_load(search_factory(port, bodies, expected, []), 4, 40, 120)
            runs = []
            for rep in range(n):
                for c in CONCURRENCY:
                    for policy, (port, expected) in servers.items():
                        wrong = []
                        r = run_load(search_factory(port, bodies, expected, wrong), c, args.requests, args.time_limit)
                        r.update(
                            policy=policy,
                            rep=rep,
                            wrong=len(wrong),
                            wrong_examples=[repr(w) for w in wrong[:3]],
                            loadavg_1min=os.getloadavg()[0],
                        )
                        runs.append(r)
                        print(
                            f"  rep {rep + 1}/{n} c={c} {policy:<10} {r['requests_per_sec']:6.1f} req/s  p50 {r['p50_ms']:6.1f}  "
                            f"p95 {r['p95_ms']:6.1f} ms  wrong {len(wrong)}/{r['requests']}  errors {r['errors']}",
                            file=sys.stderr,
                            flush=True,
                        )
        finally:
            stop_and_remove(procs, base)
        summary = []
        for c in CONCURRENCY:
            for policy in POLICIES:
                rs = [r for r in runs if r["policy"] == policy and r["concurrency"] == c]
                summary.append(
                    {
                        "policy": policy,
                        "concurrency": c,
                        "reps": len(rs),
                        "requests": sum(r["requests"] for r in rs),
                        "wrong": sum(r["wrong"] for r in rs),
                        "errors": sum(r["errors"] for r in rs),
                        **{k: median([r[k] for r in rs]) for k in ("requests_per_sec", "p50_ms", "p95_ms", "p99_ms")},
                        "requests_per_sec_all": [round(r["requests_per_sec"], 1) for r in rs],
                    }
                )
        bench.results = {"summary": summary, "runs": runs}


if __name__ == "__main__":
    main()
