"""A user's model checked before training, through the real trainer (tasks/own.py; the messages themselves:
tests/unit/test_own_model_checks.py): a refused start writes nothing, so the next one, with the model fixed as the
message says, trains in the same workdir; each refusal's advice, followed literally, gives a model that trains and
beats the trivial predictor; and a sigmoid inside a custom output layer, compiled with binary_crossentropy, trains
through the trainers and the aggregator."""

import json
import signal
import textwrap

import numpy as np
import pytest

from own_models import (
    only_error_line,
    run_own_pipeline,
    saved,
    table_statistics,
    train,
    with_pythonpath,
    workdir_with,
)

pytestmark = pytest.mark.slow


def trivial_accuracy(data):
    """The held-out accuracy of always answering the training shards' most frequent label."""
    from disttrain_contract.manifest import Manifest, read_split

    manifest = Manifest.read(str(data))
    y = np.concatenate([read_split(str(data), manifest, s)[1] for s in manifest.shards])
    y_test = read_split(str(data), manifest, manifest.test)[1]
    return float((y_test == np.bincount(y).argmax()).mean())


def hidden(data, inputs):
    import keras

    mean, variance = table_statistics(data / "manifest.json")
    x = keras.layers.Normalization(mean=mean, variance=variance)(inputs)
    return keras.layers.Dense(16, activation="relu")(x)


def column_model(dtypes, loss="binary_crossentropy", data=None):
    """One named input per column ({column: dtype}), a StringLookup on a string one, one sigmoid unit; with `data`
    (a copied table), each numeric column normalised with its training statistics, as a user would."""
    import keras

    inputs = {name: keras.Input((1,), name=name, dtype=dtype) for name, dtype in dtypes.items()}
    statistics = json.load(open(data / "manifest.json"))["input"] if data is not None else None

    def numeric(name, t):
        if statistics is None:
            return t
        j = statistics["features"].index(name)
        mean, variance = statistics["statistics"]["mean"][j], statistics["statistics"]["variance"][j]
        return keras.layers.Normalization(mean=[mean], variance=[variance])(t)

    parts = [
        keras.layers.StringLookup(vocabulary=["a", "b"], output_mode="one_hot")(t)
        if t.dtype == "string"
        else numeric(name, t)
        for name, t in inputs.items()
    ]
    x = keras.layers.Dense(8, activation="relu")(keras.layers.Concatenate()(parts))
    model = keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(x))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=loss)
    return model


def test_a_string_input_is_one_line_and_the_next_start_with_the_fixed_model_trains(cancer_data, tmp_path):
    """The issue's case: a table model with a string input ended in 'Cast float to string is not supported' after
    checkpoints/run.json was written, which refused the next start. Now: one line, exit 2, nothing written; the
    model the message describes (the same input as a float32 keras.Input) trains in the same workdir."""
    work = workdir_with(cancer_data, tmp_path)
    bad = saved(column_model({"mean_radius": "float32", "mean_texture": "string"}), tmp_path / "bad.keras")
    result = train(work, "--model-file", bad, "--epochs", 1, "--workers", 2)
    assert result.returncode == 2, result.stderr
    line = only_error_line(result)
    assert "'mean_texture' takes string" in line and "keras.Input(shape=(1,), name='mean_texture')" in line, line
    assert not (work / "train").exists()

    fixed = column_model({"mean_radius": "float32", "mean_texture": "float32"}, data=cancer_data)
    result = train(work, "--model-file", saved(fixed, tmp_path / "fixed.keras"), "--epochs", 4, "--workers", 2)
    assert result.returncode == 0, result.stderr
    marker = json.load(open(work / "train" / "worker-00000" / "_SUCCESS"))
    assert marker["final_test_metric"]["value"] > trivial_accuracy(cancer_data), marker


# ---------------------------------------------------------------- each refusal's advice, followed literally
def dense(data, n_in, units, activation=None, loss=None):
    import keras

    inputs = keras.Input((n_in,), name="measurements")
    model = keras.Model(inputs, keras.layers.Dense(units, activation=activation)(hidden(data, inputs)))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=loss)
    return model


def regressor(data, n_in, units, activation=None, loss=None):
    """A regression model whose output is in the target's unit (the target's training statistics)."""
    import keras

    target = json.load(open(data / "manifest.json"))["target_statistics"]
    inputs = keras.Input((n_in,), name="measurements")
    x = keras.layers.Dense(units, activation=activation)(hidden(data, inputs))
    model = keras.Model(inputs, keras.layers.Rescaling(target["variance"] ** 0.5, target["mean"])(x))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=loss)
    return model


def text_input(data, n_in, units, activation=None, loss=None):
    import keras

    inputs = keras.Input((n_in,), dtype="string", name="review")
    lookup = keras.layers.StringLookup(vocabulary=["a", "b"], output_mode="multi_hot")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(units, activation=activation)(lookup))
    model.compile(optimizer="adam", loss=loss)
    return model


def int_input(data, n_in, units, activation=None, loss=None):
    import keras

    inputs = keras.Input((n_in,), dtype="int32", name="measurements")
    x = keras.layers.Dense(16, activation="relu")(keras.layers.Normalization()(inputs))
    model = keras.Model(inputs, keras.layers.Dense(units, activation=activation)(x))
    model.compile(optimizer="adam", loss=loss)
    return model


BCE, SCCE = "binary_crossentropy", "sparse_categorical_crossentropy"


def bce_logits():
    import keras

    return keras.losses.BinaryCrossentropy(from_logits=True)


def bce():
    import keras

    return keras.losses.BinaryCrossentropy()


# name -> (data, the refused model (maker, units, activation, loss), what the line says, the advised model)
ADVICE = {
    "string input": ("cancer", (text_input, 1, "sigmoid", BCE), "make it keras.Input(shape=(30,))", (dense, 1, "sigmoid", BCE)),
    "integer input": ("cancer", (int_input, 1, "sigmoid", BCE), "make it keras.Input(shape=(30,))", (dense, 1, "sigmoid", BCE)),
    "sigmoid under from_logits": ("cancer", (dense, 1, "sigmoid", bce_logits), "compile it with keras.losses.BinaryCrossentropy()", (dense, 1, "sigmoid", bce)),
    "sigmoid under from_logits, no activation": ("cancer", (dense, 1, "sigmoid", bce_logits), "or end the model in Dense(1) with no activation", (dense, 1, None, bce_logits)),
    "linear under probabilities": ("cancer", (dense, 1, None, BCE), "compile it with keras.losses.BinaryCrossentropy(from_logits=True)", (dense, 1, None, bce_logits)),
    "linear under probabilities, sigmoid": ("cancer", (dense, 1, None, BCE), "end the model in Dense(1, activation='sigmoid')", (dense, 1, "sigmoid", BCE)),
    "two units under binary": ("cancer", (dense, 2, "softmax", BCE), "or compile it with loss='sparse_categorical_crossentropy'", (dense, 2, "softmax", SCCE)),
    "binary on three labels": (
        "wine", (dense, 1, "sigmoid", BCE),
        "end the model in Dense(3, activation='softmax') and compile it with loss='sparse_categorical_crossentropy'",
        (dense, 3, "softmax", SCCE),
    ),
    "fewer units than labels": ("wine", (dense, 2, "softmax", SCCE), "end the model in Dense(3, activation='softmax')", (dense, 3, "softmax", SCCE)),
    "classifier loss on a regression": ("diabetes", (regressor, 1, None, BCE), "compile it with loss='mse'", (regressor, 1, None, "mse")),
}  # fmt: skip


@pytest.fixture
def in_process():
    """train(config) of the real trainer in this process (one TensorFlow start for every case); its SIGTERM
    handler is put back after."""
    from disttrain_trainer.config import parse_config
    from disttrain_trainer.training import train as run

    handler = signal.getsignal(signal.SIGTERM)
    yield lambda *argv: run(parse_config([str(a) for a in argv]))
    signal.signal(signal.SIGTERM, handler)


@pytest.mark.long  # (ten real trainer runs, ~60 s: make test-long)
@pytest.mark.parametrize("case", list(ADVICE))
def test_each_refusals_advice_followed_literally_trains(
    case, cancer_data, wine_data, diabetes_data, tmp_path, in_process
):
    from disttrain_contract.errors import ContractError

    name, refused, says, advised = ADVICE[case]
    data = {"cancer": cancer_data, "wine": wine_data, "diabetes": diabetes_data}[name]
    work = workdir_with(data, tmp_path)
    n_in = len(json.load(open(data / "manifest.json"))["input"]["features"])

    def model(maker, units, activation, loss):
        return maker(data, n_in, units, activation, loss() if callable(loss) else loss)

    args = ("--workdir", work, "--worker-index", 0, "--workers", 2, "--batch", 32, "--seed", 3, "--epochs")
    with pytest.raises(ContractError) as err:
        in_process(*args, 1, "--model-file", saved(model(*refused), tmp_path / "refused.keras"))
    assert says in str(err.value), str(err.value)
    assert not (work / "train").exists()
    assert in_process(*args, 12, "--model-file", saved(model(*advised), tmp_path / "advised.keras")) == 0
    final = json.load(open(work / "train" / "worker-00000" / "_SUCCESS"))["final_test_metric"]
    if name == "diabetes":  # a mean predictor's RMSE is the targets' standard deviation, ~77
        assert final["name"] == "rmse" and final["value"] < 70, final
    else:
        assert final["value"] > trivial_accuracy(data) + 0.1, final


# ---------------------------------------------------------------- a sigmoid inside a custom output layer
SIGMOID_MODULE = textwrap.dedent('''
    """A user's output layer with its sigmoid inside call: no `activation` attribute says so."""
    import keras


    @keras.saving.register_keras_serializable(package="sigmoid_head")
    class SigmoidHead(keras.layers.Layer):
        def build(self, input_shape):
            self.kernel = self.add_weight(shape=(input_shape[-1], 1), initializer="glorot_uniform", name="kernel")
            self.bias = self.add_weight(shape=(1,), initializer="zeros", name="bias")

        def call(self, x):
            return keras.ops.sigmoid(keras.ops.matmul(x, self.kernel) + self.bias)
''')


@pytest.mark.long
def test_a_sigmoid_inside_a_custom_output_layer_trains_and_beats_the_trivial_predictor(cancer_data, tmp_path):
    """The issue's case: it was refused (only the last layer's activation was read), and its advice
    (from_logits=True) trained a double sigmoid that the gate published at 0.477. Compiled with
    binary_crossentropy, it trains as it is, through 2 average workers and the aggregator."""
    import importlib
    import sys

    import keras

    code = tmp_path / "code"
    code.mkdir()
    (code / "sigmoid_head.py").write_text(SIGMOID_MODULE)
    sys.path.insert(0, str(code))
    try:
        head = importlib.import_module("sigmoid_head")
        inputs = keras.Input((30,), name="measurements")
        model = keras.Model(inputs, head.SigmoidHead(name="malignant_or_benign")(hidden(cancer_data, inputs)))
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss="binary_crossentropy")
        path = saved(model, tmp_path / "model.keras")
    finally:
        sys.path.remove(str(code))
    work = workdir_with(cancer_data, tmp_path)
    env = with_pythonpath(code)
    report = run_own_pipeline(
        work,
        2,
        "average",
        "--model-file",
        path,
        "--model-module",
        "sigmoid_head",
        epochs=8,
        env=env,
        aggregator_args=("--model-module", "sigmoid_head"),
    )
    assert report["final"]["test_accuracy"] > max(0.9, trivial_accuracy(cancer_data)), report["final"]
    meta = json.loads(__import__("zipfile").ZipFile(work / "final" / "model.keras").read("disttrain.json"))
    assert meta["head"] == "sigmoid", meta["head"]
