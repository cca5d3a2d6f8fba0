"""data.shuffled_batches: the fast input pipeline gives exactly the batches that shuffling
the examples themselves gives (the plain tf.data pipeline it replaced), epoch after
epoch, for ragged text ids, images, and a parameter-server worker's tensor seed; every
epoch holds every example once."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from disttrain_trainer.data import shuffled_batches  # noqa: E402

EXAMPLES, BATCH, SEED, BATCHES = (
    203,
    16,
    42,
    40,
)  # 40 batches of 16: three epochs and a bit (not a whole number of batches)


def element_wise(features, labels, batch, seed):
    """The reference: shuffle the examples themselves, then batch (what the trainer did before)."""
    ds = tf.data.Dataset.from_tensor_slices((features, labels)).shuffle(
        len(labels), seed=seed, reshuffle_each_iteration=True
    )
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


def test_a_parameter_server_workers_tensor_seed_gives_the_int_seeds_stream_and_workers_differ():
    """A parameter-server worker seeds its shuffle with a tensor (the index of the worker
    running the dataset function): the same stream as that int seed; another worker's
    stream is another order of the same examples, every epoch holding each once."""
    rng = np.random.default_rng(2)
    images, labels = rng.integers(0, 255, size=(EXAMPLES, 4, 4, 1), dtype=np.uint8), np.arange(EXAMPLES)
    streams = []
    for worker in range(2):
        got = take(shuffled_batches(images, labels, BATCH, SEED + tf.constant(worker, tf.int64)), BATCHES)
        assert_same(got, take(shuffled_batches(images, labels, BATCH, SEED + worker), BATCHES))
        stream = np.concatenate([y for _, y in got])
        for epoch in range(3):
            assert sorted(stream[epoch * EXAMPLES : (epoch + 1) * EXAMPLES]) == list(range(EXAMPLES))
        streams.append(stream)
    assert not np.array_equal(streams[0], streams[1])


def test_a_tensor_seed_in_a_graph_works_with_a_global_seed_of_0():
    """--seed 0 makes TensorFlow's global seed 0, and a parameter-server worker's dataset function is
    traced in a graph: the tensor seed must still shuffle (it raised "symbolic tf.Tensor as a Python
    bool"), each worker in its own order, the same on every run, every epoch holding each example once."""
    rng = np.random.default_rng(3)
    images, labels = rng.integers(0, 255, size=(EXAMPLES, 4, 4, 1), dtype=np.uint8), np.arange(EXAMPLES)

    def stream(worker):
        tf.random.set_seed(0)
        # flat_map traces its function in a graph, as the coordinator traces the dataset function
        ds = tf.data.Dataset.from_tensors(tf.constant(worker, tf.int64)).flat_map(
            lambda index: shuffled_batches(images, labels, BATCH, tf.constant(0, tf.int64) + index)
        )
        return np.concatenate([y for _, y in take(ds, BATCHES)])

    try:
        first, again, other = stream(0), stream(0), stream(1)
    finally:
        tf.random.set_seed(None)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    for epoch in range(3):
        assert sorted(first[epoch * EXAMPLES : (epoch + 1) * EXAMPLES]) == list(range(EXAMPLES))
