"""DP-SGD's gradient (privacy.py says what is private and how ε is counted): per-example gradients,
each clipped to L2 norm C, summed, plus Gaussian noise, over the expected batch.

Per-example gradients: tf.vectorized_map of one example's forward and backward pass over the batch
(TensorFlow's pfor turns it into batched ops). The other way, the Jacobian of the batch's per-example
losses (GradientTape.jacobian), was slower in whole training steps on a shared 2-core host: about 2.4x on
the digits CNN and 10x on the text model (bench/dp_utility.py measures both on an idle machine). One
consequence of vectorized_map: a dropout layer draws one mask per step for the whole batch (its random
seed is the same in every example's pass), not one per example; privacy does not depend on the masks.

Example i's gradient is its own only when no example's output depends on another example of the
batch: batch normalisation (statistics of the batch) and in-batch triplet mining break it, and the
trainer refuses them (privacy.refusal).

An embedding's gradient is sparse (the rows of the example's tokens): per example it stays so
(SparseRows: the norm and the clipped sum come from the looked-up rows, not a [vocabulary, width]
matrix per example). The sum plus noise is dense: every row of the table gets noise every step, or the
rows a batch touched would tell which words its examples hold; the optimizer then updates every row.
"""

import tensorflow as tf


class DpGradient:
    """clip C, noise multiplier SIGMA, noise_shares N (the workers whose sums one all-reduce adds: each adds
    N(0, (SIGMA*C)^2 / N)), expected_batch (the expected global batch: the denominator of the average),
    secret_key (an int the noise's seeds derive from, drawn from the operating system per process)."""

    def __init__(self, l2_clip, noise_multiplier, noise_shares, expected_batch, secret_key):
        self.l2_clip = float(l2_clip)
        self.noise_std = float(noise_multiplier) * self.l2_clip / float(noise_shares) ** 0.5
        self.expected_batch = float(expected_batch)
        self.secret_key = int(secret_key)

    def step(self, model, loss_and_hits, x, y, variables, step):
        """(this worker's share of the private average gradient, the batch's loss sum, its hits) of one batch;
        `step`: a counter that differs every step (the optimizer's iterations), the noise's seed. A Poisson
        batch can be empty: its clipped sum is zero, and the noise is added all the same."""

        def clipped():
            per_example, losses, hits = per_example_gradients(model, loss_and_hits, x, y, variables)
            return clipped_sum(per_example, self.l2_clip), tf.reduce_sum(losses), tf.reduce_sum(hits)

        def empty():
            return [tf.zeros_like(v) for v in variables], tf.constant(0.0), tf.constant(0.0)

        total, loss_sum, hits = tf.cond(tf.shape(y)[0] > 0, clipped, empty)
        return self.noisy_average(total, step), loss_sum, hits

    def noisy_average(self, total, step):
        """(the clipped sum + this worker's share of the noise) / the expected batch."""
        seeds = tf.random.experimental.stateless_split(
            tf.stack([tf.constant(self.secret_key, tf.int64), tf.cast(step, tf.int64)]), num=len(total)
        )
        return [
            (g + tf.random.stateless_normal(tf.shape(g), seed=seeds[i], stddev=self.noise_std, dtype=g.dtype))
            / self.expected_batch
            for i, g in enumerate(total)
        ]


def per_example_gradients(model, loss_and_hits, x, y, variables):
    """(one per weight: [batch, *shape] gradients, or an embedding's SparseRows; [batch] losses, [batch] hits):
    each example's own."""

    def one(example):
        features, label = example
        with tf.GradientTape() as tape:
            loss, hits = loss_and_hits(
                label[None], model(tf.nest.map_structure(lambda t: t[None], features), training=True)
            )
            loss = tf.reduce_sum(loss)
        grads = tape.gradient(loss, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        # an embedding's gradient stays its looked-up rows (values, row ids): pfor then stacks [batch, positions,
        # width] rather than a dense [batch, vocabulary, width]
        return (
            [(g.values, g.indices) if isinstance(g, tf.IndexedSlices) else g for g in grads],
            loss,
            tf.reduce_sum(hits),
        )

    grads, losses, hits = tf.vectorized_map(one, (x, y))
    return ([SparseRows(*g, v.shape[0]) if isinstance(g, tuple) else g for g, v in zip(grads, variables)], losses, hits)


class SparseRows:
    """Per-example gradients of an embedding table: values [batch, positions, width] at row ids [batch, positions]
    of a table of `rows` rows (a row id can repeat within an example: its values add up)."""

    def __init__(self, values, indices, rows):
        self.values, self.indices, self.rows = values, tf.cast(indices, tf.int64), rows

    def squared_norms(self):
        # |sum of the rows with the same id|^2 summed over ids = sum over position pairs of the same id of v_i . v_j
        same = tf.cast(tf.equal(self.indices[:, :, None], self.indices[:, None, :]), self.values.dtype)
        return tf.reduce_sum(same * tf.matmul(self.values, self.values, transpose_b=True), axis=[1, 2])

    def scaled_sum(self, scale):
        width = tf.shape(self.values)[-1]
        values = tf.reshape(self.values * tf.cast(scale, self.values.dtype)[:, None, None], [-1, width])
        return tf.math.unsorted_segment_sum(values, tf.reshape(self.indices, [-1]), self.rows)


def clipped_sum(per_example, l2_clip):
    """The sum over the batch of every example's gradient scaled to L2 norm at most l2_clip (its norm over
    all the weights together). per_example: one [batch, *shape] tensor (or SparseRows) per weight."""
    per_example = [g if isinstance(g, SparseRows) else tf.convert_to_tensor(g) for g in per_example]
    dense = [g for g in per_example if not isinstance(g, SparseRows)]
    batch = tf.shape(dense[0] if dense else per_example[0].values)[0]
    squares = tf.add_n(
        [
            g.squared_norms()
            if isinstance(g, SparseRows)
            else tf.reduce_sum(tf.reshape(tf.square(g), [batch, -1]), axis=1)
            for g in per_example
        ]
    )
    # min(1, C / norm); a zero gradient stays zero (C / max(norm, tiny) > 1)
    scale = tf.minimum(1.0, l2_clip / tf.maximum(tf.sqrt(squares), 1e-12))
    return [
        g.scaled_sum(scale) if isinstance(g, SparseRows) else tf.tensordot(tf.cast(scale, g.dtype), g, axes=1)
        for g in per_example
    ]
