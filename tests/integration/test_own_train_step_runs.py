"""A model's own train_step, through the real stages: a registered keras.Model subclass whose train_step adds an L2
penalty and counts its calls in a weight, on the breast-cancer table. Where each worker steps alone (average,
localsgd) the trainer steps it through its own train_step, and the published model holds the count: every step
went through it; multiworker refuses it in one line, and the line's advice trains."""

import json
import os
import re
import textwrap

import numpy as np
import pytest

from own_models import run_own_pipeline, with_pythonpath, workdir_with
from stages import start_stage

pytestmark = pytest.mark.slow

MODULE = textwrap.dedent('''
    """A model with its own training step: the compiled loss plus an L2 penalty on the kernels."""
    import keras
    import tensorflow as tf


    @keras.saving.register_keras_serializable(package="stepping_models")
    class PenalisedSteps(keras.Model):
        def __init__(self, *args, penalty=1e-3, **kwargs):
            super().__init__(*args, **kwargs)
            self.penalty = penalty
            self.steps_taken = self.add_weight(shape=(), initializer="zeros", trainable=False, name="steps_taken")

        def get_config(self):
            return {**super().get_config(), "penalty": self.penalty}

        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compute_loss(x, y, y_pred)
                loss += self.penalty * tf.add_n(
                    [tf.reduce_sum(tf.square(w)) for w in self.trainable_weights if "kernel" in w.path]
                )
            gradients = tape.gradient(loss, self.trainable_weights)
            self.optimizer.apply_gradients(zip(gradients, self.trainable_weights))
            self.steps_taken.assign_add(1.0)
            for metric in self.metrics:
                if metric.name == "loss":
                    metric.update_state(loss)
                else:
                    metric.update_state(y, y_pred)
            return {m.name: m.result() for m in self.metrics}


    def build(spec):
        inputs = keras.Input(shape=spec.input.shape, name=spec.input.name)
        x = keras.layers.Normalization(mean=spec.statistics["mean"], variance=spec.statistics["variance"])(inputs)
        x = keras.layers.Dense(16, activation="relu")(x)
        model = PenalisedSteps(inputs, keras.layers.Dense(spec.n_outputs, activation="softmax")(x))
        model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"])
        return model


    def build_uncompiled(spec):
        inputs = keras.Input(shape=spec.input.shape, name=spec.input.name)
        return PenalisedSteps(inputs, keras.layers.Dense(spec.n_outputs, activation="softmax")(inputs))
''')
EPOCHS = 6


def stepping_module(tmp_path, monkeypatch):
    """The module on the stages' PYTHONPATH and this process's sys.path (to load the models it publishes)."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "stepping_models.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(code))
    import importlib

    importlib.import_module("stepping_models")  # (registers the class)
    return with_pythonpath(code)


def steps_taken(path):
    from disttrain_contract.artifact import load_model

    model, _ = load_model(str(path))
    assert type(model).__name__ == "PenalisedSteps"
    return float(model.steps_taken.numpy())


def steps_per_epoch(log):
    return int(re.search(r"(\d+) steps/epoch", open(log).read()).group(1))


def checked_task(data, tmp_path, *args):
    """The trainer's task for these flags, created and checked as the trainer's read phase does (in this process)."""
    from disttrain_contract.manifest import Manifest
    from disttrain_trainer import parse_config, tasks

    config = parse_config(["--workdir", str(tmp_path / "work"), "--epochs", "1", *args])
    task, config = tasks.create(Manifest.read(str(data)), config)
    task.check(config)
    return task


@pytest.mark.parametrize(
    "args, words",
    [
        (
            ("--strategy", "parameterserver", "--ps", "1"),
            ["under --strategy parameterserver a step is not one worker's"],
        ),
        (
            ("--dp-l2-clip", "1", "--dp-noise-multiplier", "1", "--dp-delta", "1e-5"),
            ["differential privacy's step", "train without --dp-l2-clip, --dp-noise-multiplier and --dp-delta"],
        ),
        (("--model-module", "stepping_models:build_uncompiled"), ["overrides train_step but was not compiled"]),
    ],
)
def test_what_cannot_run_a_models_own_step_is_one_line(args, words, cancer_data, tmp_path, monkeypatch):
    from disttrain_contract.errors import ContractError

    stepping_module(tmp_path, monkeypatch)
    with pytest.raises(ContractError) as refused:
        checked_task(cancer_data, tmp_path, "--model-module", "stepping_models", *args)
    line = str(refused.value)
    assert "\n" not in line and "PenalisedSteps overrides train_step" in line, line
    assert all(word in line for word in words), line
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize("strategy", ["average", "localsgd"])
def test_where_each_worker_steps_alone_the_task_takes_it(strategy, cancer_data, tmp_path, monkeypatch):
    stepping_module(tmp_path, monkeypatch)
    task = checked_task(cancer_data, tmp_path, "--model-module", "stepping_models", "--strategy", strategy)
    assert task.own_step == ("train_step",) and task.score.name == "accuracy"


def refused_by_both(work, env, *args):
    """Two trainers of a connected strategy: each one error line (exit 2, no traceback); nothing written."""
    from stages import free_port_block

    port = free_port_block(2)
    procs = [
        start_stage(
            "trainer",
            *("--workdir", work, "--worker-index", i, "--workers", 2, "--epochs", EPOCHS, "--port", port),
            *args,
            log=str(work / f"refused-{i}.log"),
            env=env,
        )
        for i in range(2)
    ]
    lines = []
    for i, proc in enumerate(procs):
        assert proc.wait(timeout=300) == 2, open(work / f"refused-{i}.log").read()[-3000:]
        text = open(work / f"refused-{i}.log").read()
        errors = [line for line in text.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in text, text[-3000:]
        lines += errors
    assert not (work / "train").exists()
    return lines[0]


@pytest.mark.long
def test_refused_under_multiworker_and_the_advice_trains_through_its_own_step(cancer_data, tmp_path, monkeypatch):
    from server.serving import http, running_server

    work = workdir_with(cancer_data, tmp_path)
    env = stepping_module(tmp_path, monkeypatch)
    line = refused_by_both(work, env, "--strategy", "multiworker", "--model-module", "stepping_models")
    assert "PenalisedSteps overrides train_step" in line and "--strategy multiworker" in line, line
    advised = re.search(r"train with --strategy (\w+) or (\w+)", line)
    assert advised and advised.groups() == ("average", "localsgd"), line

    report = run_own_pipeline(
        work,
        2,
        advised.group(1),
        "--model-module",
        "stepping_models",
        epochs=EPOCHS,
        env=env,
        aggregator_args=("--model-module", "stepping_models"),
    )
    assert report["final"]["test_accuracy"] > 0.9, report["final"]
    # every step of each worker went through the model's own train_step
    for i in range(2):
        worker = work / "train" / f"worker-{i:05d}"
        expected = EPOCHS * steps_per_epoch(work / f"worker-{i}.log")
        assert steps_taken(worker / "model.keras") == expected
        records = json.load(open(worker / "metrics.json"))
        assert len(records) == EPOCHS and all(np.isfinite(r["loss"]) and 0 <= r["accuracy"] <= 1 for r in records)
    assert steps_taken(work / "final" / "model.keras") > 0  # the averaged model is the user's class too

    monkeypatch.setenv("PYTHONPATH", env["PYTHONPATH"])  # the server process inherits it
    with running_server(str(work), "--model-module", "stepping_models") as (base, _, _):
        status, rows = http("POST", base + "/v1/models/disttrain:predict", {"instances": [[1.0] * 30]})
        assert status == 200 and len(rows["predictions"][0]) == 2, rows


@pytest.mark.long
def test_localsgd_steps_each_worker_through_its_own_step_between_syncs(cancer_data, tmp_path, monkeypatch):
    work = workdir_with(cancer_data, tmp_path)
    env = stepping_module(tmp_path, monkeypatch)
    report = run_own_pipeline(
        work,
        2,
        "localsgd",
        "--model-module",
        "stepping_models",
        "--sync-every",
        4,
        epochs=EPOCHS,
        env=env,
        aggregator_args=("--model-module", "stepping_models"),
    )
    assert report["final"]["test_accuracy"] > 0.9, report["final"]
    # the syncs average the count too: each worker took every step through its own train_step
    expected = EPOCHS * steps_per_epoch(work / "worker-0.log")
    assert steps_taken(work / "train" / "worker-00000" / "model.keras") == expected
    assert steps_taken(work / "final" / "model.keras") == expected
    assert os.path.exists(work / "train" / "worker-00001" / "_SUCCESS")
