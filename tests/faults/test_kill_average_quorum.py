"""Quorum success (issue 19): an `average` run publishes with the workers it has.

Three real trainer processes on digits; worker 2 is killed with SIGKILL after its first
epoch and never restarted (a worker past its retries). Workers 0 and 1 linger for it
(--linger-for-peers, what the chart sets when trainer.minWorkers < workers), then exit 0;
the aggregator with --min-workers 2 averages the two, and its report names the worker
left out and its shard's share of the data."""

import json
import signal
import time

import pytest

from stages import read_report, stage, start_stage

pytestmark = pytest.mark.faults

WORKERS, EPOCHS, BATCH, SEED = 3, 20, 32, 42  # test_pipeline.py's digits settings: 0.8 held-out accuracy


def test_average_publishes_with_min_workers_when_one_worker_is_lost_for_good(tmp_path):
    stage("copier", "--source", "sample:digits", "--n-shards", WORKERS, "--workdir", tmp_path)
    procs = [
        start_stage(
            "trainer",
            "--workdir",
            tmp_path,
            "--worker-index",
            i,
            "--workers",
            WORKERS,
            "--epochs",
            EPOCHS,
            "--batch",
            BATCH,
            "--seed",
            SEED,
            "--linger-for-peers",
            3,
            log=tmp_path / f"worker-{i}.log",
        )
        for i in range(WORKERS)
    ]
    lost_metrics = tmp_path / "train" / "worker-00002" / "metrics.json"
    deadline = time.monotonic() + 300
    while not (lost_metrics.exists() and json.loads(lost_metrics.read_text() or "[]")):
        assert procs[2].poll() is None, "worker 2 finished before it could be killed"
        assert time.monotonic() < deadline, "worker 2 never finished an epoch"
        time.sleep(0.05)
    procs[2].send_signal(signal.SIGKILL)
    assert procs[2].wait(timeout=30) == -signal.SIGKILL
    for i in (0, 1):
        assert procs[i].wait(timeout=300) == 0, (tmp_path / f"worker-{i}.log").read_text()[-3000:]
        log = (tmp_path / f"worker-{i}.log").read_text()
        assert "to finish before exiting" in log and "exiting without worker(s) 2" in log, log[-2000:]
    assert not (tmp_path / "train" / "worker-00002" / "_SUCCESS").exists()

    result = stage(
        "aggregator",
        "--workdir",
        tmp_path,
        "--expect",
        WORKERS,
        "--min-workers",
        2,
        "--straggler-wait",
        1,
        "--timeout",
        60,
    )
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    shards = [s["examples"] for s in manifest["shards"]]
    share = shards[2] / sum(shards)
    assert f"averaging without worker 2 ({share:.1%} of the training data)" in result.stdout, result.stdout
    assert "2 of 3 workers finished (at least 2 needed)" in result.stderr
    report = read_report(tmp_path / "final")
    assert report["missing_workers"] == [
        {"worker_index": 2, "shard_examples": shards[2], "share_of_training_data": share}
    ]
    assert [w["worker_index"] for w in report["workers"]] == [0, 1]
    assert report["final"]["examples"] == shards[0] + shards[1]
    assert report["final"]["test_accuracy"] > 0.8
    assert (tmp_path / "final" / "_SUCCESS").exists()
