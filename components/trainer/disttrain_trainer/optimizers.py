"""The optimizer: the trainer's (--optimizer: Adam, with a lazy update for sparse gradients, or SGD), or the one a
user's model was compiled with (`Recipe`).

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
        alpha = (
            tf.cast(learning_rate, variable.dtype)
            * tf.sqrt(1 - tf.pow(tf.cast(self.beta_2, variable.dtype), local_step))
            / (1 - tf.pow(tf.cast(self.beta_1, variable.dtype), local_step))
        )
        m = self._momentums[self._get_variable_index(variable)]
        v = self._velocities[self._get_variable_index(variable)]
        m_rows = self.beta_1 * gather(m, rows) + (1 - self.beta_1) * values
        v_rows = self.beta_2 * gather(v, rows) + (1 - self.beta_2) * tf.square(values)
        self.assign(m, tf.IndexedSlices(m_rows, rows, gradient.dense_shape))
        self.assign(v, tf.IndexedSlices(v_rows, rows, gradient.dense_shape))
        self.assign_sub(
            variable, tf.IndexedSlices(alpha * m_rows / (tf.sqrt(v_rows) + self.epsilon), rows, gradient.dense_shape)
        )


def gather(variable, rows):
    """The rows of a Keras variable, read through its tf.Variable (a gather, not a full read)."""
    return tf.gather(variable.value if isinstance(variable, keras.Variable) else variable, rows)


def build_optimizer(name, learning_rate):
    """--optimizer: adam, lazyadam or sgd (SGD with momentum 0.9; see SGD_MOMENTUM). `learning_rate`: a number or a
    keras.optimizers.schedules.LearningRateSchedule."""
    if name == "sgd":
        return keras.optimizers.SGD(learning_rate=learning_rate, momentum=SGD_MOMENTUM)
    return (LazyAdam if name == "lazyadam" else keras.optimizers.Adam)(learning_rate=learning_rate)


SGD_MOMENTUM = 0.9

# What a compiled optimizer may use: every option of Keras' base optimizer trains as `model.fit` would with the
# trainer's step (step.py), which calls the optimizer's scale_loss and apply_gradients as Keras' own train_step
# does, and finalize_variable_values at the end; but these, where the strategy (its registry entry's facts) makes
# them mean something else. (A LossScaleOptimizer is refused by its class: mixed precision's dynamic loss scale.)
REFUSED_OPTIONS = {
    "use_ema": (
        lambda s: s.same_final_weights or s.asynchronous,
        "each worker's moving average follows its own steps: localsgd's workers would end with different "
        "weights, and a parameter server's average with the workers' steps in no defined order",
    ),
    "gradient_accumulation_steps": (
        lambda s: s.asynchronous,
        "the workers' steps reach the parameter servers asynchronously: the accumulator "
        "would mix their gradients in no defined order",
    ),
}


class Recipe:
    """The optimizer a user's model was compiled with, as its serialized config (keras.optimizers.serialize): its
    class, learning rate or LearningRateSchedule, weight decay, clipnorm/clipvalue/global_clipnorm, EMA, loss
    scale factor and gradient accumulation. Every worker builds its own from the config, inside the strategy's
    scope (Keras binds an optimizer to the distribution strategy it is created under), with its state fresh:
    iterations 0, no moments (a trained file's saved optimizer state is not restored, so that every worker
    starts from the same state). --optimizer and --learning-rate replace only what they name: --learning-rate
    the learning rate (a number in place of the schedule), --optimizer the optimizer (the trainer's, with the
    file's learning rate unless --learning-rate is given too)."""

    def __init__(self, config):
        self.config = config

    @classmethod
    def of(cls, model):
        """The compiled optimizer's Recipe, None when the model was not compiled with one."""
        if not getattr(model, "compiled", False) or getattr(model, "optimizer", None) is None:
            return None
        return cls(keras.optimizers.serialize(model.optimizer))

    @property
    def class_name(self):
        return self.config["class_name"]

    @property
    def options(self):
        return self.config["config"]

    def refusal(self, strategy):
        """One line: why this recipe cannot train under `strategy` (a strategy's name), or None."""
        from disttrain_contract.strategies import names_where, strategy_of

        if self.class_name == "LossScaleOptimizer":
            return (
                "the model was compiled with a LossScaleOptimizer (mixed precision's dynamic loss scale), which "
                "disttrain does not train: compile it with the inner optimizer (the trainer trains in float32)"
            )
        for option, (refuses, why) in REFUSED_OPTIONS.items():
            if self.options.get(option) and refuses(strategy_of(strategy)):
                takes = " or ".join(names_where(lambda s, refuses=refuses: not refuses(s)))
                return (
                    f"the model's optimizer {self.class_name} sets {option}={self.options[option]!r}, which "
                    f"--strategy {strategy} cannot honour ({why}): compile it without {option}, or train with "
                    f"--strategy {takes}"
                )
        return None

    def build(self, optimizer=None, learning_rate=None):
        """The optimizer to train with: this recipe's, or the trainer's `optimizer` with this recipe's learning
        rate; `learning_rate` (a number) in place of the recipe's when given."""
        if optimizer is not None:
            rate = learning_rate if learning_rate is not None else self.learning_rate()
            return build_optimizer(optimizer, rate)
        config = {**self.config, "config": dict(self.options)}
        if learning_rate is not None:
            config["config"]["learning_rate"] = learning_rate
        return keras.optimizers.deserialize(config)

    def learning_rate(self):
        """The recipe's learning rate: a number, or its LearningRateSchedule."""
        rate = self.options.get("learning_rate")
        return keras.optimizers.schedules.deserialize(rate) if isinstance(rate, dict) else rate


def describe(optimizer):
    """One line of what an optimizer does (the log's "optimizer: ..." line): its class, learning rate or schedule,
    and the options that change a step."""
    rate = optimizer.get_config()["learning_rate"]  # (a schedule serialized; .learning_rate is its value now)
    if isinstance(rate, dict):
        settings = ", ".join(f"{k}={v}" for k, v in rate["config"].items() if k != "name" and v is not None)
        rate_text = f"{rate['class_name']}({settings})"
    else:
        rate_text = f"{float(rate):g}"
    parts = [f"learning_rate {rate_text}"]
    for option in (
        "weight_decay",
        "clipnorm",
        "clipvalue",
        "global_clipnorm",
        "loss_scale_factor",
        "gradient_accumulation_steps",
    ):
        value = getattr(optimizer, option, None)
        if value:
            parts.append(f"{option} {value:g}" if isinstance(value, float) else f"{option} {value}")
    if getattr(optimizer, "use_ema", False):
        parts.append(f"EMA (momentum {optimizer.ema_momentum:g})")
    return f"{type(optimizer).__name__} ({', '.join(parts)})"
