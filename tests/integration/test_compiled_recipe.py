"""A user's model trains with the optimizer it was compiled with, through the real trainer and aggregator.

make test: a classifier compiled with AdamW + CosineDecay + clipnorm trains with exactly that (the log and the model's
training_parameters say so), --learning-rate replaces only the rate, and an option the strategy cannot honour is one
line before anything is written, its advice followed trains. make test-long: the regression MLP compiled with
Adam(1e-2), whose held-out RMSE through the pipeline is plain `model.fit`'s (it was 2.4x worse when the trainer
replaced the optimizer), and a schedule resumed from a checkpoint to the bit."""

import json
import os

import numpy as np
import pytest

from own_models import (
    adamw_schedule_classifier,
    classifier,
    run_own_pipeline,
    saved,
    start_trainers,
    table_statistics,
    workdir_with,
)
from stages import read_report, stage

pytestmark = pytest.mark.slow


def train_group(work, *args, workers=2, strategy="average", epochs=3):
    procs = start_trainers(work, workers, strategy, "--threads", 1, *args, epochs=epochs)
    codes = [p.wait(timeout=600) for p in procs]
    return codes, [open(work / f"worker-{i}.log").read() for i in range(workers)]


def test_the_compiled_adamw_schedule_and_clipnorm_are_what_the_workers_train_with(cancer_data, tmp_path):
    work = workdir_with(cancer_data, tmp_path)
    path = saved(adamw_schedule_classifier(cancer_data), tmp_path / "adamw.keras")
    codes, logs = train_group(work, "--model-file", path)
    assert codes == [0, 0], logs[0][-2000:]
    from disttrain_contract.artifact import read_meta

    for index, log in enumerate(logs):
        line = next(line for line in log.splitlines() if ": optimizer " in line)
        assert "optimizer AdamW (learning_rate CosineDecay(initial_learning_rate=0.003, decay_steps=200" in line
        assert "weight_decay 0.004, clipnorm 1" in line and line.endswith(": the model's compiled optimizer")
        meta = read_meta(str(work / "train" / f"worker-{index:05d}" / "model.keras"))
        assert meta["training_parameters"]["optimizer"].startswith("AdamW (learning_rate CosineDecay(")
    # --learning-rate replaces the rate (the schedule), nothing else
    other = workdir_with(cancer_data, tmp_path / "flags")
    codes, logs = train_group(other, "--model-file", path, "--learning-rate", 0.01, epochs=1)
    assert codes == [0, 0], logs[0][-2000:]
    line = next(line for line in logs[0].splitlines() if ": optimizer " in line)
    assert "AdamW (learning_rate 0.01, weight_decay 0.004, clipnorm 1)" in line
    assert "--learning-rate in place of what they name" in line


def test_an_option_the_strategy_cannot_honour_is_one_line_and_its_advice_trains(cancer_data, tmp_path):
    work = workdir_with(cancer_data, tmp_path)
    path = saved(adamw_schedule_classifier(cancer_data, use_ema=True), tmp_path / "ema.keras")
    codes, logs = train_group(work, "--model-file", path, strategy="localsgd", epochs=1)
    assert codes == [2, 2]
    for index, log in enumerate(logs):
        errors = [line for line in log.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and "Traceback" not in log, log[-3000:]
        assert "sets use_ema=True, which --strategy localsgd cannot honour" in errors[0]
        assert "or train with --strategy average or multiworker" in errors[0]
        assert not os.path.exists(work / "train" / f"worker-{index:05d}" / "checkpoints")  # nothing written
    # the advice, followed: the same file with --strategy average (the moving average becomes the weights at the end)
    codes, logs = train_group(work, "--model-file", path, epochs=2)
    assert codes == [0, 0], logs[0][-2000:]
    assert "EMA (momentum 0.99)" in logs[0]


@pytest.mark.long
def test_a_regression_model_compiled_with_adam_1e2_reaches_plain_fits_rmse(diabetes_data, tmp_path):
    """The issue's example: Adam(1e-2) compiled into a regression MLP. Plain model.fit on the training split against
    2 average workers through the aggregator, the same epochs and batch: the pipeline's held-out RMSE is within 10 % of
    fit's (the benchmark holds the 3 % goal), and clearly better than predicting the training mean."""
    import keras

    from disttrain_contract.manifest import Manifest, read_split
    from own_models import regressor

    manifest = Manifest.read(str(diabetes_data))
    parts = [read_split(str(diabetes_data), manifest, s) for s in manifest.shards]
    x, y = (np.concatenate(a).astype("float32") for a in zip(*parts))
    x_test, y_test = read_split(str(diabetes_data), manifest, manifest.test)
    mean, variance = table_statistics(diabetes_data / "manifest.json")

    def build():
        model = regressor(x.shape[1], mean, variance, float(y.mean()), float(y.std()))
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
        return model

    path = saved(build(), tmp_path / "regressor.keras")
    fitted = build()
    fitted.fit(x, y, batch_size=32, epochs=30, verbose=0)
    fit_rmse = float(np.sqrt(np.mean((fitted.predict(x_test.astype("float32"), verbose=0)[:, 0] - y_test) ** 2)))
    trivial = float(np.sqrt(np.mean((y_test - y.mean()) ** 2)))
    report = run_own_pipeline(workdir_with(diabetes_data, tmp_path), 2, "average", "--model-file", path, epochs=30)
    rmse = report["final"]["test_rmse"]
    assert rmse <= 1.10 * fit_rmse, (rmse, fit_rmse)
    assert rmse < 0.9 * trivial, (rmse, trivial)


@pytest.mark.long
def test_a_schedule_resumed_from_its_checkpoint_ends_with_the_same_weights(cancer_data, tmp_path):
    """Two epochs, then the same run to four resumed from the checkpoint, against four at once: the optimizer's
    iterations (the schedule's position), moments and the weights are restored exactly."""
    path = saved(adamw_schedule_classifier(cancer_data), tmp_path / "adamw.keras")
    straight = workdir_with(cancer_data, tmp_path / "straight")
    assert train_group(straight, "--model-file", path, epochs=4)[0] == [0, 0]
    resumed = workdir_with(cancer_data, tmp_path / "resumed")
    assert train_group(resumed, "--model-file", path, epochs=2)[0] == [0, 0]
    codes, logs = train_group(resumed, "--model-file", path, epochs=4)
    assert codes == [0, 0] and "resumed from" in logs[0]

    def weights(work):
        return [
            json.load(open(work / "train" / f"worker-{i:05d}" / "_SUCCESS"))["final_weights_sha256"] for i in (0, 1)
        ]

    assert weights(resumed) == weights(straight)


def test_the_compiled_metrics_are_reported_every_epoch_and_in_the_report(cancer_data, tmp_path):
    """A model compiled with AUC and precision: every epoch's record in metrics.json has test_auc and
    test_precision, computed on the held-out split, beside the task's own accuracy; the aggregator's report has
    them for every worker's model and the final one."""
    import keras

    mean, variance = table_statistics(cancer_data / "manifest.json")
    model = classifier(30, mean, variance, compile=False)
    model.compile(
        optimizer="adam",
        loss="binary_crossentropy",
        metrics=["accuracy", keras.metrics.AUC(name="auc"), keras.metrics.Precision(name="precision")],
    )
    work = workdir_with(cancer_data, tmp_path)
    codes, logs = train_group(work, "--model-file", saved(model, tmp_path / "auc.keras"), epochs=3)
    assert codes == [0, 0], logs[0][-2000:]
    records = json.load(open(work / "train" / "worker-00000" / "metrics.json"))
    assert len(records) == 3
    for record in records:
        assert 0.5 < record["test_auc"] <= 1.0 and 0.0 <= record["test_precision"] <= 1.0, record
        assert "test_accuracy" in record
    assert records[-1]["test_auc"] > 0.9  # (a trained cancer classifier ranks well; chance is 0.5)
    stage("aggregator", "--workdir", work, "--expect", 2, "--timeout", 60, "--force")  # (3 epochs: the gate may refuse)
    report = read_report(work / "final")
    for row in [*report["workers"], report["final"]]:
        assert 0.9 < row["test_auc"] <= 1.0 and 0.0 <= row["test_precision"] <= 1.0, row
    # the published file is the user's compiled model: Keras compiles it at load with their loss, metrics and
    # optimizer, and its evaluation gives the report's numbers
    from disttrain_contract.manifest import Manifest, read_split

    published = keras.models.load_model(work / "final" / "model.keras", safe_mode=True)
    assert type(published.optimizer).__name__ == "Adam" and published.loss == "binary_crossentropy"
    manifest = Manifest.read(str(work / "data"))
    x_test, y_test = read_split(str(work / "data"), manifest, manifest.test)
    scores = published.evaluate(x_test.astype("float32"), y_test, verbose=0, return_dict=True)
    assert abs(scores["auc"] - report["final"]["test_auc"]) < 0.01, (scores, report["final"])
    assert abs(scores["precision"] - report["final"]["test_precision"]) < 1e-6, (scores, report["final"])
