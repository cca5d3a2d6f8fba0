#!/usr/bin/env python3
"""Markdown tables from bench/results/*.json, written into docs/benchmarks/results.md (the docs site's
benchmark results page) between the `<!-- results:begin -->` and `<!-- results:end -->` markers (the
text around them is kept). Also printed. `python bench/report.py --print` only prints."""

import os
import sys

from common import BENCH, command_line, load_result
from tta_store import ceiling_time_to_target, row_order, sitting_references, strategy_options

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


def f(v, digits=1):
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def header(doc, title):
    m = doc["machine"]
    v = m["versions"]
    status = f"**PROVISIONAL** ({doc['provisional_reason']})" if doc["provisional"] else "final"
    cpu = m.get("cpu_sec")
    busy = (
        f"other processes used {cpu['other_processes_cores']:.2f} cores on average meanwhile (the benchmark {cpu['benchmark']:.0f} CPU s)"
        if cpu
        else f"1-min load average {m['before']['loadavg_1_5_15'][0]} before, {m['after']['loadavg_1_5_15'][0]} after"
    )
    return (
        f"### {title}\n\n"
        f"{status}. Measured {m['before']['time_utc']} on {m['nproc']} cores ({m['cpu']}); {busy}; took {doc['duration_sec']:.0f} s; "
        f"TensorFlow {v.get('tensorflow-cpu') or v.get('tensorflow')}, Keras {v.get('keras')}, Python {v['python']}. "
        f"Raw: `bench/results/{doc['benchmark']}.json`.\n"
    )


# the training speed goals: (task, strategy, least steady speedup vs plain 1-worker training); accuracy within 1 point
GOALS = [
    ("movie-reviews", "multiworker", 1.3),
    ("digits", "multiworker", 1.0),
    ("movie-reviews", "localsgd", 1.8),
    ("digits", "localsgd", 1.8),
    ("digits-mobilenetv2", "localsgd", 1.8),
    ("movie-reviews", "average", 1.85),
    ("digits", "average", 1.85),
    ("digits-mobilenetv2", "average", 1.85),
]


def goal_rows(rows):
    out = [
        "| goal | measured (steady s/epoch) | epoch cycle | wall time | held-out acc. vs 1 worker | met |",
        "|---|---|---|---|---|---|",
    ]
    for task, strategy, least in GOALS:
        r = next((r for r in rows if (r["task"], r["workers"], r["strategy"]) == (task, 2, strategy)), None)
        if r is None:
            continue
        met = r["speedup_vs_1_worker"] >= least and r["accuracy_vs_1_worker"] >= -0.01
        out.append(
            f"| {task} `{strategy}` >= {least}x, acc. within 1 point | {f(r['speedup_vs_1_worker'], 2)}x | "
            f"{f(r.get('cycle_speedup_vs_1_worker'), 2)}x | {f(r['wall_speedup_vs_1_worker'], 2)}x | {r['accuracy_vs_1_worker'] * 100:+.1f} points | {'yes' if met else '**no**'} |"
        )
    return out


def training(doc):
    out = [header(doc, "Training: plain 1-worker training vs 2 workers of each strategy (`bench/train_scaling.py`)")]
    out.append(
        "Same data and epochs for every row of a task (batch 64 per worker, `--threads 1` per worker); "
        f"median of {doc['config']['repetitions']} repetition(s). s/epoch = steady state (each worker's mean of epochs 2.., "
        "the slower worker's: a mean, so that syncs landing in some epochs only are counted); "
        "examples/s over all workers; speedup = plain 1-worker training's s/epoch (or process wall time) / this row's; "
        "cycle = the same over each epoch's whole cycle (training, held-out evaluation, checkpoint: epoch start to epoch start); "
        "wall = the training stage's processes from start to exit (start-up, cluster join, evaluation, saving).\n"
    )
    out.append(
        "| task | workers | strategy | steps/epoch | s/epoch | 1st epoch s | examples/s | step ms | speedup "
        "| cycle s | cycle speedup | wall s | wall speedup | CPU s (all workers) | final acc. |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in doc["results"]["summary"]:
        out.append(
            f"| {r['task']} | {r['workers']} | {r['strategy']} | {r['steps_per_epoch']} | {f(r['sec_per_epoch'], 2 if r['sec_per_epoch'] >= 0.1 else 3)} | "
            f"{f(r['first_epoch_sec'], 2)} | {f(r['examples_per_sec'], 0)} | {f(r['step_ms'], 1)} | "
            f"{f(r['speedup_vs_1_worker'], 2)}x | {f(r.get('cycle_sec_per_epoch'), 2)} | {f(r.get('cycle_speedup_vs_1_worker'), 2)}x | "
            f"{f(r['process_wall_sec'], 1)} | {f(r['wall_speedup_vs_1_worker'], 2)}x | "
            f"{f(r.get('cpu_sec'), 1)} | {f(r['final_accuracy'], 3)} |"
        )
    out.append("\nThe training speed goals against these numbers:\n")
    out += goal_rows(doc["results"]["summary"])
    if doc["results"].get("sync_every"):
        out.append(
            "\nLocal SGD: choosing H (`--sync-every`) and the wire dtype, movie reviews, 2 workers (80 steps per epoch, "
            "400 in the run: H=400 averages once, at the end):\n"
        )
        out.append(
            "| H (steps between averages) | wire | s/epoch | speedup | cycle speedup | wall speedup | final acc. | vs 1 worker |"
        )
        out.append("|---|---|---|---|---|---|---|---|")
        for r in doc["results"]["sync_every"]:
            out.append(
                f"| {r['sync_every']} | {r['allreduce_dtype']} | {f(r['sec_per_epoch'], 3)} | {f(r['speedup_vs_1_worker'], 2)}x | "
                f"{f(r.get('cycle_speedup_vs_1_worker'), 2)}x | "
                f"{f(r['wall_speedup_vs_1_worker'], 2)}x | {f(r['final_accuracy'], 3)} | {r['accuracy_vs_1_worker'] * 100:+.1f} points |"
            )
    probes = doc["results"].get("collective") or {}
    if any(probes.values()):
        out.append(
            "\nPer-step cost of the collectives (`bench/collective.py`: 2 processes, MultiWorkerMirroredStrategy on loopback, "
            "`--threads 1`; median of 50 calls) next to the measured step times. \"dense all-reduce\": every gradient as a dense "
            "tensor (round 1's step); \"what the step sends\": `collectives.Wire` as the trainer calls it (for the text model the "
            "embedding's touched rows, 1,300 per worker, as one all-gather of tagged rows):\n"
        )
        out.append(
            "| task | parameters | gradients MB | dense all-reduce ms | what the step sends, float32 ms | same, float16 ms "
            "| 1 scalar ms | step ms, 1 worker | step ms, 2 workers multiworker |"
        )
        out.append("|---|---|---|---|---|---|---|---|---|")
        rows = doc["results"]["summary"]
        for task, p in probes.items():
            if not p:
                continue
            s1 = next(r for r in rows if r["task"] == task and r["workers"] == 1 and r["strategy"] == "average")
            s2 = next(r for r in rows if r["task"] == task and r["workers"] == 2 and r["strategy"] == "multiworker")
            out.append(
                f"| {task} | {p['params']:,} | {f(p['gradient_mb'], 2)} | {f(p['allreduce_gradients_ms'], 2)} | "
                f"{f(p.get('wire_float32_ms'), 2)} | {f(p.get('wire_float16_ms'), 2)} | {f(p['allreduce_scalar_ms'], 2)} | "
                f"{f(s1['step_ms'], 1)} | {f(s2['step_ms'], 1)} |"
            )
    return "\n".join(out)


def input_pipeline(doc):
    out = [header(doc, "Why: the input pipeline's CPU, and two processes on two cores (`bench/input_pipeline.py`)")]
    c = doc["config"]
    out.append(
        f"Shard 0 of each task (2 shards), batch {c['batch']}, {c['calls']} calls of {c['steps_per_call']} steps, one intra-op and "
        "one inter-op thread per process (tf.data's own threads come on top); median of "
        f"{c['repetitions']} repetition(s). element-wise = shuffle the examples, then batch (the trainer before); gathered = "
        "shuffle and batch the indices, gather each batch in one op (`data.shuffled_batches`, the trainer now): the same batches. "
        "CPU counts every thread of the process; with 2 processes, the slower one's step.\n"
    )
    out.append(
        "| task | pipeline | pipeline CPU ms/batch | 1 process: step wall ms | step CPU ms | 2 processes: step wall ms | step CPU ms "
        "| throughput of 2 vs 1 |"
    )
    out.append("|---|---|---|---|---|---|---|---|")
    for r in doc["results"]["summary"]:
        out.append(
            f"| {r['task']} | {r['pipeline']} | {f(r['pipeline_cpu_ms_per_batch'], 2)} | {f(r['one_process_wall_ms_per_step'], 2)} | "
            f"{f(r['one_process_cpu_ms_per_step'], 2)} | {f(r['two_processes_wall_ms_per_step'], 2)} | "
            f"{f(r['two_processes_cpu_ms_per_step'], 2)} | {f(r['two_vs_one_throughput'], 2)}x |"
        )
    return "\n".join(out)


def sweep(doc):
    out = [header(doc, "Why: multiworker against the batch per worker (`bench/batch_sweep.py`)")]
    c = doc["config"]
    out.append(
        f"{c['task']}, {c['epochs']} epochs, `multiworker`, `--threads 1`; 1 worker vs 2 workers at the same batch per worker "
        f"(the 2 workers take half the steps, each with an all-reduce). Median of {c['repetitions']} repetition(s).\n"
    )
    out.append(
        "| batch/worker | 1 worker: steps/epoch | step ms | s/epoch | 2 workers: steps/epoch | step ms | s/epoch | speedup "
        "| extra ms per step | CPU s 1 / 2 workers | final acc. 1 / 2 workers |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in doc["results"]["summary"]:
        a, b = r["w1"], r["w2"]
        out.append(
            f"| {r['batch_per_worker']} | {a['steps_per_epoch']:.0f} | {f(a['step_ms'], 1)} | {f(a['sec_per_epoch'], 2)} | "
            f"{b['steps_per_epoch']:.0f} | {f(b['step_ms'], 1)} | {f(b['sec_per_epoch'], 2)} | {f(r['speedup'], 2)}x | "
            f"{f(r['step_overhead_ms'], 1)} | {f(a.get('cpu_sec'), 1)} / {f(b.get('cpu_sec'), 1)} | {f(a['final_accuracy'], 3)} / {f(b['final_accuracy'], 3)} |"
        )
    return "\n".join(out)


def network(doc):
    out = [header(doc, "Training over a shaped network (`bench/network_shaped.py`)")]
    c = doc["config"]
    out.append(
        f"Movie reviews, {c['epochs']} epochs, batch {c['batch_per_worker']}/worker, `--threads 1`; 2 workers in their own network "
        "namespaces joined by a veth pair shaped with `tc tbf` (bandwidth only: `netem` delay is not available here); "
        f"median of {c['repetitions']} repetition(s); speedup against plain 1-worker training on the host.\n"
    )
    out.append("| network | workers | strategy | s/epoch | speedup | wall s | final acc. |")
    out.append("|---|---|---|---|---|---|---|")
    for r in doc["results"]["summary"]:
        out.append(
            f"| {r['network']} | {r['workers']} | {r['strategy']} | {f(r['sec_per_epoch'], 3)} | {f(r['speedup_vs_1_worker'], 2)}x | "
            f"{f(r['process_wall_sec'], 1)} | {f(r['final_accuracy'], 3)} |"
        )
    return "\n".join(out)


def contention(doc):
    out = [header(doc, "Two independent processes, by kind of work (`bench/contention.py`)")]
    out.append(
        "numpy, one thread per process: one process alone, then two started together; the ratio is both "
        "together against one alone (2.00x: the cores are independent for that work).\n"
    )
    out.append("| work | working set | one process | two processes | ratio |")
    out.append("|---|---|---|---|---|")
    for r in doc["results"]["rows"]:
        work = "matmul 96x96 float32 (in cache)" if r["kind"] == "compute" else "Adam-like update, in place"
        size = "-" if r["working_set_mb"] is None else f"{r['working_set_mb']:g} MB"
        out.append(
            f"| {work} | {size} | {f(r['alone'], 2)} {r['unit']} | {f(r['two_processes'], 2)} {r['unit']} | {f(r['ratio'], 2)}x |"
        )
    return "\n".join(out)


def server(doc):
    res = doc["results"]
    title = (
        "Serving behind the front: its cost (`bench/server_bench.py --result server_front`)"
        if doc.get("benchmark") == "server_front"
        else "Serving: single-instance `:predict` (`bench/server_bench.py`)"
    )
    out = [header(doc, title)]
    out.append(
        f"Loopback, {doc['config']['requests_per_point']} requests or {doc['config']['time_limit_sec']:.0f} s per point, "
        f"median of {doc['config']['repetitions']} repetition(s). disttrain = `disttrain-server` {doc['config']['disttrain_server']}; "
        f"disttrain-nobatch = `disttrain-server {doc['config'].get('disttrain_nobatch', '')}` (no micro-batching); "
        + (
            f"disttrain-front = `disttrain-server {doc['config']['disttrain_front']}` (nginx in front, as the image and the chart run it); "
            if "disttrain_front" in doc["config"]
            else ""
        )
        + "flask-dev = `bench/flask_baseline.py` (Flask development server, `model.predict` per request, like the originals); "
        "in-process = the server's compiled model called directly from threads of one process (no HTTP: the ceiling for one process). "
        "The load generator is Python threads on the same 2 cores (its CPU seconds are in the last column). "
        "Fewer requests than asked = the time cap was hit.\n"
    )
    out.append(
        "| concurrency | server | requests/s | requests/s min-max | p50 ms | p95 ms | p99 ms | requests (errors) | client CPU s |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|")
    for r in res["summary"]:
        rps = [
            x["requests_per_sec"]
            for x in res["runs"]
            if x["target"] == r["target"] and x["concurrency"] == r["concurrency"]
        ]
        out.append(
            f"| {r['concurrency']} | {r['target']} | {f(r['requests_per_sec'], 1)} | {f(min(rps), 0)}-{f(max(rps), 0)} | "
            f"{f(r['p50_ms'], 1)} | {f(r['p95_ms'], 1)} | "
            f"{f(r['p99_ms'], 1)} | {r['requests']} ({r['errors']}) | {f(r['client_cpu_sec'], 1)} |"
        )
    front_cost = front_goal(res["summary"])
    if front_cost:
        out.append(front_cost)
    if "call_vs_predict_batch1" not in res:  # a run without the in-process target (--only)
        return "\n".join(out)
    cvp = res["call_vs_predict_batch1"]
    out.append(
        f"\nOne call, batch 1, in-process, the two measured alternately (p50): `model(tf.constant(x))` {f(cvp['model_call_p50_ms'], 2)} ms vs "
        f"`model.predict(tf.constant(x))` {f(cvp['model_predict_p50_ms'], 2)} ms. "
        f"`model.predict(np.array([[text]]))` (the originals' call) in Keras {doc['machine']['versions'].get('keras')}: "
        f"{res['numpy_string_predict']}.\n"
    )
    out.append(
        "One call for B instances, in-process, p50: eager Keras `model(tf.constant(x))` against the compiled graph "
        "the server uses (`disttrain_server.model_store.compiled_call`):\n"
    )
    out.append(
        "| batch | eager ms per call | eager ms per instance | compiled ms per call | compiled ms per instance | compiled instances/s |"
    )
    out.append("|---|---|---|---|---|---|")
    for b in res["batching"]:
        out.append(
            f"| {b['batch']} | {f(b['eager_call_ms'], 2)} | {f(b['eager_per_instance_ms'], 3)} | {f(b['compiled_call_ms'], 2)} | "
            f"{f(b['compiled_per_instance_ms'], 3)} | {f(b['compiled_instances_per_sec'], 0)} |"
        )
    return "\n".join(out)


def front_goal(summary):
    """The front's cost at the highest concurrency both were measured at: its requests/s against the server's
    alone (goal: within 10 %), or None when the run had not both."""
    by = {(r["target"], r["concurrency"]): r["requests_per_sec"] for r in summary}
    shared = sorted(c for t, c in by if t == "disttrain-front" and ("disttrain", c) in by)
    if not shared:
        return None
    c = shared[-1]
    ratio = by[("disttrain-front", c)] / by[("disttrain", c)]
    verdict = (
        "met"
        if ratio >= 0.9
        else "not within 10 %, so the cost is named: nginx's own CPU time per request, on the cores the server "
        "and this load generator share (Operations, the front)"
    )
    return (
        f"\nThe front's cost at concurrency {c}: disttrain-front {f(by[('disttrain-front', c)], 1)} requests/s "
        f"against disttrain's {f(by[('disttrain', c)], 1)}, {100 * (ratio - 1):+.1f} % (goal: within 10 %, or the "
        f"cost named: {verdict}).\n"
    )


def metrics(doc):
    res, c = doc["results"], doc["config"]
    same = c.get("a_a_check")
    if same:
        title = (
            "The A/A check of the `/metrics` benchmark: both servers without metrics (`bench/metrics_bench.py --same`)"
        )
    elif not c.get("scraped", True):
        title = "What counting alone costs: metrics on, never scraped (`bench/metrics_bench.py --no-scrape`)"
    elif c["scrape_every_sec"] < 30:
        title = f"What `/metrics` costs, scraped every {c['scrape_every_sec']:g} s (`bench/metrics_bench.py --scrape-every {c['scrape_every_sec']:g}`)"
    else:
        title = "What `/metrics` costs: `:predict` with and without metrics (`bench/metrics_bench.py`)"
    out = [header(doc, title)]
    if "sessions" in c:  # since 24 Nov 05:30: sessions of fresh servers, short points
        design = (
            f"{c['sessions']} session(s), each starting both servers afresh, of {c['pairs_per_session']} pairs of "
            f"{c['seconds_per_point']:g}-s points (ABBA order)"
        )
    else:
        design = f"{c['repetitions']} pair(s) of {c['seconds_per_point']:g}-s points on one pair of servers"
    out.append(
        f"`disttrain-server {c['server']}` against the same with `--no-metrics`, single-instance `:predict` at concurrency "
        f"{c['concurrency']}: {design}; "
        + (
            f"/metrics is scraped every {c['scrape_every_sec']:g} s of the metrics server's load time. "
            if c.get("scraped", True) and not same
            else "no scrapes. "
        )
        + f"Goal: under {c['goal_percent']:g} % of requests/s.\n"
    )
    out.append(
        "| server | requests/s (median point) | p50 ms | p95 ms | p99 ms | server CPU ms/request (median point) | requests |"
    )
    out.append("|---|---|---|---|---|---|---|")
    for r in res["summary"]:
        out.append(
            f"| {r['target']} | {f(r['requests_per_sec'], 1)} | {f(r['p50_ms'], 2)} | {f(r['p95_ms'], 2)} | {f(r['p99_ms'], 2)} | "
            f"{f(r.get('server_cpu_ms_per_request'), 3)} | {r['requests']} |"
        )
    if "cost_percent" in res:
        low, high = res["cost_percent_ci95"]
        cpu_low, cpu_high = res["cpu_cost_percent_ci95"]
        out.append(
            f"\n**{'Difference (nothing to find: the row named metrics runs without them too)' if same else 'Cost'}: "
            f"{res['cost_percent']:.2f} % of requests/s** (all points together; 95 % bootstrap interval {low:.2f} "
            f"to {high:.2f} %"
            + (
                ""
                if same
                else f"; {'under' if res['goal_met'] else '**not under**'} the goal"
                f"{', the whole interval too' if res.get('goal_met_by_whole_interval') else ''}"
            )
            + "); per session: "
            f"{', '.join(f'{v:+.2f} %' for v in res.get('cost_percent_per_session', []))}; median of the pairs "
            f"{res['cost_percent_median_of_pairs']:+.2f} %. The servers' own CPU per request (gunicorn master and workers): "
            f"{res['cpu_cost_percent']:+.2f} % with metrics ({cpu_low:+.2f} to {cpu_high:+.2f} %). A scrape: "
            f"{f(res['scrape_ms_p50'], 1)} ms p50, {f(res['scrape_bytes'], 0)} bytes ({res['scrapes']} scrapes)."
        )
    else:  # the format of runs before 24 Nov 05:00
        out.append(
            f"\nCost per pair: {', '.join(f'{v:+.1f} %' for v in res['cost_percent_per_pair'])}; median "
            f"{res['cost_percent_median_of_pairs']:+.2f} % ({'under' if res['goal_met'] else '**not under**'} the goal)."
        )
    return "\n".join(out)


def search(doc):
    c = doc["config"]
    out = [
        header(
            doc,
            "Face search under concurrency: one OpenCV cascade per thread, a lock, or shared (`bench/search_bench.py`)",
        )
    ]
    out.append(
        f"`disttrain-server` {c['server']}, gallery of {c['gallery']}, queries {c['queries']}; "
        f"{c['requests_per_point']} requests or {c['time_limit_sec']:.0f} s per point, median of {c['repetitions']} repetition(s). "
        "wrong = answers whose JSON differs in any byte from the serial answer of the same server (or a non-200). "
        "Policies: " + "; ".join(f"{k} = {v}" for k, v in c["policies"].items()) + ".\n"
    )
    out.append("| concurrency | policy | requests/s | requests/s per rep | p50 ms | p95 ms | wrong / requests |")
    out.append("|---|---|---|---|---|---|---|")
    for r in doc["results"]["summary"]:
        out.append(
            f"| {r['concurrency']} | {r['policy']} | {f(r['requests_per_sec'], 1)} | {', '.join(map(str, r['requests_per_sec_all']))} | "
            f"{f(r['p50_ms'], 1)} | {f(r['p95_ms'], 1)} | {r['wrong']} / {r['requests']} |"
        )
    return "\n".join(out)


def copier(doc):
    out = [header(doc, "copier: ~1 GB `npz:` input (`bench/copier_bench.py`)")]
    c = doc["config"]
    out.append(
        f"{c['rows']:,} random uint8 images {'x'.join(map(str, c['row_shape']))}, 2 shards + 20 % test split; `cp` of the same "
        f"file; the copier on a 1 % input ({c['small_rows']:,} rows) for comparison. Median of {c['repetitions']} repetition(s); "
        "warm page cache. Max RSS = `/usr/bin/time` %M; anon / file = peak RssAnon / RssFile sampled every 20 ms "
        "(the copier appends each shard's rows to a buffered .npy file after its header; file pages are the page cache of what it reads and writes).\n"
    )
    out.append("| program | input MB | output MB | wall s | MB/s | max RSS MB | peak anon MB | peak file MB | CPU s |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for r in doc["results"]["summary"]:
        out.append(
            f"| {r['name']} | {f(r['input_mb'], 0)} | {f(r['output_mb'], 0)} | {f(r['wall_sec'], 1)} | {f(r['mb_per_sec'], 1)} | "
            f"{f(r['max_rss_mb'], 0)} | {f(r['peak_anon_mb'], 0)} | {f(r['peak_file_mb'], 0)} | {f(r['user_sec'] + r['sys_sec'], 1)} |"
        )
    return "\n".join(out)


def copier_objectstore(doc):
    out = [
        header(
            doc, "copier from object storage: a ~1 GB CSV table from disk and from S3 (`bench/copier_objectstore.py`)"
        )
    ]
    c, g = doc["config"], doc["results"]["goals"]
    out.append(
        f"`table:` of {c['table_bytes'] / 2**20:,.0f} MB ({c['rows']:,} rows, {c['features']} numeric features and a label), 2 shards + "
        f"20 % test split, from the local disk and from {c['store']} (`table:s3://...`: downloaded once to the output volume, "
        f"then read twice there like a local table). Median of {c['repetitions']} repetition(s); warm page cache; the shards "
        f"of both runs are byte-identical. Max RSS = `/usr/bin/time` %M. Fetched = what the copier reports it fetched from the store.\n"
    )
    out.append("| source | wall s | MB/s | max RSS MB | peak anon MB | CPU s | fetched (x object) | GET requests |")
    out.append("|---|---|---|---|---|---|---|---|")
    for r in doc["results"]["summary"]:
        ratio = f(r["fetched_bytes"] / c["table_bytes"], 3) if r["fetched_bytes"] else "-"
        out.append(
            f"| {r['name']} | {f(r['wall_sec'], 1)} | {f(r['mb_per_sec'], 1)} | {f(r['max_rss_mb'], 0)} | {f(r['peak_anon_mb'], 0)} | "
            f"{f(r['user_sec'] + r['sys_sec'], 1)} | {ratio} | {r['get_requests'] or '-'} |"
        )
    met = g["met"]
    out.append(
        f"\nGoals: s3 within 1.5x of local: {f(g['s3_vs_local_wall'], 2)}x ({'met' if met['wall within 1.5x'] else '**not met**'}); "
        f"peak RSS under 300 MB: {f(g['max_rss_mb'], 0)} MB ({'met' if met['RSS under 300 MB'] else '**not met**'}); "
        f"the object fetched once: {f(g['fetched_vs_object'], 3)}x ({'met' if met['fetched once'] else '**not met**'})."
    )
    return "\n".join(out)


def aggregator(doc):
    res = doc["results"]
    one = res["one_model"]
    out = [header(doc, "aggregator: average 8 models (`bench/aggregator_bench.py`)")]
    out.append(
        f"8 movie-reviews workers x 1 epoch. One model: {one.get('params', 0):,} parameters = {f(one.get('weights_mb'), 1)} MB "
        f"of float32 weights; the `.keras` file is {f(one['model_file_mb'], 1)} MB. "
        f"The baseline row is one process loading and evaluating a single model (TensorFlow's own footprint). "
        f"Median of {doc['config']['repetitions']} repetition(s).\n"
    )
    out.append("| run | wall s | max RSS MB | peak anon MB | CPU s |")
    out.append("|---|---|---|---|---|")
    for r in res["summary"]:
        out.append(
            f"| {r['name']} | {f(r['wall_sec'], 1)} | {f(r['max_rss_mb'], 0)} | {f(r['peak_anon_mb'], 0)} | {f(r['user_sec'] + r['sys_sec'], 1)} |"
        )
    out.append(
        f"\nThe 8 models add {f(res['extra_rss_for_8_models_mb'], 0)} MB of peak RSS over one "
        f"({f(res['extra_rss_for_8_models_mb'] / 7, 0)} MB per extra model, vs {f(one.get('weights_mb'), 1)} MB of weights each). "
        f"Final accuracy of the 8-way average: {f(res['final_accuracy'], 3)} "
        f"(workers {min(res['worker_accuracy']):.3f}-{max(res['worker_accuracy']):.3f}; 1 epoch on 1/8 of the data each, "
        "so near chance: this run measures the aggregator, not the model)."
    )
    return "\n".join(out)


def progress(doc):
    c, res = doc["config"], doc["results"]["summary"]
    out = [header(doc, "Live progress: the cost of progress.json (`bench/progress_overhead.py`)")]
    out.append(
        f"One `average` worker on digits, {c['epochs']} epochs, batch {c['batch']}, with `--progress-interval "
        f"{c['interval_sec']:g}` (the default) and 0 (no file), alternating, median of {c['repetitions']} repetition(s) each. "
        "Training = the epochs' steps (metrics.json wall_time_sec, where the writes happen); cycle = plus each epoch's "
        "evaluation, checkpoint and end-of-epoch write; process = the whole trainer process. Goal: under 1 %.\n"
    )
    out.append("| time | with progress s (min-max) | without s (min-max) | cost |")
    out.append("|---|---|---|---|")
    for key, name in (("training_sec", "training"), ("cycle_sec", "cycle"), ("process_wall_sec", "process")):
        r = res[key]
        out.append(
            f"| {name} | {f(r['on'], 2)} ({f(r['on_min_max'][0], 2)}-{f(r['on_min_max'][1], 2)}) | "
            f"{f(r['off'], 2)} ({f(r['off_min_max'][0], 2)}-{f(r['off_min_max'][1], 2)}) | {r['cost_pct']:+.2f} % |"
        )
    out.append(
        f"\nOne write of the run's final progress.json ({res['progress_file_bytes']:,} bytes; temporary file, then rename; no fsync) "
        f"takes {f(res['one_write_ms'], 3)} ms (median of {c['one_write_samples']}); a run made {res['writes_per_run']:g} writes: "
        f"{res['writes_cost_pct']:.3f} % of its cycle time. With an fsync before the rename (which the trainer skips: "
        f"the file is outdated a second later) one write took {f(res.get('one_write_with_fsync_ms'), 3)} ms."
    )
    if doc["provisional"]:
        out.append(
            "\nOn a busy machine the end-to-end rows measure the other processes' load, which changed several-fold "
            "between runs (with and without ran in turn, but one run lasts minutes); the one-write time is the "
            "figure to read until a run on an idle machine."
        )
    return "\n".join(out)


def malloc_settings(doc):
    c, res = doc["config"], doc["results"]["summary"]
    variants = list(c["variants"])

    def described(variant):
        setting = c["variants"][variant]
        return (
            f"{variant} (`--malloc {setting['malloc']}`"
            + "".join(f", `{k}={v}`" for k, v in setting["environment"].items())
            + ")"
        )

    out = [header(doc, "malloc settings: the trainer's against glibc's defaults (`bench/malloc_settings.py`)")]
    out.append(
        "Each configuration with one thread per process, run as "
        + "; ".join(described(v) for v in variants)
        + f", one after the other, median of {c['repetitions']} repetition(s) each; steady seconds per epoch "
        "(epochs 2.., the slower worker). Goal: tuned no slower than either other by more than 3 %.\n"
    )
    out.append(
        "| configuration | "
        + " | ".join(f"{v} s/epoch (each run)" for v in variants)
        + " | "
        + " | ".join(f"tuned against {v}" for v in variants[1:])
        + " |"
    )
    out.append("|---|" + "---|" * (2 * len(variants) - 1))
    for name, r in res.items():
        cells = [f"{f(r['sec_per_epoch'][v], 2)} ({', '.join(f(x, 2) for x in r['runs'][v])})" for v in variants]
        changes = [f"{r['tuned_change_pct'][v]:+.1f} %" for v in variants[1:]]
        out.append(f"| {name} | " + " | ".join(cells + changes) + " |")
    out += [f"\n{note}" for note in doc.get("notes") or []]
    return "\n".join(out)


def combine(doc):
    out = [
        header(doc, "aggregator --combine: average, ensemble and best on the held-out split (`bench/combine_bench.py`)")
    ]
    c = doc["config"]
    out.append(
        f"`{c['strategy']}` strategy, seed {c['seed']}, batch {c['batch']}, epochs "
        + ", ".join(f"{task} {n}" for task, n in c["epochs"].items())
        + f"; every run's trainers keep `--validation-fraction {c['validation_fraction']}` of their shard, so all three "
        "candidates are trained on the same examples; one run per row. best = the worker with the highest validation "
        "accuracy (never the held-out split). Latency: "
        + (doc["results"]["runs"][0]["latency_method"] if doc["results"]["runs"] else "-")
        + ".\n"
    )
    out.append(
        "| task | workers | held-out | average | ensemble | best (worker, validation acc.) | workers alone "
        "| latency ms/instance: average / ensemble / best | forward passes: average / ensemble / best |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|")
    for r in doc["results"]["runs"]:
        cand = r["candidates"]
        top = max(v["test_accuracy"] for v in cand.values() if "test_accuracy" in v)

        def acc(name):
            v = cand.get(name) or {}
            if "test_accuracy" not in v:
                return "-"
            text = f"{v['test_accuracy']:.4f}"
            return f"**{text}**" if v["test_accuracy"] == top else text

        best = cand.get("best") or {}
        best_cell = acc("best") + (
            f" ({best['worker_index']}, {best['validation_accuracy']:.3f})" if "worker_index" in best else ""
        )
        out.append(
            f"| {r['task']} | {r['workers']} | {r['test_examples']:,} | {acc('average')} | {acc('ensemble')} | {best_cell} | "
            f"{', '.join(f'{a:.4f}' for a in r['workers_test_accuracy'])} | "
            + " / ".join(
                f(cand[n].get("latency_ms_per_instance") if n in cand else None, 2)
                for n in ("average", "ensemble", "best")
            )
            + " | "
            + " / ".join(
                str(cand[n].get("forward_passes", "-")) if n in cand else "-" for n in ("average", "ensemble", "best")
            )
            + " |"
        )
    return "\n".join(out)


def task_interface(doc):
    out = [
        header(
            doc,
            "The built-in tasks through the task registry, against the trainer before it (`bench/task_interface.py`)",
        )
    ]
    c = doc["config"]
    out.append(
        f"1 worker, `--threads {c['threads']}`, the same seed and data, {c['repetitions']} repetition(s) of each side in "
        "turns; before = the trainer before the task registry (its `task ==` branches; the revision is in the raw file), "
        "after = the trainer with it. "
        "Goals: s/epoch within 5 %, the same held-out accuracy.\n"
    )
    return "\n".join(out + before_after_rows(doc))


def strategy_refactor(doc):
    out = [
        header(
            doc,
            "Every strategy through its registry entry, its package and TrainConfig, against the trainer before "
            "them (`bench/strategy_refactor.py`)",
        )
    ]
    c = doc["config"]
    out.append(
        f"{c.get('source', 'sample:digits')} in 2 shards, 2 workers (parameterserver: the chief, 1 parameter server and 2 workers), "
        f"{c['epochs']} epochs, batch {c['batch']}, `--threads {c['threads']}`, {c['repetitions']} repetition(s) "
        "of each side in turns; worker 0's steady s/epoch and last held-out accuracy; before = the trainer before "
        "the strategy registry (the revision is in the raw file). Goals: s/epoch within 5 %, the same final "
        "weights for every strategy but parameterserver (asynchronous), its accuracy within its spread.\n"
    )
    return "\n".join(out + before_after_rows(doc))


def dp_off(doc):
    out = [header(doc, "Differential privacy's code when it is off, against the trainer before it (`bench/dp_off.py`)")]
    c = doc["config"]
    out.append(
        f"1 worker, `--threads {c['threads']}`, no `--dp-*` flags, the same seed and data, {c['repetitions']} "
        "repetition(s) of each side in turns; before = the trainer before DP-SGD (the revision is in the raw file), "
        "after = the trainer with it. Goals: the same final weights, s/epoch within noise.\n"
    )
    return "\n".join(out + before_after_rows(doc))


def before_after_rows(doc):
    out = []
    out.append(
        "| task | s/epoch before | s/epoch after | after / before | held-out accuracy before | after | same final weights |"
    )
    out.append("|---|---|---|---|---|---|---|")
    for task, r in doc["results"].items():
        out.append(
            f"| {task} | {f(r['epoch_sec_before'], 3)} | {f(r['epoch_sec_after'], 3)} | {r['ratio']:.3f} | "
            f"{f(r['test_accuracy_before'], 4)} | {f(r['test_accuracy_after'], 4)} | {'yes' if r['same_weights'] else 'no'} |"
        )
    return out


def dp_utility(doc):
    out = [
        header(
            doc,
            "Differential privacy: held-out accuracy against ε, and the per-example gradients' step time (`bench/dp_utility.py`)",
        )
    ]
    c = doc["config"]
    out.append(
        f"2 workers (`{c['strategy']}`), clip norm {c['l2_clip']}, δ = {c['delta']:g}, Poisson sampling; the noise "
        "multiplier of each ε found on the trainer's own accountant (dp-accounting, RDP); the final model's held-out "
        "accuracy. Plot: `bench/plots/dp_utility.png`.\n"
    )
    out.append(
        "| task | epochs | batch | target ε | noise multiplier | reported ε (total) | held-out accuracy (mean; range "
        "of the runs) |"
    )
    out.append("|---|---|---|---|---|---|---|")
    for r in doc["results"]["utility"]:
        target = "no DP-SGD" if r["target_epsilon"] is None else f"{r['target_epsilon']:g}"
        runs = r.get("test_accuracy_runs") or [r["test_accuracy"]]
        spread = f" ({min(runs):.3f}-{max(runs):.3f}, {len(runs)} runs)" if len(runs) > 1 else ""
        out.append(
            f"| {r['task']} | {r['epochs']} | {r['batch']} | {target} | {f(r['noise_multiplier'], 3)} | "
            f"{f(r['epsilon'], 2)} | {r['test_accuracy']:.4f}{spread} |"
        )
    out.append("")
    out.append(
        f"| model | step (batch {c['step_batch']}, {c['timed_steps']} timed steps) | ms per step | x the ordinary step |"
    )
    out.append("|---|---|---|---|")
    ordinary = {r["model"]: r["ms_per_step"] for r in doc["results"]["step_time"] if r["variant"] == "ordinary step"}
    for r in doc["results"]["step_time"]:
        out.append(
            f"| {r['model']} | {r['variant']} | {r['ms_per_step']:.1f} | {r['ms_per_step'] / ordinary[r['model']]:.1f} |"
        )
    return "\n".join(out)


def own_model(doc):
    """The own-model rows beside their goals; a result of the earlier layout (a table per dataset, breast cancer and
    diabetes through each strategy) is rendered as it was."""
    out = [header(doc, "Your own model through the pipeline against plain `model.fit` (`bench/own_model.py`)")]
    r = doc["results"]
    if "tables" not in r:
        return "\n".join(out + own_model_earlier(doc))
    c = doc["config"]
    shape = ", ".join(f"{k} {v['batch_per_worker']} x {v['epoch_factor']}" for k, v in c["run_shape"].items())
    out.append(
        f"{c['seeds']} seed(s) (initial weights) per model; 2 workers per strategy against Keras' `model.fit` of the "
        f"same compiled file (one process, every training row, batch {c['fit_batch']}), at fit's global batch and "
        f"optimizer steps (batch per worker x fit's epochs: {shape}); fit's epochs: "
        + ", ".join(f"{k} {v}" for k, v in c["fit_epochs"].items())
        + ". Published model's held-out metric, mean +- standard deviation over the seeds; its difference from "
        "fit's mean; met: no worse than fit by more than the goal's margin (1 accuracy point, 3 % of RMSE), where fit "
        "beats the trivial predictor clearly (by 5 accuracy points, or an RMSE 10 % below its).\n"
    )
    for note in doc.get("notes") or []:
        out.append(f"Note: {note}.\n")
    out.append("| data | held-out rows | trivial predictor |")
    out.append("|---|---|---|")
    for name, t in r["tables"].items():
        out.append(f"| {name} | {t['held_out']:,} | {t['metric']} {t['value']:.4f} |")
    out.append("")
    out.append("| part | model | run | metric | mean +- sd over seeds | difference from fit | goal | met |")
    out.append("|---|---|---|---|---|---|---|---|")
    parts = (("accuracy", "1 point"), ("regression", "3 %"), ("images", "1 point"))
    for part, goal in parts:
        models = r.get(part) or {}
        if part == "regression":
            models = {"MLP, Adam(1e-2), diabetes": models}
        for model, rows in models.items():
            for name, row in rows.items():
                fit = name == "fit"
                diff = "-" if fit else f"{row['difference_from_fit']:+.2f} {row['difference_unit']}"
                if fit:
                    met = "-"
                elif not row.get("goal_applies", True):
                    met = "n/a (fit at the trivial predictor)"
                else:
                    met = "yes" if row["met"] else "**no**"
                out.append(
                    f"| {part} | {model} | {name} | {row['metric']} | {row['mean']:.4f} +- {row['sd']:.4f} | {diff} | "
                    f"{'-' if fit else goal} | {met} |"
                )
    if "step_time" in r:
        out += ["", *own_model_step_time(r["step_time"])]
    return "\n".join(out)


def own_model_step_time(st):
    sec = st["epoch_sec"]
    own, adam = sec["file's optimizer"], sec["trainer's Adam"]
    runs = len(next(iter(st["runs"].values())))
    out = [
        f"Step time: the AdamW + CosineDecay + clipnorm file on the generated table, one worker, `--threads 1`, batch "
        f"32, {st['steps_per_epoch']} steps an epoch; steady s/epoch (the mean of epochs 2..), median of {runs} run(s) "
        "of each side in turns.\n",
        "| run | s/epoch | file's optimizer / this | goal | met |",
        "|---|---|---|---|---|",
        f"| trainer, the file's optimizer (AdamW, clipnorm) | {own:.3f} | - | - | - |",
        f"| trainer, its Adam (`--optimizer adam`) | {adam:.3f} | "
        f"{st['ratio_to_trainers_adam']:.3f} | <= 1.05 | {'yes' if st['met_trainers_adam'] else '**no**'} |",
        f"| Keras `model.fit`, one process | {sec['fit']:.3f} | {st['ratio_to_fit']:.3f} | <= 1.10 | "
        f"{'yes' if st['met_fit'] else '**no**'} |",
    ]
    return out


def own_model_earlier(doc):
    c = doc["config"]
    factor = c.get("epoch_factor") or {}
    out = [
        f"{c['seeds']} seeds (initial weights) per table, {c['workers']} workers per strategy, the batch of `fit` (one "
        "process, every training row) and as many optimizer steps per model: epochs x "
        + ", ".join(f"{k} {v}" for k, v in factor.items())
        + " of fit's. Held-out metric: mean +- standard deviation "
        "over the seeds; difference of the mean from fit's (goals: within 1 point of accuracy, within 5 % of RMSE).\n"
    ]
    out.append("| table | run | metric | mean +- sd over seeds | difference from fit |")
    out.append("|---|---|---|---|---|")
    for table, rows in doc["results"].items():
        for name, r in rows.items():
            diff = "-" if name == "fit" else f"{r['difference_from_fit']:+.2f} {r['difference_unit']}"
            out.append(f"| {table} | {name} | {r['metric']} | {r['mean']:.4f} +- {r['sd']:.4f} | {diff} |")
    return out


def preemption(doc):
    c = doc["config"]
    out = [header(doc, "SIGTERM to exit of a training worker (`bench/preemption.py`)")]
    out.append(
        f"Batch {c['batch']}, {c['steps_per_call']} steps per call (the chart's defaults); SIGTERM to worker 0 a "
        "random part of an epoch after it entered epoch 3; seconds until every worker of the run had exited "
        f"(`average`: one process, `multiworker`: a pair), {c['runs']} runs each. The chart's "
        "`trainer.terminationGracePeriodSeconds` must cover the slowest with a margin.\n"
    )
    out.append("| model | strategy | exited 75 | median s | max s | steps from the signal to the stop (max) |")
    out.append("|---|---|---|---|---|---|")
    for key, r in doc["results"].items():
        model, strategy = key.split("/")
        steps = [
            run["stopped_at_step"] - run["step_at_signal"]
            for run in r["runs"]
            if run.get("stopped_at_step") is not None
        ]
        out.append(
            f"| {model} | `{strategy}` | {r['ok']}/{len(r['runs'])} | {f(r['median_sec'], 2)} | {f(r['max_sec'], 2)} | "
            f"{max(steps, default='-')} |"
        )
    return "\n".join(out)


def time_to_accuracy(doc):
    """The time-to-accuracy rows: this file has no single run's header (its rows are written one by one,
    over several sessions), so each row says whether it was measured on a quiet host."""
    m = doc["machine"]
    rows = doc["rows"]
    provisional = sum(1 for r in rows if r.get("provisional"))
    out = ["### Time to accuracy (`bench/time_to_accuracy.py`)\n"]
    out.append(
        f"{'**PROVISIONAL**: ' + str(provisional) + ' of ' + str(len(rows)) + ' rows quick or measured while other processes were busy. ' if provisional else ''}"
        f"{m.get('nproc')} cores ({m.get('cpu')}); TensorFlow {m['versions'].get('tensorflow-cpu') or m['versions'].get('tensorflow')}. "
        "Time to target: from the trainer processes' start until the chief's held-out metric (after an epoch) first "
        "reaches the target, start-up, evaluations and syncs included; `average`: until the aggregator has "
        "evaluated the averaged model. Speedup: 1 worker's time to target / the row's. s/epoch: steady state "
        "(epochs 2.., the slower worker). Of ceiling: the row's throughput against the ceiling's (two independent "
        "1-worker processes: 2 x their epoch's data in the ceiling's s/epoch), ceiling s/epoch / (2 x the row's). "
        "Of ceiling time: the ceiling's time to the target over the row's; the ceiling's time is measured, not derived: "
        "when the slower of `average`'s two workers (never talking, each on half the data) had evaluated the epoch at "
        "which 1 worker reached the target, start-up and evaluations included (the task's line below). "
        "Raw: `bench/results/time_to_accuracy.json`.\n"
    )
    if os.path.exists(os.path.join(BENCH, "plots", "time_to_accuracy.png")):
        out.append("![Time to accuracy per task and link](../assets/bench/time_to_accuracy.png)\n")
    return "\n".join(out + time_to_accuracy_rows(rows, doc.get("earlier_rows") or []))


def outer_overlap(doc):
    """DiLoCo with and without eager updates, side by side: rows of the time-to-accuracy plan run in one
    sitting (time_to_accuracy.py --only ... --results bench/results/outer_overlap.json)."""
    m = doc["machine"]
    out = [
        "### Overlapped syncs side by side (`bench/time_to_accuracy.py --results bench/results/outer_overlap.json`)\n",
        f"{m.get('nproc')} cores ({m.get('cpu')}); TensorFlow {m['versions'].get('tensorflow-cpu') or m['versions'].get('tensorflow')}. "
        "DiLoCo's rows with and without `--outer-overlap eager`, run one after the other in one sitting; the columns "
        "as in the time-to-accuracy table above (no 1-worker or ceiling row was run with them: no speedup). "
        "Raw: `bench/results/outer_overlap.json`.\n",
    ]
    return "\n".join(out + time_to_accuracy_rows(doc["rows"]))


def time_to_accuracy_rows(rows, earlier=()):
    """The table of time-to-accuracy rows (its ceiling lines first, for the tasks that have a ceiling). A row's
    speedup and shares of the ceiling are against the 1-worker and ceiling rows of its own sitting where
    that sitting measured them (they may since have been measured again: `earlier`, the file's earlier_rows),
    else against the current ones: ratios are read within a sitting."""
    out = []
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    ceilings = {task: ceiling_time_to_target(rows, task) for task in tasks}

    def references(r):
        """(1-worker row, ceiling row, ceiling's time to target) for row r."""
        return sitting_references(r["task"], r.get("sitting"), rows, earlier) or (
            next((x for x in rows if x["task"] == r["task"] and x["strategy"] == "single"), None),
            next((x for x in rows if x["task"] == r["task"] and x["strategy"] == "ceiling"), None),
            ceilings[r["task"]],
        )

    for task, ceiling in ceilings.items():
        if ceiling:
            out.append(
                f"- {task}: the ceiling's time to the target {ceiling[0]:.1f} s (`average`'s workers at epoch {ceiling[1]})"
            )
    out.append("")
    out.append(
        "| task | link | workers | strategy | options | target | time to target s | speedup | s/epoch | of ceiling | of ceiling time "
        "| final | epochs | status |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (tasks.index(r["task"]), row_order(r))):
        single, ceiling, ceiling_time = references(r)
        speedup = (
            f"{single['time_to_target_seconds'] / r['time_to_target_seconds']:.2f}x"
            if single and single.get("reached") and r.get("reached")
            else "-"
        )
        options = ", ".join(f"{k}={v}" for k, v in strategy_options(r["options"]).items()) or "-"
        of_ceiling = (
            f"{ceiling['seconds_per_epoch'] / (2 * r['seconds_per_epoch']) * 100:.0f} %"
            if ceiling
            and ceiling.get("seconds_per_epoch")
            and r.get("seconds_per_epoch")
            and r["workers"] == 2
            and r["strategy"] != "ceiling"
            else "-"
        )
        of_ceiling_time = (
            f"{ceiling_time[0] / r['time_to_target_seconds'] * 100:.0f} %"
            if ceiling_time and r.get("reached") and r["workers"] == 2 and r["strategy"] not in ("ceiling", "average")
            else "-"
        )
        out.append(
            f"| {r['task']} | {r['link']} | {r['workers']} | {r['strategy']} | {options} | {r['target']} | "
            f"{f(r.get('time_to_target_seconds'), 1)} | {speedup} | {f(r.get('seconds_per_epoch'), 2)} | {of_ceiling} | {of_ceiling_time} | "
            f"{f(r.get('final_metric'), 3)} | {r.get('epochs', '-')} | {r['status']}{' (provisional)' if r.get('provisional') else ''} |"
        )
    return out


def tables():
    parts = []
    for name, fn in (
        ("contention", contention),
        ("train_scaling", training),
        ("network_shaped", network),
        ("input_pipeline", input_pipeline),
        ("batch_sweep", sweep),
        ("server", server),
        ("server_front", server),
        ("metrics", metrics),
        ("metrics-same", metrics),
        ("search", search),
        ("copier", copier),
        ("copier_objectstore", copier_objectstore),
        ("aggregator", aggregator),
        ("combine", combine),
        ("progress_overhead", progress),
        ("malloc_settings", malloc_settings),
        ("task_interface", task_interface),
        ("strategy_refactor", strategy_refactor),
        ("strategy_refactor_text", strategy_refactor),
        ("dp_off", dp_off),
        ("dp_utility", dp_utility),
        ("own_model", own_model),
        ("preemption", preemption),
        ("time_to_accuracy", time_to_accuracy),
        ("outer_overlap", outer_overlap),
    ):
        doc = load_result(name)
        if doc is not None:
            parts.append(fn(doc))
    return "\n\n".join(parts)


def main():
    text = tables()
    print(text)
    if "--print" in sys.argv:
        return
    readme = os.path.join(BENCH, "..", "docs", "benchmarks", "results.md")
    with open(readme) as fh:
        current = fh.read()
    if BEGIN not in current or END not in current:
        raise SystemExit(f"{readme} has no {BEGIN} ... {END} markers")
    head, rest = current.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    with open(readme + ".tmp", "w") as fh:
        fh.write(f"{head}{BEGIN}\n{text}\n{END}{tail}")
    os.replace(readme + ".tmp", readme)


if __name__ == "__main__":
    command_line(
        __doc__,
        lambda parser: parser.add_argument(
            "--print", action="store_true", help="print the tables only; bench/README.md is left alone"
        ),
    )
    main()
