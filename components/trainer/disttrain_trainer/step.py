"""The training step, the same for every strategy: one `tf.function` call runs several
steps (`--steps-per-call`, the idea of Keras' `steps_per_execution`), so the Python and
dispatch overhead of a call is paid once per call rather than once per step, and the
step's metrics are summed on the worker rather than sent anywhere. (The one exception,
a synchronous step with a sparse gradient, is explained in make_train_call.)

A strategy plugs in two things: the tf.distribute strategy the step runs under (the
default one-replica strategy, or MultiWorkerMirroredStrategy) and, for synchronous
training, how the gradients are summed across workers (collectives.Wire.all_reduce_sum).
"""

import keras
import tensorflow as tf


def make_train_call(tf_strategy, model, optimizer, loss_and_hits, reduce_gradients=None, run_call=None, private=None):
    """train_call(iterator, steps) -> [loss sum, hits, examples] of this worker over `steps` steps.

    run_call(compiled, iterator, steps): how the compiled call runs, if not here and now
    (parameter-server training schedules it on a worker and returns a RemoteValue).
    private: a dp_step.DpGradient for differentially private training (clipped per-example
    gradients plus noise instead of the batch's gradient); None: the ordinary step."""
    variables = model.trainable_variables
    if reduce_gradients is not None:
        skip_keras_gradient_allreduce(optimizer)

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
        per_replica = tf_strategy.run(step_fn if private is None else private_step_fn, args=next(iterator))
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
