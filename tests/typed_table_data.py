"""A small typed table with known distributions, written as the copier writes a typed table (task "typed_table",
storage "parquet": NAME.parquet + NAME.y.npy per split, the manifest's input the TableSpec of the training
shards, the _SUCCESS marker), for the tests of everything that reads one (trainer, aggregator, exports).

The columns (about MISSING of every column but `visits` missing, at random):
    age       float    normal(40, 12)
    income    float    lognormal(10, 0.5)
    visits    integer  poisson(3), never missing (its model dtype is int64)
    children  integer  poisson(1.2)
    member    boolean  30 % true
    island    string   Biscoe 45 %, Dream 35 %, Torgersen 19.5 %, Other 0.5 % (below the vocabulary's minimum count)
    colour    string   six colours, none of which says anything of the label
The label ("no", "yes") is drawn from a logistic model of them: age, membership, island, visits and whether age
is missing move it, so a model that reads them scores well above the majority class (about 60 % "no"), and
one that sees the missing indicator scores higher still.
"""

import os

import numpy as np

from disttrain_contract import write_marker
from disttrain_contract.atomic import sha256_file
from disttrain_contract.manifest import Manifest, SplitInfo, shard_name
from disttrain_contract.typed_table import Column, TableSpec, model_dtype

MISSING = 0.05
LABELS = ["no", "yes"]
MIN_COUNT = 10  # a string value seen fewer times in training is out of vocabulary (the copier's minimum count)
TYPES = {
    "age": "float",
    "income": "float",
    "visits": "integer",
    "children": "integer",
    "member": "boolean",
    "island": "string",
    "colour": "string",
}
ISLANDS = (("Biscoe", 0.45, 1.6), ("Dream", 0.35, -1.2), ("Torgersen", 0.195, 0.0), ("Other", 0.005, 0.0))
COLOURS = ("red", "green", "blue", "black", "white", "grey")


def generate(rows, seed=0, missing=MISSING, problem="classification"):
    """({column: list of Python values, None where missing}, labels int64 [rows]); a regression's labels are the
    target "score", float32: 10 x the label's logit plus normal noise (standard deviation 3)."""
    rng = np.random.default_rng(seed)
    age = rng.normal(40, 12, rows)
    income = rng.lognormal(10, 0.5, rows)
    visits = rng.poisson(3, rows)
    children = rng.poisson(1.2, rows)
    member = rng.random(rows) < 0.3
    names, shares, effects = zip(*ISLANDS)
    island = rng.choice(len(names), rows, p=np.asarray(shares) / sum(shares))
    colour = rng.choice(len(COLOURS), rows)
    holes = {name: rng.random(rows) < missing for name in TYPES if name != "visits"}
    logit = (
        0.07 * (age - 40) + 1.4 * member + np.asarray(effects)[island] + 0.35 * (visits - 3) + 1.5 * holes["age"] - 0.9
    )
    labels = (rng.random(rows) < 1 / (1 + np.exp(-2.0 * logit))).astype(np.int64)
    if problem == "regression":
        labels = (10 * logit + rng.normal(0, 3, rows)).astype(np.float32)
    values = {
        "age": age.tolist(),
        "income": income.tolist(),
        "visits": visits.tolist(),
        "children": children.tolist(),
        "member": member.tolist(),
        "island": [names[i] for i in island],
        "colour": [COLOURS[i] for i in colour],
    }
    for name, hole in holes.items():
        values[name] = [None if h else v for v, h in zip(values[name], hole)]
    return values, labels


def column_spec(name, values):
    """The Column of the training values (None missing), as the copier computes it."""
    column_type = TYPES[name]
    present = [v for v in values if v is not None]
    missing = len(values) - len(present)
    dtype = model_dtype(column_type, missing > 0)
    if column_type == "string":
        counts = {}
        for v in present:
            counts[v] = counts.get(v, 0) + 1
        kept = sorted((v for v, c in counts.items() if c >= MIN_COUNT), key=lambda v: (-counts[v], v))
        return Column(name, column_type, dtype, missing, vocabulary=tuple(kept), counts=tuple(counts[v] for v in kept))
    numbers = np.asarray(present, dtype=np.float64)
    return Column(
        name,
        column_type,
        dtype,
        missing,
        mean=float(numbers.mean()),
        variance=float(numbers.var()),
        min=float(numbers.min()),
        max=float(numbers.max()),
    )


def table_spec(values):
    return TableSpec(columns=tuple(column_spec(name, values[name]) for name in TYPES if name in values))


ARROW_TYPES = {"float": "float64", "integer": "int64", "boolean": "bool", "string": "string"}


def write_split(data_dir, name, values, labels):
    """NAME.parquet (the typed columns, nulls where missing) and NAME.y.npy; its SplitInfo."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({c: pa.array(v, type=pa.type_for_alias(ARROW_TYPES[TYPES[c]])) for c, v in values.items()})
    files = {f"{name}.parquet": None, f"{name}.y.npy": None}
    pq.write_table(table, os.path.join(data_dir, f"{name}.parquet"))
    np.save(os.path.join(data_dir, f"{name}.y.npy"), labels)
    for file in files:
        files[file] = sha256_file(os.path.join(data_dir, file))
    return SplitInfo(name=name, examples=len(labels), sha256=files)


def regression_target(targets):
    """The manifest's target and its training statistics (a regression)."""
    t = np.asarray(targets, dtype=np.float64)
    statistics = {"mean": float(t.mean()), "variance": float(t.var()), "min": float(t.min()), "max": float(t.max())}
    return {"target": "score", "target_statistics": statistics}


def rows_of(values, index):
    return {name: [column[i] for i in index] for name, column in values.items()}


def write_typed_table(
    data_dir, n_shards=2, rows=2400, seed=0, test_fraction=0.2, missing=MISSING, columns=None, problem="classification"
):
    """The whole dataset directory (`columns`: the names of those it holds, in TYPES' order; default all);
    returns (its Manifest, the test split's (values, labels))."""
    os.makedirs(data_dir, exist_ok=True)
    values, labels = generate(rows, seed, missing, problem)
    values = {name: values[name] for name in TYPES if columns is None or name in columns}
    order = np.random.default_rng(seed + 1).permutation(rows)
    n_test = int(round(rows * test_fraction))
    test, train = order[:n_test], order[n_test:]
    train_values = rows_of(values, train)
    spec = table_spec(train_values)
    shards = [
        write_split(data_dir, shard_name(i), rows_of(values, part), labels[part])
        for i, part in enumerate(np.array_split(train, n_shards))
    ]
    test_info = write_split(data_dir, "test", rows_of(values, test), labels[test])
    manifest = Manifest(
        task="typed_table",
        source="generated:typed_table_data",
        seed=seed,
        test_fraction=test_fraction,
        labels=list(LABELS) if problem == "classification" else [],
        input=spec.to_json(),
        storage="parquet",
        shards=shards,
        test=test_info,
        problem=problem,
        **(regression_target(labels[train]) if problem == "regression" else {}),
    )
    manifest.write(data_dir)
    write_marker(data_dir, "copier", n_shards=n_shards, examples=rows)
    return manifest, (rows_of(values, test), labels[test])


# ---------------------------------------------------------------- models of the two ways
RAW_COLUMNS_MODULE = '''"""A user's raw-columns model of a typed table, as in keras-io's structured-data examples: one named input per
column, its own lookups and normalisations built from build(spec)'s spec.table (no pass over the data)."""

import keras


def encode_column(column, x):
    """One column's features: text through a lookup (an embedding for the first string column, a one-hot for
    the others), numbers imputed and normalised, with a missing indicator."""
    if column.type == "string":
        if column.name == "island":
            ids = keras.layers.StringLookup(vocabulary=list(column.vocabulary), name=f"{column.name}_ids")(x)
            vectors = keras.layers.Embedding(len(column.vocabulary) + 1, 4, name=f"{column.name}_embedding")(ids)
            return [keras.layers.Flatten(name=f"{column.name}_flat")(vectors)]
        one_hot = keras.layers.StringLookup(
            vocabulary=list(column.vocabulary), output_mode="one_hot", name=f"{column.name}_one_hot"
        )(x)
        return [keras.ops.reshape(one_hot, (-1, len(column.vocabulary) + 1))]
    if column.dtype != "float32":
        x = keras.ops.cast(x, "float32")
    missing = keras.ops.isnan(x)
    filled = keras.ops.where(missing, column.mean, x)
    z = keras.layers.Normalization(mean=[column.mean], variance=[column.variance], name=f"{column.name}_z")(filled)
    return [z, keras.ops.cast(missing, "float32")] if column.missing else [z]


def build(spec):
    inputs = {c.name: keras.Input(shape=(1,), dtype=c.dtype, name=c.name) for c in spec.table.columns}
    parts = [part for c in spec.table.columns for part in encode_column(c, inputs[c.name])]
    x = keras.layers.Concatenate(name="features")(parts)
    x = keras.layers.Dense(32, activation="relu", name="hidden")(x)
    outputs = keras.layers.Dense(spec.n_outputs, activation="softmax", name="probabilities")(x)
    model = keras.Model(inputs, outputs, name="raw_columns")
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="sparse_categorical_crossentropy")
    return model
'''


def write_raw_columns_module(directory, name="typed_raw_columns"):
    """The raw-columns model as a --model-module NAME in `directory` (put it on PYTHONPATH)."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f"{name}.py"), "w") as fh:
        fh.write(RAW_COLUMNS_MODULE)
    return str(directory)


def one_vector_model(width, n_labels=2, seed=0, hidden=32):
    """A user's model of today's contract, one float vector in (the preprocessing block's), compiled."""
    import keras

    keras.utils.set_random_seed(seed)
    inputs = keras.Input(shape=(width,), name="features")
    x = keras.layers.Dense(hidden, activation="relu", name="hidden")(inputs)
    outputs = keras.layers.Dense(n_labels, activation="softmax", name="probabilities")(x)
    model = keras.Model(inputs, outputs, name="one_vector")
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="sparse_categorical_crossentropy")
    return model
