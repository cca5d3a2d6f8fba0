"""The advisor probe's bytes per multiworker step (probe.gradient_wire_bytes): dense gradients whole, an
embedding's as the unique rows real batches touch, averaged over several batches (one batch's count varies with
its examples)."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from disttrain_advisor.probe import gradient_wire_bytes  # noqa: E402


class Task:
    """The one method of a task the probe calls: per-example loss, and a score."""

    @staticmethod
    def loss_and_score(y, logits):
        return keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True), None


def model_and_batches(token_batches, embed=True):
    inputs = keras.Input(shape=(3,), dtype="int32")
    hidden = keras.layers.Embedding(50, 4)(inputs) if embed else keras.layers.CategoryEncoding(50)(inputs)
    if embed:
        hidden = keras.layers.GlobalAveragePooling1D()(hidden)
    model = keras.Model(inputs, keras.layers.Dense(2)(hidden))
    batches = [
        (tf.constant(np.array(tokens, dtype="int32")), tf.constant(np.zeros(len(tokens), dtype="int32")))
        for tokens in token_batches
    ]
    return model, iter(batches)


def test_an_embeddings_rows_are_the_mean_of_the_batches_unique_rows():
    # batches touching 2, 6, 4 and 4 unique rows: 4 on average; each row 4 float32 values and two int32 tags
    token_batches = [[[1, 1, 2], [2, 1, 1]], [[1, 2, 3], [4, 5, 6]], [[7, 8, 9], [9, 7, 10]], [[1, 2, 3], [3, 2, 4]]]
    model, batches = model_and_batches(token_batches)
    total, sparse = gradient_wire_bytes(tf, model, Task, batches, batches=4)
    dense = (4 * 2 + 2) * 4  # the Dense layer's kernel and bias
    assert sparse and total == dense + 4 * (4 * 4 + 8)
    # one batch alone would have priced the first batch's 2 rows
    model, batches = model_and_batches(token_batches[:1])
    assert gradient_wire_bytes(tf, model, Task, batches, batches=1) == (dense + 2 * (4 * 4 + 8), True)


def test_a_model_without_an_embedding_takes_one_batch():
    model, batches = model_and_batches([[[1, 2, 3]]], embed=False)  # one batch: a second next() would raise
    total, sparse = gradient_wire_bytes(tf, model, Task, batches)
    assert (total, sparse) == ((50 * 2 + 2) * 4, False)
