"""The quality gate's floor through the real aggregator program: two real Keras worker models whose output
ignores their input (trained as the trainer would, in the contract's format) are no better than the trivial
predictor and are refused with exit 4, nothing published, even with no published model and every worker as
bad; models that learnt something, on the same data, are published. Classification (make test) and
regression (make test-long)."""

import os

import numpy as np
import pytest

from integration.test_aggregator_own_models import aggregate, keras, read_report, write_table, write_workers

FEATURES = 3


def blind(units, activation=None):
    """A model whose input never reaches its head: a frozen all-zero layer feeds it 0, so training can only
    learn the head's bias (the class prior, or the targets' mean): the trivial predictor, as a model."""

    def build():
        inputs = keras.Input(shape=(FEATURES,), name="features")
        zero = keras.layers.Dense(1, kernel_initializer="zeros", bias_initializer="zeros", trainable=False)(inputs)
        return keras.Model(inputs, keras.layers.Dense(units, activation=activation, name="out")(zero))

    return build


def classifier():
    inputs = keras.Input(shape=(FEATURES,), name="features")
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(2, activation="softmax", name="out")(hidden))


def linear():
    """(A linear regression: the average of two stays as good as either, so only the floor is at stake.)"""
    inputs = keras.Input(shape=(FEATURES,), name="features")
    return keras.Model(inputs, keras.layers.Dense(1, name="out")(inputs))


def trivial_check(report):
    return next(c for c in report["gate"]["checks"] if c["name"] == "trivial")


# (four aggregator runs take ~50 s: regression's under make test-long, the unit tests decide its numbers)
# make test-long (make test is near its budget; it checks the floor's decisions in tests/unit/test_gate_trivial.py)
@pytest.mark.long
@pytest.mark.parametrize("problem", ["classification", "regression"])
def test_a_model_no_better_than_the_trivial_predictor_is_refused_and_a_good_one_published(tmp_path, problem):
    splits = write_table(tmp_path, problem)
    classification = problem == "classification"
    head, loss = ("softmax", "sparse_categorical_crossentropy") if classification else ("value", "mse")
    write_workers(
        tmp_path,
        blind(2, "softmax") if classification else blind(1),
        splits,
        problem,
        head,
        [30, 30],
        train_dir="train-blind",
        loss=loss,
    )
    refused = aggregate(tmp_path, "--dir", tmp_path / "train-blind", "--exports", "none")
    assert refused.returncode == 4, refused.stdout + refused.stderr
    (line,) = refused.stderr.strip().splitlines()  # one line, no traceback
    flag = "--min-gain-vs-trivial" if classification else "--min-relative-gain-vs-trivial"
    assert line.startswith("error: refused to publish the final model: held-out ") and flag in line
    assert "the trivial predictor's" in line and "best worker" not in line  # the floor alone refused it
    assert not os.path.exists(tmp_path / "final")  # nothing published
    (rejected,) = (tmp_path / "rejected").iterdir()
    report = read_report(rejected)
    check = trivial_check(report)
    y_test, y_train = splits["test"][1], np.concatenate([splits["shard-00000"][1], splits["shard-00001"][1]])
    if classification:  # the training split's majority class, scored on the held-out labels
        majority = int(np.bincount(y_train).argmax())
        assert check["reference_value"] == pytest.approx(float(np.mean(y_test == majority)))
        assert check["predictor"]["label"] == ["no", "yes"][majority]
        assert f"{check['reference_value']:.4f} (always the training split's majority class" in line
    else:  # the RMSE of always predicting the training targets' mean
        assert check["reference_value"] == pytest.approx(
            float(np.sqrt(np.mean((y_test - y_train.mean()) ** 2))), rel=1e-5
        )
        assert check["predictor"]["training_mean"] == pytest.approx(float(y_train.mean()), rel=1e-5)
    final = report["final"][f"test_{check['metric']}"]
    assert check["final_value"] == final and check["min_gain"] == 1.0 and check["gain"] < 1.0 and not check["passed"]
    assert [c["passed"] for c in report["gate"]["checks"]] == [True, True, False]  # the relative checks saw nothing
    print(line)
    print(f"{problem}: blind model {final:.4f}, trivial predictor {check['reference_value']:.4f}, gain {check['gain']}")

    # the same data, models that see their input: published, and the check says by how much
    write_workers(
        tmp_path,
        classifier if classification else linear,
        splits,
        problem,
        head,
        [30, 30],
        train_dir="train-good",
        loss=loss,
    )
    published = aggregate(tmp_path, "--dir", tmp_path / "train-good", "--exports", "none")
    assert published.returncode == 0, published.stdout + published.stderr
    assert (
        "above the trivial predictor's" in published.stdout
        if classification
        else "better than the trivial predictor's" in published.stdout
    )
    good = read_report(tmp_path / "final")
    check = trivial_check(good)
    assert check["passed"] and check["gain"] > 20 and good["gate"]["passed"]
    print(f"{problem}: good model {check['final_value']:.4f}, gain {check['gain']}")
