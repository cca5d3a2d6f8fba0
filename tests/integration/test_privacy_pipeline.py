"""Differentially private training through the real pipeline (copier -> 2 trainer processes -> aggregator):
ε in report.json for each supported strategy, the refusals, and training with DP off unchanged."""

import json
import os

import pytest

from disttrain_trainer import privacy
from stages import run_pipeline, stage

pytestmark = pytest.mark.slow

CLIP, SIGMA, DELTA = 1.0, 1.1, 1e-5
DP = ["--dp-l2-clip", CLIP, "--dp-noise-multiplier", SIGMA, "--dp-delta", DELTA, "--progress-interval", 0]
EPOCHS, BATCH = 2, 32


def check_privacy(report, workdir, workers=2):
    section = report["privacy"]
    markers = [json.load(open(os.path.join(workdir, "train", f"worker-{i:05d}", "_SUCCESS"))) for i in range(workers)]
    # ε recomputed here from what the run says it did: its q, its steps, the flags
    q, steps = section["sampling_probability"], section["steps"]
    assert steps == EPOCHS * section["steps_per_epoch"]
    assert section["epsilon"] == pytest.approx(privacy.epsilon(SIGMA, q, steps, DELTA), rel=1e-12)
    assert section["delta"] == DELTA and section["l2_clip"] == CLIP and section["noise_multiplier"] == SIGMA
    assert len(section["epsilon_by_epoch"]) == EPOCHS and section["epsilon_by_epoch"][-1] == section["epsilon"]
    assert section["epsilon_by_epoch"][0] < section["epsilon"]
    assert section["accountant"].startswith("RDP") and section["assumptions"] and section["not_covered"]
    assert section["epsilon"] == max(m["privacy"]["epsilon"] for m in markers)
    with open(os.path.join(workdir, "train", "worker-00000", "metrics.json")) as fh:
        history = json.load(fh)
    assert [e["epsilon"] for e in history] == markers[0]["privacy"]["epsilon_by_epoch"]
    assert 0 <= report["final"]["test_accuracy"] <= 1


@pytest.mark.long  # (64 s on a loaded 2-core host)
def test_a_private_average_run_reports_epsilon(tmp_path):
    report = run_pipeline(
        str(tmp_path), "sample:digits", 2, "average", EPOCHS, BATCH, extra_trainer_args=DP, aggregator_args=("--force",)
    )  # (a noisy 2-epoch model may fail the quality gate)
    check_privacy(report, tmp_path)
    # average: each worker's q is its own shard's
    shards = [json.load(open(tmp_path / "train" / f"worker-{i:05d}" / "_SUCCESS"))["examples"] for i in range(2)]
    assert report["privacy"]["sampling_probability"] == pytest.approx(BATCH / min(shards))


@pytest.mark.long
@pytest.mark.parametrize("strategy, extra", [("multiworker", ()), ("localsgd", ("--sync-every", 4))])
def test_a_private_connected_run_reports_epsilon(tmp_path, strategy, extra):
    report = run_pipeline(
        str(tmp_path),
        "sample:digits",
        2,
        strategy,
        EPOCHS,
        BATCH,
        extra_trainer_args=(*DP, *extra),
        aggregator_args=("--force",),
    )
    check_privacy(report, tmp_path)
    # connected strategies go through the largest shard per epoch: that is the q every example has
    largest = max(json.load(open(tmp_path / "data" / "manifest.json"))["shards"], key=lambda s: s["examples"])
    assert report["privacy"]["sampling_probability"] == pytest.approx(BATCH / largest["examples"])


# The final weights of this run (digits, 2 workers, average, 2 epochs, batch 32, seed 42) with the DP code
# present and off. TensorFlow's CPU kernels sum in a different order with AVX-512 than with AVX2 alone, so
# the weights are pinned per vector width: with AVX-512 as the trainer trained them before differential
# privacy was added; with AVX2 alone as the trainer of 27 Nov 2026 trained them on an AMD EPYC host (no
# trainer without DP was run there): from then on they must not change.
WEIGHTS_WITHOUT_DP = {
    "avx512f": [
        "f482ec4108ed17cd656cda5936106556cc4a342bd4f8f5e350c4adf664922dd1",
        "7149f390764af99756be30861f80cc3026dc40b0ea2286b63a20854693fd02c4",
    ],
    "avx2": [
        "8eae57f5168e5f07c1a04d9fa05e98c9d72963a428df147bc63fd921f3b1c8d2",
        "4ba68941495e61f4521328af42ae5b5bd184a223a6a92ffa69d921cb08bc2d19",
    ],
}


def vector_width():
    """The widest of the CPU's vector extensions that the pinned weights know ("avx512f", "avx2"), or None."""
    with open("/proc/cpuinfo") as fh:
        flags = next((line.split(":", 1)[1].split() for line in fh if line.startswith("flags")), [])
    return next((width for width in WEIGHTS_WITHOUT_DP if width in flags), None)


def test_training_with_dp_off_is_bit_identical(tmp_path):
    stage("copier", "--source", "sample:digits", "--n-shards", 2, "--workdir", tmp_path)
    for i in range(2):
        stage(
            "trainer",
            "--workdir",
            tmp_path,
            "--worker-index",
            i,
            "--workers",
            2,
            "--epochs",
            2,
            "--batch",
            32,
            "--progress-interval",
            0,
        )
    hashes = [
        json.load(open(tmp_path / "train" / f"worker-{i:05d}" / "_SUCCESS"))["final_weights_sha256"] for i in range(2)
    ]
    width = vector_width()
    if width is None:
        pytest.skip(f"no weights pinned for this CPU (neither of {sorted(WEIGHTS_WITHOUT_DP)}); it trained {hashes}")
    assert hashes == WEIGHTS_WITHOUT_DP[width], f"{width}: {hashes}"
    assert "privacy" not in json.load(open(tmp_path / "train" / "worker-00000" / "_SUCCESS"))


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    root = tmp_path_factory.mktemp("digits")
    stage("copier", "--source", "sample:digits", "--n-shards", 1, "--workdir", root)
    return root


@pytest.mark.parametrize(
    "args, message",
    [
        (["--dp-delta", "0.01"], "--dp-delta 0.01 must be below 1/n = "),
        (["--model", "mobilenetv2"], "differential privacy does not support the model's batch normalisation (layer "),
    ],
)
def test_refusals_that_need_the_data_or_the_model(digits, tmp_path, args, message):
    flags = {"--dp-l2-clip": "1", "--dp-noise-multiplier": "1", "--dp-delta": "1e-5"}
    flags.update(dict(zip(args[::2], args[1::2])))
    result = stage(
        "trainer",
        "--workdir",
        digits,
        "--out",
        tmp_path / "train",
        "--epochs",
        1,
        *[x for pair in flags.items() for x in pair],
        check=False,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: " + message)
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "train" / "worker-00000" / "_SUCCESS").exists()


def test_faces_are_refused_with_the_reason(tmp_path):
    stage("copier", "--source", "sample:faces", "--n-shards", 1, "--workdir", tmp_path)
    result = stage(
        "trainer",
        "--workdir",
        tmp_path,
        "--epochs",
        1,
        "--dp-l2-clip",
        1,
        "--dp-noise-multiplier",
        1,
        "--dp-delta",
        1e-6,
        check=False,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "error: differential privacy does not support the faces task: its triplet loss mines negatives within the batch"
        )
    )


@pytest.mark.long  # (17-57 s on a loaded 2-core host)
def test_a_private_table_model_leaves_the_copiers_statistics_out(cancer_data, tmp_path):
    """The built-in table model normalises with the copier's statistics of the training split; trained privately,
    it goes without them (ε would not cover them), and the report says what ε does not cover."""
    import keras

    work = tmp_path / "work"
    os.makedirs(work)
    os.symlink(cancer_data, work / "data")
    for i in range(2):
        stage(
            "trainer",
            "--workdir",
            work,
            "--worker-index",
            i,
            "--workers",
            2,
            "--epochs",
            1,
            "--batch",
            16,
            "--dp-l2-clip",
            1,
            "--dp-noise-multiplier",
            1,
            "--dp-delta",
            1e-4,
            "--progress-interval",
            0,
        )
    model = keras.saving.load_model(work / "train" / "worker-00000" / "model.keras")
    assert "normalize" not in [layer.name for layer in model.layers]
    marker = json.load(open(work / "train" / "worker-00000" / "_SUCCESS"))
    assert any("table model leaves the copier's statistics out" in line for line in marker["privacy"]["not_covered"])


@pytest.mark.long
def test_your_own_model_trains_privately(cancer_data, tmp_path):
    """A user's model file (one sigmoid unit, its own compiled loss) through the private step with synchronous
    workers; a batch-normalised one is refused (test_refusals...: the built-in MobileNetV2)."""
    from own_models import classifier, run_own_pipeline, saved, table_statistics, workdir_with

    work = workdir_with(cancer_data, tmp_path)
    mean, variance = table_statistics(work / "data" / "manifest.json")
    path = saved(classifier(30, mean, variance, head="sigmoid", seed=2), tmp_path / "model.keras")
    report = run_own_pipeline(
        work,
        2,
        "multiworker",
        "--model-file",
        path,
        "--dp-l2-clip",
        1,
        "--dp-noise-multiplier",
        1,
        "--dp-delta",
        1e-4,
        "--learning-rate",
        0.01,
        epochs=4,
        aggregator_args=("--force",),
    )
    assert report["privacy"]["epsilon"] == pytest.approx(
        privacy.epsilon(1, report["privacy"]["sampling_probability"], report["privacy"]["steps"], 1e-4), rel=1e-12
    )
    assert report["final"]["test_accuracy"] > 0.8, report["final"]  # (the majority label is 0.63 of the table)
