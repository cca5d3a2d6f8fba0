"""artifact.compile_as_saved: the published model compiled as the workers' files were, or one reason why not."""

import json
import zipfile

import keras
import numpy as np

from disttrain_contract.artifact import compile_as_saved


def small_model():
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, activation="softmax")])


def test_a_compiled_files_loss_metrics_and_optimizer_config_are_applied_with_a_fresh_state(tmp_path):
    model = small_model()
    schedule = keras.optimizers.schedules.CosineDecay(1e-3, decay_steps=100)
    model.compile(
        optimizer=keras.optimizers.AdamW(schedule, weight_decay=0.01, clipnorm=1.0),
        loss="sparse_categorical_crossentropy",
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="acc")],
    )
    model.fit(np.ones((8, 3)), np.zeros(8), epochs=1, verbose=0)
    model.save(tmp_path / "w.keras")
    target = small_model()
    assert compile_as_saved(target, tmp_path / "w.keras") is None
    optimizer = target.optimizer
    assert type(optimizer).__name__ == "AdamW" and optimizer.weight_decay == 0.01 and optimizer.clipnorm == 1.0
    assert isinstance(optimizer._learning_rate, keras.optimizers.schedules.CosineDecay)
    assert int(optimizer.iterations.numpy()) == 0  # the state starts over
    assert target.loss == "sparse_categorical_crossentropy"
    scores = target.evaluate(np.ones((4, 3)), np.zeros(4), verbose=0, return_dict=True)
    assert set(scores) == {"loss", "acc"}


def test_an_uncompiled_file_leaves_the_model_uncompiled_without_a_reason(tmp_path):
    small_model().save(tmp_path / "plain.keras")
    target = small_model()
    assert compile_as_saved(target, tmp_path / "plain.keras") is None
    assert not target.compiled


def test_a_configuration_keras_cannot_rebuild_is_a_reason_not_an_exception(tmp_path):
    model = small_model()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.save(tmp_path / "w.keras")
    with zipfile.ZipFile(tmp_path / "w.keras") as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    config = json.loads(members["config.json"])
    config["compile_config"]["loss"] = {"module": "nowhere", "class_name": "NoSuchLoss", "config": {}}
    members["config.json"] = json.dumps(config).encode()
    with zipfile.ZipFile(tmp_path / "bad.keras", "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    target = small_model()
    reason = compile_as_saved(target, tmp_path / "bad.keras")
    assert reason.startswith("Keras cannot rebuild its compile configuration") and "NoSuchLoss" in reason
    assert not target.compiled
