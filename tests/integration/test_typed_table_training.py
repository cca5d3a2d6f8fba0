"""Training on a typed table (task typed_table), both ways, with 2 workers of each strategy, through trainers ->
aggregator (the dataset written as the copier writes one: tests/typed_table_data.py, shared by every test):

  columns  a --model-module whose named inputs are the table's columns (its own StringLookup, Embedding,
           Normalization, built from build(spec)'s spec.table);
  block    a --model-file that takes one float vector: disttrain's preprocessing block is put in front of it;
  built-in no model given: the block + the built-in MLP.

Each run must score well above the majority class on the held-out split, its published exports take raw rows
(the SavedModel's serving signature: one input per column, its predictions those of final/model.keras to
1e-5), and its disttrain.json's input is the table's spec.
"""

import json
import os
import shutil
import zipfile

import numpy as np
import pytest

from disttrain_contract.manifest import Manifest, read_split
from disttrain_contract.typed_table import TableSpec, encoded_width
from own_models import only_error_line, run_own_pipeline, saved, train, with_pythonpath
from typed_table_data import one_vector_model, write_raw_columns_module, write_typed_table

pytestmark = pytest.mark.slow

EPOCHS = 8
# the held-out majority class scores ~0.6 on this table (tests/typed_table_data.py); a model that reads the
# columns ~0.8
MARGIN = 0.08
MODULE = "typed_raw_columns"


@pytest.fixture(scope="module")
def typed_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("typed_table")
    write_typed_table(str(root / "data"), n_shards=2)
    write_raw_columns_module(str(root / "code"))
    return root


def workdir(typed_data, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(typed_data / "data", work / "data")
    return work


def way_args(way, typed_data, tmp_path):
    """(trainer args, aggregator args, environment) of a way of taking the columns."""
    if way == "columns":
        env = with_pythonpath(typed_data / "code")
        return ("--model-module", MODULE), ("--model-module", MODULE), env
    if way == "block":
        spec = TableSpec.from_json(Manifest.read(str(typed_data / "data")).input)
        path = saved(one_vector_model(encoded_width(spec)), tmp_path / "one_vector.keras")
        return ("--model-file", path), (), None
    return (), (), None


def majority(work):
    manifest = Manifest.read(str(work / "data"))
    _, y = read_split(str(work / "data"), manifest, manifest.test)
    return max(np.mean(y == 0), np.mean(y == 1))


def check_published(work, report):
    """disttrain.json's input is the spec; the SavedModel's signature takes the raw columns and answers as
    final/model.keras does; the exports record what they are (TFLite: skipped for the string columns)."""
    import tensorflow as tf

    from disttrain_contract.artifact import load_model
    from disttrain_contract.serving import SIGNATURE_NAME

    final = work / "final"
    manifest = Manifest.read(str(work / "data"))
    with zipfile.ZipFile(final / "model.keras") as archive:
        meta = json.loads(archive.read("disttrain.json"))
    assert meta["input"] == manifest.input and meta["input"]["typed"] is True
    spec = TableSpec.from_json(manifest.input)
    # (every model here takes every column; a dict of Keras inputs is in the order of its sorted names)
    assert sorted(i["name"] for i in meta["inputs"]) == sorted(spec.names)
    model, _ = load_model(str(final / "model.keras"))
    x, _ = read_split(str(work / "data"), manifest, manifest.test)
    x = {i["name"]: x[i["name"]] for i in meta["inputs"]}
    keras_out = np.asarray(model(x, training=False))
    saved = report["exports"]["saved_model"]
    signature = saved["signatures"][SIGNATURE_NAME]
    assert {name: spec_["dtype"] for name, spec_ in signature["inputs"].items()} == {
        i["name"]: {"string": "DT_STRING", "float32": "DT_FLOAT", "int64": "DT_INT64"}[i["dtype"]]
        for i in meta["inputs"]
    }
    loaded = tf.saved_model.load(str(final / saved["path"])).signatures[SIGNATURE_NAME]
    out_name = next(iter(signature["outputs"]))
    served = loaded(**{name: tf.constant(value) for name, value in x.items()})[out_name].numpy()
    np.testing.assert_allclose(served, keras_out, atol=1e-5)
    assert "skipped" in report["exports"]["tflite"] and "string" in report["exports"]["tflite"]["skipped"]


FITTED = {}  # way -> plain model.fit's held-out accuracy (once per session)


def plain_fit(way, typed_data, tmp_path):
    """The same model with the same preprocessing trained by Keras' model.fit in this process on every training
    row, batch 32, as many optimizer steps as one worker of a 2-worker run takes (EPOCHS // 2 epochs of all the
    rows): its held-out accuracy, the reference of the strategies' goal."""
    if way in FITTED:
        return FITTED[way]
    import importlib
    import sys

    import keras
    import tensorflow as tf

    from disttrain_contract.user_model import ModelSpec
    from disttrain_trainer.preprocessing import encode, with_block
    from disttrain_trainer.tasks import typed

    data = str(typed_data / "data")
    manifest = Manifest.read(data)
    spec = ModelSpec.of(manifest)
    parts = [read_split(data, manifest, s) for s in manifest.shards]
    x = {name: np.concatenate([p[0][name] for p in parts]) for name in spec.table.names}
    y = np.concatenate([p[1] for p in parts])
    x_test, y_test = read_split(data, manifest, manifest.test)
    if way == "block":
        core = one_vector_model(encoded_width(spec.table))  # (the file's model: the same seed)
        core.fit(encode(spec.table, x), y, batch_size=32, epochs=EPOCHS // 2, shuffle=True, verbose=0)
        model, test_input = with_block(spec.table, core), x_test
    else:
        sys.path.insert(0, str(typed_data / "code"))
        keras.utils.set_random_seed(42)  # (the trainer's default --seed)
        model = importlib.import_module(MODULE).build(spec)
        inputs = typed.check_inputs(model, spec.table)
        # (Keras' fit takes no object arrays of str: the columns as a tf.data stream of constants)
        columns = {name: tf.constant(value) for name, value in typed.columns_for(x, inputs).items()}
        stream = tf.data.Dataset.from_tensor_slices((columns, y)).shuffle(len(y), seed=0).batch(32)
        model.fit(stream, epochs=EPOCHS // 2, verbose=0)
        test_input = {name: tf.constant(value) for name, value in typed.columns_for(x_test, inputs).items()}
    predicted = np.asarray(model(test_input, training=False)).argmax(axis=-1)
    FITTED[way] = float(np.mean(predicted == y_test))
    return FITTED[way]


# average in `make test`; the connected groups (whose runs start and join a cluster) in `make test-long`
STRATEGIES = (
    "average",
    pytest.param("multiworker", marks=pytest.mark.long),
    pytest.param("localsgd", marks=pytest.mark.long),
)
# the goal is 1 point; on 480 held-out rows 1 point is 5 examples: a tolerance of the run-to-run spread
GOAL_POINTS = 2.0


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("way", ("columns", "block"))
def test_both_ways_with_two_workers(way, strategy, typed_data, tmp_path):
    work = workdir(typed_data, tmp_path)
    trainer_args, aggregator_args, env = way_args(way, typed_data, tmp_path)
    report = run_own_pipeline(
        work, 2, strategy, *trainer_args, epochs=EPOCHS, env=env, aggregator_args=aggregator_args, batch=32
    )
    accuracy, fit = report["final"]["test_accuracy"], plain_fit(way, typed_data, tmp_path)
    print(f"{way} {strategy}: held-out accuracy {accuracy:.4f}, plain model.fit {fit:.4f}")
    assert accuracy > majority(work) + MARGIN, (way, strategy, accuracy, majority(work))
    assert 100 * (fit - accuracy) <= GOAL_POINTS, (way, strategy, accuracy, fit)
    check_published(work, report)


def test_the_built_in_model_is_the_block_and_an_mlp(typed_data, tmp_path):
    work = workdir(typed_data, tmp_path)
    # (a validation carve of each shard's columns: the best worker is a candidate beside the average and the
    # ensemble, all three evaluated on the held-out columns)
    report = run_own_pipeline(work, 2, "average", "--validation-fraction", 0.1, epochs=EPOCHS, batch=32)
    assert report["final"]["test_accuracy"] > majority(work) + MARGIN, report["final"]
    candidates = report["combine"]["candidates"]
    assert candidates["best"]["validation_examples"] > 0 and candidates["ensemble"]["forward_passes"] == 2
    assert candidates["ensemble"]["test_accuracy"] > majority(work) + MARGIN, candidates
    check_published(work, report)
    with zipfile.ZipFile(work / "final" / "model.keras") as archive:
        meta = json.loads(archive.read("disttrain.json"))
    assert meta["preprocessing"]["way"] == "block" and meta["model_source"] == "builtin"


def test_a_table_of_numbers_with_missing_values_gets_a_tflite_model(tmp_path):
    """No text column: the block is numbers only (NaN imputation, indicators, normalisation), and the published
    model converts to TFLite's builtin ops, its held-out accuracy within a point of the Keras model's."""
    work = tmp_path / "work"
    write_typed_table(str(work / "data"), n_shards=2, columns=("age", "income", "visits", "children", "member"))
    report = run_own_pipeline(work, 2, "average", epochs=EPOCHS, batch=32)
    assert report["final"]["test_accuracy"] > majority(work) + 0.05, report["final"]
    lite = report["exports"]["tflite"]
    assert "skipped" not in lite and lite["builtin_ops_only"], lite
    assert abs(lite["accuracy_points_vs_keras"]) <= 1.0 and lite["max_abs_diff_vs_keras"] < 1e-4, lite
    assert {i["name"] for i in lite["inputs"]} == {"age", "income", "visits", "children", "member"}
    assert (work / "final" / "model.tflite").is_file()


def test_a_regression_on_a_typed_table(tmp_path):
    """The built-in block + MLP on a regression target (its output scaled by the target's training statistics):
    well below the training mean's RMSE, the exports' numbers the Keras model's."""
    work = tmp_path / "work"
    manifest, (_, y_test) = write_typed_table(str(work / "data"), n_shards=2, problem="regression")
    report = run_own_pipeline(work, 2, "average", epochs=EPOCHS, batch=32)
    trivial = float(np.sqrt(np.mean((y_test - manifest.target_statistics["mean"]) ** 2)))  # the training mean's
    assert report["problem"] == "regression" and report["final"]["test_rmse"] < 0.8 * trivial, (
        report["final"],
        trivial,
    )
    check_published(work, report)


def test_a_model_input_of_the_wrong_dtype_is_one_line(typed_data, tmp_path):
    import keras

    work = workdir(typed_data, tmp_path)
    spec = TableSpec.from_json(Manifest.read(str(work / "data")).input)
    inputs = {c.name: keras.Input(shape=(1,), dtype=c.dtype, name=c.name) for c in spec.columns if c.numeric}
    inputs["member"] = keras.Input(shape=(1,), dtype="int64", name="member")  # it has missing values: float32
    x = keras.layers.Concatenate()([keras.ops.cast(v, "float32") for v in inputs.values()])
    model = keras.Model(inputs, keras.layers.Dense(2, activation="softmax")(x))
    result = train(work, "--model-file", saved(model, tmp_path / "bad.keras"), "--epochs", 1)
    assert result.returncode == 2
    line = only_error_line(result)
    assert "'member'" in line and "dtype='float32'" in line, line
    assert not os.path.exists(work / "train" / "worker-00000" / "model.keras")


def test_a_one_vector_model_of_the_wrong_width_is_told_the_width(typed_data, tmp_path):
    work = workdir(typed_data, tmp_path)
    width = encoded_width(TableSpec.from_json(Manifest.read(str(work / "data")).input))
    result = train(work, "--model-file", saved(one_vector_model(width + 3), tmp_path / "wide.keras"), "--epochs", 1)
    assert result.returncode == 2
    assert f"keras.Input(shape=({width},))" in only_error_line(result)


@pytest.mark.long
@pytest.mark.parametrize("way", ("columns", "block"))
def test_both_ways_with_parameter_servers(way, typed_data, tmp_path):
    """parameterserver (a chief, 1 parameter server, 2 workers): the raw-columns model's lookup tables are
    created under the strategy's scope (TensorFlow copies a StaticHashTable to each worker), the block's
    vectors travel in the workers' dataset function."""
    work = workdir(typed_data, tmp_path)
    trainer_args, aggregator_args, env = way_args(way, typed_data, tmp_path)
    report = run_own_pipeline(
        work, 2, "parameterserver", *trainer_args, epochs=EPOCHS, env=env, aggregator_args=aggregator_args, batch=32
    )
    accuracy, fit = report["final"]["test_accuracy"], plain_fit(way, typed_data, tmp_path)
    print(f"{way} parameterserver: held-out accuracy {accuracy:.4f}, plain model.fit {fit:.4f}")
    assert accuracy > majority(work) + MARGIN, (way, accuracy, majority(work))
    assert 100 * (fit - accuracy) <= GOAL_POINTS, (way, accuracy, fit)
    check_published(work, report)


def test_a_resumed_raw_columns_worker_ends_with_the_weights_of_an_undisturbed_run(typed_data, tmp_path):
    """The checkpoint of a model with its own lookups (StringLookup tables, an Embedding) holds all it needs: a
    worker stopped after epoch 1 and started again ends with exactly the weights of one that ran through."""
    from disttrain_contract.artifact import load_model

    env = with_pythonpath(typed_data / "code")
    weights = {}
    for name, runs in (("undisturbed", (3,)), ("resumed", (1, 3))):
        work = workdir(typed_data, tmp_path / name)
        for epochs in runs:
            result = train(work, "--model-module", MODULE, "--workers", 2, "--epochs", epochs, "--threads", 1, env=env)
            assert result.returncode == 0, result.stderr[-2000:]
        if name == "resumed":
            assert "after epoch 1" in result.stdout
        weights[name] = load_model(str(work / "train" / "worker-00000" / "model.keras"))[0].get_weights()
    assert len(weights["resumed"]) == len(weights["undisturbed"])
    for a, b in zip(weights["resumed"], weights["undisturbed"]):
        np.testing.assert_array_equal(a, b)
