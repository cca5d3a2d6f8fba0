"""Held-out evaluation, computed the same way by the trainer (per epoch) and the
aggregator (per worker model and the final one), so their numbers compare."""

import numpy as np


def as_model_input(task, x):
    """Text models take a [n, 1] column of strings; image arrays pass as they are."""
    if task == "text":
        return np.asarray(x, dtype=object).reshape(-1, 1)
    return x


def evaluate(model, x, y, batch=512):
    """(mean cross-entropy, accuracy) of a softmax model on (x, y)."""
    import tensorflow as tf

    loss_sum, correct = 0.0, 0
    for start in range(0, len(y), batch):
        probs = model(tf.constant(x[start : start + batch]), training=False).numpy().astype(np.float64)
        labels = np.asarray(y[start : start + batch])
        picked = np.clip(probs[np.arange(len(labels)), labels], 1e-7, 1.0)
        loss_sum += float(-np.log(picked).sum())
        correct += int((probs.argmax(axis=-1) == labels).sum())
    return loss_sum / len(y), correct / len(y)
