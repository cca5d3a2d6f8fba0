"""LazyAdam: Keras' Adam on dense gradients; on an embedding's sparse gradient, Adam's
arithmetic on the touched rows only (numpy reference below), the other rows untouched."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from disttrain_trainer.optimizers import LazyAdam  # noqa: E402

LR, B1, B2, EPS = 0.01, 0.9, 0.999, 1e-7  # Keras' Adam defaults but the learning rate


def make(cls, initial):
    variable = keras.Variable(initial)
    optimizer = cls(learning_rate=LR)
    optimizer.build([variable])
    return variable, optimizer


def test_dense_gradients_take_keras_adam_step_unchanged():
    rng = np.random.default_rng(0)
    initial = rng.normal(size=(5, 3)).astype("float32")
    (lazy, lazy_opt), (dense, dense_opt) = make(LazyAdam, initial), make(keras.optimizers.Adam, initial)
    for _ in range(4):
        grad = tf.constant(rng.normal(size=(5, 3)).astype("float32"))
        lazy_opt.apply_gradients([(grad, lazy)])
        dense_opt.apply_gradients([(grad, dense)])
    np.testing.assert_array_equal(lazy.numpy(), dense.numpy())


def test_sparse_gradients_update_only_the_touched_rows_with_adams_arithmetic():
    rng = np.random.default_rng(1)
    initial = rng.normal(size=(6, 2)).astype("float32")
    variable, optimizer = make(LazyAdam, initial)
    w, m, v = initial.astype("float64"), np.zeros((6, 2)), np.zeros((6, 2))
    # step 1 touches rows 0, 2 (row 2 twice: its gradients add up), step 2 rows 2, 4
    for step, (rows, values) in enumerate([([0, 2, 2], rng.normal(size=(3, 2))), ([4, 2], rng.normal(size=(2, 2)))], 1):
        grad = tf.IndexedSlices(
            tf.constant(values, tf.float32), tf.constant(rows, tf.int64), tf.constant([6, 2], tf.int64)
        )
        optimizer.apply_gradients([(grad, variable)])
        summed = {}
        for row, value in zip(rows, values):
            summed[row] = summed.get(row, 0) + value
        alpha = LR * np.sqrt(1 - B2**step) / (1 - B1**step)
        for row, g in summed.items():
            m[row] = B1 * m[row] + (1 - B1) * g
            v[row] = B2 * v[row] + (1 - B2) * g * g
            w[row] -= alpha * m[row] / (np.sqrt(v[row]) + EPS)
    np.testing.assert_allclose(variable.numpy(), w, rtol=1e-5, atol=1e-6)
    # rows 1, 3, 5 were never touched; row 0 was touched in step 1 only and did not move in step 2
    # (dense Adam's momentum would have moved it)
    np.testing.assert_array_equal(variable.numpy()[[1, 3, 5]], initial[[1, 3, 5]])
    np.testing.assert_array_equal(optimizer._momentums[0].numpy()[[1, 3, 5]], 0)
