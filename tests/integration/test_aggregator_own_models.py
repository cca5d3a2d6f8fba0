"""The aggregator on own models and regression (real TensorFlow, the real aggregator program).

The worker artifacts are built here, in the contract's format (artifact.save_model with the
contract's meta keys, the trainer's marker, metrics.json), on a copier-format table dataset written
with the contract's classes: tiny Keras models trained for a few epochs on a few rows, so that what
is checked is the aggregator's handling, not training.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from disttrain_contract import Workdir, sha256_file, write_marker
from disttrain_contract.artifact import save_model, weights_fingerprint
from disttrain_contract.manifest import Manifest, SplitInfo, shard_name
from disttrain_contract.layout import METRICS_FILE
from disttrain_contract.tensorflow_import import import_tensorflow
from disttrain_contract.trainer_records import EpochRecord, write_epoch_records
from stages import read_report

import_tensorflow()  # quietly, before keras imports it
import keras  # noqa: E402

FEATURES = ["a", "b", "c"]
WEIGHTS = np.array([1.5, -2.0, 0.5], dtype=np.float32)


def write_table(root, problem, shards=(80, 80), test=60, seed=0):
    """data/: a copier-format table dataset (manifest, shards, marker); returns {split: (x, y)}."""
    rng = np.random.default_rng(seed)
    data = root / "data"
    data.mkdir(parents=True)

    def make(n):
        x = rng.normal(size=(n, len(FEATURES))).astype(np.float32)
        signal = x @ WEIGHTS
        if problem == "regression":
            return x, (signal + 3.0 + 0.1 * rng.normal(size=n)).astype(np.float32)
        return x, (signal > 0).astype(np.int64)

    splits, infos = {}, []
    for name, n in [(shard_name(i), n) for i, n in enumerate(shards)] + [("test", test)]:
        x, y = splits[name] = make(n)
        np.save(data / f"{name}.x.npy", x)
        np.save(data / f"{name}.y.npy", y)
        infos.append(SplitInfo(name, n, {f: sha256_file(str(data / f)) for f in (f"{name}.x.npy", f"{name}.y.npy")}))
    train = np.concatenate([splits[shard_name(i)][0] for i in range(len(shards))])
    Manifest(
        task="table",
        source="table:test.csv",
        seed=seed,
        test_fraction=0.2,
        labels=[] if problem == "regression" else ["no", "yes"],
        input={
            "kind": "table",
            "name": "features",
            "shape": [len(FEATURES)],
            "dtype": "float32",
            "features": FEATURES,
            "statistics": {
                "mean": train.mean(0).tolist(),
                "variance": train.var(0).tolist(),
                "min": train.min(0).tolist(),
                "max": train.max(0).tolist(),
            },
        },
        storage="npy",
        shards=infos[:-1],
        test=infos[-1],
        problem=problem,
        target="y" if problem == "regression" else None,
    ).write(str(data))
    write_marker(str(data), "copier")
    return splits


def meta_of(model, problem, head, source="file", **extra):
    """The contract's disttrain.json keys for an own model."""
    manifest = json.load(open(extra.pop("data") / "manifest.json"))
    inputs = [{"name": t.name, "shape": list(t.shape[1:]), "dtype": str(t.dtype)} for t in model.inputs]
    return {
        "task": "table",
        "problem": problem,
        "target": manifest["target"],
        "labels": manifest["labels"],
        "input": manifest["input"],
        "head": head,
        "model_source": source,
        "inputs": inputs,
        "outputs": [{"name": model.output_names[0], "shape": list(model.output.shape[1:])}],
        "vocab_sha256": None,
        "seed": 0,
        "strategy": "average",
        **extra,
    }


def write_workers(
    root,
    build,
    splits,
    problem,
    head,
    epochs,
    train_dir="train",
    validation=None,
    meta_extra=None,
    feed=lambda x: x,
    loss="mse",
):
    """One trained model per entry of `epochs`, all from the same initial weights, with the trainer's
    marker and metrics.json; `validation`: each worker's validation value of the primary metric.
    Each model is built after keras.backend.clear_session(), as in a trainer process of its own: the
    same automatic layer names (dense, dense_1, ...) in every worker's model."""
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    init = build().get_weights()
    sha = weights_fingerprint(init)
    name = "rmse" if problem == "regression" else "accuracy"
    direction = "min" if problem == "regression" else "max"
    workdir = Workdir(str(root))
    for i, n in enumerate(epochs):
        x, y = splits[shard_name(i)]
        keras.backend.clear_session()
        keras.utils.set_random_seed(i)
        model = build()
        model.set_weights(init)
        model.compile(optimizer=keras.optimizers.Adam(0.05), loss=loss)
        if n:
            model.fit(feed(x), y, epochs=n, batch_size=16, verbose=0)
        d = workdir.worker(i, str(root / train_dir))
        os.makedirs(d)
        save_model(
            model,
            os.path.join(d, "model.keras"),
            meta_of(
                model,
                problem,
                head,
                data=root / "data",
                init_weights_sha256=sha,
                worker_index=i,
                workers=len(epochs),
                epochs=max(epochs),
                examples=len(y),
                **(meta_extra or {}),
            ),
        )
        write_epoch_records(
            os.path.join(d, METRICS_FILE),
            [
                EpochRecord(epoch=e, loss=1.0, examples=len(y), examples_per_sec=10 * len(y), wall_time_sec=0.1)
                for e in range(1, max(epochs) + 1)
            ],
        )
        marker = {"problem": problem}
        if validation is not None:
            marker.update(
                validation_metric={"name": name, "value": validation[i], "direction": direction}, validation_examples=20
            )
        write_marker(
            d,
            "trainer",
            worker_index=i,
            workers=len(epochs),
            strategy="average",
            epochs=max(epochs),
            init_weights_sha256=sha,
            examples=len(y),
            model="model.keras",
            final_weights_sha256=weights_fingerprint(model.get_weights()),
            **marker,
        )
    return sha


def aggregate(root, *args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "disttrain_aggregator.main", "--workdir", str(root), "--timeout", "5", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


def report_of(root, final="final"):
    return read_report(root / final)


# ------------------------------------------------------------------------------------ regression
def regressor():
    inputs = keras.Input(shape=(len(FEATURES),), name="features")
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(1, name="price")(hidden))


def rmse_of(model, x, y):
    return float(np.sqrt(np.mean((np.asarray(model(x)).reshape(-1) - y) ** 2)))


@pytest.fixture(scope="module")
def regression_run(tmp_path_factory):
    """Two regression workers (worker 1 trained longer: the lower RMSE), published with --combine best."""
    root = tmp_path_factory.mktemp("regression")
    splits = write_table(root, "regression")
    # the validation values the trainer would have measured: worker 1's is lower (better)
    write_workers(root, regressor, splits, "regression", "value", epochs=[2, 40], validation=[2.5, 0.3])
    result = aggregate(root, "--combine", "best", "--exports", "saved_model,tflite")
    assert result.returncode == 0, result.stdout + result.stderr
    return root, splits, result


def test_regression_report_ranks_by_rmse_in_its_direction(regression_run):
    root, splits, result = regression_run
    report = report_of(root)
    assert (report["problem"], report["target"]) == ("regression", "y")
    assert report["primary_metric"] == {"name": "rmse", "direction": "min", "label": "RMSE"}
    assert report["metrics"] == ["rmse", "mae", "r2", "loss"]
    for row in report["workers"] + [report["final"]]:
        assert {"test_rmse", "test_mae", "test_r2", "test_loss"} <= set(row), row
        assert "test_accuracy" not in row
        assert row["test_loss"] == pytest.approx(row["test_rmse"] ** 2)
    w0, w1 = report["workers"]
    assert w1["test_rmse"] < w0["test_rmse"] and w1["test_r2"] > w0["test_r2"]
    best = report["combine"]["candidates"]["best"]
    assert best["worker_index"] == 1  # the LOWER validation RMSE
    assert best["validation_metric"] == {"name": "rmse", "direction": "min", "value": 0.3}
    assert "validation_accuracy" not in best
    assert report["final"]["test_rmse"] == w1["test_rmse"]  # published: the best worker
    gate = report["gate"]
    assert gate["passed"] and gate["metric"]["unit"] == "percent"
    assert gate["checks"][0]["reference"] == "worker 1" and gate["checks"][0]["shortfall"] == 0
    section = report["analysis"]
    assert section["method"]["kind"] == "regression" and "no probability" in section["method"]["calibration"]["skipped"]
    final = section["models"]["final"]
    assert final["rmse"] == pytest.approx(report["final"]["test_rmse"])
    assert len(final["predicted_vs_actual"]) == 10 and sum(s["examples"] for s in final["slices"]) == 60
    assert "points" in final and "points" not in section["models"]["ensemble"]
    assert section["compare"]["rows"][1]["model"] == "best worker (worker 1, by held-out RMSE)"
    marker = json.load(open(root / "final" / "_SUCCESS"))
    assert marker["final_test_metric"] == {"name": "rmse", "value": w1["test_rmse"], "direction": "min"}
    assert marker["test_accuracy"] is None and marker["problem"] == "regression"
    out = result.stdout
    assert "RMSE" in out and "MAE" in out and "R²" in out and "test acc" not in out
    assert "calibration: none for regression" in out
    for name in ("report.png", "analysis.png"):
        assert (root / "final" / name).stat().st_size > 10_000
    # the TensorBoard events have the trainers' names
    events = root / "tensorboard" / "final"
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = EventAccumulator(str(events)).Reload().Tags()
    assert {"test_rmse", "test_mae", "test_r2", "test_loss"} <= set(tags.get("scalars", []) + tags.get("tensors", []))


def test_a_regression_run_takes_a_one_worker_regression_baseline(tmp_path):
    """--baseline is checked against the run's data before any model is evaluated, its problem and target
    included: a 1-worker regression run is a regression run's baseline (its RMSE, MAE and R² in the table)."""
    one, two = tmp_path / "one", tmp_path / "two"
    write_workers(one, regressor, write_table(one, "regression", shards=(160,)), "regression", "value", epochs=[10])
    assert aggregate(one, "--exports", "none").returncode == 0
    write_workers(two, regressor, write_table(two, "regression"), "regression", "value", epochs=[10, 10])
    result = aggregate(
        two, "--exports", "none", "--max-relative-drop-vs-best-worker", 100, "--baseline", one / "final" / "report.json"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    baseline = report_of(one)["final"]
    compare = report_of(two)["analysis"]["compare"]
    assert compare["baseline"]["available"]
    row = compare["rows"][-1]
    assert row["model"] == "1-worker baseline"
    assert [row[k] for k in ("rmse", "mae", "r2")] == [baseline[f"test_{k}"] for k in ("rmse", "mae", "r2")]


def test_the_savedmodel_takes_the_models_own_input_and_matches_keras(regression_run):
    import tensorflow as tf

    from disttrain_contract.artifact import load_model

    root, splits, result = regression_run
    report = report_of(root)
    saved = report["exports"]["saved_model"]
    signature = saved["signatures"]["serving_default"]
    assert signature["inputs"] == {"features": {"dtype": "DT_FLOAT", "shape": [-1, 3]}}
    assert list(signature["outputs"]) == ["price"]
    x, _ = splits["test"]
    serve = tf.saved_model.load(str(root / "final" / saved["path"])).signatures["serving_default"]
    got = serve(features=tf.constant(x))["price"].numpy()
    model, meta = load_model(str(root / "final" / "model.keras"))
    assert meta["model_source"] == "file" and meta["head"] == "value" and meta["inputs"][0]["name"] == "features"
    np.testing.assert_allclose(got, np.asarray(model(x)), atol=1e-5, rtol=0)
    lite = report["exports"]["tflite"]
    assert lite["metric"] == "rmse" and lite["inputs"] == [{"name": "features", "dtype": "DT_FLOAT", "shape": [-1, 3]}]
    assert lite["test_rmse"] == pytest.approx(lite["keras_test_rmse"], rel=1e-4)
    assert lite["keras_test_rmse"] == report["final"]["test_rmse"]
    assert "held-out RMSE" in result.stdout


def test_the_gate_refuses_a_clearly_worse_regression_model_in_one_line(regression_run):
    root, splits, _ = regression_run
    write_workers(root, regressor, splits, "regression", "value", epochs=[0, 0], train_dir="train-bad")  # untrained
    result = aggregate(root, "--dir", root / "train-bad", "--exports", "none")
    assert result.returncode == 4, result.stdout + result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("error: refused to publish the final model: held-out RMSE "), line
    assert "% worse than the published model's" in line and "(at most 5 % allowed: --max-relative-regression)" in line
    assert "Traceback" not in result.stderr
    rejected = report_of(root / "rejected", os.listdir(root / "rejected")[0])
    assert rejected["gate"]["checks"][1]["unit"] == "percent" and rejected["gate"]["checks"][1]["shortfall"] > 5


# -------------------------------------------------------------------- own classifier: sigmoid head
def sigmoid_classifier():
    """A dict of named inputs, one per feature column, and one sigmoid unit for the two labels."""
    inputs = {name: keras.Input(shape=(1,), name=name) for name in FEATURES}
    merged = keras.layers.Concatenate()([inputs[name] for name in FEATURES])
    return keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid", name="yes")(merged))


def by_column(x):
    return {name: x[:, i : i + 1] for i, name in enumerate(FEATURES)}


def test_a_multi_input_sigmoid_classifier_evaluates_to_its_accuracy(tmp_path):
    import tensorflow as tf

    from disttrain_contract.artifact import load_model

    splits = write_table(tmp_path, "classification")
    write_workers(
        tmp_path,
        sigmoid_classifier,
        splits,
        "classification",
        "sigmoid",
        epochs=[15, 15],
        feed=by_column,
        loss="binary_crossentropy",
    )
    result = aggregate(tmp_path, "--exports", "saved_model,tflite")
    assert result.returncode == 0, result.stdout + result.stderr
    report = report_of(tmp_path)
    x, y = splits["test"]
    model, meta = load_model(str(tmp_path / "final" / "model.keras"))
    expected = float(((np.asarray(model(by_column(x))).reshape(-1) > 0.5).astype(int) == y).mean())
    assert report["final"]["test_accuracy"] == pytest.approx(expected)
    assert expected > 0.8  # a separable problem: the model learnt it (not chance)
    assert report["primary_metric"]["name"] == "accuracy" and report["problem"] == "classification"
    assert report["analysis"]["models"]["final"]["confusion_matrix"]  # a classifier's analysis
    assert meta["head"] == "sigmoid" and [i["name"] for i in meta["inputs"]] == FEATURES
    signature = report["exports"]["saved_model"]["signatures"]["serving_default"]
    assert sorted(signature["inputs"]) == FEATURES and list(signature["outputs"]) == ["yes"]
    serve = tf.saved_model.load(str(tmp_path / "final" / report["exports"]["saved_model"]["path"])).signatures[
        "serving_default"
    ]
    got = serve(**{k: tf.constant(v) for k, v in by_column(x).items()})["yes"].numpy()
    np.testing.assert_allclose(got, np.asarray(model(by_column(x))), atol=1e-5, rtol=0)
    lite = report["exports"]["tflite"]
    assert "skipped" not in lite, lite
    assert [i["name"] for i in lite["inputs"]] == FEATURES and lite["test_accuracy"] == pytest.approx(
        expected, abs=0.02
    )


# ---------------------------------------------------------------------- a custom registered layer


def test_a_custom_layer_loads_with_model_module_and_is_refused_in_one_line_without(tmp_path, tmp_path_factory):
    from disttrain_contract.user_model import code_info
    from server.own_models import CUSTOM_MODULE, custom_module_dir, import_custom_module

    code = custom_module_dir(tmp_path_factory)  # the user's module of the server's own-model tests
    module = import_custom_module(code)

    def build():
        inputs = keras.Input(shape=(len(FEATURES),), name="features")
        return keras.Model(inputs, keras.layers.Dense(1, name="value")(module.Scale(0.5)(inputs)))

    root = tmp_path / "run"
    splits = write_table(root, "regression", shards=(60,))
    # (trained long enough to beat the training mean, which the gate's floor requires of a published model)
    write_workers(
        root,
        build,
        splits,
        "regression",
        "value",
        epochs=[60],
        meta_extra={"model_source": "module", "model_code": code_info(module, "build")},
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = aggregate(root, "--exports", "none", env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: the model {root / 'train' / 'worker-00000' / 'model.keras'} was trained with code from the module "
        f"{CUSTOM_MODULE}: pass --model-module {CUSTOM_MODULE} so that its layers load"
    )
    assert not (root / "final").exists()

    result = aggregate(root, "--exports", "none", "--model-module", CUSTOM_MODULE, env=dict(env, PYTHONPATH=str(code)))
    assert result.returncode == 0, result.stdout + result.stderr
    report = report_of(root)
    assert report["final"]["test_rmse"] > 0 and report["problem"] == "regression"
    published = json.loads(__import__("zipfile").ZipFile(root / "final" / "model.keras").read("disttrain.json"))
    assert published["model_code"]["module"] == CUSTOM_MODULE and published["model_source"] == "module"
