"""A user's model is checked against the data and its compiled loss before any step (tasks/own.py): every input's
name, shape and dtype (a table's several named inputs each against its column), the output against the loss
(probabilities or logits are the compiled loss's to say; a custom output layer may apply anything), and the model
run on a few real training rows, whose output range may warn but never changes the head. The tasks are created
here in-process, as the trainer's read phase creates them, on tables the real copier wrote; the advice of each
refusal is followed by real training in tests/integration/test_own_model_checks.py."""

import numpy as np
import pytest

from own_models import breast_cancer_csv, diabetes_csv, table_statistics, wine_csv

keras = pytest.importorskip("keras")


@keras.saving.register_keras_serializable(package="own_model_checks")
class SigmoidHead(keras.layers.Layer):
    """A custom output layer with the sigmoid inside its call (no `activation` attribute to read)."""

    def __init__(self, units=1, squash="sigmoid", **kwargs):
        super().__init__(**kwargs)
        self.units, self.squash = units, squash
        self.dense = keras.layers.Dense(units)

    def build(self, input_shape):
        self.dense.build(input_shape)

    def call(self, x):
        return getattr(keras.ops, self.squash)(self.dense(x))

    def get_config(self):
        return {**super().get_config(), "units": self.units, "squash": self.squash}


@keras.saving.register_keras_serializable(package="own_model_checks")
class SmallValuesOnly(keras.layers.Layer):
    """Fails when it runs on values above 1 (the raw table's are): built symbolically it is fine."""

    def call(self, x):
        import tensorflow as tf

        with tf.control_dependencies([tf.debugging.assert_less(tf.reduce_max(x), 1.0, message="a value above 1")]):
            return tf.identity(x)


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """{name: data directory}: the cancer, wine and diabetes tables copied by the real copier (2 shards)."""
    from disttrain_copier.main import main as copier

    root, out = tmp_path_factory.mktemp("tables"), {}
    for name, write, args in (
        ("cancer", breast_cancer_csv, ()),
        ("wine", wine_csv, ()),
        ("diabetes", diabetes_csv, ("--label-column", "progression", "--problem", "regression")),
    ):
        csv = write(str(root / f"{name}.csv"))
        copier(["--source", f"table:{csv}", "--n-shards", "2", "--workdir", str(root / name), *args])
        out[name] = root / name / "data"
    return out


def task_for(data, model, tmp_path, *args):
    """The own task for `model` (saved and loaded back as --model-file) on the data, as the trainer creates it."""
    from disttrain_contract.manifest import Manifest
    from disttrain_trainer.config import parse_config
    from disttrain_trainer.tasks import own

    path = str(tmp_path / "model.keras")
    model.save(path)
    config = parse_config(["--workdir", str(tmp_path / "work"), "--data", str(data), "--model-file", path, *args])
    return own.Task(Manifest.read(str(data)), config)


def refusal(data, model, tmp_path):
    from disttrain_contract.errors import ContractError

    with pytest.raises(ContractError) as err:
        task_for(data, model, tmp_path)
    message = str(err.value)
    assert "\n" not in message, message
    return message


def training_rows(data, rows=64):
    from disttrain_contract.manifest import Manifest, read_split

    manifest = Manifest.read(str(data))
    return read_split(str(data), manifest, manifest.shards[0])[0][:rows]


def dense_model(data, units, activation=None, loss=None, inputs_dtype="float32"):
    mean, variance = table_statistics(data / "manifest.json")
    inputs = keras.Input((len(mean),), name="measurements", dtype=inputs_dtype)
    x = keras.layers.Dense(8, activation="relu")(keras.layers.Normalization(mean=mean, variance=variance)(inputs))
    model = keras.Model(inputs, keras.layers.Dense(units, activation=activation, name="head")(x))
    if loss is not None:
        model.compile(optimizer="adam", loss=loss)
    return model


def column_inputs(dtypes, shape=(1,)):
    """A table model with one named input per column ({column: dtype}); a string column goes through a StringLookup."""
    inputs = {name: keras.Input(shape, name=name, dtype=dtype) for name, dtype in dtypes.items()}
    parts = [
        keras.layers.StringLookup(vocabulary=["a", "b"], output_mode="one_hot")(t)
        if t.dtype == "string"
        else keras.layers.Reshape((-1,))(t)
        for t in inputs.values()
    ]
    model = keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(keras.layers.Concatenate()(parts)))
    model.compile(optimizer="adam", loss="binary_crossentropy")
    return model


# ---------------------------------------------------------------- inputs: name, shape, dtype (both sides named)
def test_a_table_input_of_strings_is_refused_naming_it_and_both_dtypes(tables, tmp_path):
    line = refusal(tables["cancer"], column_inputs({"mean_radius": "float32", "mean_texture": "string"}), tmp_path)
    assert "input 'mean_texture' takes string" in line and "column 'mean_texture' is float32" in line, line
    assert "keras.Input(shape=(1,), name='mean_texture')" in line and "StringLookup" in line, line


def test_a_table_input_of_integers_is_refused_and_a_wider_float_is_taken(tables, tmp_path):
    line = refusal(tables["cancer"], column_inputs({"mean_radius": "int32", "mean_texture": "float32"}, ()), tmp_path)
    assert "input 'mean_radius' takes int32" in line and "is float32" in line, line
    assert "keras.Input(shape=(), name='mean_radius')" in line, line
    task = task_for(tables["cancer"], column_inputs({"mean_radius": "float64", "mean_texture": "float16"}), tmp_path)
    assert task.columns == {"mean_radius": (0, True), "mean_texture": (1, True)}


def test_a_table_input_named_after_no_column_or_of_two_values_is_refused(tables, tmp_path):
    line = refusal(tables["cancer"], column_inputs({"mean_radius": "float32", "radius": "float32"}), tmp_path)
    assert "input 'radius' is not a column" in line and "mean_radius" in line, line
    line = refusal(
        tables["cancer"], column_inputs({"mean_radius": "float32", "mean_texture": "float32"}, (2,)), tmp_path
    )
    assert "input 'mean_radius' has shape [2]" in line, line


def test_a_single_input_of_another_dtype_or_shape_is_refused_naming_both_sides(tables, tmp_path):
    data = tables["cancer"]
    line = refusal(data, dense_model(data, 1, "sigmoid", "binary_crossentropy", inputs_dtype="int64"), tmp_path)
    assert (
        "input 'measurements' has shape [30] and dtype int64" in line
        and "'features' has shape [30] and dtype float32" in line
    ), line
    assert "make it keras.Input(shape=(30,))" in line, line
    inputs = keras.Input((1,), dtype="string", name="review")
    lookup = keras.layers.StringLookup(vocabulary=["a", "b"], output_mode="one_hot")(inputs)
    text = keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(lookup))
    line = refusal(data, text, tmp_path)
    assert "input 'review' has shape [1] and dtype string" in line and "'features' has shape [30]" in line, line
    narrow = keras.Input((29,), name="measurements")
    line = refusal(data, keras.Model(narrow, keras.layers.Dense(1, activation="sigmoid")(narrow)), tmp_path)
    assert "has shape [29]" in line and "has shape [30]" in line and "keras.Input(shape=(30,))" in line, line


# ---------------------------------------------------------------- the output follows the compiled loss
def custom_head_model(data, units=1, squash="sigmoid", loss=None):
    keras.utils.set_random_seed(3)  # (the same weights in every run: what the probe sees does not depend on order)
    mean, variance = table_statistics(data / "manifest.json")
    inputs = keras.Input((len(mean),), name="measurements")
    x = keras.layers.Dense(8, activation="relu")(keras.layers.Normalization(mean=mean, variance=variance)(inputs))
    model = keras.Model(inputs, SigmoidHead(units, squash, name="custom_head")(x))
    if loss is not None:
        model.compile(optimizer="adam", loss=loss)
    return model


def test_a_sigmoid_inside_a_custom_layer_reads_as_the_compiled_loss_says(tables, tmp_path, capsys):
    data = tables["cancer"]
    task = task_for(data, custom_head_model(data, loss="binary_crossentropy"), tmp_path)
    assert task.head == "sigmoid"
    task.prepare(str(data), training_rows(data))
    assert "warning" not in capsys.readouterr().err
    # the double sigmoid of the issue: the loss says logits, and is followed; the probe of the output warns
    task = task_for(data, custom_head_model(data, loss=keras.losses.BinaryCrossentropy(from_logits=True)), tmp_path)
    assert task.head == "sigmoid_logits"
    task.prepare(str(data), training_rows(data))
    err = capsys.readouterr().err
    assert "warning: the compiled keras.losses.BinaryCrossentropy reads it as logits" in err, err
    assert "without from_logits=True" in err, err


def test_a_keras_layer_that_contradicts_the_loss_is_refused(tables, tmp_path):
    data = tables["cancer"]
    logits_loss = keras.losses.BinaryCrossentropy(from_logits=True)
    line = refusal(data, dense_model(data, 1, "sigmoid", logits_loss), tmp_path)
    assert "'head' (1 unit(s), activation sigmoid) is already a sigmoid" in line, line
    assert "compile it with keras.losses.BinaryCrossentropy() (from_logits=False)" in line and "Dense(1)" in line
    line = refusal(data, dense_model(data, 1, None, "binary_crossentropy"), tmp_path)
    assert "outputs linear values" in line and "keras.losses.BinaryCrossentropy(from_logits=True)" in line, line
    assert "Dense(1, activation='sigmoid')" in line, line
    line = refusal(data, dense_model(data, 2, "softmax", "binary_crossentropy"), tmp_path)
    assert "scores one unit per example" in line and "loss='sparse_categorical_crossentropy'" in line, line
    line = refusal(data, dense_model(data, 2, "softmax", keras.losses.SparseCategoricalCrossentropy(True)), tmp_path)
    assert "is already a softmax" in line and "SparseCategoricalCrossentropy() (from_logits=False)" in line, line


def test_the_labels_must_fit_the_output_units_the_loss_scores(tables, tmp_path):
    wine = tables["wine"]
    line = refusal(wine, dense_model(wine, 1, "sigmoid", "binary_crossentropy"), tmp_path)
    assert "scores two labels, and the data has 3" in line and "Dense(3, activation='softmax')" in line, line
    line = refusal(wine, dense_model(wine, 2, "softmax", "sparse_categorical_crossentropy"), tmp_path)
    assert "3 labels, more than the output's 2 unit(s)" in line and "Dense(3, activation='softmax')" in line, line
    logits = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    line = refusal(wine, dense_model(wine, 2, None, logits), tmp_path)
    assert "end the model in Dense(3)" in line, line


def test_a_categorical_loss_scores_the_labels_one_hot(tables, tmp_path):
    """CategoricalCrossentropy takes one-hot labels; the data's are class indices: the task turns them into one-hot
    rows, and the per-example loss is the sparse loss's."""
    import tensorflow as tf

    wine = tables["wine"]
    task = task_for(wine, dense_model(wine, 3, "softmax", "categorical_crossentropy"), tmp_path)
    assert task.head == "softmax"
    probabilities = tf.constant([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.3, 0.4, 0.3]])
    y = tf.constant([0, 2, 0], tf.int64)
    loss, _ = task.loss_and_score(y, probabilities)
    assert np.allclose(loss.numpy(), -np.log([0.7, 0.8, 0.3]), atol=1e-6), loss


def test_without_a_loss_the_last_layer_decides_as_before(tables, tmp_path, capsys):
    data = tables["cancer"]
    assert task_for(data, dense_model(data, 1, "sigmoid"), tmp_path).head == "sigmoid"
    assert task_for(data, dense_model(data, 2, "softmax"), tmp_path).head == "softmax"
    assert task_for(data, dense_model(data, 2), tmp_path).head == "logits"
    line = refusal(data, custom_head_model(data), tmp_path)
    assert "the custom layer SigmoidHead" in line and "compile it with loss='binary_crossentropy'" in line, line
    # a custom softmax read as logits (no loss to say otherwise): the probe warns
    task = task_for(data, custom_head_model(data, 2, "softmax"), tmp_path)
    assert task.head == "logits"
    task.prepare(str(data), training_rows(data))
    assert "warning: the last layer's the custom layer SigmoidHead reads it as logits" in capsys.readouterr().err


def test_a_probe_of_probabilities_out_of_range_warns_and_changes_nothing(tables, tmp_path, capsys):
    data = tables["cancer"]
    task = task_for(data, custom_head_model(data, squash="tanh", loss="binary_crossentropy"), tmp_path)
    task.prepare(str(data), training_rows(data))
    err = capsys.readouterr().err
    assert task.head == "sigmoid" and "reads it as a probability, but on 64 training rows" in err, err
    task = task_for(data, dense_model(data, 2, "softmax", "sparse_categorical_crossentropy"), tmp_path)
    task.prepare(str(data), training_rows(data))
    assert "warning" not in capsys.readouterr().err


def test_a_regression_compiled_with_a_classifiers_loss_is_refused(tables, tmp_path):
    diabetes = tables["diabetes"]
    line = refusal(diabetes, dense_model(diabetes, 1, None, "binary_crossentropy"), tmp_path)
    assert "a classifier's loss" in line and "'progression'" in line and "loss='mse'" in line, line
    assert task_for(diabetes, dense_model(diabetes, 1, None, "mse"), tmp_path).head == "value"


def test_a_model_that_fails_on_the_training_rows_is_one_line_before_training(tables, tmp_path):
    from disttrain_contract.errors import ContractError

    data = tables["cancer"]
    inputs = keras.Input((30,), name="measurements")
    model = keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(SmallValuesOnly()(inputs)))
    model.compile(loss="binary_crossentropy")
    task = task_for(data, model, tmp_path)
    with pytest.raises(ContractError) as err:
        task.prepare(str(data), training_rows(data))
    line = str(err.value)
    assert "does not run on 64 training rows" in line and "a value above 1" in line and "\n" not in line, line
