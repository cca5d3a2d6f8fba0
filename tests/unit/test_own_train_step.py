"""A model's own training step (tasks/own.py finds it, step.py runs it): a keras.Model subclass that overrides
train_step or compute_loss is stepped by its own train_step inside the trainer's compiled call, with the trainer's
optimizer, and the call's sums are what the step returns (or the task's loss and score where it returns none)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from disttrain_trainer.step import make_train_call
from disttrain_trainer.tasks.own import own_step_methods


class Counting(keras.Model):
    """Its own train_step: Keras' own arithmetic, and a count of its calls."""

    def __init__(self, *args, returns=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.returns = returns  # None: the compiled metrics; else a dict of constants
        self.calls = self.add_weight(shape=(), initializer="zeros", trainable=False, name="calls")

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x, y, y_pred)
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_weights), self.trainable_weights))
        self.calls.assign_add(1.0)
        if self.returns is not None:
            return {key: tf.constant(value) for key, value in self.returns.items()}
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


class ConstantLoss(keras.Model):
    """compute_loss only: Keras' default train_step calls it (a constant: no gradient, the weights stay)."""

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        return 0.0 * keras.ops.sum(y_pred) + 3.0


class Deeper(Counting):
    """Inherits the override."""


def layers():
    inputs = keras.Input((4,), name="f")
    return inputs, keras.layers.Dense(2, activation="softmax")(keras.layers.Dense(8, activation="relu")(inputs))


def compiled(cls, **kwargs):
    keras.utils.set_random_seed(1)
    model = cls(*layers(), **kwargs)
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def loss_and_hits(y, outputs):
    per_example = keras.losses.sparse_categorical_crossentropy(y, outputs)
    return per_example, tf.cast(tf.equal(tf.argmax(outputs, axis=-1), y), tf.float32)


def batches(n=64, batch=16):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")
    return x, y, tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).repeat()


def trained(model, steps_per_call=(2, 3)):
    """The trainer's call over the model's own step, with the trainer's optimizer; (sums, optimizer)."""
    optimizer = keras.optimizers.Adam(1e-2)
    optimizer.build(model.trainable_variables)
    strategy = tf.distribute.get_strategy()
    call = make_train_call(strategy, model, optimizer, loss_and_hits, model_step_score="accuracy")
    iterator = iter(strategy.distribute_datasets_from_function(lambda _: batches()[2]))
    return sum(call(iterator, steps) for steps in steps_per_call), optimizer


def test_a_functional_or_sequential_model_has_no_step_of_its_own():
    assert own_step_methods(keras.Model(*layers())) == ()
    assert own_step_methods(keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])) == ()


def test_an_override_is_found_through_the_mro():
    assert own_step_methods(Counting(*layers())) == ("train_step",)
    assert own_step_methods(Deeper(*layers())) == ("train_step",)
    assert own_step_methods(ConstantLoss(*layers())) == ("compute_loss",)


def test_the_models_own_step_runs_each_step_with_the_trainers_optimizer():
    model = compiled(Counting)
    own = model.optimizer
    before = [w.copy() for w in model.get_weights()]
    sums, optimizer = trained(model)
    assert float(model.calls.numpy()) == 5 and int(optimizer.iterations.numpy()) == 5  # 2 + 3 steps, its own
    # the trainer's optimizer stepped; the model keeps the one it was compiled with (its checkpoint, its file)
    assert model.optimizer is own and int(own.iterations.numpy()) == 0
    assert sums[2] == 5 * 16
    assert any(not np.allclose(a, b) for a, b in zip(before, model.get_weights()))
    assert 0 < sums[0] / sums[2] < 2 and 0 <= sums[1] / sums[2] <= 1  # its loss and accuracy, per example


def test_the_sums_are_what_the_step_returns():
    sums, _ = trained(compiled(Counting, returns={"loss": 7.0, "accuracy": 0.25}))
    assert sums.tolist() == pytest.approx([7.0 * 80, 0.25 * 80, 80])


def test_what_the_step_does_not_return_is_the_tasks_on_the_batch_after_the_step():
    model = compiled(Counting, returns={"loss": 7.0})  # no accuracy: the task's hits, after the step
    sums, _ = trained(model, steps_per_call=(1,))
    x, y, _ = batches()
    _, hits = loss_and_hits(y[:16], model(x[:16], training=False))
    assert sums.tolist() == pytest.approx([7.0 * 16, float(tf.reduce_sum(hits)), 16])


def test_a_compute_loss_override_is_stepped_by_keras_own_train_step():
    model = compiled(ConstantLoss)
    before = [w.copy() for w in model.get_weights()]
    sums, optimizer = trained(model)
    assert sums[0] == pytest.approx(3.0 * 80)  # Keras' train_step tracked the override's loss
    assert int(optimizer.iterations.numpy()) == 5
    assert all(np.allclose(a, b) for a, b in zip(before, model.get_weights()))  # its constant loss moves nothing
