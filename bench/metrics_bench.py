#!/usr/bin/env python3
"""What /metrics costs (the goal: under 3 % of requests/s at concurrency 8).

Two disttrain-servers on the same model with the same flags (bench/server_bench.py's SERVER_ARGS:
gunicorn, 2 workers x 8 threads, micro-batching), one with metrics (the default: every request
counted and timed into prometheus_client's multiprocess files) and one with --no-metrics. Single-
instance :predict calls at concurrency 8 from this process, each point 3 s long, the two servers
back to back in alternating order (ABBA), so a change in the machine's speed hits both.

Why short points, many pairs and several sessions: the host's speed drifts by up to 30 % over
tens of seconds (one run of 20-s points saw both servers 25 % slower for 40 s; its 7 pairs ranged
from -5 % to +21 %), so pairs 3 s apart see the same machine. And a pair of server processes has a
speed of its own for its whole life: sessions of the same code on an idle machine cost from 2.9 %
to 11 %, while the A/A check (`--same`: both servers without metrics) gives 0.2 % (-3.3 to 3.3).
So each session starts both servers afresh (which one starts first alternates) and runs --pairs
pairs; the cost is that of all points together (cost_percent), with a 95 % bootstrap interval that
resamples sessions, then pairs within them.
While the metrics server is under load a scraper thread GETs /metrics every SCRAPE_EVERY seconds
of its load time (30 s, the chart's ServiceMonitor interval); `--scrape-every 1` is the pessimistic
case (30x the chart's rate: a scrape holds a worker's GIL for milliseconds while it reads every
worker's files), `--no-scrape` the counting alone.

Two measures of the cost: requests/s (the goal's), and the servers' own CPU time per request
(gunicorn master and workers, from /proc). The load generator shares the 2 cores, so requests/s
moves with how the scheduler shares them from one point to the next; CPU per request is what
metrics add to each request's work, and depends less on who else got the cores (it still moves
with batch sizes: a slower server forms larger micro-batches).
"""

import argparse
import math
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
SCRAPE_EVERY = 30.0  # the chart's metrics.serviceMonitor.interval
TARGETS = ("metrics", "no-metrics")
GOAL_PERCENT = 3.0


def scraper(port, stop, timings, offsets):
    """GET /metrics at each of `offsets` (seconds after the point's start) until `stop` is set; the
    milliseconds each took."""
    started = time.perf_counter()
    for offset in offsets:
        if stop.wait(max(0.0, offset - (time.perf_counter() - started))):
            return
        began = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
            body = response.read()
        timings.append(((time.perf_counter() - began) * 1000, len(body)))


def scrape_offsets(loaded_before, seconds, every):
    """When, within a metrics point, the scrapes fall: every `every` seconds of the metrics server's
    load time (`loaded_before` of it before this point), so the rate is the same whatever the
    length of the points (with every=30 and 3-s points, one point in ten has a scrape)."""
    first, end = math.ceil(loaded_before / every), math.ceil((loaded_before + seconds) / every)
    return [
        k * every - loaded_before for k in range(first, end)
    ]  # the multiples of `every` in [before, before + seconds)


def cost_percent(on, off):
    """What metrics cost over a set of pairs: 100 x (1 - the metrics server's requests/s over all its
    points / the other's), and the same for the servers' CPU per request (their total CPU seconds
    over their total requests). Points are equally long, so a pair in a slow moment weighs as much
    as one in a fast moment, and a lucky point cannot decide the result as it can a median."""
    rps = 100 * (1 - sum(r["requests_per_sec"] for r in on) / sum(r["requests_per_sec"] for r in off))

    def cpu_per_request(runs):
        return sum(r["server_cpu_ms_per_request"] * r["requests"] for r in runs) / sum(r["requests"] for r in runs)

    return rps, 100 * (cpu_per_request(on) / cpu_per_request(off) - 1)


def bootstrap_ci(sessions, draws=4000, seed=0):
    """95 % percentile-bootstrap intervals of cost_percent: resample the sessions, then the pairs
    within each (a session's servers have a speed of their own, so both levels vary). `sessions`:
    per session, (metrics points, no-metrics points) in pair order. Seeded: the same runs give the
    same intervals."""
    import numpy as np

    rng = np.random.default_rng(seed)
    costs = []
    for _ in range(draws):
        on, off = [], []
        for k in rng.integers(0, len(sessions), size=len(sessions)):
            s_on, s_off = sessions[k]
            for i in rng.integers(0, len(s_on), size=len(s_on)):
                on.append(s_on[i])
                off.append(s_off[i])
        costs.append(cost_percent(on, off))
    low, high = np.percentile(np.array(costs), [2.5, 97.5], axis=0)
    return [round(float(low[0]), 2), round(float(high[0]), 2)], [round(float(low[1]), 2), round(float(high[1]), 2)]


def start_servers(base, session, same):
    """Both servers, started in alternating order; {name: (port, pid)} and the processes."""
    ports, procs = {}, []
    for name in TARGETS if session % 2 == 0 else TARGETS[::-1]:
        port, log = free_port_block(1), os.path.join(base, f"{name}-{session}.log")
        extra = ["--no-metrics"] if name == "no-metrics" or same else []
        procs.append(
            subprocess.Popen(
                [os.path.join(BIN, "disttrain-server"), "--workdir", base, "--port", str(port), *SERVER_ARGS, *extra],
                stdout=open(log, "w"),
                stderr=subprocess.STDOUT,
            )
        )
        wait_http(f"http://127.0.0.1:{port}/readyz", proc=procs[-1], log=log)
        ports[name] = (port, procs[-1].pid)
    for name, (port, _) in ports.items():  # warm up: both gunicorn workers load the model lazily
        w = run_load(http_factory(port), CONCURRENCY, 400, 120)
        if w["errors"]:
            raise SystemExit(f"{name} warm-up failed: {w['last_error']}")
    return ports, procs


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=3, help="length of each load point")
    p.add_argument(
        "--sessions", type=int, default=2 if QUICK else 6, help="fresh pairs of servers (BENCH_REPS overrides)"
    )
    p.add_argument("--pairs", type=int, default=6 if QUICK else 12, help="pairs of points per session")
    p.add_argument("--same", action="store_true", help="A/A check: both servers without metrics (no scrapes)")
    p.add_argument("--no-scrape", action="store_true", help="metrics on but never scraped: the counting's cost alone")
    p.add_argument(
        "--scrape-every",
        type=float,
        default=SCRAPE_EVERY,
        help="seconds of load between scrapes of the metrics "
        f"server (default {SCRAPE_EVERY:g}, the chart's ServiceMonitor interval; 1 is the pessimistic case)",
    )
    args = p.parse_args()
    n_sessions = reps(full=args.sessions, quick=args.sessions)
    n = n_sessions * args.pairs
    base = tmpdir("metrics")
    config = {
        "concurrency": CONCURRENCY,
        "seconds_per_point": args.seconds,
        "sessions": n_sessions,
        "pairs_per_session": args.pairs,
        "repetitions": n,
        "a_a_check": args.same,
        "scraped": not (args.same or args.no_scrape),
        "server": " ".join(SERVER_ARGS),
        "no_metrics": " ".join(SERVER_ARGS + ["--no-metrics"]),
        "scrape_every_sec": args.scrape_every,
        "model": "movie-reviews text model (1 worker, 2 epochs)",
        "instances_per_request": 1,
        "goal_percent": GOAL_PERCENT,
    }
    procs = []
    name = (
        "metrics-same"
        if args.same
        else "metrics-unscraped"
        if args.no_scrape
        else "metrics"
        if args.scrape_every == SCRAPE_EVERY
        else f"metrics-scrape-{args.scrape_every:g}s"
    )
    with Bench(name, config) as bench:
        runs, scrapes, sessions, loaded = [], [], [], 0.0
        try:
            prepare_model(base)
            for session in range(n_sessions):
                ports, procs = start_servers(base, session, args.same)
                session_runs = []
                for rep in range(args.pairs):
                    for name in TARGETS if rep % 2 == 0 else TARGETS[::-1]:
                        port, pid = ports[name]
                        stop, timings = threading.Event(), []
                        thread = None
                        if name == "metrics" and not (args.same or args.no_scrape):
                            offsets = scrape_offsets(loaded, args.seconds, args.scrape_every)
                            thread = threading.Thread(target=scraper, args=(port, stop, timings, offsets))
                            thread.start()
                            loaded += args.seconds
                        cpu_before = process_tree_cpu_sec(pid)
                        r = run_load(http_factory(port), CONCURRENCY, 10**9, args.seconds)
                        r["server_cpu_ms_per_request"] = (
                            1000 * (process_tree_cpu_sec(pid) - cpu_before) / max(r["requests"], 1)
                        )
                        if thread:
                            stop.set()
                            thread.join()
                            scrapes.extend(timings)
                        r.update(
                            target=name, session=session, rep=rep, scrapes=len(timings), loadavg_1min=os.getloadavg()[0]
                        )
                        session_runs.append(r)
                        if r["errors"]:
                            raise SystemExit(f"{name}: {r['errors']} errors, e.g. {r['last_error']}")
                    on, off = (next(x for x in session_runs[-2:] if x["target"] == t) for t in TARGETS)
                    print(
                        f"  session {session + 1}/{n_sessions} pair {rep + 1}/{args.pairs}: {on['requests_per_sec']:7.1f} vs "
                        f"{off['requests_per_sec']:7.1f} req/s ({'A vs A' if args.same else 'metrics vs none'}), server CPU "
                        f"{on['server_cpu_ms_per_request']:.3f} vs {off['server_cpu_ms_per_request']:.3f} ms/request, "
                        f"p99 {on['p99_ms']:.2f} vs {off['p99_ms']:.2f} ms",
                        file=sys.stderr,
                        flush=True,
                    )
                stop_and_remove(procs, base, keep=True)
                procs = []
                runs.extend(session_runs)
                sessions.append(tuple([r for r in session_runs if r["target"] == t] for t in TARGETS))
                print(
                    f"  session {session + 1}/{n_sessions}: {cost_percent(*sessions[-1])[0]:.2f} % of requests/s",
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            stop_and_remove(procs, base)
        rps = {name: [r["requests_per_sec"] for r in runs if r["target"] == name] for name in TARGETS}
        # each repetition's pair, measured back to back: the cost as a share of the no-metrics rate
        pairs = [100 * (off - on) / off for on, off in zip(rps["metrics"], rps["no-metrics"])]
        summary = [
            {
                "target": name,
                "requests_per_sec": median(rps[name]),
                "requests_per_sec_all": [round(v, 1) for v in rps[name]],
                **{k: median([r[k] for r in runs if r["target"] == name]) for k in ("p50_ms", "p95_ms", "p99_ms")},
                "requests": sum(r["requests"] for r in runs if r["target"] == name),
            }
            for name in TARGETS
        ]
        cpu = {name: [r["server_cpu_ms_per_request"] for r in runs if r["target"] == name] for name in TARGETS}
        cpu_pairs = [100 * (on / off - 1) for on, off in zip(cpu["metrics"], cpu["no-metrics"])]
        for row in summary:
            row["server_cpu_ms_per_request"] = median(cpu[row["target"]])
            row["server_cpu_ms_per_request_all"] = [round(v, 4) for v in cpu[row["target"]]]
        on, off = ([r for r in runs if r["target"] == name] for name in TARGETS)
        cost, cpu_cost = cost_percent(on, off)
        cost_ci, cpu_cost_ci = bootstrap_ci(sessions)
        bench.results = {
            "summary": summary,
            "cost_percent": cost,  # the goal's number: all points together
            "cost_percent_ci95": cost_ci,
            "goal_met": cost < GOAL_PERCENT,
            "goal_met_by_whole_interval": cost_ci[1] < GOAL_PERCENT,
            "cost_percent_per_pair": [round(v, 2) for v in pairs],
            "cost_percent_median_of_pairs": median(pairs),
            "cost_percent_per_session": [round(cost_percent(*x)[0], 2) for x in sessions],
            # the same question asked of the servers' CPU per request (more CPU per request = fewer requests/s on full cores)
            "cpu_cost_percent": cpu_cost,
            "cpu_cost_percent_ci95": cpu_cost_ci,
            "cpu_cost_percent_per_pair": [round(v, 2) for v in cpu_pairs],
            "cpu_cost_percent_median_of_pairs": median(cpu_pairs),
            "scrape_ms_p50": median([t for t, _ in scrapes]),
            "scrape_bytes": median([b for _, b in scrapes]),
            "scrapes": len(scrapes),
            "runs": runs,
        }
        print(
            f"  {'A/A check: the second server' if args.same else '/metrics'} costs {cost:.2f} % of requests/s at concurrency {CONCURRENCY} "
            f"({n_sessions} sessions x {args.pairs} pairs, 95 % interval "
            f"{cost_ci[0]:.2f} to {cost_ci[1]:.2f}; median of pairs {median(pairs):.2f}); goal < {GOAL_PERCENT} %; "
            f"server CPU per request {cpu_cost:+.2f} % ({cpu_cost_ci[0]:+.2f} to {cpu_cost_ci[1]:+.2f})",
            file=sys.stderr,
            flush=True,
        )


if __name__ == "__main__":
    main()
