#!/usr/bin/env python3
"""copier from object storage: shard a generated ~1 GB numeric CSV table (`table:`) from the local disk
and from SeaweedFS on loopback (`table:s3://...`); wall time, peak memory of the copier, bytes fetched.

Goals: the s3 run within 1.5x the local run's wall time, the copier under 300 MB peak RSS, and the
object fetched once (bytes fetched ~1x its size; the copier reports what it fetched, a test checks
that figure against the bytes a proxy saw on the wire). The table is 32 float features and a label
(two classes), one row id among the features so that no two rows repeat (the copier's leakage check
would refuse the copy). A table is read twice by the copier (count and check, then copy), so an s3://
table is downloaded once to the output volume first: the s3 run's wall time includes that download.
SeaweedFS (`weed mini` from the venv, tests/objectstore.py) runs on the same machine: its CPU use
competes with the copier's, as it would not against a remote store. Both runs read a warm page cache.

--quick (or BENCH_QUICK=1): a 64 MB table, for a fast check. BENCH_OBJECTSTORE_MB sets the size
(default 1024); BENCH_REPS the repetitions (default 1: each pair of runs takes minutes at 1 GB).
"""

import json
import os
import re
import shutil
import sys
import time

import numpy as np

import common
from common import BIN, Bench, command_line, median, reps, run_measured, tail, tmpdir

FEATURES = 32


def write_table(path, size_mb, seed=0):
    """A CSV of about size_mb MB: a row id, FEATURES - 1 random floats, a label; written in chunks."""
    rng = np.random.default_rng(seed)
    pool_rows = 50_000  # formatted once; each written row takes one, behind its own row id
    values = rng.normal(size=(pool_rows, FEATURES - 1))
    pool = [",".join(f"{v:.6g}" for v in row) + f",{'pos' if row[0] + row[1] > 0 else 'neg'}\n" for row in values]
    target = size_mb * 2**20
    with open(path, "w") as fh:
        fh.write(",".join(["row", *(f"f{i}" for i in range(1, FEATURES))]) + ",label\n")
        written, i = 0, 0
        while written < target:
            picks = rng.integers(0, pool_rows, 8192)
            chunk = "".join(f"{i + k}," + pool[p] for k, p in enumerate(picks))
            fh.write(chunk)
            written += len(chunk)
            i += len(picks)
    return os.path.getsize(path), i


def fetched(log):
    found = re.search(r"fetched ([\d,]+) bytes from the object store in (\d+)", tail(log, 100_000))
    return (int(found.group(1).replace(",", "")), int(found.group(2))) if found else (None, None)


def checksums(out):
    with open(os.path.join(out, "data", "manifest.json")) as fh:
        manifest = json.load(fh)
    return [s["sha256"] for s in (*manifest["shards"], manifest["test"])]


def main(quick):
    n = reps(full=1, quick=1)
    size_mb = 64 if quick else int(os.environ.get("BENCH_OBJECTSTORE_MB", "1024"))
    base = tmpdir("objectstore")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
    from objectstore import seaweedfs  # noqa: E402  (tests/ on the path: the tests' store)

    config = {
        "table_mb": size_mb,
        "features": FEATURES,
        "n_shards": 2,
        "test_fraction": 0.2,
        "repetitions": n,
        "store": "SeaweedFS weed mini on loopback (same machine)",
    }
    with Bench("copier_objectstore", config) as bench:
        try:
            table = os.path.join(base, "table.csv")
            print(f"  generating a {size_mb} MB table ...", file=sys.stderr, flush=True)
            size, rows = write_table(table, size_mb)
            config.update(table_bytes=size, rows=rows)
            with seaweedfs(os.path.join(base, "store")) as store:
                bucket = store.make_bucket("bench")
                started = time.monotonic()
                url = store.put(table, f"{bucket}/table.csv")
                config["upload_sec"] = round(time.monotonic() - started, 1)
                runs, sums = [], {}
                for rep in range(n):
                    for name, source, env in (("local", f"table:{table}", None), ("s3", f"table:{url}", store.env())):
                        out, log = os.path.join(base, f"w-{name}"), os.path.join(base, f"{name}-{rep}.log")
                        r = run_measured(
                            [
                                os.path.join(BIN, "disttrain-copier"),
                                "--source",
                                source,
                                "--n-shards",
                                2,
                                "--workdir",
                                out,
                                "--no-stats-plot",
                            ],
                            log=log,
                            env=env,
                            timeout=7200,
                        )
                        if r["rc"]:
                            raise SystemExit(f"copier ({name}) failed:\n{tail(log)}")
                        r.update(name=name, rep=rep)
                        r["fetched_bytes"], r["get_requests"] = fetched(log)
                        r["mb_per_sec"] = size / 2**20 / r["wall_sec"]
                        sums[name] = checksums(out)
                        runs.append(r)
                        read = f", fetched {r['fetched_bytes'] / size:.3f}x the object" if r["fetched_bytes"] else ""
                        print(
                            f"  rep {rep + 1}/{n} {name:<5} {r['wall_sec']:7.1f}s {r['mb_per_sec']:6.1f} MB/s  max RSS "
                            f"{r['max_rss_mb']:5.0f} MB{read}",
                            file=sys.stderr,
                            flush=True,
                        )
                        shutil.rmtree(out, ignore_errors=True)
                if sums["local"] != sums["s3"]:
                    raise SystemExit("the shards from the store differ from the shards from the disk")
        finally:
            if not os.environ.get("BENCH_KEEP"):
                shutil.rmtree(base, ignore_errors=True)
        summary = []
        for name in ("local", "s3"):
            rs = [r for r in runs if r["name"] == name]
            summary.append(
                {
                    "name": name,
                    "reps": len(rs),
                    **{
                        k: median([r[k] for r in rs])
                        for k in (
                            "wall_sec",
                            "mb_per_sec",
                            "max_rss_mb",
                            "peak_anon_mb",
                            "peak_file_mb",
                            "user_sec",
                            "sys_sec",
                        )
                    },
                    "fetched_bytes": rs[0]["fetched_bytes"],
                    "get_requests": rs[0]["get_requests"],
                }
            )
        local, s3 = summary
        goals = {
            "s3_vs_local_wall": s3["wall_sec"] / local["wall_sec"],
            "max_rss_mb": max(local["max_rss_mb"], s3["max_rss_mb"]),
            "fetched_vs_object": s3["fetched_bytes"] / size,
        }
        goals["met"] = {
            "wall within 1.5x": goals["s3_vs_local_wall"] <= 1.5,
            "RSS under 300 MB": goals["max_rss_mb"] < 300,
            "fetched once": goals["fetched_vs_object"] <= 1.01,
        }
        bench.results = {"summary": summary, "goals": goals, "identical_shards": True, "runs": runs}
        print(
            f"  s3/local wall {goals['s3_vs_local_wall']:.2f}x, max RSS {goals['max_rss_mb']:.0f} MB, fetched "
            f"{goals['fetched_vs_object']:.3f}x the object",
            file=sys.stderr,
            flush=True,
        )


if __name__ == "__main__":
    args = command_line(
        __doc__, lambda p: p.add_argument("--quick", action="store_true", help="a 64 MB table (a fast check)")
    )
    if args.quick:
        common.QUICK = True  # the result says quick (provisional), as with BENCH_QUICK=1
    main(common.QUICK)
