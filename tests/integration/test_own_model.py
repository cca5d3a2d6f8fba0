"""Your own model on your own table, through the real stages as separate processes.

The models are written here, the way a user writes one in a notebook (tests/own_models.py), and saved
with model.save(): disttrain never built them. The data is scikit-learn's breast-cancer table (and
diabetes, wine) written as CSV and copied by `disttrain-copier --source table:...`.

The copied tables are fixtures of tests/integration/conftest.py. make test runs one strategy (average) end to end, the bad inputs and fine-tuning; the per-strategy
matrix and regression runs are in tests/integration/test_own_model_strategies.py (make test-long)."""

import json
import os

import numpy as np
import pytest

from own_models import (
    classifier,
    only_error_line,
    run_own_pipeline,
    saved,
    table_statistics,
    train,
    with_pythonpath,
    workdir_with,
    write_user_module,
)
from stages import stage

pytestmark = pytest.mark.slow


# ---------------------------------------------------------------- bad input: one line, exit 2, nothing written
def lambda_model(n, mean, variance):
    import keras

    inputs = keras.Input((n,), name="measurements")
    x = keras.layers.Lambda(lambda t: t * 2.0)(keras.layers.Normalization(mean=mean, variance=variance)(inputs))
    return keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(x))


def custom_layer_model(n, mean, variance, module_dir):
    import importlib
    import sys

    import keras

    sys.path.insert(0, module_dir)
    try:
        module = importlib.import_module("tabular_models")
        inputs = keras.Input((n,), name="measurements")
        x = module.FeatureGate()(keras.layers.Normalization(mean=mean, variance=variance)(inputs))
        return keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(x))
    finally:
        sys.path.remove(module_dir)


def narrow_model(n, mean, variance):
    import keras

    inputs = keras.Input((n - 1,), name="measurements")
    return keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(inputs))


def text_input_model(n, mean, variance):
    import keras

    inputs = keras.Input((1,), dtype="string", name="review")
    return keras.Model(
        inputs,
        keras.layers.Dense(2, activation="softmax")(
            keras.layers.StringLookup(output_mode="one_hot", vocabulary=["a"])(inputs)
        ),
    )


BAD_MODEL_FILES = {
    # name -> (model maker, what the error line must say)
    "lambda layer": (lambda_model, ["Lambda layer", "register_keras_serializable"]),
    "custom layer without its module": (custom_layer_model, ["tabular_models>FeatureGate", "--model-module"]),
    "input shape": (narrow_model, ["shape [29]", "shape [30]", "'features'"]),
    "input dtype": (text_input_model, ["dtype string", "float32"]),
}


@pytest.mark.parametrize("case", list(BAD_MODEL_FILES))
def test_a_bad_model_file_is_one_line_and_exit_2_before_anything_is_written(case, cancer_data, tmp_path):
    work = workdir_with(cancer_data, tmp_path)
    mean, variance = table_statistics(work / "data" / "manifest.json")
    make, words = BAD_MODEL_FILES[case]
    args = (30, mean, variance) + ((write_user_module(str(tmp_path / "code")),) if "custom" in case else ())
    path = saved(make(*args), tmp_path / "model.keras")
    result = train(work, "--model-file", path, "--epochs", 1)
    assert result.returncode == 2, result.stderr
    line = only_error_line(result)
    for word in words:
        assert word in line, line
    assert not (work / "train").exists()


def test_more_labels_than_output_units_and_a_softmax_for_a_regression_are_refused(wine_data, diabetes_data, tmp_path):
    import keras

    wine = workdir_with(wine_data, tmp_path / "wine")
    inputs = keras.Input((13,), name="measurements")
    two_units = saved(keras.Model(inputs, keras.layers.Dense(2, activation="softmax")(inputs)), tmp_path / "two.keras")
    line = only_error_line(result := train(wine, "--model-file", two_units, "--epochs", 1))
    assert result.returncode == 2 and "3 labels, more than the output's 2 units" in line, line

    diabetes = workdir_with(diabetes_data, tmp_path / "diabetes")
    inputs = keras.Input((10,), name="measurements")
    softmax = saved(
        keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(inputs)), tmp_path / "softmax.keras"
    )
    line = only_error_line(result := train(diabetes, "--model-file", softmax, "--epochs", 1))
    assert result.returncode == 2 and "regression target" in line and "'progression'" in line, line
    assert not (wine / "train").exists() and not (diabetes / "train").exists()


def test_a_module_that_does_not_import_or_returns_no_model_is_refused(cancer_data, tmp_path):
    work = workdir_with(cancer_data, tmp_path)
    code = write_user_module(str(tmp_path / "code"))
    with open(os.path.join(code, "broken_models.py"), "w") as fh:
        fh.write("import keras\nraise RuntimeError('the notebook forgot a cell')\n")
    for module, words in (
        ("no_such_models", ["no such module", "PYTHONPATH"]),
        ("broken_models", ["does not import", "the notebook forgot a cell"]),
        ("tabular_models:not_a_model", ["returned str, not a keras.Model"]),
        ("tabular_models:missing", ["has no function missing(spec)"]),
    ):
        result = train(work, "--model-module", module, "--epochs", 1, env=with_pythonpath(code))
        assert result.returncode == 2, result.stderr
        line = only_error_line(result)
        assert all(word in line for word in words), line
    assert not (work / "train").exists()


# ---------------------------------------------------------------- fine-tuning
def test_fine_tuning_starts_from_the_file_and_ends_no_worse(cancer_data, tmp_path):
    """A model trained by the user keeps its predictions when loaded: the trainer's held-out accuracy before the
    first step is the file's own, computed here with Keras; fine-tuning ends no worse than it started."""
    import keras

    from disttrain_contract.manifest import Manifest, read_split

    work = workdir_with(cancer_data, tmp_path)
    data = str(work / "data")
    manifest = Manifest.read(data)
    mean, variance = table_statistics(work / "data" / "manifest.json")
    x = np.concatenate([read_split(data, manifest, s)[0] for s in manifest.shards])
    y = np.concatenate([read_split(data, manifest, s)[1] for s in manifest.shards])
    x_test, y_test = read_split(data, manifest, manifest.test)
    model = classifier(30, mean, variance, head="sigmoid", seed=3)
    model.fit(x, y.astype("float32"), epochs=4, batch_size=32, verbose=0)
    own_accuracy = float(((model.predict(x_test, verbose=0)[:, 0] > 0.5) == y_test).mean())
    path = saved(model, tmp_path / "pretrained.keras")

    result = train(work, "--model-file", path, "--epochs", 3, "--workers", 2, "--learning-rate", 3e-4)
    assert result.returncode == 0, result.stderr
    marker = json.load(open(work / "train" / "worker-00000" / "_SUCCESS"))
    before, after = marker["initial_test_metric"]["value"], marker["final_test_metric"]["value"]
    assert marker["initial_test_metric"]["name"] == "accuracy"
    assert before == pytest.approx(own_accuracy, abs=1e-9), (before, own_accuracy)
    assert after >= before - 1 / len(y_test), (before, after)  # no worse, up to one example of noise
    # the published worker model is the user's architecture, with disttrain's metadata attached
    from disttrain_contract.artifact import load_model

    published, meta = load_model(str(work / "train" / "worker-00000" / "model.keras"))
    assert [layer.__class__.__name__ for layer in published.layers] == [
        layer.__class__.__name__ for layer in keras.models.load_model(path).layers
    ]
    assert (meta["model_source"], meta["head"], meta["problem"], meta["inputs"][0]["name"]) == (
        "file",
        "sigmoid",
        "classification",
        "measurements",
    )


# ---------------------------------------------------------------- the whole pipeline


def test_own_model_file_through_every_stage(cancer_data, tmp_path):
    """A model file on a table: copier -> 2 average workers -> aggregator -> server, asked over TF Serving's
    REST API (rows and columns) and KServe V2, whose answers are the published Keras model's own."""
    from disttrain_contract.artifact import load_model
    from disttrain_contract.evaluation import probabilities
    from disttrain_contract.manifest import Manifest, read_split
    from server.serving import http, running_server

    work = workdir_with(cancer_data, tmp_path)
    mean, variance = table_statistics(work / "data" / "manifest.json")
    path = saved(classifier(30, mean, variance, head="sigmoid", seed=1), tmp_path / "model.keras")
    report = run_own_pipeline(work, 2, "average", "--model-file", path, epochs=12)
    assert report["final"]["test_accuracy"] > 0.9, report["final"]

    manifest = Manifest.read(str(work / "data"))
    x_test, y_test = read_split(str(work / "data"), manifest, manifest.test)
    model, meta = load_model(str(work / "final" / "model.keras"))
    expected = probabilities(model(x_test[:3]).numpy(), meta["head"])
    with running_server(str(work)) as (base, _, _):
        status, rows = http("POST", base + "/v1/models/disttrain:predict", {"instances": x_test[:3].tolist()})
        assert status == 200, rows
        assert np.allclose(np.asarray(rows["predictions"], dtype=float), expected, atol=1e-5), rows
        status, columns = http("POST", base + "/v1/models/disttrain:predict", {"inputs": x_test[:3].tolist()})
        assert status == 200 and np.allclose(np.asarray(columns["outputs"], dtype=float), expected, atol=1e-5), columns
        body = {
            "inputs": [
                {
                    "name": meta["inputs"][0]["name"],
                    "shape": [3, 30],
                    "datatype": "FP32",
                    "data": x_test[:3].astype("float32").ravel().tolist(),
                }
            ]
        }
        status, v2 = http("POST", base + "/v2/models/disttrain/infer", body)
        assert status == 200, v2
        assert np.allclose(np.asarray(v2["outputs"][0]["data"], dtype=float).reshape(3, -1), expected, atol=1e-5), v2
        status, bad = http("POST", base + "/v1/models/disttrain:predict", {"instances": [[1.0, 2.0]]})
        assert status == 400 and "30" in bad["error"], bad


def test_a_custom_layer_module_in_all_three_stages(cancer_data, tmp_path, monkeypatch):
    """build(spec) of a user's module with a registered custom layer: the trainer builds, the aggregator and the
    server load the published model in safe mode with the same --model-module, and refuse it without."""
    from server.serving import http, running_server

    work = workdir_with(cancer_data, tmp_path)
    code = write_user_module(str(tmp_path / "code"))
    env = with_pythonpath(code)
    report = run_own_pipeline(
        work,
        2,
        "average",
        "--model-module",
        "tabular_models",
        epochs=10,
        env=env,
        aggregator_args=("--model-module", "tabular_models"),
    )
    assert report["final"]["test_accuracy"] > 0.9, report["final"]
    meta = json.loads(__import__("zipfile").ZipFile(work / "final" / "model.keras").read("disttrain.json"))
    assert meta["model_code"]["module"] == "tabular_models" and len(meta["model_code"]["sha256"]) == 64

    refused = stage(
        "aggregator",
        "--workdir",
        work,
        "--expect",
        2,
        "--timeout",
        10,
        "--savefile",
        tmp_path / "again" / "model.keras",
        check=False,
        env=env,
    )
    assert refused.returncode == 2 and "--model-module tabular_models" in only_error_line(refused)

    monkeypatch.setenv("PYTHONPATH", env["PYTHONPATH"])  # the server process inherits it
    with running_server(str(work), "--model-module", "tabular_models") as (base, _, _):
        status, rows = http("POST", base + "/v1/models/disttrain:predict", {"instances": [[1.0] * 30]})
        assert status == 200 and len(rows["predictions"][0]) == 2, rows
