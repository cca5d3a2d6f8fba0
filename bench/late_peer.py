"""Start-up race: N multiworker pairs in which worker 1 starts DELAY seconds after worker 0.

The goal: 0 start-up failures in 20 runs where one worker starts 30 s late. Each pair
trains sample:digits for 1 epoch on its own ports and output folder; CONCURRENT pairs run at
once (the waiting is idle, so they share 2 cores well). Prints each run's wait and the failure
count; writes bench/results/late_peer.json; exits 1 if any run failed.

    .venv/bin/python bench/late_peer.py [--runs 20] [--delay 30] [--concurrent 4]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

BENCH = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("BENCH_BIN") or os.path.dirname(sys.executable)
sys.path.insert(0, os.path.join(BENCH, "..", "tests"))

from stages import free_port_block  # noqa: E402


def late_pair(work, delay, epochs=1, peer_wait=600, source="sample:digits", extra=()):
    """copier (2 shards) -> worker 0 now, worker 1 `delay` s later. Returns
    {"ok", "exit_codes", "seconds", "waiting_lines", "wait_seconds"}; logs in work/worker-{i}.log."""
    subprocess.run(
        [os.path.join(BIN, "disttrain-copier"), "--source", source, "--n-shards", "2", "--workdir", work],
        check=True,
        capture_output=True,
    )
    port = free_port_block(2)
    procs, logs = [], [os.path.join(work, f"worker-{i}.log") for i in range(2)]
    started = time.monotonic()
    for i in range(2):
        if i:
            time.sleep(delay)
        procs.append(
            subprocess.Popen(
                [
                    os.path.join(BIN, "disttrain-trainer"),
                    "--workdir",
                    work,
                    "--strategy",
                    "multiworker",
                    "--workers",
                    "2",
                    "--worker-index",
                    str(i),
                    "--epochs",
                    str(epochs),
                    "--port",
                    str(port),
                    "--peer-wait",
                    str(peer_wait),
                    *extra,
                ],
                stdout=open(logs[i], "w"),
                stderr=subprocess.STDOUT,
            )
        )
    codes = [p.wait(timeout=peer_wait + 900) for p in procs]
    text = open(logs[0]).read()
    waits = [int(m) for m in re.findall(r"waiting for worker 1 \(.*\), (\d+) s of", text)]
    return {
        "ok": codes == [0, 0],
        "exit_codes": codes,
        "seconds": round(time.monotonic() - started, 1),
        "waiting_lines": len(waits),
        "wait_seconds": max(waits, default=0),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--delay", type=float, default=30)
    p.add_argument("--concurrent", type=int, default=4)
    args = p.parse_args()
    root = tempfile.mkdtemp(prefix="late-peer-")
    started = time.monotonic()

    def one(n):
        result = late_pair(os.path.join(root, f"run-{n:02d}"), args.delay)
        print(
            f"run {n:2d}: {'ok' if result['ok'] else 'FAILED'} exit codes {result['exit_codes']}, "
            f"{result['seconds']:.0f} s, worker 0's last waiting line at {result['wait_seconds']} s",
            flush=True,
        )
        return result

    with ThreadPoolExecutor(args.concurrent) as pool:
        results = list(pool.map(one, range(args.runs)))
    failures = sum(not r["ok"] for r in results)
    wall = time.monotonic() - started
    print(
        f"{failures} start-up failures in {args.runs} runs (worker 1 {args.delay:g} s late); wall {wall:.0f} s; logs in {root}"
    )
    os.makedirs(os.path.join(BENCH, "results"), exist_ok=True)
    with open(os.path.join(BENCH, "results", "late_peer.json"), "w") as fh:
        json.dump(
            {
                "benchmark": "late_peer",
                "config": vars(args),
                "failures": failures,
                "wall_seconds": round(wall, 1),
                "runs": results,
            },
            fh,
            indent=2,
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
