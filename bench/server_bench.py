#!/usr/bin/env python3
"""Serving: requests/s and latency percentiles for single-instance :predict calls.

Five targets, same model, same request bodies:
  disttrain          disttrain-server with its defaults (gunicorn, 2 workers x 8 threads, compiled model,
                     micro-batching up to 32 instances per model call, no batch timeout)
  disttrain-front    the same server behind its front, as the image and the chart run it (--front nginx:
                     nginx reads each request whole, then passes it to gunicorn on a Unix socket)
  disttrain-nobatch  the same server with --max-batch-size 1: every request makes its own model call
  flask-dev          bench/flask_baseline.py: Flask's development server + model.predict per request (the originals)
  in-process         the server's compiled model called directly in one process, no HTTP (the ceiling),
                     threads as concurrency
The load generator (this process) runs on loopback: C threads, each with its own connection,
share a bounded request count and a time limit; at C = 1, 8, 32 (--concurrency, --only: a subset, for a
short side-by-side run). Each repetition runs every
(concurrency, target) pair in turn. The client shares the 2 cores with the server; its CPU use is recorded.

Per call: in-process latency of one model call for batch 1, 8, 32, eager Keras against the compiled
graph the server uses: why batching and compiling help.
"""

import argparse
import http.client
import json
import os
import resource
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np

from common import BIN, Bench, QUICK, median, reps, run_measured, stop_and_remove, tail, tmpdir
from stages import free_port_block

HERE = os.path.dirname(os.path.abspath(__file__))
PATH = "/v1/models/disttrain:predict"
TEXTS = [
    "a moving, beautifully acted film with a script that never talks down to its audience",
    "tedious, overlong and badly written; the jokes fall flat",
    "an uneven but often charming comedy",
    "the worst movie of the year",
    "a triumph of style over substance, but what style",
    "it is hard to care about any of these characters",
    "funny, warm and surprisingly wise",
    "a mess from start to finish",
]
CONCURRENCY = (1, 8, 32)
SERVER_ARGS = ["--workers", "2", "--threads", "8", "--max-batch-size", "32", "--batch-timeout-ms", "0"]
NOBATCH_ARGS = ["--max-batch-size", "1"]  # replaces SERVER_ARGS' value (see server_args)
FRONT_ARGS = ["--front", "nginx"]
TARGETS = ("disttrain", "disttrain-front", "disttrain-nobatch", "flask-dev", "in-process")


def server_args(extra=()):
    """SERVER_ARGS with the flags in `extra` replacing theirs (each flag once on the command line)."""
    extra = list(extra)
    replaced = set(extra[::2])
    pairs = [SERVER_ARGS[i : i + 2] for i in range(0, len(SERVER_ARGS), 2)]
    return [a for flag, value in pairs if flag not in replaced for a in (flag, value)] + extra


def percentiles(lat_ms):
    if not lat_ms:
        return {"p50_ms": None, "p95_ms": None, "p99_ms": None, "mean_ms": None}
    a = np.asarray(lat_ms)
    return {
        "p50_ms": float(np.percentile(a, 50)),
        "p95_ms": float(np.percentile(a, 95)),
        "p99_ms": float(np.percentile(a, 99)),
        "mean_ms": float(a.mean()),
    }


def run_load(call_factory, concurrency, n_requests, time_limit):
    """C threads share n_requests (stop early at time_limit). call_factory() -> call(i) per thread."""
    lock = threading.Lock()
    state = {"left": n_requests, "errors": 0, "error": None}
    latencies = []
    deadline = time.monotonic() + time_limit

    def worker():
        call = call_factory()
        mine = []
        while time.monotonic() < deadline:
            with lock:
                if state["left"] <= 0:
                    break
                state["left"] -= 1
                i = state["left"]
            t = time.perf_counter()
            try:
                call(i)
                mine.append((time.perf_counter() - t) * 1000)
            except Exception as err:  # noqa: BLE001 - counted and reported
                with lock:
                    state["errors"] += 1
                    state["error"] = repr(err)[:300]
        with lock:
            latencies.extend(mine)

    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    client_cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return {
        "concurrency": concurrency,
        "requests": len(latencies),
        "errors": state["errors"],
        "last_error": state["error"],
        "wall_sec": wall,
        "requests_per_sec": len(latencies) / wall,
        "hit_time_limit": time.monotonic() >= deadline,
        "client_cpu_sec": client_cpu,
        **percentiles(latencies),
    }


def http_factory(port):
    bodies = [json.dumps({"instances": [t]}).encode() for t in TEXTS]

    def factory():
        conn = [None]

        def call(i):
            if conn[0] is None:
                conn[0] = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            c = conn[0]
            try:
                c.request("POST", PATH, body=bodies[i % len(bodies)], headers={"Content-Type": "application/json"})
                resp = c.getresponse()
                data = resp.read()
            except (http.client.HTTPException, OSError):
                c.close()
                conn[0] = None
                raise
            if resp.will_close:  # gunicorn sync workers and the Flask dev server close after each response
                c.close()
                conn[0] = None
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {data[:200]!r}")
            if b"predictions" not in data:
                raise RuntimeError(f"unexpected body {data[:200]!r}")

        return call

    return factory


def wait_http(url, timeout=180, proc=None, log=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"{url}: the server exited {proc.returncode}:\n{tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"{url} not ready after {timeout}s:\n{tail(log)}")


# ------------------------------------------------------------ the in-process child
def inprocess(args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    from disttrain_server.model_store import compiled_call

    model = keras.models.load_model(args.model, compile=False)
    compiled = compiled_call(model)  # exactly what disttrain-server calls
    out = {}
    # 1. what the originals did
    try:
        model.predict(np.array([[TEXTS[0]]]), verbose=0)
        out["numpy_string_predict"] = "works"
    except Exception as err:  # noqa: BLE001 - the point is to record it
        out["numpy_string_predict"] = f"fails: {type(err).__name__}: {str(err).splitlines()[0][:300]}"

    def timed(fn, n):
        for _ in range(20):
            fn()
        ts = []
        for _ in range(n):
            t = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t) * 1000)
        return ts

    n = args.iters
    # 2. per-call cost: model(...) (what disttrain-server does) vs model.predict (the baseline)
    # (interleaved: one call of each in turn, so a change in the machine's load hits both)
    batch1 = tf.constant([[TEXTS[0]]])
    for _ in range(20):
        model(batch1, training=False).numpy()
        model.predict(batch1, verbose=0)
    call, predict = [], []
    for _ in range(max(20, n // 5)):
        t = time.perf_counter()
        model(batch1, training=False).numpy()
        call.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        model.predict(batch1, verbose=0)
        predict.append((time.perf_counter() - t) * 1000)
    out["call_batch1_ms"], out["predict_batch1_ms"] = percentiles(call), percentiles(predict)
    # 3. batching: one call for B instances, eager Keras and the server's compiled graph
    out["batching"] = []
    for b in (1, 8, 32):
        x = np.array([[TEXTS[i % len(TEXTS)]] for i in range(b)], dtype=object)
        row = {"batch": b}
        for name, fn in (
            ("eager", lambda: model(tf.constant(x), training=False).numpy()),
            ("compiled", lambda: compiled(x)),
        ):
            p50 = percentiles(timed(fn, n))["p50_ms"]
            row.update(
                {
                    f"{name}_call_ms": p50,
                    f"{name}_per_instance_ms": p50 / b,
                    f"{name}_instances_per_sec": 1000 * b / p50,
                }
            )
        out["batching"].append(row)
    # 4. the ceiling at each concurrency: C threads calling the compiled model directly
    inputs = [np.array([[t]], dtype=object) for t in TEXTS]

    def factory():
        return lambda i: compiled(inputs[i % len(inputs)])

    out["load"] = [run_load(factory, c, args.requests, args.time_limit) for c in CONCURRENCY]
    print("RESULT " + json.dumps(out), flush=True)


# ------------------------------------------------------------------------ main
def prepare_model(base):
    steps = [
        ["copier", "--source", "sample:movie-reviews", "--n-shards", 1, "--workdir", base],
        ["trainer", "--workdir", base, "--worker-index", 0, "--workers", 1, "--epochs", 2],
        ["aggregator", "--workdir", base, "--expect", 1, "--timeout", 60],
    ]
    for s in steps:
        log = os.path.join(base, f"{s[0]}.log")
        r = run_measured([os.path.join(BIN, f"disttrain-{s[0]}"), *s[1:]], log=log)
        if r["rc"]:
            raise SystemExit(f"{s[0]} failed:\n{tail(log)}")
    return os.path.join(base, "final", "model.keras")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--inprocess-child", action="store_true")
    p.add_argument("--model")
    p.add_argument("--requests", type=int, default=300 if QUICK else 2000)
    p.add_argument("--time-limit", type=float, default=30 if QUICK else 60)
    p.add_argument("--iters", type=int, default=100 if QUICK else 300)
    p.add_argument("--concurrency", default=",".join(map(str, CONCURRENCY)), help="comma-separated (default 1,8,32)")
    p.add_argument(
        "--only", default=",".join(TARGETS), help=f"comma-separated targets (default all: {','.join(TARGETS)})"
    )
    p.add_argument(
        "--result",
        default="server",
        help="the result's name (default server; the front's cost alone: --only disttrain,disttrain-front "
        "--concurrency 32 --result server_front)",
    )
    args = p.parse_args()
    concurrency = tuple(int(c) for c in args.concurrency.split(","))
    only = args.only.split(",")
    if not set(only) <= set(TARGETS):
        p.error(f"--only takes targets among {','.join(TARGETS)}, got {args.only}")
    if args.inprocess_child:
        return inprocess(args)

    n = reps(full=3, quick=1)
    base = tmpdir("server")
    config = {
        "concurrency": concurrency,
        "targets": only,
        "requests_per_point": args.requests,
        "time_limit_sec": args.time_limit,
        "repetitions": n,
        "disttrain_server": " ".join(SERVER_ARGS) + " (the defaults)",
        "disttrain_nobatch": " ".join(server_args(NOBATCH_ARGS)),
        "disttrain_front": " ".join(server_args(FRONT_ARGS)),
        "flask_dev": "bench/flask_baseline.py (Flask development server, threaded, model.predict per request)",
        "model": "movie-reviews text model (1 worker, 2 epochs)",
        "instances_per_request": 1,
    }
    procs = []
    with Bench(args.result, config) as bench:
        try:
            model = prepare_model(base)
            targets = {}
            for name, extra in (
                ("disttrain", []),
                ("disttrain-front", FRONT_ARGS),
                ("disttrain-nobatch", NOBATCH_ARGS),
            ):
                if name not in only:
                    continue
                port, log = free_port_block(1), os.path.join(base, f"{name}.log")
                procs.append(
                    subprocess.Popen(
                        [
                            os.path.join(BIN, "disttrain-server"),
                            "--workdir",
                            base,
                            "--port",
                            str(port),
                            *server_args(extra),
                        ],
                        stdout=open(log, "w"),
                        stderr=subprocess.STDOUT,
                    )
                )
                wait_http(f"http://127.0.0.1:{port}/readyz", proc=procs[-1], log=log)
                targets[name] = http_factory(port)
            if "flask-dev" in only:
                port, log = free_port_block(1), os.path.join(base, "flask.log")
                procs.append(
                    subprocess.Popen(
                        [sys.executable, os.path.join(HERE, "flask_baseline.py"), model, str(port)],
                        stdout=open(log, "w"),
                        stderr=subprocess.STDOUT,
                    )
                )
                wait_http(f"http://127.0.0.1:{port}/healthz", proc=procs[-1], log=log)
                targets["flask-dev"] = http_factory(port)
            for name, factory in targets.items():  # warm up: both gunicorn workers load the model lazily
                w = run_load(factory, 4, 40, 120)
                if w["errors"]:
                    raise SystemExit(f"{name} warm-up failed: {w['last_error']}")
            runs, children = [], []
            for rep in range(n):
                for c in concurrency:
                    for name, factory in targets.items():
                        r = run_load(factory, c, args.requests, args.time_limit)
                        r.update(target=name, rep=rep, loadavg_1min=os.getloadavg()[0])
                        runs.append(r)
                        print(
                            f"  rep {rep + 1}/{n} c={c:<2} {name:<17} {r['requests_per_sec']:7.1f} req/s  p50 {r['p50_ms']:7.1f}  "
                            f"p95 {r['p95_ms']:7.1f}  p99 {r['p99_ms']:7.1f} ms  errors {r['errors']}",
                            file=sys.stderr,
                            flush=True,
                        )
                if "in-process" not in only:
                    continue
                # the in-process ceiling and the batching probe, in a child (no HTTP servers busy meanwhile)
                log_i = os.path.join(base, f"inprocess-{rep}.log")
                r = run_measured(
                    [
                        sys.executable,
                        os.path.abspath(__file__),
                        "--inprocess-child",
                        "--model",
                        model,
                        "--requests",
                        args.requests,
                        "--time-limit",
                        args.time_limit,
                        "--iters",
                        args.iters,
                    ],
                    log=log_i,
                )
                child = next(
                    (json.loads(line[7:]) for line in tail(log_i, 10**6).splitlines() if line.startswith("RESULT ")),
                    None,
                )
                if child is None:
                    raise SystemExit(f"in-process child failed:\n{tail(log_i)}")
                children.append(child)
                for r in child["load"]:
                    runs.append({**r, "target": "in-process", "rep": rep})
                    print(
                        f"  rep {rep + 1}/{n} c={r['concurrency']:<2} {'in-process':<17} {r['requests_per_sec']:7.1f} req/s  "
                        f"p50 {r['p50_ms']:7.1f}  p95 {r['p95_ms']:7.1f}  p99 {r['p99_ms']:7.1f} ms",
                        file=sys.stderr,
                        flush=True,
                    )
        finally:
            stop_and_remove(procs, base)
        summary = []
        for c in concurrency:
            for name in (t for t in TARGETS if t in only):
                rs = [r for r in runs if r["target"] == name and r["concurrency"] == c]
                summary.append(
                    {
                        "target": name,
                        "concurrency": c,
                        "reps": len(rs),
                        "requests": sum(r["requests"] for r in rs),
                        "errors": sum(r["errors"] for r in rs),
                        **{
                            k: median([r[k] for r in rs])
                            for k in ("requests_per_sec", "p50_ms", "p95_ms", "p99_ms", "client_cpu_sec", "wall_sec")
                        },
                        "requests_per_sec_all": [round(r["requests_per_sec"], 1) for r in rs],
                    }
                )
        bench.results = {"summary": summary, "runs": runs}
        if children:
            bench.results["batching"] = [
                {
                    "batch": b["batch"],
                    **{k: median([ch["batching"][i][k] for ch in children]) for k in b if k != "batch"},
                }
                for i, b in enumerate(children[0]["batching"])
            ]
            bench.results["call_vs_predict_batch1"] = {
                "model_call_p50_ms": median([ch["call_batch1_ms"]["p50_ms"] for ch in children]),
                "model_predict_p50_ms": median([ch["predict_batch1_ms"]["p50_ms"] for ch in children]),
            }
            bench.results["numpy_string_predict"] = children[0]["numpy_string_predict"]


if __name__ == "__main__":
    main()
