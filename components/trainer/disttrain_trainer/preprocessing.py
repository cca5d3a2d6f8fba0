"""disttrain's preprocessing block for a typed table: the raw columns of a row (typed_table.py: one [n, 1] input
per column, named as the column, of its Column.dtype) -> one float32 vector, built from the table's spec alone
(its training statistics and vocabularies: no pass over the data). The layout, column by column in the table's
order, is typed_table.encoded_width's:

    numeric column (float32, int64)  z = (x - mean) / sqrt(variance)   (Normalization; int64 cast to float32 first)
                                     a missing value (NaN) is imputed by the training mean, so its z is 0.
                                     when the column had missing values in training: + its indicator, 1. missing
    string column                    StringLookup(vocabulary, num_oov_indices=1, output_mode="one_hot"): slot 0
                                     the out-of-vocabulary value, then the vocabulary in the spec's order;
                                     when the column had missing values in training: + "" (missing) its own slot

Why these: a one-hot keeps every category's effect separate for an MLP, and the copier's vocabulary is capped,
so the width stays small; an index (output_mode="int") would need an Embedding, whose weights a user's
one-vector model would have to own. Imputing the mean makes a missing value neutral (z = 0) to the layers
after it, and the indicator lets them learn what missing itself says (a missing value is seldom missing at
random). Missing text gets its own slot for the same reason; a column with no missing value in training has
neither (nothing to learn it from): a missing value there is out of vocabulary, or a NaN imputed to z = 0.
A variance of 0 (a constant column) divides by Keras' epsilon, so z stays 0.

The block has no weights, trainable or not: its numbers are constants of the graph (Normalization given its
mean and variance, the lookups' tables), so averaging, checkpoints and resume see only the model behind it.
It is built of Keras' own layers and ops, so the published model loads in safe mode wherever it is served,
with no module of disttrain's registered.
"""

import re

import keras
import numpy as np

from disttrain_contract.typed_table import encoded_width

VECTOR = "features"  # the block's output, the one-vector model's input (ModelSpec.input.name)
BLOCK_NAME = "preprocessing"


def raw_inputs(table):
    """{column name: keras.Input(shape=(1,), dtype=Column.dtype, name=column name)}, in the table's order."""
    return {c.name: keras.Input(shape=(1,), dtype=c.dtype, name=c.name) for c in table.columns}


def block(table):
    """The preprocessing block: a keras.Model from the raw columns (raw_inputs) to the float32 vector of
    width typed_table.encoded_width(table) (the module docstring's layout)."""
    inputs = raw_inputs(table)
    parts, tags = [], set()
    for i, column in enumerate(table.columns):
        x, tag = inputs[column.name], layer_name(column.name)
        tag = tag if tag not in tags else f"{tag}_{i}"  # ("a b" and "a_b": one name each)
        tags.add(tag)
        if column.numeric:
            parts += numeric_parts(column, x, tag)
        else:
            parts.append(string_part(column, x, tag))
    vector = parts[0] if len(parts) == 1 else keras.layers.Concatenate(name="concatenate")(parts)
    model = keras.Model(inputs, vector, name=BLOCK_NAME)
    if model.weights:  # (the docstring's invariant: averaging and resume rely on it)
        raise AssertionError(f"the preprocessing block has weights: {[w.path for w in model.weights]}")
    return model


def numeric_parts(column, x, tag):
    """[z] or [z, missing indicator] of a numeric column's [n, 1] input."""
    if column.dtype != "float32":
        x = keras.ops.cast(x, "float32")
    mean = float(column.mean) if column.mean is not None else 0.0  # (no value present in training: none to impute)
    variance = float(column.variance) if column.variance is not None else 1.0
    normalize = keras.layers.Normalization(mean=[mean], variance=[variance], name=f"{tag}_normalize")
    if not column.missing and column.dtype != "float32":
        return [normalize(x)]  # an int64 column has no NaN to impute
    missing = keras.ops.isnan(x)
    z = normalize(keras.ops.where(missing, mean, x))  # (mean - mean) / std: exactly 0
    return [z, keras.ops.cast(missing, "float32")] if column.missing else [z]


def string_part(column, x, tag):
    """The one-hot of a string column's [n, 1] input (slot 0 out of vocabulary; missing's own slot last)."""
    vocabulary = list(column.vocabulary) + ([""] if column.missing else [])
    if not vocabulary:
        # every training value was rare: all are out of vocabulary, the one slot. StringLookup refuses an empty
        # vocabulary, so it is given a token no cell holds (it starts with NUL; numpy strips a trailing one) and
        # its slot is dropped.
        lookup = keras.layers.StringLookup(
            vocabulary=["\x00(none)"], num_oov_indices=1, output_mode="one_hot", name=f"{tag}_lookup"
        )
        return keras.ops.reshape(lookup(x), (-1, 2))[:, :1]
    lookup = keras.layers.StringLookup(
        vocabulary=vocabulary, num_oov_indices=1, output_mode="one_hot", name=f"{tag}_lookup"
    )
    return keras.ops.reshape(lookup(x), (-1, len(vocabulary) + 1))


def layer_name(column_name):
    """A column's name as part of a layer's (Keras refuses a "/" in one)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", column_name)


def with_block(table, core):
    """The published model: the raw columns -> the block -> `core` (the one-vector model)."""
    inputs = raw_inputs(table)
    return keras.Model(inputs, core(block(table)(inputs)), name=f"{core.name}_on_columns")


def encode(table, columns, batch=4096):
    """The block applied to a split's columns (manifest.read_split's dict of [n, 1] arrays) once: float32
    [n, encoded_width]. What the one-vector model trains on (the trainer encodes its shard once, as it
    tokenizes a text shard once), the same numbers the published model computes from the raw row."""
    import tensorflow as tf

    from disttrain_contract.evaluation import call_in_chunks

    model = block(table)
    graph = tf.function(lambda x: model(x, training=False), reduce_retracing=True)
    names = table.names
    x = {name: columns[name] for name in names}
    n = len(x[names[0]])
    if n == 0:
        return np.zeros((0, encoded_width(table)), np.float32)
    return call_in_chunks(graph, x, batch).astype(np.float32)
