"""A worker that starts 30 s after its peer (a pod Pending while a node scales up): the first
waits, says for whom, and the pipeline goes through. (20 such runs: bench/late_peer.py.)"""

import time

import pytest

from stages import free_port_block, read_report, stage, start_stage

pytestmark = pytest.mark.faults

DELAY = 30


def test_a_worker_30_s_late_joins_and_the_aggregator_publishes(tmp_path, measure):
    stage("copier", "--source", "sample:digits", "--n-shards", 2, "--workdir", tmp_path)
    port = free_port_block(2)
    logs = [tmp_path / f"worker-{i}.log" for i in range(2)]
    common = ["--workdir", tmp_path, "--strategy", "multiworker", "--workers", 2, "--epochs", 1, "--port", port]
    started = time.monotonic()
    first = start_stage("trainer", *common, "--worker-index", 0, log=logs[0])
    time.sleep(DELAY)
    assert first.poll() is None, logs[0].read_text()[-3000:]  # still waiting, not failed
    late = start_stage("trainer", *common, "--worker-index", 1, log=logs[1])
    codes = [first.wait(timeout=600), late.wait(timeout=600)]
    seconds = time.monotonic() - started
    assert codes == [0, 0], "\n---\n".join(log.read_text()[-3000:] for log in logs)
    text = logs[0].read_text()
    assert "worker 0/2: waiting for worker 1 (127.0.0.1:" in text and "connection refused), 10 s of 600 s" in text
    stage("aggregator", "--workdir", tmp_path, "--expect", 2, "--timeout", 60)
    report = read_report(tmp_path / "final")
    assert report["strategy"] == "multiworker"
    measure(late_seconds=DELAY, pair_seconds=round(seconds, 1))
