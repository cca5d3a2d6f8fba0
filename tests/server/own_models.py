"""A user's own Keras models on a user's own data, built here the way a user would (keras.Input,
layers, model.fit) and published the way the trainer and aggregator publish them
(docs/formats.md): WORKDIR/final/model.keras with disttrain.json (contract artifact.save_model),
the aggregator's _SUCCESS and report.json, and WORKDIR/data (manifest.json, a shard and the held-out
test split) as the copier writes it for a table or array source. Imported as `server.own_models` by
tests/server and tests/browser; each model is built once per test session (a few seconds each).

    cancer     table classification, 5 features, one sigmoid unit (head "sigmoid"): benign | malignant
    diabetes   table regression, 4 features, head "value", target "progression"
    two_inputs table classification with two named inputs, age and bmi ([1] each), logits (head "logits")
    counts     array classification, int64 [2, 3] arrays, softmax over 3 labels
    custom     table regression through a layer of the user's own module (ownlayers.Scale), model_code recorded
    homes      typed table classifier (task typed_table) built like keras-io's structured-data examples: one named
               input per column (string, float32, int64) through StringLookup, IntegerLookup, Discretization and
               Normalization inside the model; its disttrain.json input is the TableSpec (HOMES_SPEC)
"""

import importlib
import json
import os
import sys

import numpy as np

from disttrain_contract import Workdir
from disttrain_contract.atomic import sha256_file
from disttrain_contract.manifest import Manifest, SplitInfo, split_files
from disttrain_contract.markers import write_marker

CANCER_FEATURES = ["radius", "texture", "perimeter", "smoothness", "concavity"]
DIABETES_FEATURES = ["age", "sex", "bmi", "bp"]
CUSTOM_MODULE = "ownlayers"
CUSTOM_SOURCE = '''"""A user's own layer, registered so that a .keras file using it loads in safe mode."""
import keras


@keras.saving.register_keras_serializable(package="ownlayers")
class Scale(keras.layers.Layer):
    def __init__(self, factor=1.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, x):
        return x * self.factor

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}
'''


def statistics(x):
    x = np.asarray(x, dtype=np.float64).reshape(-1, np.shape(x)[-1])
    return {
        "mean": x.mean(0).tolist(),
        "variance": x.var(0).tolist(),
        "min": x.min(0).tolist(),
        "max": x.max(0).tolist(),
    }


def table_spec(features, x):
    return {
        "kind": "table",
        "name": "features",
        "shape": [len(features)],
        "dtype": "float32",
        "features": features,
        "statistics": statistics(x),
    }


def write_data(root, task, spec, labels, x, y, problem="classification", target=None, test=40):
    """WORKDIR/data as the copier writes it: one shard and the held-out test split (its last `test` rows)."""
    data = Workdir(root).data
    os.makedirs(data, exist_ok=True)
    splits = []
    for name, xs, ys in (("shard-00000", x[:-test], y[:-test]), ("test", x[-test:], y[-test:])):
        np.save(os.path.join(data, f"{name}.x.npy"), xs, allow_pickle=False)
        np.save(os.path.join(data, f"{name}.y.npy"), ys, allow_pickle=False)
        splits.append(
            SplitInfo(name, len(ys), {f: sha256_file(os.path.join(data, f)) for f in split_files(name, "npy")})
        )
    Manifest(
        task=task,
        source=f"{task}:own.csv",
        seed=0,
        test_fraction=test / len(y),
        labels=labels,
        input=spec,
        storage="npy",
        shards=splits[:1],
        test=splits[1],
        problem=problem,
        target=target,
    ).write(data)
    return data


def publish_own(root, model, meta, report=None):
    """final/model.keras (contract save_model), report.json and the aggregator's _SUCCESS."""
    from disttrain_contract.artifact import save_model

    final = Workdir(root).final
    os.makedirs(final, exist_ok=True)
    save_model(model, os.path.join(final, "model.keras"), meta)
    with open(os.path.join(final, "report.json"), "w") as fh:
        json.dump(report or {"task": meta["task"], "problem": meta["problem"], "target": meta.get("target")}, fh)
    write_marker(final, "aggregator", task=meta["task"])
    return os.path.join(final, "model.keras")


def meta_of(task, spec, labels, head, inputs, outputs, problem="classification", target=None, **extra):
    return {
        "task": task,
        "problem": problem,
        "target": target,
        "labels": labels,
        "head": head,
        "input": spec,
        "inputs": inputs,
        "outputs": outputs,
        "model_source": "file",
        **extra,
    }


def _cached(tmp_path_factory, name, build):
    root = tmp_path_factory.getbasetemp() / "own-models" / name
    if not os.path.exists(os.path.join(Workdir(root).final, "_SUCCESS")):
        build(str(root))
    return root


def _keras():
    from disttrain_contract.tensorflow_import import import_tensorflow

    import_tensorflow()
    import keras

    keras.utils.set_random_seed(0)
    return keras


def cancer(tmp_path_factory):
    """Workdir of a breast-cancer-like table classifier with one sigmoid unit: P(malignant)."""

    def build(root):
        keras = _keras()
        rng = np.random.default_rng(0)
        y = rng.integers(0, 2, 300)
        x = (rng.normal(0, 1, (300, 5)) + y[:, None] * [1.5, 0.8, 1.6, 0.3, 1.2] + [14, 19, 90, 0.1, 0.09]).astype(
            np.float32
        )
        x[:, 2] *= 1.0 + 0.1 * x[:, 0] / 14  # perimeter follows radius, a bit
        spec = table_spec(CANCER_FEATURES, x[:-40])
        inputs = keras.Input((5,), name="features")
        hidden = keras.layers.Normalization(mean=spec["statistics"]["mean"], variance=spec["statistics"]["variance"])(
            inputs
        )
        hidden = keras.layers.Dense(8, activation="relu")(hidden)
        model = keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid", name="malignant")(hidden))
        model.compile(optimizer=keras.optimizers.Adam(0.05), loss="binary_crossentropy")
        model.fit(x[:-40], y[:-40], epochs=20, batch_size=32, verbose=0)
        labels = ["benign", "malignant"]
        write_data(root, "table", spec, labels, x, y.astype(np.int64))
        publish_own(
            root,
            model,
            meta_of(
                "table",
                spec,
                labels,
                "sigmoid",
                [{"name": "features", "shape": [5], "dtype": "float32"}],
                [{"name": "malignant", "shape": [1]}],
            ),
        )

    return _cached(tmp_path_factory, "cancer", build)


def diabetes(tmp_path_factory):
    """Workdir of a diabetes-like table regression (head "value", target "progression")."""

    def build(root):
        keras = _keras()
        rng = np.random.default_rng(1)
        x = (rng.normal(0, 1, (300, 4)) * [13, 0.5, 4.4, 14] + [48, 1.5, 26, 95]).astype(np.float32)
        y = (150 + 0.3 * (x[:, 0] - 48) + 9 * (x[:, 2] - 26) + 0.8 * (x[:, 3] - 95) + rng.normal(0, 10, 300)).astype(
            np.float32
        )
        spec = table_spec(DIABETES_FEATURES, x[:-40])
        inputs = keras.Input((4,), name="features")
        hidden = keras.layers.Normalization(mean=spec["statistics"]["mean"], variance=spec["statistics"]["variance"])(
            inputs
        )
        hidden = keras.layers.Dense(16, activation="relu")(hidden)
        model = keras.Model(inputs, keras.layers.Dense(1, name="progression")(hidden))
        model.compile(optimizer=keras.optimizers.Adam(0.1), loss="mse")
        model.fit(x[:-40], y[:-40], epochs=40, batch_size=32, verbose=0)
        write_data(root, "table", spec, [], x, y, problem="regression", target="progression")
        publish_own(
            root,
            model,
            meta_of(
                "table",
                spec,
                [],
                "value",
                [{"name": "features", "shape": [4], "dtype": "float32"}],
                [{"name": "progression", "shape": [1]}],
                problem="regression",
                target="progression",
            ),
        )

    return _cached(tmp_path_factory, "diabetes", build)


def two_inputs(tmp_path_factory):
    """Workdir of a table classifier with two named inputs (a dict of keras.Inputs), age and bmi, and logits."""

    def build(root):
        keras = _keras()
        rng = np.random.default_rng(2)
        x = (rng.normal(0, 1, (200, 2)) * [12, 4] + [50, 26]).astype(np.float32)
        y = ((x[:, 0] - 50) / 12 + (x[:, 1] - 26) / 4 > 0).astype(np.int64)
        spec = table_spec(["age", "bmi"], x[:-40])
        age, bmi = keras.Input((1,), name="age"), keras.Input((1,), name="bmi")
        joined = keras.layers.Concatenate()([age, bmi])
        hidden = keras.layers.Normalization(mean=spec["statistics"]["mean"], variance=spec["statistics"]["variance"])(
            joined
        )
        model = keras.Model({"age": age, "bmi": bmi}, keras.layers.Dense(2, name="logits")(hidden))
        model.compile(
            optimizer=keras.optimizers.Adam(0.1), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
        model.fit({"age": x[:-40, :1], "bmi": x[:-40, 1:]}, y[:-40], epochs=20, batch_size=32, verbose=0)
        labels = ["low", "high"]
        write_data(root, "table", spec, labels, x, y)
        publish_own(
            root,
            model,
            meta_of(
                "table",
                spec,
                labels,
                "logits",
                [{"name": "age", "shape": [1], "dtype": "float32"}, {"name": "bmi", "shape": [1], "dtype": "float32"}],
                [{"name": "logits", "shape": [2]}],
            ),
        )

    return _cached(tmp_path_factory, "two-inputs", build)


def counts(tmp_path_factory):
    """Workdir of an array classifier of int64 [2, 3] count arrays (softmax over 3 labels)."""

    def build(root):
        keras = _keras()
        rng = np.random.default_rng(3)
        y = rng.integers(0, 3, 240)
        x = rng.poisson(2, (240, 2, 3)).astype(np.int64)
        x[np.arange(240), 0, y] += 5
        spec = {"kind": "array", "name": "x", "shape": [2, 3], "dtype": "int64", "statistics": statistics(x[:-40])}
        inputs = keras.Input((2, 3), dtype="int64", name="x")
        hidden = keras.layers.Flatten()(keras.layers.Rescaling(0.1)(inputs))
        model = keras.Model(inputs, keras.layers.Dense(3, activation="softmax", name="probabilities")(hidden))
        model.compile(optimizer=keras.optimizers.Adam(0.05), loss="sparse_categorical_crossentropy")
        model.fit(x[:-40], y[:-40], epochs=20, batch_size=32, verbose=0)
        labels = ["first", "second", "third"]
        write_data(root, "array", spec, labels, x, y.astype(np.int64))
        publish_own(
            root,
            model,
            meta_of(
                "array",
                spec,
                labels,
                "softmax",
                [{"name": "x", "shape": [2, 3], "dtype": "int64"}],
                [{"name": "probabilities", "shape": [3]}],
            ),
        )

    return _cached(tmp_path_factory, "counts", build)


def custom_module_dir(tmp_path_factory):
    """A directory holding the user's module ownlayers.py (put it on PYTHONPATH)."""
    folder = tmp_path_factory.getbasetemp() / "own-models" / "user-code"
    os.makedirs(folder, exist_ok=True)
    path = folder / f"{CUSTOM_MODULE}.py"
    if not path.exists() or path.read_text() != CUSTOM_SOURCE:
        path.write_text(CUSTOM_SOURCE)
    return folder


def import_custom_module(folder):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return importlib.import_module(CUSTOM_MODULE)


def custom(tmp_path_factory):
    """Workdir of a table regression with the user's registered layer ownlayers>Scale; its disttrain.json
    records the module (model_code), as the trainer does for --model-module."""
    folder = custom_module_dir(tmp_path_factory)

    def build(root):
        from disttrain_contract.user_model import code_info

        keras = _keras()
        module = import_custom_module(folder)
        rng = np.random.default_rng(4)
        x = rng.normal(0, 1, (120, 3)).astype(np.float32)
        y = (x @ [2.0, -1.0, 0.5] + 10).astype(np.float32)
        spec = table_spec(["a", "b", "c"], x[:-20])
        inputs = keras.Input((3,), name="features")
        model = keras.Model(inputs, keras.layers.Dense(1, name="y")(module.Scale(0.5, name="scale")(inputs)))
        model.compile(optimizer=keras.optimizers.Adam(0.1), loss="mse")
        model.fit(x[:-20], y[:-20], epochs=30, batch_size=16, verbose=0)
        write_data(root, "table", spec, [], x, y, problem="regression", target="y", test=20)
        publish_own(
            root,
            model,
            meta_of(
                "table",
                spec,
                [],
                "value",
                [{"name": "features", "shape": [3], "dtype": "float32"}],
                [{"name": "y", "shape": [1]}],
                problem="regression",
                target="y",
                model_source="module",
                model_code=code_info(module, "build"),
            ),
        )

    return _cached(tmp_path_factory, "custom", build)


def held_out(root):
    """The held-out (x, y) of a workdir's data."""
    data = os.path.join(root, "data")
    return np.load(os.path.join(data, "test.x.npy")), np.load(os.path.join(data, "test.y.npy"))


def own_outputs(root, x):
    """What the served model should answer for x (an array, or a dict of named arrays), computed here with
    Keras and the contract's head: probabilities [n, labels], or values [n] for a regression."""
    from disttrain_contract.artifact import load_model
    from disttrain_contract.evaluation import predict, probabilities

    model, meta = load_model(os.path.join(root, "final", "model.keras"))
    raw = predict(model, x)
    return raw.reshape(len(raw), -1)[:, 0] if meta["head"] == "value" else probabilities(raw, meta["head"])


# The typed table of `homes`: its columns as the copier describes them (typed_table.TableSpec.to_json()).
HOMES_LABELS = ["stays", "moves"]
HOMES_CITIES = ["paris", "lyon", "nice"]


def homes_spec():
    from disttrain_contract.typed_table import Column, TableSpec

    return TableSpec(
        columns=(
            # text, with missing values ("" to the lookup: out of vocabulary)
            Column("city", "string", "string", missing=12, vocabulary=tuple(HOMES_CITIES), counts=(120, 90, 78)),
            # an integer column with missing values: float32, NaN for missing (Discretization puts NaN in its top bin)
            Column("age", "integer", "float32", missing=9, mean=44.0, variance=150.0, min=18.0, max=80.0),
            # a float column without missing values: still float32; the model has no way to take NaN here
            Column("income", "float", "float32", mean=52.0, variance=400.0, min=5.0, max=140.0),
            # an integer column without missing values: int64, a value required
            Column("rooms", "integer", "int64", mean=3.1, variance=1.4, min=1.0, max=6.0),
            # a boolean with missing values: float32 0., 1., NaN
            Column("owner", "boolean", "float32", missing=20, mean=0.55, variance=0.25, min=0.0, max=1.0),
        )
    )


def homes_columns(rng, n):
    """n training rows as the model's inputs ({column: [n, 1] array of its dtype}) and their labels."""
    city = rng.choice(HOMES_CITIES + [""], n, p=[0.4, 0.3, 0.25, 0.05])
    age = rng.integers(18, 81, n).astype(np.float32)
    age[rng.random(n) < 0.05] = np.nan
    income = rng.normal(52, 20, n).clip(5, 140).astype(np.float32)
    rooms = rng.integers(1, 7, n).astype(np.int64)
    owner = (rng.random(n) < 0.55).astype(np.float32)
    owner[rng.random(n) < 0.07] = np.nan
    score = (city == "paris") * 1.0 - (np.nan_to_num(age, nan=44) - 44) / 15 + (income - 52) / 20 - (owner == 1) * 1.0
    x = {
        "city": city.astype(object).reshape(-1, 1),
        "age": age.reshape(-1, 1),
        "income": income.reshape(-1, 1),
        "rooms": rooms.reshape(-1, 1),
        "owner": owner.reshape(-1, 1),
    }
    return x, (score + rng.normal(0, 0.5, n) > 0).astype(np.int64)


def homes(tmp_path_factory):
    """Workdir of a typed table classifier over HOMES_SPEC (softmax over HOMES_LABELS), published with its
    TableSpec as disttrain.json's input and one {"name", "shape": [1], "dtype"} input per column."""

    def build(root):
        keras = _keras()
        import tensorflow as tf

        spec = homes_spec()
        c = {column.name: column for column in spec.columns}
        inputs = {column.name: keras.Input((1,), name=column.name, dtype=column.dtype) for column in spec.columns}
        encoded = [
            keras.layers.StringLookup(vocabulary=HOMES_CITIES, output_mode="one_hot", name="city_lookup")(
                inputs["city"]
            ),
            keras.layers.Discretization(bin_boundaries=[30.0, 45.0, 60.0], output_mode="one_hot", name="age_bins")(
                inputs["age"]
            ),
            keras.layers.Normalization(mean=c["income"].mean, variance=c["income"].variance, name="income_norm")(
                inputs["income"]
            ),
            keras.layers.IntegerLookup(vocabulary=[1, 2, 3, 4, 5, 6], output_mode="one_hot", name="rooms_lookup")(
                inputs["rooms"]
            ),
            keras.layers.Discretization(bin_boundaries=[0.5], output_mode="one_hot", name="owner_bins")(
                inputs["owner"]
            ),
        ]
        hidden = keras.layers.Dense(8, activation="relu")(keras.layers.Concatenate()(encoded))
        model = keras.Model(inputs, keras.layers.Dense(2, activation="softmax", name="probabilities")(hidden))
        model.compile(optimizer=keras.optimizers.Adam(0.05), loss="sparse_categorical_crossentropy")
        x, y = homes_columns(np.random.default_rng(5), 300)
        train = tf.data.Dataset.from_tensor_slices(({k: tf.constant(v) for k, v in x.items()}, y)).batch(32)
        model.fit(train, epochs=10, verbose=0)
        publish_own(
            root,
            model,
            meta_of(
                "typed_table",
                spec.to_json(),
                HOMES_LABELS,
                "softmax",
                [{"name": column.name, "shape": [1], "dtype": column.dtype} for column in spec.columns],
                [{"name": "probabilities", "shape": [2]}],
            ),
        )

    return _cached(tmp_path_factory, "homes", build)
