"""DP-SGD's gradient (privacy.py says what is private and how ε is counted): per-example gradients,
each clipped to L2 norm C, summed, plus Gaussian noise, over the expected batch.

Per-example gradients come from the Jacobian of the batch's per-example losses with respect to the
weights (GradientTape.jacobian, vectorised by TensorFlow's pfor): one forward pass for the whole batch,
so dropout draws its masks as in non-private training, and example i's row of the Jacobian is the
gradient of its own loss. That holds only when no example's output depends on another example of the
batch: batch normalisation (statistics of the batch) and in-batch triplet mining break it, and the
trainer refuses them (privacy_checks).

An embedding's gradient is sparse (the batch's rows); the Jacobian makes it dense per example
([batch, vocabulary, width]), and the noise is dense anyway: every row of the table gets noise every
step, or the rows a batch touched would tell which words its examples hold.
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

    def gradients(self, tape, per_example_loss, variables, step):
        """This worker's share of the private average gradient of one step (`step`: a counter that
        differs every step, e.g. the optimizer's iterations: the noise's seed)."""
        jacobians = tape.jacobian(per_example_loss, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        total = clipped_sum(jacobians, self.l2_clip)
        seeds = tf.random.experimental.stateless_split(
            tf.stack([tf.constant(self.secret_key, tf.int64), tf.cast(step, tf.int64)]), num=len(total))
        return [(g + tf.random.stateless_normal(tf.shape(g), seed=seeds[i], stddev=self.noise_std, dtype=g.dtype))
                / self.expected_batch for i, g in enumerate(total)]


def clipped_sum(per_example, l2_clip):
    """The sum over the batch of every example's gradient scaled to L2 norm at most l2_clip (its norm over
    all the weights together). per_example: one [batch, *shape] tensor per weight."""
    per_example = [tf.convert_to_tensor(g) for g in per_example]
    batch = tf.shape(per_example[0])[0]
    squares = tf.add_n([tf.reduce_sum(tf.reshape(tf.square(g), [batch, -1]), axis=1) for g in per_example])
    # min(1, C / norm); a zero gradient stays zero (C / max(norm, tiny) > 1)
    scale = tf.minimum(1.0, l2_clip / tf.maximum(tf.sqrt(squares), 1e-12))
    return [tf.tensordot(tf.cast(scale, g.dtype), g, axes=1) for g in per_example]
