#!/usr/bin/env python3
"""What /metrics costs (issue 13's goal: under 3 % of requests/s at concurrency 8).

Two disttrain-servers on the same model with the same flags (bench/server_bench.py's SERVER_ARGS:
gunicorn, 2 workers x 8 threads, micro-batching), one with metrics (the default: every request
counted and timed into prometheus_client's multiprocess files) and one with --no-metrics. Single-
instance :predict calls at concurrency 8 from this process, each point for a fixed time. Each
repetition runs both servers, in alternating order, so a change in the machine's load hits both.
While the metrics server is under load a scraper thread GETs /metrics every SCRAPE_EVERY seconds
(30x the chart's ServiceMonitor interval): the cost measured includes scraping, pessimistically.

Two measures of the cost: requests/s (the goal's), and the servers' own CPU time per request
(gunicorn master and workers, from /proc). The load generator shares the 2 cores, so requests/s
moves with how the scheduler shares them from one point to the next (pairs differed by up to
+-12 % on an idle machine); CPU per request is what metrics add to each request's work, and does
not depend on who else got the cores.
"""

import argparse
import os
import subprocess
import sys
import threading
import time
import urllib.request

from common import BIN, Bench, QUICK, median, process_tree_cpu_sec, reps, stop_and_remove, tmpdir
from server_bench import SERVER_ARGS, http_factory, prepare_model, run_load, wait_http
from stages import free_port_block

CONCURRENCY = 8
SCRAPE_EVERY = 1.0
TARGETS = ("metrics", "no-metrics")
GOAL_PERCENT = 3.0


def scraper(port, stop, timings):
    """GET /metrics every SCRAPE_EVERY seconds until `stop` is set; the milliseconds each took."""
    while not stop.wait(SCRAPE_EVERY):
        started = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
            body = response.read()
        timings.append(((time.perf_counter() - started) * 1000, len(body)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=8 if QUICK else 20, help="length of each load point")
    args = p.parse_args()
    n = reps(full=7, quick=3)  # a difference of a few percent needs several pairs even in quick mode
    base = tmpdir("metrics")
    config = {"concurrency": CONCURRENCY, "seconds_per_point": args.seconds, "repetitions": n,
              "server": " ".join(SERVER_ARGS), "no_metrics": " ".join(SERVER_ARGS + ["--no-metrics"]),
              "scrape_every_sec": SCRAPE_EVERY, "model": "movie-reviews text model (1 worker, 2 epochs)",
              "instances_per_request": 1, "goal_percent": GOAL_PERCENT}
    procs = []
    with Bench("metrics", config) as bench:
        try:
            prepare_model(base)
            ports = {}
            pids = {}
            for name in TARGETS:
                port, log = free_port_block(1), os.path.join(base, f"{name}.log")
                extra = ["--no-metrics"] if name == "no-metrics" else []
                procs.append(subprocess.Popen([os.path.join(BIN, "disttrain-server"), "--workdir", base, "--port", str(port),
                                               *SERVER_ARGS, *extra], stdout=open(log, "w"), stderr=subprocess.STDOUT))
                wait_http(f"http://127.0.0.1:{port}/readyz", proc=procs[-1], log=log)
                ports[name], pids[name] = port, procs[-1].pid
            for name, port in ports.items():  # warm up: both gunicorn workers load the model lazily
                w = run_load(http_factory(port), CONCURRENCY, 400, 120)
                if w["errors"]:
                    raise SystemExit(f"{name} warm-up failed: {w['last_error']}")
            runs, scrapes = [], []
            for rep in range(n):
                order = TARGETS if rep % 2 == 0 else TARGETS[::-1]
                for name in order:
                    stop, timings = threading.Event(), []
                    thread = threading.Thread(target=scraper, args=(ports[name], stop, timings)) if name == "metrics" else None
                    if thread:
                        thread.start()
                    cpu_before = process_tree_cpu_sec(pids[name])
                    r = run_load(http_factory(ports[name]), CONCURRENCY, 10**9, args.seconds)
                    r["server_cpu_ms_per_request"] = 1000 * (process_tree_cpu_sec(pids[name]) - cpu_before) / max(r["requests"], 1)
                    if thread:
                        stop.set()
                        thread.join()
                        scrapes.extend(timings)
                    r.update(target=name, rep=rep, scrapes=len(timings), loadavg_1min=os.getloadavg()[0])
                    runs.append(r)
                    print(f"  rep {rep + 1}/{n} {name:<10} {r['requests_per_sec']:7.1f} req/s  p50 {r['p50_ms']:6.2f}  p99 {r['p99_ms']:6.2f} ms  "
                          f"server CPU {r['server_cpu_ms_per_request']:.3f} ms/request  errors {r['errors']}" + (f"  scrapes {len(timings)}" if thread else ""), file=sys.stderr, flush=True)
                    if r["errors"]:
                        raise SystemExit(f"{name}: {r['errors']} errors, e.g. {r['last_error']}")
        finally:
            stop_and_remove(procs, base)
        rps = {name: [r["requests_per_sec"] for r in runs if r["target"] == name] for name in TARGETS}
        # each repetition's pair, measured back to back: the cost as a share of the no-metrics rate
        pairs = [100 * (off - on) / off for on, off in zip(rps["metrics"], rps["no-metrics"])]
        summary = [{"target": name, "requests_per_sec": median(rps[name]), "requests_per_sec_all": [round(v, 1) for v in rps[name]],
                    **{k: median([r[k] for r in runs if r["target"] == name]) for k in ("p50_ms", "p95_ms", "p99_ms")},
                    "requests": sum(r["requests"] for r in runs if r["target"] == name)} for name in TARGETS]
        cost = 100 * (1 - median(rps["metrics"]) / median(rps["no-metrics"]))
        cpu = {name: [r["server_cpu_ms_per_request"] for r in runs if r["target"] == name] for name in TARGETS}
        cpu_pairs = [100 * (on / off - 1) for on, off in zip(cpu["metrics"], cpu["no-metrics"])]
        for row in summary:
            row["server_cpu_ms_per_request"] = median(cpu[row["target"]])
            row["server_cpu_ms_per_request_all"] = [round(v, 4) for v in cpu[row["target"]]]
        bench.results = {
            "summary": summary,
            "cost_percent_of_medians": cost,
            "cost_percent_per_pair": [round(v, 2) for v in pairs],
            "cost_percent_median_of_pairs": median(pairs),
            "goal_met": median(pairs) < GOAL_PERCENT,
            # the same question asked of the servers' CPU per request (more CPU per request = fewer requests/s on full cores)
            "cpu_cost_percent_per_pair": [round(v, 2) for v in cpu_pairs],
            "cpu_cost_percent_median_of_pairs": median(cpu_pairs),
            "scrape_ms_p50": median([t for t, _ in scrapes]),
            "scrape_bytes": median([b for _, b in scrapes]),
            "scrapes": len(scrapes),
            "runs": runs,
        }
        print(f"  /metrics costs {median(pairs):.2f} % of requests/s at concurrency {CONCURRENCY} (median of {n} pairs: "
              f"{', '.join(f'{v:.1f}' for v in pairs)}); goal < {GOAL_PERCENT} %; server CPU per request +{median(cpu_pairs):.2f} % "
              f"({', '.join(f'{v:.1f}' for v in cpu_pairs)})", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
