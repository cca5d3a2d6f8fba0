"""kill -9 in a DiLoCo run (localsgd, Nesterov outer step, int8 wire with error feedback): the outer
momentum and the wire's residual are checkpointed with the weights, and the restarted group goes on
exactly as an undisturbed run does: with one thread, the same final weights bit for bit, and the same
outer state in the last checkpoints. Also with batch normalization, whose statistics each sync
re-estimates from a few batches of each worker's shard: a small convolutional model file with a
BatchNormalization layer in a nested network (own_models.batch_norm_cnn_file: the re-estimation is the
same for any model; MobileNetV2 here took four times as long, most of it tracing its graph). And
with eager updates (--outer-overlap eager), whose checkpoints hold the message in flight, and with syncs at
each epoch's end (--sync-at-epoch-end)."""

import json
import shutil
import signal
import time

import numpy as np
import pytest
import tensorflow as tf

from own_models import batch_norm_cnn_file
from stages import free_port_block, latest_saved_epoch, stage, start_stage

pytestmark = pytest.mark.faults

EPOCHS = 4
OUTER_STATE = ("anchors", "outer_momenta", "wire_residuals")


# the digits CNN at batch 8: 90 steps an epoch, 18 syncs; the batch-norm model file at batch 32: 23 steps, 4 syncs.
# With eager updates every epoch's checkpoint is taken with the exchange of its last sync in flight (90 = 18 x 5):
# the resumed group sends it again. With syncs at each epoch's end too, at batch 7 (103 steps an epoch, which H = 5
# does not divide): the schedule counts H from each epoch's start, the resumed group too.
MODELS = {
    "cnn": lambda tmp_path: ["--batch", 8],
    "cnn-eager-updates": lambda tmp_path: ["--batch", 8, "--outer-overlap", "eager"],
    "cnn-epoch-end-syncs": lambda tmp_path: ["--batch", 7, "--sync-at-epoch-end"],
    "batch-norm": lambda tmp_path: ["--batch", 32, "--model-file", batch_norm_cnn_file(tmp_path / "model.keras")],
}


def start_pair(work, label, model_args):
    port = free_port_block(2)
    # one thread: the same arithmetic in the same order on every run
    args = [
        "--workdir",
        work,
        "--epochs",
        EPOCHS,
        *model_args,
        "--strategy",
        "localsgd",
        "--sync-every",
        5,
        "--outer-optimizer",
        "nesterov",
        "--allreduce-dtype",
        "int8",
        "--threads",
        1,
        "--port",
        port,
    ]
    return [start_stage("trainer", *args, "--worker-index", i, log=work / f"w{i}-{label}.log") for i in range(2)]


def finish(work, procs, label):
    for i, proc in enumerate(procs):
        assert proc.wait(timeout=600) == 0, open(work / f"w{i}-{label}.log").read()[-3000:]


def outer_state(work, worker):
    """The outer state in a worker's last checkpoint: {checkpoint key: array}."""
    reader = tf.train.load_checkpoint(str(work / "train" / f"worker-{worker:05d}" / "checkpoints" / f"ckpt-{EPOCHS}"))
    return {
        key: reader.get_tensor(key)
        for key in reader.get_variable_to_shape_map()
        if key.startswith(OUTER_STATE) and key.endswith("VARIABLE_VALUE")
    }


@pytest.mark.parametrize("model", MODELS)
def test_the_outer_state_resumes_bit_exact_after_kill_9(tmp_path, model):
    stage("copier", "--source", "sample:digits", "--n-shards", 2, "--workdir", tmp_path / "source")
    model_args = MODELS[model](tmp_path)
    runs = {name: tmp_path / name for name in ("undisturbed", "resumed")}
    for work in runs.values():
        shutil.copytree(tmp_path / "source" / "data", work / "data")

    finish(runs["undisturbed"], start_pair(runs["undisturbed"], "first", model_args), "first")

    work = runs["resumed"]
    group = start_pair(work, "first", model_args)
    deadline = time.monotonic() + 300
    while latest_saved_epoch(work / "train" / "worker-00001" / "checkpoints") < 1:  # an epoch lasts about a second
        assert time.monotonic() < deadline and group[1].poll() is None, "worker 1 never saved its first epoch"
        time.sleep(0.005)
    group[1].send_signal(signal.SIGSTOP)  # held at once, then killed: mid-training, whatever the load
    group[1].send_signal(signal.SIGKILL)
    assert group[1].wait(timeout=30) == -signal.SIGKILL
    assert group[0].wait(timeout=300) != 0  # the survivor fails at its next sync
    common = min(latest_saved_epoch(work / "train" / f"worker-{i:05d}" / "checkpoints") for i in range(2))
    assert 1 <= common < EPOCHS
    finish(work, start_pair(work, "second", model_args), "second")
    for i in range(2):
        assert f"after epoch {common}" in open(work / f"w{i}-second.log").read()

    if model == "batch-norm":  # (run.json names the re-estimation only for a model with batch normalization)
        assert (
            json.load(open(work / "train" / "worker-00000" / "checkpoints" / "run.json"))["sync_batch_norm_batches"]
            == 8
        )
    markers = {
        name: [json.load(open(w / "train" / f"worker-{i:05d}" / "_SUCCESS")) for i in range(2)]
        for name, w in runs.items()
    }
    assert {m["final_weights_sha256"] for ms in markers.values() for m in ms} == {
        markers["undisturbed"][0]["final_weights_sha256"]
    }
    for i in range(2):
        undisturbed, resumed = outer_state(runs["undisturbed"], i), outer_state(work, i)
        assert {k.split("/")[0] for k in undisturbed} == set(OUTER_STATE) and sorted(undisturbed) == sorted(resumed)
        for key in undisturbed:
            np.testing.assert_array_equal(resumed[key], undisturbed[key], err_msg=key)
        assert any(v.any() for k, v in undisturbed.items() if k.startswith("outer_momenta"))
        assert any(v.any() for k, v in undisturbed.items() if k.startswith("wire_residuals"))
