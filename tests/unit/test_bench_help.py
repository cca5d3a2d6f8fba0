"""Every benchmark script with a main answers --help with its usage and exits 0 without running anything
(python bench/train_scaling.py --help used to start the full benchmark, report.py to rewrite bench/README.md).
The scripts parse their arguments before importing TensorFlow or starting work, so all of them take a few
seconds together, run in parallel."""

import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench")
SCRIPTS = sorted(
    name
    for name in os.listdir(BENCH)
    if name.endswith(".py") and 'if __name__ == "__main__":' in open(os.path.join(BENCH, name)).read()
)


def bench_files():
    """{path: mtime} of everything under bench/: --help must write nothing."""
    return {
        os.path.join(d, f): os.stat(os.path.join(d, f)).st_mtime_ns
        for d, _, files in os.walk(BENCH)
        for f in files
        if "__pycache__" not in d
    }


def test_every_bench_script_with_a_main_answers_help():
    assert len(SCRIPTS) >= 20, SCRIPTS
    before, started = bench_files(), time.monotonic()
    procs = {
        name: subprocess.Popen(
            [sys.executable, name, "--help"], cwd=BENCH, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for name in SCRIPTS
    }
    failures = []
    for name, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=max(1, 60 - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            proc.kill()  # it started the benchmark instead
            out, err = proc.communicate()
        if proc.returncode != 0 or not out.startswith("usage: "):
            failures.append(f"{name}: exit {proc.returncode}\n{out[:500]}{err[-1000:]}")
    elapsed = time.monotonic() - started
    assert not failures, "\n\n".join(failures)
    assert bench_files() == before, "a script wrote into bench/ while answering --help"
    assert elapsed < 30, (
        f"--help took {elapsed:.1f} s for the {len(SCRIPTS)} scripts: one imports something heavy before parsing"
    )
