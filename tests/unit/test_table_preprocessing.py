"""The preprocessing block of a typed table (disttrain_trainer/preprocessing.py) and how a model's inputs are
matched to the table's columns (tasks/typed.py): real Keras layers on real columns."""

import math

import numpy as np
import pytest

from disttrain_contract.errors import ContractError
from disttrain_contract.typed_table import Column, TableSpec, column_array, encoded_width

keras = pytest.importorskip("keras")

from disttrain_trainer import preprocessing  # noqa: E402
from disttrain_trainer.tasks import typed  # noqa: E402

SPEC = TableSpec(
    columns=(
        Column("height", "float", "float32", missing=3, mean=10.0, variance=4.0, min=4.0, max=16.0),
        Column("rooms", "integer", "int64", missing=0, mean=3.0, variance=1.0, min=1.0, max=6.0),
        Column("flag", "boolean", "float32", missing=1, mean=0.25, variance=0.1875, min=0.0, max=1.0),
        Column("city", "string", "string", missing=2, vocabulary=("Oslo", "Bergen"), counts=(30, 20)),
        Column("kind", "string", "string", missing=0, vocabulary=("a",), counts=(40,)),
        Column("rare", "string", "string", missing=0),
    )
)
# the layout: height z, height missing | rooms z | flag z, flag missing | city OOV, Oslo, Bergen, missing |
# kind OOV, a | rare OOV
WIDTH = 2 + 1 + 2 + 4 + 2 + 1


def rows(**columns):
    """A few rows as the server and read_columns give them: [n, 1] arrays of each column's dtype."""
    return {c.name: column_array(c, columns[c.name]) for c in SPEC.columns}


def encoded(x):
    return np.asarray(preprocessing.block(SPEC)(x, training=False))


def test_the_width_is_the_contracts_and_the_block_has_no_weights():
    model = preprocessing.block(SPEC)
    assert encoded_width(SPEC) == WIDTH
    assert model.output.shape[-1] == WIDTH
    assert model.weights == [] and model.get_weights() == []


def test_each_column_is_encoded_as_the_layout_says():
    x = rows(
        height=[12.0, None],
        rooms=[5, 3],
        flag=[True, None],
        city=["Bergen", None],
        kind=["a", "b"],
        rare=["x", None],
    )
    out = encoded(x)
    assert out.shape == (2, WIDTH)
    first, second = out
    # height: (12 - 10) / 2, present; missing: imputed by the mean (z = 0), indicator 1
    np.testing.assert_allclose(first[:2], [1.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(second[:2], [0.0, 1.0], atol=1e-6)
    # rooms (int64): (5 - 3) / 1 and (3 - 3) / 1
    np.testing.assert_allclose([first[2], second[2]], [2.0, 0.0], atol=1e-6)
    # flag: (1 - 0.25) / sqrt(0.1875); missing: 0 and its indicator
    np.testing.assert_allclose(first[3:5], [0.75 / math.sqrt(0.1875), 0.0], atol=1e-5)
    np.testing.assert_allclose(second[3:5], [0.0, 1.0], atol=1e-6)
    # city: Bergen's slot; a missing city its own slot (the column had missing values in training)
    np.testing.assert_array_equal(first[5:9], [0, 0, 1, 0])
    np.testing.assert_array_equal(second[5:9], [0, 0, 0, 1])
    # kind: "a" its slot, "b" (never seen) out of vocabulary
    np.testing.assert_array_equal(first[9:11], [0, 1])
    np.testing.assert_array_equal(second[9:11], [1, 0])
    # rare: an empty vocabulary, every value (and a missing one: no missing in training) out of vocabulary
    np.testing.assert_array_equal(out[:, 11], [1, 1])


def test_a_missing_value_in_a_column_without_missing_values_is_out_of_vocabulary():
    out = encoded(rows(height=[10.0], rooms=[3], flag=[False], city=["Oslo"], kind=[None], rare=["x"]))
    np.testing.assert_array_equal(out[0, 9:11], [1, 0])  # "" is not "a": the OOV slot
    np.testing.assert_array_equal(out[0, 5:9], [0, 1, 0, 0])


def test_encode_gives_the_published_models_numbers(tmp_path):
    """The shard encoded once (what the one-vector model trains on) equals the block inside the published model,
    saved and loaded back in safe mode, as the aggregator and the server load it."""
    rng = np.random.default_rng(0)
    n = 50
    x = rows(
        height=[None if rng.random() < 0.2 else float(rng.normal(10, 2)) for _ in range(n)],
        rooms=rng.integers(1, 6, n).tolist(),
        flag=[None if rng.random() < 0.2 else bool(rng.random() < 0.3) for _ in range(n)],
        city=[rng.choice(["Oslo", "Bergen", "Tromsø", None]) for _ in range(n)],
        kind=[rng.choice(["a", "b"]) for _ in range(n)],
        rare=["x"] * n,
    )
    vectors = preprocessing.encode(SPEC, x)
    np.testing.assert_allclose(vectors, encoded(x), atol=1e-6)
    core_in = keras.Input(shape=(WIDTH,), name="features")
    core = keras.Model(core_in, keras.layers.Dense(2, activation="softmax", name="probabilities")(core_in))
    published = preprocessing.with_block(SPEC, core)
    assert [w.shape for w in published.get_weights()] == [w.shape for w in core.get_weights()]
    path = str(tmp_path / "model.keras")
    published.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    np.testing.assert_allclose(np.asarray(loaded(x)), np.asarray(core(vectors)), atol=1e-6)


def test_a_raw_columns_model_is_checked_column_by_column():
    inputs = {
        "height": keras.Input(shape=(1,), dtype="float32", name="height"),
        "rooms": keras.Input(shape=(1,), dtype="int64", name="rooms"),
        "city": keras.Input(shape=(1,), dtype="string", name="city"),
    }
    x = keras.layers.Concatenate()(
        [
            inputs["height"],
            keras.ops.cast(inputs["rooms"], "float32"),
            keras.layers.StringLookup(vocabulary=["Oslo"], output_mode="one_hot")(inputs["city"]),
        ]
    )
    model = keras.Model(inputs, keras.layers.Dense(2)(x))
    assert typed.check_inputs(model, SPEC) == {
        "height": ("float32", True),
        "rooms": ("int64", True),
        "city": ("string", True),
    }


def test_a_wrong_dtype_names_the_column_and_its_dtype():
    bad = keras.Input(shape=(1,), dtype="int64", name="flag")  # flag has missing values: float32 with NaN
    model = keras.Model(bad, keras.layers.Dense(2)(keras.ops.cast(bad, "float32")))
    with pytest.raises(ContractError) as err:
        typed.check_inputs(model, SPEC)
    message = str(err.value)
    assert "\n" not in message
    assert "'flag'" in message and "float32" in message and "dtype='float32'" in message
    text = keras.Input(shape=(1,), dtype="float32", name="city")
    with pytest.raises(ContractError, match="dtype='string', name='city'"):
        typed.check_inputs(keras.Model(text, keras.layers.Dense(2)(text)), SPEC)


def test_a_one_vector_model_of_another_width_is_told_the_blocks_width():
    vector = keras.Input(shape=(WIDTH + 1,), name="x")
    with pytest.raises(ContractError) as err:
        typed.check_inputs(keras.Model(vector, keras.layers.Dense(2)(vector)), SPEC)
    assert f"keras.Input(shape=({WIDTH},))" in str(err.value) and "\n" not in str(err.value)
    right = keras.Input(shape=(WIDTH,), name="x")
    assert typed.check_inputs(keras.Model(right, keras.layers.Dense(2)(right)), SPEC) is None


def test_inputs_that_are_not_columns_are_refused():
    a, b = keras.Input(shape=(1,), name="height"), keras.Input(shape=(1,), name="weight")
    model = keras.Model([a, b], keras.layers.Dense(2)(keras.layers.Concatenate()([a, b])))
    with pytest.raises(ContractError, match="'weight' name no column of the table"):
        typed.check_inputs(model, SPEC)


def test_batches_of_columns_take_each_row_whole():
    """A typed table's batches (data.shuffled_batches on a dict of columns): every column's row i is one example's,
    and a split's rows are taken and joined together (take_rows, concat_rows)."""
    from disttrain_trainer.data import concat_rows, shuffled_batches, take_rows

    n = 40
    x = {
        "number": np.arange(n, dtype=np.float32).reshape(-1, 1),
        "text": np.asarray([f"row{i}" for i in range(n)], dtype=object).reshape(-1, 1),
    }
    y = np.arange(n, dtype=np.int64)
    features, labels = next(iter(shuffled_batches(x, y, 16, seed=3)))
    numbers, texts = features["number"].numpy()[:, 0], features["text"].numpy()[:, 0]
    assert sorted(set(labels.numpy())) != list(range(16))  # (shuffled)
    assert [f"row{int(v)}".encode() for v in numbers] == list(texts) and list(numbers.astype(int)) == list(labels)
    halves = [take_rows(x, np.arange(0, 10)), take_rows(x, np.arange(10, 15))]
    joined = concat_rows(halves)
    np.testing.assert_array_equal(joined["number"][:, 0], np.arange(15))
    assert list(joined["text"][:, 0]) == [f"row{i}" for i in range(15)]
