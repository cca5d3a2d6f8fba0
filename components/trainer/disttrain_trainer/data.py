"""The training input: an endless stream of shuffled batches of one worker's examples."""

import contextlib

import tensorflow as tf


def shuffled_batches(features, labels, batch, seed):
    """Batches of (features, labels), reshuffled every epoch, endless.

    features: an array, a tf.RaggedTensor of token ids (text; each batch is 0-padded to
    its longest row), or a dict of [n, 1] arrays (a typed table's columns, taken together). seed: an int, or a scalar int64 tensor (a parameter-server worker's
    seed depends on which worker runs the dataset function).

    The examples' indices are shuffled and batched, and each batch's rows are gathered in
    one op. That gives the batches shuffling the examples themselves gives (a shuffle's
    order depends on its seed and buffer size, not on what it holds: tests/unit/test_data.py),
    at a fraction of the CPU: a text batch cost 2.5-2.8 ms of CPU element by element and
    0.3-0.4 ms gathered (on a 2-core host). That CPU runs beside the step on the other core,
    so two workers sharing two cores paid for it twice."""
    features = as_tensors(features)
    labels = tf.constant(labels)
    indices = tf.data.Dataset.range(len(labels))
    with tensor_seed_in_a_graph(seed):
        ds = indices.shuffle(len(labels), seed=seed, reshuffle_each_iteration=True).repeat().batch(batch)
    return ds.map(lambda rows: (gather(features, rows), tf.gather(labels, rows)))


def as_tensors(features):
    """An array (or a dict of them) as constants; a RaggedTensor as it is."""
    if isinstance(features, dict):
        return {name: tf.constant(value) for name, value in features.items()}
    return features if isinstance(features, tf.RaggedTensor) else tf.constant(features)


def gather(features, rows):
    """The rows of features (a tensor, a RaggedTensor padded dense, or a dict of tensors taken together)."""
    if isinstance(features, dict):
        return {name: tf.gather(value, rows) for name, value in features.items()}
    return dense(tf.gather(features, rows))


def take_rows(x, rows):
    """Rows `rows` (an index array) of a split's x: a list (text), an array, or a dict of arrays (a typed table)."""
    if isinstance(x, dict):
        return {name: value[rows] for name, value in x.items()}
    if isinstance(x, list):
        return [x[i] for i in rows]
    return x[rows]


def concat_rows(parts):
    """Several splits' x one after the other (as take_rows takes them)."""
    import numpy as np

    if len(parts) == 1:
        return parts[0]
    if isinstance(parts[0], dict):
        return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
    return np.concatenate(parts)  # (text's lists too: an array of str, as the text task takes it)


@contextlib.contextmanager
def tensor_seed_in_a_graph(seed):
    """TensorFlow's random_seed.get_seed compares the op seed with 0 when the global seed is 0
    (--seed 0), which a tensor seed in a graph cannot answer ("Using a symbolic tf.Tensor as a
    Python bool"; a parameter-server worker's dataset function is traced so; the (0, 0) pair
    is tensorflow/tensorflow#17284). While such a shuffle is made, the graph has no seed:
    get_seed then pairs the tensor with TensorFlow's default graph seed. Still one order per
    seed value, the same on every run."""
    graph = tf.compat.v1.get_default_graph()
    if tf.executing_eagerly() or not isinstance(seed, tf.Tensor) or graph.seed != 0:
        yield
        return
    graph.seed = None
    try:
        yield
    finally:
        graph.seed = 0


def dense(rows):
    return rows.to_tensor() if isinstance(rows, tf.RaggedTensor) else rows


def poisson_batches(features, labels, sampling_probability, secret_seed):
    """Differentially private training's batches (privacy.py): step i takes every example
    independently with probability q, a batch of random size (mean q x examples), endless.

    This is the sampling dp-accounting's PoissonSampledDpEvent accounts for; shuffled
    batches are not (one can hold an example twice across an epoch's end). The draws are
    stateless in (secret_seed, step), so skipping the batches a resumed epoch already took
    skips the same draws; secret_seed must not be guessable (privacy.secret_seed), since
    knowing which examples a batch holds forfeits the amplification the accounting counts on."""
    features = as_tensors(features)
    labels = tf.constant(labels)
    count = len(labels)

    def draw(step):
        chosen = (
            tf.random.stateless_uniform([count], seed=tf.stack([tf.constant(secret_seed, tf.int64), step]))
            < sampling_probability
        )
        rows = tf.squeeze(tf.where(chosen), axis=1)
        return gather(features, rows), tf.gather(labels, rows)

    return tf.data.Dataset.range(2**62).map(draw)
