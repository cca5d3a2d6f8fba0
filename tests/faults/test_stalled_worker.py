"""A connected worker that stalls for longer than TensorFlow's own heartbeat timeout (10 s) and less than
the trainer's --heartbeat-timeout (default 120 s): held with SIGSTOP for 20 s mid-training, as a saturated slow
link can hold its heartbeats (MobileNetV2's float32 syncs at 10 Mbit/s: the group once failed with "stopped
sending heartbeats"), a long pause of its node or a paused VM would. A localsgd group trains on through it and
ends in sync; with --heartbeat-timeout 10, TensorFlow's own, the same stall fails the group."""

import json
import signal
import time

import pytest

from stages import free_port_block, stage, start_stage, wait_for_epochs

pytestmark = pytest.mark.faults

EPOCHS, STALL_SECONDS = 20, 20


def run_with_a_stall(work, *flags):
    """A 2-worker localsgd run on digits whose worker 1 is held for STALL_SECONDS after its first epoch:
    (exit codes, logs)."""
    stage("copier", "--source", "sample:digits", "--n-shards", 2, "--workdir", work)
    args = [
        "--workdir",
        work,
        "--workers",
        2,
        "--epochs",
        EPOCHS,
        "--batch",
        32,
        "--strategy",
        "localsgd",
        "--threads",
        1,
        "--port",
        free_port_block(2),
        *flags,
    ]
    group = [start_stage("trainer", *args, "--worker-index", i, log=work / f"w{i}.log") for i in range(2)]
    try:
        wait_for_epochs(work / "train" / "worker-00001" / "metrics.json", 1, group, timeout=300)
        group[1].send_signal(signal.SIGSTOP)
        time.sleep(STALL_SECONDS)
        group[1].send_signal(signal.SIGCONT)
        codes = [p.wait(timeout=300) for p in group]
    finally:
        for p in group:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait()
    return codes, [open(work / f"w{i}.log").read() for i in range(2)]


def test_a_stall_longer_than_tensorflows_heartbeat_timeout_does_not_fail_the_group(tmp_path):
    codes, logs = run_with_a_stall(tmp_path)
    assert codes == [0, 0], "\n".join(log[-3000:] for log in logs)
    epochs = [json.load(open(tmp_path / "train" / f"worker-{i:05d}" / "metrics.json")) for i in range(2)]
    assert [len(e) for e in epochs] == [EPOCHS, EPOCHS]
    assert epochs[0][-1]["synced_weights_checksum"] == epochs[1][-1]["synced_weights_checksum"]
    # the stall happened inside the run: worker 0 waited for it at a sync
    assert max(e["wall_time_sec"] for e in epochs[0]) > STALL_SECONDS / 2


def test_with_tensorflows_own_timeout_the_same_stall_fails_the_group(tmp_path):
    codes, logs = run_with_a_stall(tmp_path, "--heartbeat-timeout", 10)
    assert codes[0] != 0 and "stopped sending heartbeats" in logs[0], logs[0][-3000:]
