#!/usr/bin/env python3
"""copier: shard a generated ~1 GB `npz:` dataset; time and peak memory against `cp` of the same bytes.

The input is random uint8 images 32x32x3 (3072 bytes a row) with 10 classes, written to the .npz
chunk by chunk (the generator never holds it in memory either), stored uncompressed like np.savez.
A 1 % input (same shape) is sharded too: if the copier streams, its peak memory does not grow with
the input. Each repetition runs cp, the copier on the big input and the copier on the small one
in turn; the page cache is warm for all of them (the file was just written). Peak memory is the
child's ru_maxrss (os.wait4) plus RssAnon/RssFile sampled every 20 ms: the copier writes its shards
through memory-mapped .npy files, whose pages count in the resident set but are file pages the
kernel writes back and drops, not heap.

BENCH_COPIER_MB sets the input size (default 1024).
"""

import os
import shutil
import sys
import zipfile

import numpy as np

from common import BIN, Bench, command_line, median, reps, run_measured, tail, tmpdir

ROW = (32, 32, 3)


def write_npz(path, rows, seed=0, chunk=16384):
    rng = np.random.default_rng(seed)
    row_bytes = int(np.prod(ROW))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        with zf.open("x.npy", "w", force_zip64=True) as fh:
            np.lib.format.write_array_header_1_0(fh, {"descr": "|u1", "fortran_order": False, "shape": (rows, *ROW)})
            done = 0
            while done < rows:
                n = min(chunk, rows - done)
                fh.write(rng.integers(0, 256, size=n * row_bytes, dtype=np.uint8).tobytes())
                done += n
        with zf.open("y.npy", "w", force_zip64=True) as fh:
            np.lib.format.write_array(fh, rng.integers(0, 10, size=rows, dtype=np.int64), allow_pickle=False)
    return os.path.getsize(path)


def du(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def main():
    n = reps(full=3, quick=1)
    size_mb = int(os.environ.get("BENCH_COPIER_MB", "1024"))
    rows = size_mb * 2**20 // int(np.prod(ROW))
    base = tmpdir("copier")
    config = {
        "rows": rows,
        "row_shape": ROW,
        "dtype": "uint8",
        "n_shards": 2,
        "test_fraction": 0.2,
        "repetitions": n,
        "small_rows": rows // 100,
    }
    with Bench("copier", config) as bench:
        try:
            big, small = os.path.join(base, "big.npz"), os.path.join(base, "small.npz")
            print(f"  generating {rows} rows ({size_mb} MB) ...", file=sys.stderr, flush=True)
            sizes = {"big": write_npz(big, rows), "small": write_npz(small, rows // 100, seed=1)}
            runs = []
            for rep in range(n):
                for name, cmd, out in (
                    ("cp", ["cp", big, os.path.join(base, "copy.npz")], os.path.join(base, "copy.npz")),
                    (
                        "copier",
                        [
                            os.path.join(BIN, "disttrain-copier"),
                            "--source",
                            f"npz:{big}",
                            "--n-shards",
                            2,
                            "--workdir",
                            os.path.join(base, "w-big"),
                        ],
                        os.path.join(base, "w-big"),
                    ),
                    (
                        "copier-1%",
                        [
                            os.path.join(BIN, "disttrain-copier"),
                            "--source",
                            f"npz:{small}",
                            "--n-shards",
                            2,
                            "--workdir",
                            os.path.join(base, "w-small"),
                        ],
                        os.path.join(base, "w-small"),
                    ),
                ):
                    log = os.path.join(base, f"{name}-{rep}.log")
                    r = run_measured(cmd, log=log)
                    if r["rc"]:
                        raise SystemExit(f"{name} failed:\n{tail(log)}")
                    r.update(
                        name=name,
                        rep=rep,
                        input_bytes=sizes["small" if name == "copier-1%" else "big"],
                        output_bytes=du(out),
                    )
                    r["mb_per_sec"] = r["input_bytes"] / 2**20 / r["wall_sec"]
                    runs.append(r)
                    print(
                        f"  rep {rep + 1}/{n} {name:<9} {r['wall_sec']:6.1f}s {r['mb_per_sec']:6.1f} MB/s  max RSS {r['max_rss_mb']:6.0f} MB  "
                        f"(anon {r['peak_anon_mb']:.0f}, file {r['peak_file_mb']:.0f})",
                        file=sys.stderr,
                        flush=True,
                    )
                    shutil.rmtree(out, ignore_errors=True) if os.path.isdir(out) else os.remove(out)
        finally:
            if not os.environ.get("BENCH_KEEP"):
                shutil.rmtree(base, ignore_errors=True)
        summary = []
        for name in ("cp", "copier", "copier-1%"):
            rs = [r for r in runs if r["name"] == name]
            summary.append(
                {
                    "name": name,
                    "reps": len(rs),
                    "input_mb": rs[0]["input_bytes"] / 2**20,
                    "output_mb": rs[0]["output_bytes"] / 2**20,
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
                }
            )
        bench.results = {"summary": summary, "runs": runs}


if __name__ == "__main__":
    command_line(__doc__)
    main()
