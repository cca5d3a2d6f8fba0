"""DiLoCo (localsgd --outer-optimizer nesterov) with 2 real worker processes over loopback: after every
epoch's last sync both workers hold the same weights (their records carry the same checksum of the
synced weights), on the float32 and float16 wires (all-reduce) and on the int8 and int4 ones (all-gather,
summed in worker order), for the text and the image task; the model and the report record the outer settings."""

import json

import numpy as np
import pytest

from disttrain_contract.artifact import load_model
from own_models import batch_norm_cnn_file
from stages import free_port_block, read_report, stage, start_stage

pytestmark = pytest.mark.slow

EPOCHS, BATCH = 2, 32


def train_pair(work, source, *trainer_args):
    """copier -> 2 localsgd trainers (one thread each); returns each worker's (metrics, marker)."""
    stage("copier", "--source", source, "--n-shards", 2, "--workdir", work)
    port = free_port_block(2)
    procs = [
        start_stage(
            "trainer",
            "--workdir",
            work,
            "--worker-index",
            i,
            "--epochs",
            EPOCHS,
            "--batch",
            BATCH,
            "--strategy",
            "localsgd",
            "--port",
            port,
            "--threads",
            1,
            *trainer_args,
            log=work / f"worker-{i}.log",
        )
        for i in range(2)
    ]
    for i, proc in enumerate(procs):
        assert proc.wait(timeout=600) == 0, open(work / f"worker-{i}.log").read()[-3000:]
    worker = [work / "train" / f"worker-{i:05d}" for i in range(2)]
    return [(json.load(open(w / "metrics.json")), json.load(open(w / "_SUCCESS"))) for w in worker]


# make test: the int8 wire on both tasks, float16 and int4 on digits; the float32 wire (its all-reduce is plain local
# SGD's) in make test-long
@pytest.mark.parametrize(
    "source, wire",
    [
        pytest.param("sample:digits", "float32", marks=pytest.mark.long),
        ("sample:digits", "float16"),
        ("sample:digits", "int8"),
        ("sample:digits", "int4"),
        pytest.param("sample:movie-reviews", "float32", marks=pytest.mark.long),
        ("sample:movie-reviews", "int8"),
    ],
)
def test_diloco_workers_hold_identical_weights_after_every_sync(tmp_path, source, wire):
    # H = 5 does not divide an epoch's steps: the epochs end between syncs, and the record names the last one
    (metrics0, marker0), (metrics1, marker1) = train_pair(
        tmp_path, source, "--sync-every", 5, "--outer-optimizer", "nesterov", "--allreduce-dtype", wire
    )
    assert [m["epoch"] for m in metrics0] == [m["epoch"] for m in metrics1] == list(range(1, EPOCHS + 1))
    for m0, m1 in zip(metrics0, metrics1):
        assert (
            m0["last_sync_step"] == m1["last_sync_step"]
            and m0["synced_weights_checksum"] == m1["synced_weights_checksum"]
        )
        assert m0["synced_weights_checksum"] is not None
    steps = metrics0[-1]["last_sync_step"] // EPOCHS  # the last sync is the final step's (finish)
    assert metrics0[0]["last_sync_step"] == steps // 5 * 5  # epoch 1 ended between syncs
    assert len({m["synced_weights_checksum"] for m in metrics0}) == EPOCHS  # the weights moved between epochs
    assert marker0["final_weights_sha256"] == marker1["final_weights_sha256"]  # the last sync (finish): the model
    assert marker0["final_weights_sha256"] != marker0["init_weights_sha256"]
    model = load_model(str(tmp_path / "train" / "worker-00000" / "model.keras"))[0]
    weights = [w for w in model.weights if "float" in str(w.dtype)]
    size = sum(int(np.prod(w.shape)) for w in weights)
    if wire in ("float32", "float16"):
        assert marker0["wire_bytes_per_sync"] == {"float32": 4, "float16": 2}[wire] * size
    elif (
        wire == "int8"
    ):  # every weight as one vector: 1 byte a weight padded to 4 bytes, a float32 scale per block of 256
        assert marker0["wire_bytes_per_sync"] == 4 * (-(-size // 4) + -(-size // 256))
    else:  # int4: two weights a byte
        assert marker0["wire_bytes_per_sync"] == 4 * (-(-size // 8) + -(-size // 256))
    # both workers evaluate the same final model
    assert metrics0[-1]["test_accuracy"] == metrics1[-1]["test_accuracy"] > (0.7 if source == "sample:digits" else 0.6)

    if wire == "int8" and source == "sample:digits":  # the report and the model's metadata say how it was trained
        stage("aggregator", "--workdir", tmp_path, "--expect", 2, "--timeout", 60)
        parameters = read_report(tmp_path / "final")["training_parameters"]
        assert {
            k: parameters[k] for k in ("sync_every", "outer_optimizer", "outer_lr", "outer_momentum", "allreduce_dtype")
        } == {
            "sync_every": 5,
            "outer_optimizer": "nesterov",
            "outer_lr": 0.7,
            "outer_momentum": 0.9,
            "allreduce_dtype": "int8",
        }


@pytest.mark.long
def test_batch_norm_statistics_are_re_estimated_for_each_evaluation(tmp_path):
    # Three convolution + batch-norm blocks nested in the model as a keras.applications backbone is (a model
    # file), H = the 23 steps of an epoch: every evaluation is of a sync's weights. The statistics averaged
    # across workers do not fit them; re-estimated after the sync, they do (measured: 0.59 and 0.74 after
    # the two epochs, against 0.15 and 0.16 averaged; chance is 0.1).
    model = [
        "--model-file",
        batch_norm_cnn_file(tmp_path / "model.keras", blocks=3),
        "--sync-every",
        23,
        "--outer-optimizer",
        "nesterov",
        "--allreduce-dtype",
        "int8",
    ]
    refreshed = train_pair(tmp_path / "refreshed", "sample:digits", *model)
    averaged = train_pair(tmp_path / "averaged", "sample:digits", *model, "--sync-batch-norm-batches", 0)
    (metrics0, marker0), (metrics1, marker1) = refreshed
    assert [m["last_sync_step"] for m in metrics0] == [23, 46]  # each epoch ends with a sync
    assert [m["batch_norm_re_estimations"] for m in metrics0] == [1, 1]  # (and "averaged" took none)
    assert "batch_norm_re_estimations" not in averaged[0][0][0]
    assert [m["synced_weights_checksum"] for m in metrics0] == [m["synced_weights_checksum"] for m in metrics1]
    assert marker0["final_weights_sha256"] == marker1["final_weights_sha256"]
    with_refresh = [m["test_accuracy"] for m in metrics0]
    without = [m["test_accuracy"] for m in averaged[0][0]]
    assert with_refresh[-1] > 0.5 and all(a > b + 0.2 for a, b in zip(with_refresh, without)), (with_refresh, without)
    parameters = json.load(open(tmp_path / "refreshed" / "train" / "worker-00000" / "checkpoints" / "run.json"))
    assert parameters["sync_batch_norm_batches"] == 8


# (make test: eager updates on the int8 wire, the form the advisor weighs; delayed on float32 in make test-long)
@pytest.mark.parametrize(
    "overlap, wire",
    [
        ("eager", "int8"),
        pytest.param("eager", "int4", marks=pytest.mark.long),
        pytest.param("delayed", "float32", marks=pytest.mark.long),
    ],
)
def test_overlapped_syncs_end_in_one_model(tmp_path, overlap, wire):
    # H = 5: syncs within and across the epochs; the exchange of each runs beside the next 5 steps
    (metrics0, marker0), (metrics1, marker1) = train_pair(
        tmp_path,
        "sample:digits",
        "--sync-every",
        5,
        "--outer-optimizer",
        "nesterov",
        "--allreduce-dtype",
        wire,
        "--outer-overlap",
        overlap,
    )
    for m0, m1 in zip(metrics0, metrics1):
        assert m0["last_sync_step"] == m1["last_sync_step"] and m0["sync_wait_sec"] >= 0
        # the seconds training stood still for the syncs hold their waits for the exchanges (the last epoch's, the
        # landing of the last one too)
        assert m0["sync_sec"] >= m0["sync_wait_sec"] and m1["sync_sec"] >= m1["sync_wait_sec"]
        same = m0["synced_weights_checksum"] == m1["synced_weights_checksum"]
        # delayed: every worker applies the same stale mean; eager: each its own change, until the final average
        assert same if overlap == "delayed" or m0 is metrics0[-1] else not same, (overlap, m0["epoch"])
    assert marker0["final_weights_sha256"] == marker1["final_weights_sha256"] != marker0["init_weights_sha256"]
    # Two epochs are a start only: the outer step one sync late holds the group back (here 0.64 with eager
    # updates, 0.47 delayed, against 0.7 and more without overlap; docs/strategies.md has longer runs). Chance is 0.1.
    assert metrics0[-1]["test_accuracy"] == metrics1[-1]["test_accuracy"] > {"eager": 0.5, "delayed": 0.3}[overlap]
    run = json.load(open(tmp_path / "train" / "worker-00000" / "checkpoints" / "run.json"))
    assert run["outer_overlap"] == overlap


def test_syncs_at_each_epochs_end_evaluate_the_groups_model(tmp_path):
    # H = 5 does not divide an epoch's steps: with --sync-at-epoch-end the syncs count H from each epoch's start and
    # one falls on its end, so every epoch's record is of one model, the same on both workers, evaluated the same
    (metrics0, marker0), (metrics1, marker1) = train_pair(
        tmp_path,
        "sample:digits",
        "--sync-every",
        5,
        "--outer-optimizer",
        "nesterov",
        "--allreduce-dtype",
        "int8",
        "--sync-at-epoch-end",
    )
    steps = metrics0[-1]["last_sync_step"] // EPOCHS
    assert steps % 5, "the test needs an epoch that H does not divide"
    assert [m["last_sync_step"] for m in metrics0] == [steps * e for e in range(1, EPOCHS + 1)]
    # each record counts its epoch's syncs (every 5 steps and the end), and the seconds they took of the epoch
    assert [m["syncs"] for m in metrics0] == [m["syncs"] for m in metrics1] == [-(-steps // 5)] * EPOCHS
    assert all(0 < m["sync_sec"] < m["wall_time_sec"] for m in metrics0 + metrics1)
    for m0, m1 in zip(metrics0, metrics1):
        assert (m0["synced_weights_checksum"], m0["test_accuracy"], m0["test_loss"]) == (
            m1["synced_weights_checksum"],
            m1["test_accuracy"],
            m1["test_loss"],
        )
    assert marker0["final_weights_sha256"] == marker1["final_weights_sha256"] != marker0["init_weights_sha256"]
    assert metrics0[-1]["test_accuracy"] > 0.7
    run = json.load(open(tmp_path / "train" / "worker-00000" / "checkpoints" / "run.json"))
    assert run["sync_at_epoch_end"] is True and run["sync_every"] == 5
