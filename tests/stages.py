"""Shared test helpers: run the real stage programs as separate processes."""

import json
import os
import re
import subprocess
import sys
import time

from disttrain_contract.ports import free_port_block  # noqa: F401  (the tests and benchmarks import it from here)

BIN = os.path.dirname(sys.executable)  # the venv's console scripts: disttrain-copier, ...
# The advisor's probe budget in its tests: small, but one a probe meets on a loaded host (CI runs them beside the
# image builds or the fault tests, and two TensorFlow start-ups with one thread each then take 20 s before the
# first timed step).
ADVISOR_BUDGET_SECONDS = 40


def stage(name, *args, check=True, timeout=600, env=None):
    """Run `disttrain-<name> args...`; return the CompletedProcess (text)."""
    result = subprocess.run(
        [os.path.join(BIN, f"disttrain-{name}"), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"disttrain-{name} {' '.join(map(str, args))} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
        )
    return result


def start_stage(name, *args, log=None, env=None):
    out = open(log, "w") if log else subprocess.DEVNULL
    return subprocess.Popen(
        [os.path.join(BIN, f"disttrain-{name}"), *map(str, args)], stdout=out, stderr=subprocess.STDOUT, env=env
    )


def run_pipeline(
    workdir,
    source,
    workers,
    strategy="average",
    epochs=3,
    batch=64,
    seed=42,
    extra_trainer_args=(),
    ps=0,
    aggregator_args=(),
    copier_args=(),
):
    """copier -> `workers` trainer processes in parallel -> aggregator; returns report.json's object (read
    through the contract's typed Report: a report not of its documented form fails the test).
    ps > 0 (--strategy parameterserver): 1 chief + ps parameter servers + `workers` workers."""
    stage("copier", "--source", source, "--n-shards", workers, "--workdir", workdir, *copier_args)
    tasks = workers + (1 + ps if ps else 0)
    port = free_port_block(tasks)
    procs = [
        start_stage(
            "trainer",
            "--workdir",
            workdir,
            "--worker-index",
            i,
            "--workers",
            workers,
            "--epochs",
            epochs,
            "--batch",
            batch,
            "--strategy",
            strategy,
            "--seed",
            seed,
            "--port",
            port,
            *extra_trainer_args,
            *(("--ps", ps) if ps else ()),
            log=os.path.join(workdir, f"worker-{i}.log"),
        )
        for i in range(tasks)
    ]
    for i, proc in enumerate(procs):
        if proc.wait(timeout=900) != 0:
            for p in procs:
                p.kill()
            raise AssertionError(
                f"trainer {i} failed:\n" + open(os.path.join(workdir, f"worker-{i}.log")).read()[-3000:]
            )
    stage("aggregator", "--workdir", workdir, "--expect", workers, "--timeout", 60, *aggregator_args)
    return read_report(os.path.join(workdir, "final"))


def read_report(directory):
    """The report.json in `directory` as its JSON object, read (and so checked) by the contract's typed Report."""
    from disttrain_contract.report import Report

    return Report.read(os.path.join(directory, "report.json")).to_json()


def latest_saved_epoch(checkpoint_dir):
    """The epoch of the newest checkpoint named by TensorFlow's `checkpoint` state file (0: none)."""
    try:
        text = open(os.path.join(checkpoint_dir, "checkpoint")).read()
    except FileNotFoundError:
        return 0
    return int(re.search(r'^model_checkpoint_path: "ckpt-(\d+)"', text, re.M).group(1))


def read_metrics(path):
    """A trainer's metrics.json (one record per finished epoch), [] while it is not there or being replaced."""
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return []


def wait_for_epochs(metrics_path, n, procs, timeout=600):
    """metrics_path's records once it has `n` epochs; every trainer in `procs` must still be running meanwhile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            assert proc.poll() is None, "a trainer exited before it could be killed"
        metrics = read_metrics(metrics_path)
        if len(metrics) >= n:
            return metrics
        time.sleep(0.05)
    raise AssertionError(f"{metrics_path} never reached {n} epochs")
