"""kill -9 a trainer mid-training, start it again: it resumes from its last
checkpoint instead of epoch 0, and the pipeline finishes.

Here: the exact resume of one worker (make test) and a localsgd group whose workers are epochs apart
(make test-long). The kill of a worker in every strategy, the restarted group and the recovered
accuracy are tests/faults/test_kill_trainer.py's (make test-faults)."""

import json
import shutil
import signal
import time

import numpy as np
import pytest

from disttrain_contract.artifact import load_model
from stages import free_port_block, latest_saved_epoch, read_report, stage, start_stage, wait_for_epochs

pytestmark = pytest.mark.slow


def test_a_resumed_worker_ends_with_exactly_the_model_of_an_undisturbed_run(tmp_path):
    """The checkpoint holds all of the model's state (the dropout generator's too) and a resumed
    run skips the batches its restored epochs took: killed or not, the same weights come out."""
    stage("copier", "--source", "sample:movie-reviews", "--n-shards", "1", "--workdir", tmp_path / "data-source")
    runs = {}
    for name in ("undisturbed", "resumed"):
        shutil.copytree(tmp_path / "data-source" / "data", tmp_path / name / "data")
        # one thread: the same arithmetic in the same order on both runs
        args = ["--workdir", tmp_path / name, "--epochs", 2, "--batch", 8, "--threads", 1]
        first = start_stage("trainer", *args, log=tmp_path / f"{name}-first.log")
        if name == "resumed":
            wait_for_epochs(tmp_path / name / "train" / "worker-00000" / "metrics.json", 1, [first], timeout=300)
            time.sleep(0.5)  # into epoch 2
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=30)
            first = start_stage("trainer", *args, log=tmp_path / f"{name}-second.log")
        assert first.wait(timeout=600) == 0
        runs[name] = load_model(str(tmp_path / name / "train" / "worker-00000" / "model.keras"))[0].get_weights()
    assert "after epoch 1" in open(tmp_path / "resumed-second.log").read()
    for undisturbed, resumed in zip(runs["undisturbed"], runs["resumed"], strict=True):
        np.testing.assert_array_equal(resumed, undisturbed)


@pytest.mark.long
def test_localsgd_resumes_when_a_worker_is_epochs_behind(tmp_path):
    """Local SGD has no meeting at the end of an epoch, only its syncs: with H longer than an
    epoch, one worker can be several epochs ahead of another. Worker 1 is held (SIGSTOP) right
    after its first epoch; the chief trains on to the first sync (H = 300 steps, in epoch 4:
    90 steps per epoch) and waits there, its checkpoints of epochs 1-3 on disk. Worker 1 is
    then killed, and the restarted group must find epoch 1, the last one both saved, in the
    chief's checkpoints (kept: 2 + ceil(H / steps per epoch), not the usual 2)."""
    epochs, train = 6, tmp_path / "train"
    stage("copier", "--source", "sample:digits", "--n-shards", "2", "--workdir", tmp_path)
    port = free_port_block(2)
    args = [
        "--workdir",
        tmp_path,
        "--epochs",
        epochs,
        "--batch",
        8,
        "--strategy",
        "localsgd",
        "--sync-every",
        300,
        "--port",
        port,
    ]
    group = [start_stage("trainer", *args, "--worker-index", i, log=tmp_path / f"w{i}-first.log") for i in range(2)]
    deadline = time.monotonic() + 300
    while latest_saved_epoch(train / "worker-00001" / "checkpoints") < 1:  # polled often: an epoch lasts ~0.3 s
        assert time.monotonic() < deadline and group[1].poll() is None, "worker 1 never saved its first epoch"
        time.sleep(0.005)
    group[1].send_signal(signal.SIGSTOP)
    behind = latest_saved_epoch(train / "worker-00001" / "checkpoints")
    wait_for_epochs(train / "worker-00000" / "metrics.json", 3, [group[0]], timeout=300)
    assert latest_saved_epoch(train / "worker-00000" / "checkpoints") == 3  # waiting at the sync in epoch 4
    assert behind == 1, f"worker 1 was stopped after epoch {behind}, not 1: the test did not hold it back in time"
    group[1].send_signal(signal.SIGKILL)
    assert group[1].wait(timeout=30) == -signal.SIGKILL
    assert group[0].wait(timeout=300) != 0  # the chief fails at the sync instead of hanging

    port = free_port_block(2)
    args[-1] = port
    group = [start_stage("trainer", *args, "--worker-index", i, log=tmp_path / f"w{i}-second.log") for i in range(2)]
    assert [p.wait(timeout=600) for p in group] == [0, 0]
    for i in range(2):
        assert "after epoch 1" in open(tmp_path / f"w{i}-second.log").read()
    markers = [json.load(open(train / f"worker-{i:05d}" / "_SUCCESS")) for i in range(2)]
    assert markers[0]["final_weights_sha256"] == markers[1]["final_weights_sha256"]
    stage("aggregator", "--workdir", tmp_path, "--expect", 2, "--timeout", 30)
    assert read_report(tmp_path / "final")["final"]["test_accuracy"] > 0.9
