"""The optimizer: Adam, with a lazy update for sparse gradients.

Keras 3's Adam turns an embedding's sparse gradient (a tf.IndexedSlices: the rows a batch
looked up) into a dense one: every step it reads and writes the whole embedding and both of
its moment tables, with dense temporaries in between. For the movie-review model that is
about a dozen passes over 5.1 MB per step for the ~1,200 rows a batch of 64 reviews touches,
and two workers on two cores share one L3 cache and one memory bus while they do it.

LazyAdam updates only the touched rows: their moments decay and take the new gradient, and
their weights move; the other rows keep their weights and moments until a batch touches them
again. That is the "lazy" Adam of TensorFlow Addons' LazyAdam and PyTorch's SparseAdam (the
usual choice for large embeddings); it is not the same arithmetic as dense Adam, whose
momentum keeps moving rows a batch did not touch. Dense gradients take Keras' own Adam step
unchanged. bench/README.md ("the lazy update") has the measured step time and accuracy.
"""

import keras
import tensorflow as tf

from disttrain_trainer.collectives import unique_rows


class LazyAdam(keras.optimizers.Adam):
    def update_step(self, gradient, variable, learning_rate):
        if not isinstance(gradient, tf.IndexedSlices):
            return super().update_step(gradient, variable, learning_rate)
        gradient = unique_rows(gradient)  # a row looked up twice in a batch: one update, its gradients summed
        rows = gradient.indices
        values = tf.cast(gradient.values, variable.dtype)
        local_step = tf.cast(self.iterations + 1, variable.dtype)
        alpha = (tf.cast(learning_rate, variable.dtype) * tf.sqrt(1 - tf.pow(tf.cast(self.beta_2, variable.dtype), local_step))
                 / (1 - tf.pow(tf.cast(self.beta_1, variable.dtype), local_step)))
        m = self._momentums[self._get_variable_index(variable)]
        v = self._velocities[self._get_variable_index(variable)]
        m_rows = self.beta_1 * gather(m, rows) + (1 - self.beta_1) * values
        v_rows = self.beta_2 * gather(v, rows) + (1 - self.beta_2) * tf.square(values)
        self.assign(m, tf.IndexedSlices(m_rows, rows, gradient.dense_shape))
        self.assign(v, tf.IndexedSlices(v_rows, rows, gradient.dense_shape))
        self.assign_sub(variable, tf.IndexedSlices(alpha * m_rows / (tf.sqrt(v_rows) + self.epsilon), rows,
                                                  gradient.dense_shape))


def gather(variable, rows):
    """The rows of a Keras variable, read through its tf.Variable (a gather, not a full read)."""
    return tf.gather(variable.value if isinstance(variable, keras.Variable) else variable, rows)


def build_optimizer(name, learning_rate):
    """--optimizer: adam, lazyadam or sgd (SGD with momentum 0.9; see SGD_MOMENTUM)."""
    if name == "sgd":
        return keras.optimizers.SGD(learning_rate=learning_rate, momentum=SGD_MOMENTUM)
    return (LazyAdam if name == "lazyadam" else keras.optimizers.Adam)(learning_rate=learning_rate)


SGD_MOMENTUM = 0.9
