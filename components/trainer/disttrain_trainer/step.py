"""The training step, the same for every strategy: one `tf.function` call runs several
steps (`--steps-per-call`, the idea of Keras' `steps_per_execution`), so the Python and
dispatch overhead of a call is paid once per call rather than once per step, and the
step's metrics are summed on the worker rather than sent anywhere. (The one exception,
a synchronous step with a sparse gradient, is explained in make_train_call.)

A strategy plugs in two things: the tf.distribute strategy the step runs under (the
default one-replica strategy, or MultiWorkerMirroredStrategy) and, for synchronous
training, how the gradients are summed across workers (collectives.Wire.all_reduce_sum).

A user's model whose class overrides keras.Model's train_step or compute_loss (tasks/own.py)
is stepped by its own `train_step((x, y))` instead, inside the same compiled call: where each
worker steps alone (the registry's steps_alone: average, localsgd), so that nothing is summed
across workers inside the step. It applies the gradients itself, with `model.optimizer`, which
is the trainer's optimizer (the one built from the compiled recipe, checkpointed with the run)
while the step is traced: the graph steps with the trainer's optimizer, and the model keeps
the optimizer it was compiled with, so that its checkpoint and its published file are those of
any other model (no second copy of the optimizer's state). The model's metrics are reset
before each step, so what the step returns is that step's: its "loss" and the training score's
metric ("accuracy", or "mae" for a regression) become the call's sums, weighted by the batch's
examples; what it does not return is taken from the task's own loss_and_score on the batch, in
a forward pass (training=False) after the step.
"""

import keras
import tensorflow as tf


def make_train_call(
    tf_strategy,
    model,
    optimizer,
    loss_and_hits,
    reduce_gradients=None,
    run_call=None,
    private=None,
    model_step_score=None,
):
    """train_call(iterator, steps) -> [loss sum, hits, examples] of this worker over `steps` steps.

    run_call(compiled, iterator, steps): how the compiled call runs, if not here and now
    (parameter-server training schedules it on a worker and returns a RemoteValue).
    private: a dp_step.DpGradient for differentially private training (clipped per-example
    gradients plus noise instead of the batch's gradient); None: the ordinary step.
    model_step_score: the name of the training score (metrics.training_score) when the model's
    own train_step is the step (the task refused every strategy and option it cannot run
    under: a step of one worker alone, not private); None: the trainer's step."""
    variables = model.trainable_variables
    if model_step_score is not None:
        if reduce_gradients is not None or private is not None:
            raise ValueError("a model's own train_step runs only where a step is one worker's alone, not private")
    if reduce_gradients is not None:
        skip_keras_gradient_allreduce(optimizer)

    def model_step_fn(x, y):
        for metric in model.metrics:  # (Keras' fit resets them per epoch; here per step: the returns are its own)
            metric.reset_state()
        # the trainer's optimizer while the step is traced (the module's docstring says why only then)
        compiled_with, model.optimizer = getattr(model, "optimizer", None), optimizer
        try:
            logs = model.train_step((x, y))
        finally:
            model.optimizer = compiled_with
        logs = logs if isinstance(logs, dict) else {}
        examples = tf.cast(tf.shape(y)[0], tf.float32)
        if "loss" not in logs or model_step_score not in logs:
            per_example, hits = loss_and_hits(y, model(x, training=False))  # (after the step: its weights)
            taken = {"loss": tf.reduce_mean(per_example), model_step_score: tf.reduce_mean(hits)}
            logs = {**taken, **logs}
        loss, score = (tf.reduce_mean(tf.cast(logs[key], tf.float32)) for key in ("loss", model_step_score))
        return tf.stack([loss * examples, score * examples, examples])

    def private_step_fn(x, y):
        grads, loss_sum, hits = private.step(model, loss_and_hits, x, y, variables, optimizer.iterations)
        if reduce_gradients is not None:
            grads = reduce_gradients(grads)
        optimizer.apply_gradients(zip(grads, variables))
        return tf.stack([loss_sum, hits, tf.cast(tf.shape(y)[0], tf.float32)])

    def step_fn(x, y):
        with tf.GradientTape() as tape:
            per_example, hits = loss_and_hits(y, model(x, training=True))
            loss = tf.nn.compute_average_loss(per_example)  # / global batch: gradients add up across replicas
            if model.losses:  # the layers' regularization losses, as Keras' compute_loss adds them (per replica)
                loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
            loss = optimizer.scale_loss(loss)  # (the optimizer's loss_scale_factor; apply_gradients unscales)
        grads = tape.gradient(loss, variables)
        if reduce_gradients is not None:
            grads = reduce_gradients(grads)
        optimizer.apply_gradients(zip(grads, variables))
        return tf.stack([tf.reduce_sum(per_example), tf.reduce_sum(hits), tf.cast(tf.shape(y)[0], tf.float32)])

    def one_step(iterator):
        step = model_step_fn if model_step_score is not None else step_fn if private is None else private_step_fn
        per_replica = tf_strategy.run(step, args=next(iterator))
        return tf.add_n(tf_strategy.experimental_local_results(per_replica))

    # (a private step's gradient is dense: the noise covers every embedding row)
    if reduce_gradients is not None and private is None and has_sparse_gradients(model):
        # One step per call. In a tf.range loop every step runs the same collective
        # instance, and TensorFlow fixes an instance's shapes the first time it runs in a
        # call: the next step's sparse gradient, with another number of rows, fails with
        # "Shape mismatch in the collective instance". Unrolling the steps in Python
        # instead works, but tracing 32 text steps took 15 s, more than the 0.15 s per
        # epoch that fewer calls saved (80 steps per epoch, 2 workers, a 2-core host).
        single = tf.function(one_step)
        return lambda iterator, steps: sum(single(iterator).numpy() for _ in range(steps))

    @tf.function
    def looped(iterator, steps):
        sums = tf.zeros([3], tf.float32)
        for _ in tf.range(steps):
            sums += one_step(iterator)
        return sums

    if run_call is not None:
        return lambda iterator, steps: run_call(looped, iterator, tf.constant(steps))
    return lambda iterator, steps: looped(iterator, tf.constant(steps)).numpy()


def has_sparse_gradients(model):
    """An Embedding layer's gradient is a tf.IndexedSlices (only the looked-up rows)."""
    from disttrain_trainer.models import find_layer

    return find_layer(model, keras.layers.Embedding) is not None


def skip_keras_gradient_allreduce(optimizer):
    """Keras 3's optimizer all-reduces the gradients itself when it runs in a replica
    context (`_all_reduce_sum_gradients`, in float32, default options). The step has
    already summed them across workers with the chosen dtype and packing, so this
    instance must not sum them again (that would double the gradients and pay a
    second collective). There is no public switch for it in Keras 3.15."""
    if not hasattr(optimizer, "_all_reduce_sum_gradients"):
        raise RuntimeError(
            f"keras {keras.__version__}: the optimizer has no _all_reduce_sum_gradients to replace; "
            "check disttrain_trainer.step against this Keras version"
        )
    optimizer._all_reduce_sum_gradients = lambda grads_and_vars: list(grads_and_vars)
