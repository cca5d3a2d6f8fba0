"""The conformance set: the model shapes real users bring, each built as a user builds it (own_models.py) and saved
with model.save(), through the real stages: the copier (image folders or a table), 2 trainers on `average` and on a
connected strategy, the aggregator, and the server. Each case checks that the shape trains, that the published
file is the user's model as it was built (its classes, layers and parameters), and that `:predict` answers what
`model.predict` of the published file answers (loaded with keras.saving.load_model in safe mode, the user's
module imported) to within 1e-5. Not their accuracy: data and epochs are small; a table model, whose run is long
enough, must beat the trivial predictor.

    mobilenetv3small   keras.applications.MobileNetV3Small(input_shape=(32, 32, 3), weights=None, classes=10)
    efficientnetb0     keras.applications.EfficientNetB0, the same way; both on digit image folders (images:DIR)
    sigmoid_layer      a functional table model whose output is a registered custom layer with its sigmoid inside
    train_step         a registered keras.Model subclass with its own train_step (refused by multiworker: localsgd)
    adamw_schedule     a table model compiled with AdamW(CosineDecay(...), weight_decay=..., clipnorm=1.0)

Every case is long (make test-long): a few minutes each on 2 cores."""

import json
import re
import time
from dataclasses import dataclass

import numpy as np
import pytest

from own_models import (
    CONFORMANCE_MODULE_NAME,
    adamw_schedule,
    digit_image_folders,
    efficientnetb0,
    mobilenetv3small,
    run_own_pipeline,
    saved,
    sigmoid_layer,
    train_step,
    workdir_with,
    write_conformance_module,
)
from stages import stage

pytestmark = [pytest.mark.slow, pytest.mark.long]


# ---------------------------------------------------------------- the data and the user's code, once per session
@pytest.fixture(scope="session")
def digit_images_data(tmp_path_factory):
    """300 digit PNGs (30 a label, 32x32 RGB) in images:DIR/<label>/ folders, copied by the real copier into 2
    shards and a held-out split; the data directory, which each test copies into its own workdir."""
    root = tmp_path_factory.mktemp("digit-folders")
    folders = digit_image_folders(str(root / "photos"))
    stage("copier", "--source", f"images:{folders}", "--image-size", 32, "--n-shards", 2, "--workdir", root / "work")
    return root / "work" / "data"


@pytest.fixture(scope="session")
def user_code(tmp_path_factory):
    """The user's module (own_models.CONFORMANCE_MODULE) in a folder of its own, imported here (its classes
    registered, for building the models and loading the published ones); the stages' environment with the folder
    on PYTHONPATH."""
    return write_conformance_module(str(tmp_path_factory.mktemp("user-code")))


@dataclass(frozen=True)
class Shape:
    build: object  # build(data directory) -> a compiled keras.Model
    data: str  # the session fixture of its data
    connected: str  # the connected strategy it trains on beside average
    epochs: int
    module: bool = False  # its classes are the user's module's: the stages get --model-module
    long_enough: bool = True  # its run beats the trivial predictor (else the gate may refuse it: --force)


SHAPES = {
    "mobilenetv3small": Shape(mobilenetv3small, "digit_images_data", "multiworker", epochs=2, long_enough=False),
    "efficientnetb0": Shape(efficientnetb0, "digit_images_data", "multiworker", epochs=2, long_enough=False),
    "sigmoid_layer": Shape(sigmoid_layer, "cancer_data", "multiworker", epochs=3, module=True),
    # multiworker refuses a model's own train_step (its step sums the gradients across the workers)
    "train_step": Shape(train_step, "cancer_data", "localsgd", epochs=3, module=True),
    "adamw_schedule": Shape(adamw_schedule, "cancer_data", "multiworker", epochs=3),
}
CASES = [
    pytest.param(name, strategy, id=f"{name}-{strategy}")
    for name, shape in SHAPES.items()
    for strategy in ("average", shape.connected)
]


# ---------------------------------------------------------------- what each case checks
def trivial_accuracy(data):
    """The held-out accuracy of always answering the training shards' most frequent label."""
    from disttrain_contract.manifest import Manifest, read_split

    manifest = Manifest.read(str(data))
    y = np.concatenate([read_split(str(data), manifest, s)[1] for s in manifest.shards])
    y_test = read_split(str(data), manifest, manifest.test)[1]
    return float((y_test == np.bincount(y).argmax()).mean())


def layout(model):
    """What makes a model the one its user built: its class, its layers' names and classes, its weights' shapes."""
    return (
        type(model).__name__,
        [(layer.name, type(layer).__name__) for layer in model.layers],
        [tuple(w.shape) for w in model.weights],
    )


def steps_per_epoch(log):
    return int(re.search(r"(\d+) steps/epoch", open(log).read()).group(1))


def served_predictions(base, x, chunk=32):
    from server.serving import http, predict_url

    rows = []
    for start in range(0, len(x), chunk):
        status, body = http("POST", base + predict_url(), {"instances": x[start : start + chunk].tolist()})
        assert status == 200, body
        rows += body["predictions"]
    return np.asarray(rows, np.float64)


def label_probabilities(raw):
    """model.predict's output as the server answers it, one probability per label: a single sigmoid unit is
    the second label's probability."""
    return np.concatenate([1 - raw, raw], axis=-1) if raw.shape[-1] == 1 else raw


@pytest.mark.parametrize("name, strategy", CASES)
def test_the_model_trains_is_published_and_is_served_as_built(name, strategy, request, tmp_path, user_code):
    import keras

    from server.serving import running_server

    shape = SHAPES[name]
    data = request.getfixturevalue(shape.data)
    started = time.monotonic()
    built = shape.build(data)
    path = saved(built, tmp_path / f"{name}.keras")
    work = workdir_with(data, tmp_path)
    module = ("--model-module", CONFORMANCE_MODULE_NAME) if shape.module else ()
    # (--exports none: the exports are tested on their own; here they would cost an EfficientNet case a minute)
    gate = ("--exports", "none") if shape.long_enough else ("--force", "--exports", "none")
    report = run_own_pipeline(
        work,
        2,
        strategy,
        "--model-file",
        path,
        "--threads",
        1,
        *module,
        epochs=shape.epochs,
        env=user_code,
        aggregator_args=(*module, *gate),
    )
    if shape.long_enough:
        assert report["final"]["test_accuracy"] > trivial_accuracy(data) + 0.05, report["final"]
        assert report["gate"]["passed"], report["gate"]

    # the published file is the user's model as it was built: its classes, layers and weights, in safe mode
    published = work / "final" / "model.keras"
    model = keras.saving.load_model(str(published), safe_mode=True)
    assert layout(model) == layout(built)
    if name == "adamw_schedule":  # both workers trained with the compiled recipe; the trainer's file keeps it
        for i in range(2):
            log = open(work / f"worker-{i}.log").read()
            assert ": optimizer AdamW (learning_rate CosineDecay(initial_learning_rate=0.01, decay_steps=60" in log
            assert "weight_decay 0.004, clipnorm 1): the model's compiled optimizer" in log
        # (worker 0's: under multiworker the chief alone writes the one model)
        trained = keras.saving.load_model(str(work / "train" / "worker-00000" / "model.keras"), safe_mode=True)
        optimizer = keras.optimizers.serialize(trained.optimizer)
        assert optimizer["class_name"] == "AdamW" and optimizer["config"]["clipnorm"] == 1.0, optimizer
        assert optimizer["config"]["learning_rate"]["class_name"] == "CosineDecay", optimizer

    x = np.load(data / "test.x.npy")
    expected = label_probabilities(model.predict(x.astype(np.float32), batch_size=32, verbose=0))
    assert np.isfinite(expected).all()
    with running_server(str(work), "--workers", 1, *module, env=user_code) as (base, _, _):
        answered = served_predictions(base, x)
    assert answered.shape == expected.shape == (len(x), len(json.load(open(data / "manifest.json"))["labels"]))
    np.testing.assert_allclose(answered, expected, rtol=0, atol=1e-5)
    if name == "train_step":  # every step of every worker went through the model's own train_step (checked last)
        steps = [shape.epochs * steps_per_epoch(work / f"worker-{i}.log") for i in range(2)]
        assert float(model.own_steps.numpy()) == np.mean(steps), steps  # average's mean, localsgd's synced count
    accuracy = report["final"]["test_accuracy"]
    print(f"{name} on {strategy}: {time.monotonic() - started:.0f} s, held-out accuracy {accuracy:.3f}")
