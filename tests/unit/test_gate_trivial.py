"""The quality gate's floor: the trivial predictor (trivial.py) measured on known labels, and the gate's
decision against it (gate.py's "trivial" check) for classification, regression and faces, at its boundary."""

import json

import numpy as np
import pytest

from disttrain_aggregator import gate
from disttrain_aggregator.main import parse_args
from disttrain_aggregator.trivial import trivial_predictor
from disttrain_contract.manifest import Manifest, SplitInfo
from disttrain_contract.metrics import ACCURACY, RMSE, TOP1

WORKERS = [("worker 0", 0.60)]


def write_dataset(root, shards, test, labels=("a", "b", "c"), problem="classification", stats=True, storage="npy"):
    """A data directory with `shards` (each a list of labels or targets) and the manifest; with `stats`, the
    copier's stats.json as the copier writes it (the training label counts over every shard)."""
    infos = []
    for i, y in enumerate(shards):
        name = f"shard-{i:05d}"
        if storage == "jsonl":
            (root / f"{name}.jsonl").write_text("".join(json.dumps({"text": "x", "label": int(v)}) + "\n" for v in y))
        else:
            np.save(root / f"{name}.y.npy", np.asarray(y, dtype=np.float32 if problem == "regression" else np.int64))
        infos.append(SplitInfo(name, len(y), {}))
    validation = None
    if stats:
        counts = np.bincount(np.concatenate(shards).astype(int), minlength=len(labels))
        (root / "stats.json").write_text(json.dumps({"train": {"label_counts": dict(zip(labels, counts.tolist()))}}))
        validation = {"stats": "stats.json"}
    regression = problem == "regression"
    train = np.concatenate(shards).astype(np.float64)
    return Manifest(
        task="text" if storage == "jsonl" else "table",
        source="table:t.csv",
        seed=0,
        test_fraction=0.2,
        labels=[] if regression else list(labels),
        input={"kind": "table"},
        storage=storage,
        shards=infos,
        test=SplitInfo("test", len(test), {}),
        validation=validation,
        problem=problem,
        target="y" if regression else None,
        target_statistics={"mean": float(train.mean())} if regression and stats else None,
    )


@pytest.mark.parametrize("stats", [True, False])
def test_the_majority_class_is_the_training_splits_scored_on_the_held_out_labels(tmp_path, stats):
    # training: 'b' 5 of 9; held out: 'a' is its own majority (3 of 5), 'b' 1 of 5
    manifest = write_dataset(tmp_path, [[1, 1, 0, 2], [1, 1, 1, 0, 2]], [0, 0, 0, 1, 2], stats=stats)
    trivial = trivial_predictor(str(tmp_path), manifest, np.array([0, 0, 0, 1, 2]))
    assert trivial["name"] == "majority class" and trivial["label"] == "b"
    assert trivial["value"] == pytest.approx(0.2)  # not the held-out split's own majority, 0.6
    assert trivial["training_share"] == pytest.approx(5 / 9)
    assert trivial["description"] == "always the training split's majority class 'b' (55.6% of the training examples)"


def test_a_text_datasets_labels_without_statistics_and_a_tie_goes_to_the_first_label(tmp_path):
    manifest = write_dataset(tmp_path, [[0, 1], [1, 0]], [1, 1, 0], labels=("neg", "pos"), stats=False, storage="jsonl")
    trivial = trivial_predictor(str(tmp_path), manifest, np.array([1, 1, 0]))
    assert (trivial["label"], trivial["value"]) == ("neg", pytest.approx(1 / 3))


@pytest.mark.parametrize("stats", [True, False])
def test_regressions_trivial_predictor_is_the_training_mean(tmp_path, stats):
    manifest = write_dataset(tmp_path, [[1.0, 2.0], [3.0, 6.0]], [0.0, 4.0], problem="regression", stats=stats)
    trivial = trivial_predictor(str(tmp_path), manifest, np.array([0.0, 4.0]))
    assert trivial["training_mean"] == pytest.approx(3.0)
    assert trivial["value"] == pytest.approx(np.sqrt((9 + 1) / 2))  # the RMSE of predicting 3 for 0 and 4


def test_faces_trivial_predictor_is_chance_among_the_held_out_people():
    class Faces:
        task, problem = "faces", "classification"

    trivial = trivial_predictor(None, Faces, np.array([7, 7, 3, 9, 12]))
    assert trivial["name"] == "chance" and trivial["value"] == pytest.approx(1 / 4)


MAJORITY = {
    "name": "majority class",
    "value": 0.5836,
    "label": "positive",
    "description": "always the training split's majority class 'positive' (57.7% of the training examples)",
}


def decide(final, trivial=MAJORITY, min_gain=1.0, metric=ACCURACY, workers=WORKERS):
    return gate.decide(final, workers, None, 1.0, 1.0, True, metric, trivial=trivial, min_gain_vs_trivial=min_gain)


def test_a_model_at_the_majority_class_is_refused_naming_the_predictor_the_values_and_the_flag():
    verdict = decide(0.5836, workers=[("chief (synchronised)", 0.5836)])
    assert not verdict["passed"]
    assert verdict["reasons"] == [
        "held-out accuracy 0.5836 is no better than the trivial predictor's 0.5836 (always the training split's "
        "majority class 'positive' (57.7% of the training examples); at least 1 point above required: "
        "--min-gain-vs-trivial)"
    ]
    check = verdict["checks"][-1]
    assert (check["name"], check["reference_value"], check["gain"], check["min_gain"], check["passed"]) == (
        "trivial",
        0.5836,
        0.0,
        1.0,
        False,
    )
    assert check["predictor"] == {k: v for k, v in MAJORITY.items() if k != "value"}
    assert (
        "0.00 points above the trivial predictor's 0.5836 (majority class 'positive'; at least 1 above: FAILED)"
        in gate.summary(verdict)
    )


def test_the_margin_is_in_points_and_exactly_the_margin_passes():
    assert decide(0.5936)["passed"]  # 1.00 point above: allowed
    verdict = decide(0.5935)
    assert not verdict["passed"] and verdict["reasons"][0].startswith(
        "held-out accuracy 0.5935 is only 0.99 points above the trivial predictor's 0.5836"
    )
    assert decide(0.5935, min_gain=0.5)["passed"]
    assert not decide(0.6836, min_gain=10.01)["passed"] and decide(0.6836, min_gain=10.0)["passed"]
    assert decide(0.10, trivial=dict(MAJORITY, value=0.129))["reasons"][0].startswith(
        "held-out accuracy 0.1000 is 2.90 points below the trivial predictor's 0.1290"
    )


def test_the_floor_applies_whatever_the_relative_checks_say():
    """Every worker as bad as the final model and no published model: the relative checks pass, the floor does not."""
    verdict = decide(0.477, trivial=dict(MAJORITY, value=0.5), workers=[("worker 0", 0.477), ("worker 1", 0.47)])
    assert [c["passed"] for c in verdict["checks"]] == [True, True, False] and not verdict["passed"]
    assert len(verdict["reasons"]) == 1 and "--min-gain-vs-trivial" in verdict["reasons"][0]


def test_faces_top1_at_chance_is_refused():
    chance = {
        "name": "chance",
        "value": 0.1,
        "description": "chance: 1 of the 10 held-out people's gallery photos, picked blindly",
    }
    assert not decide(0.1, chance, metric=TOP1)["passed"]
    assert decide(0.8, chance, metric=TOP1)["passed"]


MEAN = {
    "name": "training mean",
    "value": 80.0,
    "training_mean": 152.1,
    "description": "always the training targets' mean 152.1",
}


def test_regression_is_relative_to_the_trivial_rmse_and_exactly_the_margin_passes():
    workers = [("worker 0", 79.2)]
    assert decide(79.2, MEAN, 1.0, RMSE, workers)["passed"]  # 1 % below 80
    verdict = decide(79.3, MEAN, 1.0, RMSE, [("worker 0", 79.3)])
    assert not verdict["passed"]
    assert verdict["reasons"] == [
        "held-out RMSE 79.3 is only 0.88 % better than the trivial predictor's 80 (always "
        "the training targets' mean 152.1; at least 1 % better required: "
        "--min-relative-gain-vs-trivial)"
    ]
    check = verdict["checks"][-1]
    assert (check["unit"], check["gain"], check["passed"]) == ("percent", 0.875, False)
    worse = decide(84.0, MEAN, 1.0, RMSE, [("worker 0", 84.0)])
    assert "is 5.00 % worse than the trivial predictor's 80" in worse["reasons"][0]
    assert (
        "RMSE 5.00 % worse than the trivial predictor's 80 (training mean; at least 1 % better: FAILED)"
        in gate.summary(worse)
    )
    assert decide(40.0, MEAN, 50.0, RMSE, [("worker 0", 40.0)])["passed"]  # half the trivial RMSE: 50 % better


def test_a_nan_metric_never_passes_the_floor():
    assert not decide(float("nan"))["passed"]


@pytest.mark.parametrize(
    "flag, value, unit",
    [
        ("--min-gain-vs-trivial", "0", "accuracy points"),
        ("--min-gain-vs-trivial", "-1", "accuracy points"),
        ("--min-gain-vs-trivial", "101", "accuracy points"),
        ("--min-relative-gain-vs-trivial", "nan", "percent"),
        ("--min-relative-gain-vs-trivial", "0", "percent"),
    ],
)
def test_a_margin_that_would_publish_a_trivial_model_is_an_argparse_error(capsys, flag, value, unit):
    with pytest.raises(SystemExit) as exit:
        parse_args([flag, value])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert (
        f"{flag} must be more than 0 and at most 100 ({unit}): a model only as good as the trivial predictor "
        "is never published"
        in err
        and "Traceback" not in err
    )
    assert parse_args([flag, "2.5"]).__dict__[flag[2:].replace("-", "_")] == 2.5
