"""data.shuffled_batches: the fast input pipeline gives exactly the batches that shuffling
the examples themselves gives (the plain tf.data pipeline it replaced), epoch after
epoch, for ragged text ids, images, and a parameter-server worker's slice; every epoch
holds every example once."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from disttrain_trainer.data import shuffled_batches  # noqa: E402

EXAMPLES, BATCH, SEED, BATCHES = 203, 16, 42, 40  # 40 batches of 16: three epochs and a bit (not a whole number of batches)


def element_wise(features, labels, batch, seed):
    """The reference: shuffle the examples themselves, then batch (what the trainer did before)."""
    ds = tf.data.Dataset.from_tensor_slices((features, labels)).shuffle(len(labels), seed=seed, reshuffle_each_iteration=True)
    ds = ds.repeat()
    if isinstance(features, tf.RaggedTensor):
        return ds.ragged_batch(batch).map(lambda ids, y: (ids.to_tensor(), y))
    return ds.batch(batch)


def take(ds, n):
    return [(x.numpy(), y.numpy()) for x, y in ds.take(n)]


def assert_same(got, want):
    assert len(got) == len(want)
    for (gx, gy), (wx, wy) in zip(got, want):
        np.testing.assert_array_equal(gx, wx)
        np.testing.assert_array_equal(gy, wy)


def ragged_ids(rng, n):
    lengths = rng.integers(1, 30, size=n)
    return tf.RaggedTensor.from_row_lengths(rng.integers(1, 500, size=lengths.sum()), lengths)


def test_text_batches_equal_the_element_wise_shuffle():
    rng = np.random.default_rng(0)
    ids, labels = ragged_ids(rng, EXAMPLES), rng.integers(0, 2, size=EXAMPLES)
    got = take(shuffled_batches(ids, labels, BATCH, SEED), BATCHES)
    assert_same(got, take(element_wise(ids, labels, BATCH, SEED), BATCHES))


def test_image_batches_equal_the_element_wise_shuffle_and_each_epoch_has_every_example_once():
    rng = np.random.default_rng(1)
    images = rng.integers(0, 255, size=(EXAMPLES, 8, 8, 1), dtype=np.uint8)
    labels = np.arange(EXAMPLES)  # the label says which example it is
    got = take(shuffled_batches(images, labels, BATCH, SEED), BATCHES)
    assert_same(got, take(element_wise(images, labels, BATCH, SEED), BATCHES))
    stream = np.concatenate([y for _, y in got])
    epochs = [stream[i : i + EXAMPLES] for i in range(0, 3 * EXAMPLES, EXAMPLES)]
    for epoch in epochs:
        assert sorted(epoch) == list(range(EXAMPLES))
    assert not np.array_equal(epochs[0], epochs[1])  # reshuffled every epoch
    for x, y in got:
        np.testing.assert_array_equal(x, images[y])  # each row is its label's example


def test_a_parameter_server_workers_slice_is_its_own_examples():
    rng = np.random.default_rng(2)
    images, labels = rng.integers(0, 255, size=(EXAMPLES, 4, 4, 1), dtype=np.uint8), np.arange(EXAMPLES)
    start, size, part = 100, 60, 1

    def own_part(indices):
        return indices.skip(start).take(size), part

    got = take(shuffled_batches(images, labels, BATCH, SEED, own_part), 8)  # 128 rows: two epochs of 60, and a bit
    stream = np.concatenate([y for _, y in got])
    assert sorted(stream[:size]) == list(range(start, start + size))
    # what the trainer did before: the slice of the examples, with the whole shuffle buffer
    reference = tf.data.Dataset.from_tensor_slices((images, labels)).skip(start).take(size)
    reference = reference.shuffle(EXAMPLES, seed=SEED + part, reshuffle_each_iteration=True).repeat().batch(BATCH)
    assert_same(got, take(reference, 8))
