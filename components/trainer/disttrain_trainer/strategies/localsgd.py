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

When: every H steps of the run, and at the run's last step. Between two syncs each worker trains its own
model, so an epoch's end that falls between syncs evaluates and checkpoints the chief's own model of up to H
steps past the last sync, not the group's. With --sync-at-epoch-end the syncs are every H steps counted from
each epoch's start and at each epoch's end (options.next_sync): every epoch's evaluation then reads the
group's model right after its outer step, the model the run would publish if it ended there, the same on
every worker (DiLoCo's papers evaluate that model too; docs/strategies.md compares the two curves). The price,
where H does not divide an epoch: a short interval and one sync more an epoch (ceil(S / H) instead of S / H).

The wire (--allreduce-dtype): float32 and float16 by all-reduce (collectives.Wire); int8 and int4
(wire_codecs.py: a float32 scale per block of 256 values) by one all-gather, decoded and summed
in worker order (TensorFlow's collectives refuse int8). On the lossy wires the sync uses error
feedback: what the wire rounded off (the residual) is added to the next sync's change.

Overlap (--outer-overlap): a sync's collective is the only time a worker waits for the others, and over
a slow link it is most of a sync (its bytes x 8 / the link's bits per second). With
`delayed` or `eager` the collective runs on a second thread beside the next H inner steps: at a sync a
worker encodes its change and starts sending it, and applies the exchange the previous sync started
(waiting only for what is left of it). The outer step is then one sync late (Kale, Douillard and Donchev
2025, "Eager updates for overlapped communication and computation in DiLoCo", arXiv 2502.12996):
  delayed  the mean of the previous sync's changes: every worker still holds the same weights after a
           sync, but each change lands one round late, on weights that have moved on;
  eager    the paper's eager update: this worker's own change of this round stands in for its stale one,
           (the previous sync's total - its own previous change + its own new change) / workers, so its
           own progress lands at once. The workers' weights then differ by their own changes until the
           end of the run.
The run ends (finish) by waiting for the last exchange and adding the mean change it has not yet applied
as it is (no outer step: there are no inner steps after it for a momentum step to be corrected by); under
`eager` the workers then average their weights (one float32 all-reduce), so the published model is one
model, the same on every worker. What is in flight (this worker's last message, in its wire form) is
checkpointed: a resumed group sends it again, and goes on exactly as an undisturbed one. The exchange has
a collective group of its own (collectives.SideChannel says why). The late outer step costs about H steps to
the target (measured: docs/strategies.md), so `none` stays the default.

Batch normalization (--sync-batch-norm-batches N, default 8): the averaged moving statistics describe
no model the group holds (each worker's fit its own weights, and the outer step moves the weights
further), so right after a sync the model's inference is off (a batch-norm network evaluated at a rare sync
can score near chance: docs/strategies.md). Training
itself uses each batch's statistics and does not notice, but an evaluation or an export at a sync
does, and the published model is always a sync's. So after a sync whose statistics something reads
before the next sync replaces them (options.statistics_read_after_sync: the last sync before an epoch's
end, where the held-out evaluation and the checkpoint read them, and the run's last) every worker
re-estimates the statistics for the synced weights from the first N batches of its shard (forward passes
in training mode with the moving average turned off, the mean of the batches' statistics, as
torch.optim.swa_utils.update_bn does after averaging), and the workers average those (one float32
all-reduce of the statistics). The same N batches every time, and the same syncs (a rule of the step): a
resumed run does what an undisturbed one does. It costs N forward passes (about N / 3 steps) once an epoch
where H is shorter than an epoch. (Re-estimating after every sync would give every evaluation the same
statistics, each re-estimation replacing the last whole, momentum 0, at the price of more of them.)

What is not synced: the inner optimizer's state. Each worker keeps its own Adam moments and step
count across syncs (as DiLoCo keeps each worker's inner AdamW state): they describe its own
gradients, and averaging them would double the bytes of every sync for no measured gain. Integer
state (the dropout layers' random generators) stays per worker too.

No meeting per epoch: the syncs are the only collectives. Every worker evaluates its own
model on the held-out split after each epoch and records its own shard's training loss and
accuracy, as `average` workers do. (An epoch-end collective to sum the metrics, with the
chief alone evaluating, made every other worker wait for the chief's evaluation at its next
sync.) Between two syncs the workers'
models differ, so their per-epoch curves differ a little (with --sync-at-epoch-end they are the
same); after the last sync every worker holds the same weights, and the chief's evaluation of them is the
run's result.

Checkpoints: each worker keeps its own (its model differs from the others' between syncs),
every epoch, with the anchor, the outer momentum and the wire's residual: a resumed run goes on
exactly as an undisturbed one. The syncs bound how far apart the workers are: no worker is more than H steps
(overlapped: 2H) ahead of another, so each keeps enough checkpoints (checkpoints_to_keep) that the last epoch
every worker saved is still on disk, and a restarted group resumes every worker from it.
"""

import contextlib
import os
import re
import threading
import time

import keras
import numpy as np
import tensorflow as tf

from disttrain_trainer import preemption, wire_codecs
from disttrain_trainer.collectives import WIRE_DTYPES, SideChannel, Wire, sum_block_rows
from disttrain_trainer.models import find_layers
from disttrain_trainer.strategies import options
from disttrain_trainer.strategies.base import Connected


class Strategy(Connected):
    name = "localsgd"

    def __init__(self, config, placement, cluster=None):
        super().__init__(config, placement, cluster)
        settings = config.strategy_settings  # (options.LocalSGDSettings: the flags, or their defaults)
        self.every = settings.sync_every
        self.nesterov = settings.outer_optimizer == "nesterov"
        self.outer_lr, self.outer_momentum = settings.outer_lr, settings.outer_momentum
        self.wire_dtype = settings.allreduce_dtype
        self.batch_norm_batches = settings.sync_batch_norm_batches
        self.overlap = settings.outer_overlap if settings.outer_overlap != "none" else None
        self.at_epoch_end = settings.sync_at_epoch_end  # (options.next_sync: the syncs' schedule)
        self.settings = options.outer_settings(settings)
        self.epochs = config.epochs
        self.steps_per_epoch = None  # (train_epoch: the syncs whose statistics are read depend on it)
        self.synced_at = None
        self.synced_checksum = None
        self.waited = 0.0  # seconds this epoch's syncs waited for an overlapped exchange (epoch_facts)
        self.syncs, self.sync_seconds = 0, 0.0  # this epoch's syncs and the seconds training stood still for them
        self.estimations = 0  # this epoch's batch-norm re-estimations (epoch_facts)
        self.notice = None  # the run's preemption.Notice, while an epoch trains (train_epoch)
        self.agreed = None  # (step, whether any worker asked to stop): an overlapped sync's own agreement (sync)

    def run_config(self):
        # (a checkpoint resumes only with the same outer state, kept as one vector each: a checkpoint that
        # kept it per weight is refused by name rather than restored into nothing)
        return {"sync_every": self.every, **self.settings, "sync_state": "one vector",
                **({"sync_batch_norm_batches": self.batch_norm_batches} if self.norms else {})}

    def bind(self, model):
        self.model = model
        self.norms = find_layers(model, keras.layers.BatchNormalization) if self.batch_norm_batches else []
        self.weights = [w for w in model.weights if keras.backend.is_float_dtype(w.dtype)]
        self.sizes = [int(np.prod(w.shape)) for w in self.weights]
        # The sync's state is one float32 vector per kind, every weight's values end to end (flatten()), not
        # a variable per weight: the per-weight ops made a graph whose tracing took 2.2 s of MobileNetV2's
        # start-up (its 262 weights). The arithmetic is elementwise either way: the same values.
        # the weights at the last sync, the same on every worker (at first: the shared initialisation)
        self.anchor = tf.Variable(self.flatten(), trainable=False, name="anchor")
        # the outer optimizer moves the trainable weights; the others (batch-norm statistics) are averaged
        self.moved = (tf.constant(np.concatenate([np.full(n, w.trainable) for w, n in zip(self.weights, self.sizes)]))
                      if self.nesterov else None)
        self.momentum = tf.Variable(tf.zeros([sum(self.sizes)]), trainable=False, name="outer_momentum") if self.nesterov else None
        self.residual = (tf.Variable(tf.zeros([sum(self.sizes)]), trainable=False, name="wire_residual")
                         if self.wire_dtype in options.LOSSY_WIRES else None)
        self._sync = tf.function(self._sync_fn)
        self._refresh = None
        if self.overlap:
            # what this worker sent at the last sync, in its wire form, and whether its exchange is still to apply
            total = sum(self.sizes)
            if self.wire_dtype in wire_codecs.BLOCK_WIRES:
                self.message = tf.Variable(tf.zeros([wire_codecs.packed_length(total, self.wire_dtype)], tf.int32), trainable=False,
                                           name="sync_message")
            else:
                self.message = tf.Variable(tf.zeros([total], WIRE_DTYPES[self.wire_dtype]), trainable=False,
                                           name="sync_message")
            self.in_flight = tf.Variable(False, trainable=False, name="sync_in_flight")
            self._send = tf.function(self._send_fn)
            self._land = tf.function(self._land_fn)
            self.side = SideChannel(self.cluster)
            self.exchange = Background(tf.function(self._exchange_fn, input_signature=[tf.TensorSpec([], tf.int32)]))

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
        self.statistics = [v for layer in self.norms for v in (layer.moving_mean, layer.moving_variance)]
        # where the statistics sit in the anchor vector (the refresh writes them there too)
        offsets = dict(zip((w.path for w in self.weights), np.cumsum([0, *self.sizes[:-1]])))
        self.statistics_at = tf.constant(np.concatenate([np.arange(offsets[v.path], offsets[v.path] + int(np.prod(v.shape)))
                                                         for v in self.statistics])[:, None], tf.int64)
        self.statistics_wire = Wire("float32")
        self._refresh = tf.function(self._refresh_fn)

    def checkpoint_state(self):
        state = {"anchors": self.anchor}
        if self.momentum is not None:
            state["outer_momenta"] = self.momentum
        if self.residual is not None:
            state["wire_residuals"] = self.residual
        if self.overlap:
            state.update(sync_message=self.message, sync_in_flight=self.in_flight)
        return state

    def flatten(self):
        """Every weight's values end to end, in float32 (the layout of the sync's state)."""
        return tf.concat([tf.reshape(tf.cast(w.value, tf.float32), [-1]) for w in self.weights], 0)

    def assign_weights(self, flat):
        for weight, part in zip(self.weights, tf.split(flat, self.sizes)):
            weight.assign(tf.cast(tf.reshape(part, weight.shape), weight.dtype))

    def before_training(self, step):
        # Trace the sync (and the re-estimation) now, in start-up, as the train step's tracing is part of it:
        # 2 s on MobileNetV2. Tracing only: nothing runs, so a resumed run goes on exactly as an undisturbed
        # one. (A dry run of the collectives, which this was, also opened the communicator, but it sent a
        # whole sync's bytes for nothing: 2.8 s of start-up at 10 Mbit/s. The first sync opens it now.)
        if self.overlap:
            self._send.get_concrete_function(tf.TensorSpec([sum(self.sizes)], tf.float32))
            self._land.get_concrete_function(tf.TensorSpec([sum(self.sizes)], tf.float32))
            self.exchange.fn.get_concrete_function()
            if bool(self.in_flight.numpy()):  # resumed between two syncs: send the message in flight again
                self.exchange.start(self.exchange_key(step // self.every * self.every))
        else:
            self._sync.get_concrete_function()
        if self._refresh is not None:
            with self.refresh_momentum():
                self._refresh.get_concrete_function()

    def next_sync(self, step):
        return options.next_sync(step, self.every, self.steps_per_epoch, self.at_epoch_end)

    def steps_to_sync(self, step):
        return self.next_sync(step) - step

    def syncs_at(self, step):
        """Whether the schedule (next_sync) puts a sync at `step`."""
        return self.next_sync(step - 1) == step

    def train_epoch(self, train_call, iterator, step, steps_per_epoch, steps_per_call, progress, notice=None, done=0,
                    sums=None):
        self.notice = notice  # (an overlapped sync agrees on stopping itself: sync)
        self.steps_per_epoch = steps_per_epoch
        return super().train_epoch(train_call, iterator, step, steps_per_epoch, steps_per_call, progress, notice, done,
                                   sums)

    def after_steps(self, step):
        if self.syncs_at(step):
            self.sync(step)

    def agree_to_stop(self, requested, step):
        # Only at a sync, where every worker holds the same weights: each then saves its own
        # checkpoint of that one step. Between two syncs a worker that had SIGTERM trains on
        # to the next one (at most H steps).
        if not self.syncs_at(step):
            return False
        if self.agreed is not None and self.agreed[0] == step:
            return self.agreed[1]  # agreed by the sync at this step, before its exchange started
        return self.any_worker(requested)

    def finish(self, step):
        if self.synced_at != step:  # the published model is a sync's, whatever H is
            self.sync(step)
        if self.overlap:  # and every worker's exchange applied, the same model on every worker
            # (the last epoch's sync_sec: the landing of the last exchange, and with eager updates the average of the
            # workers' weights, are training standing still for its syncs too; not a sync of the schedule's count)
            with self.standing_still(syncs=0):
                total = self.wait_for_exchange()
                with unoptimized_graphs():
                    synced = self._land(total)
                    if self._refresh is not None:
                        synced = self.refresh()
                self.synced_checksum = int(synced)

    @contextlib.contextmanager
    def standing_still(self, syncs):
        """Count the block's seconds in this epoch's sync_sec, and `syncs` in its syncs (epoch_facts): training stands
        still for them. (Up to the checksum's int(), which waits for the sync's result.)"""
        started = time.monotonic()
        yield
        self.syncs, self.sync_seconds = self.syncs + syncs, self.sync_seconds + time.monotonic() - started

    def sync(self, step):
        # (timed to the checksum's int(), which waits for the sync's result: the collective, its wait for the slowest
        # worker, the codec, the outer step and a re-estimation, all that training stood still for)
        with self.standing_still(syncs=1):
            if self.overlap:
                total = self.wait_for_exchange() if bool(self.in_flight.numpy()) else tf.zeros([sum(self.sizes)])
            with unoptimized_graphs():  # (never while the exchange runs: the option is the runtime's, see there)
                synced = self._send(total) if self.overlap else self._sync()
                if self._refresh is not None and options.statistics_read_after_sync(
                        step, self.next_sync(step), self.steps_per_epoch, self.epochs * self.steps_per_epoch):
                    synced = self.refresh()  # (the statistics change: the checksum is the refresh's)
            if self.overlap:
                if self.notice is not None:
                    # Agree on stopping before the exchange takes the link. The agreement is a collective too, and
                    # asked after the exchange had started (agree_to_stop, before the next train call) its few bytes
                    # queued behind the exchange's on the one connection between two workers: on a slow link it
                    # waited for most of the exchange, which the steps then did not overlap (the text model's int8
                    # DiLoCo at 10 Mbit/s with eager updates: 1.56 s per epoch, 1.78 waiting for each sync; 1.20
                    # agreeing first).
                    self.agreed = (step, self.any_worker(self.notice.requested))
                # after the re-estimation's collective and the agreement: one collective of the sync in flight at a time
                self.exchange.start(self.exchange_key(step))
            self.synced_checksum, self.synced_at = int(synced), step

    def exchange_key(self, step):
        """The instance key of the exchange of the sync at `step`: the same on every worker, and a new one for
        each sync of a run (one exchange is in flight at a time; the range wraps after 2**31 syncs)."""
        return tf.constant(step // self.every % (2**31 - 1), tf.int32)

    def wait_for_exchange(self):
        """The total of the workers' messages of the last sync (float32), once its exchange is done."""
        started = time.monotonic()
        total = self.exchange.result()
        self.waited += time.monotonic() - started
        return total

    def refresh(self):
        """Re-estimate the batch-norm statistics for the synced weights (the module's docstring)."""
        self.estimations += 1
        with self.refresh_momentum():
            return self._refresh()

    @contextlib.contextmanager
    def refresh_momentum(self):
        """Momentum 0 in the batch-norm layers: each forward pass leaves its own batch's statistics in the
        moving ones (the re-estimation is traced once, with this value; the train step with the layers' own)."""
        momenta = [layer.momentum for layer in self.norms]
        try:
            for layer in self.norms:
                layer.momentum = 0.0
            yield
        finally:
            for layer, momentum in zip(self.norms, momenta):
                layer.momentum = momentum

    def _refresh_fn(self):
        """The mean of the refresh batches' statistics on this worker, averaged over the workers, in the
        moving statistics and in the anchor. Returns the checksum of the synced weights, as _sync_fn does."""
        variables = self.statistics

        def replica_fn():
            totals = [tf.zeros_like(v.value) for v in variables]
            for i in tf.range(self.refresh_count):
                start = i * self.refresh_batch
                self.model(tf.nest.map_structure(lambda x: x[start:start + self.refresh_batch], self.refresh_inputs),  # noqa: B023
                           training=True)
                totals = [t + v.value for t, v in zip(totals, variables)]
            return self.statistics_wire.all_reduce_sum([t / self.refresh_count for t in totals])

        summed = self.cluster.run(replica_fn)
        workers = self.cluster.num_replicas_in_sync
        means = [self.cluster.experimental_local_results(t)[0] / workers for t in summed]
        for variable, mean in zip(variables, means):
            variable.assign(mean)
        self.anchor.scatter_nd_update(self.statistics_at, tf.concat([tf.reshape(m, [-1]) for m in means], 0))
        return checksum(self.anchor)

    def _sync_fn(self):
        """One sync: every worker sends its change since the last sync (with the residual of a lossy
        wire), and applies the same update to the same anchor. Returns a checksum of the synced weights (the sum of
        their bits), the same on every worker (a batch-norm re-estimation after it returns its own: it changes the
        statistics)."""
        workers = self.cluster.num_replicas_in_sync

        def replica_fn():
            change = self.flatten() - self.anchor.value()
            if self.residual is None:  # float32
                (total,) = self.wire.all_reduce_sum([change])
                return total, tf.zeros([0])
            # A lossy wire codes the change as one vector too: the codec's ops per tensor made a graph whose
            # tracing and first run took 18 s of MobileNetV2's start-up (its 262 weights; 27 s against plain
            # localsgd's 9, bench/results/time_to_accuracy.json). (int8's blocks of 256 then run across the
            # weights' boundaries: one scale per block all the same.)
            encode, decode = wire_codecs.CODECS[self.wire_dtype]
            message, residual = wire_codecs.with_error_feedback(change, self.residual.value(), encode, decode)
            if self.wire_dtype == "float16":  # (summed in float16 by the all-reduce, then back to float32)
                (total,) = self.wire.all_reduce_sum([message])
                total = decode(total)
            else:
                (total,) = self.wire.sum_blocks([message], [sum(self.sizes)])
            return total, residual

        total, residual = (self.cluster.experimental_local_results(t)[0] for t in self.cluster.run(replica_fn))
        self.outer_step(total / workers)
        if self.residual is not None:
            self.residual.assign(residual)
        return checksum(self.anchor)

    def outer_step(self, mean):
        """The anchor moved by the workers' mean change (--outer-optimizer), and the weights set to it."""
        if self.nesterov:
            step, momentum = nesterov_step(mean, self.momentum.value(), self.outer_lr, self.outer_momentum)
            # only the trainable weights move by the outer step (and keep a momentum); the others: the average
            self.momentum.assign(tf.where(self.moved, momentum, 0.0))
            synced = self.anchor + tf.where(self.moved, step, mean)
        else:
            synced = self.anchor + mean  # the average
        self.anchor.assign(synced)
        self.assign_weights(synced)

    # ---------------------------------------------------------------- overlapped syncs (--outer-overlap)
    def _send_fn(self, stale_total):
        """An overlapped sync's own part (no collective): encode this round's change into the message (with the
        residual of a lossy wire), and take the outer step with the last sync's exchange, `stale_total` (zeros at
        the first sync). The exchange of the new message starts after it (sync)."""
        change = self.flatten() - self.anchor.value()
        if self.residual is None:
            message = change
        else:
            encode, decode = wire_codecs.CODECS[self.wire_dtype]
            message, residual = wire_codecs.with_error_feedback(change, self.residual.value(), encode, decode)
            self.residual.assign(residual)
            if self.wire_dtype in wire_codecs.BLOCK_WIRES:
                message = wire_codecs.pack(*message, self.wire_dtype)
        if self.overlap == "eager":  # this worker's new change in place of its stale one
            stale_total = stale_total - self.decode_message(self.message.value()) + self.decode_message(message)
        self.outer_step(stale_total / self.cluster.num_replicas_in_sync)
        self.message.assign(message)
        self.in_flight.assign(True)
        return checksum(self.anchor)

    def _exchange_fn(self, instance_key):
        """The collective of an overlapped sync, on the exchange's thread: the total of every worker's message
        (float32), as _sync_fn sums it, over the side channel (collectives.SideChannel says why)."""
        if self.wire_dtype in wire_codecs.BLOCK_WIRES:
            (total,) = sum_block_rows(self.side.gather(self.message.value(), instance_key), self.side.size, [sum(self.sizes)],
                                      self.wire_dtype)
            return total
        return tf.cast(self.side.sum(self.message.value(), instance_key), tf.float32)

    def _land_fn(self, total):
        """The end of an overlapped run: the mean of the last exchange's part not applied yet (all of it under
        `delayed`, the others' changes under `eager`) added to the anchor, then under `eager` the workers' weights
        averaged (they differ by their own changes). Nothing is in flight after it."""
        if self.overlap == "eager":
            total = total - self.decode_message(self.message.value())
        landed = self.anchor + total / self.cluster.num_replicas_in_sync
        if self.overlap == "eager":
            # (tf.identity: handed a tensor made outside the replica function, the all-reduce finds no device to
            # send it to)
            summed = self.cluster.run(lambda: Wire("float32").all_reduce_sum([tf.identity(landed)])[0])
            landed = self.cluster.experimental_local_results(summed)[0] / self.cluster.num_replicas_in_sync
        self.anchor.assign(landed)
        self.assign_weights(landed)
        self.message.assign(tf.zeros_like(self.message))
        self.in_flight.assign(False)
        return checksum(self.anchor)

    def decode_message(self, message):
        """A message in its wire form (sync_message's) -> the float32 change it stands for."""
        if self.wire_dtype in wire_codecs.BLOCK_WIRES:
            return wire_codecs.block_decode(*wire_codecs.unpack(message, sum(self.sizes), self.wire_dtype))
        return tf.cast(message, tf.float32)

    @property
    def wire_bytes_per_sync(self):
        """What each worker sends at a sync (its payload; an all-reduce ring sends about twice this over all
        its hops, an all-gather sends it to each other worker)."""
        if self.wire_dtype in wire_codecs.BLOCK_WIRES:
            return 4 * wire_codecs.packed_length(sum(self.sizes), self.wire_dtype)  # (one vector: see _sync_fn)
        return sum(self.sizes) * (2 if self.wire_dtype == "float16" else 4)

    def marker_info(self):
        return {"wire_bytes_per_sync": self.wire_bytes_per_sync}

    def epoch_metrics(self, sums):
        return sums  # this worker's own: no collective at the epoch's end (see the module's docstring)

    def epoch_facts(self):
        # the checksum of the last sync's weights: every worker's record of an epoch says the same one
        facts = {"training_metrics_of": "this worker", "last_sync_step": self.synced_at,
                 "synced_weights_checksum": self.synced_checksum,
                 # what this epoch's syncs cost this worker (its share of wall_time_sec), to set beside the advisor's
                 "syncs": self.syncs, "sync_sec": round(self.sync_seconds, 3)}
        self.syncs, self.sync_seconds = 0, 0.0
        if self.overlap:  # how much of the exchanges the inner steps did not hide
            facts["sync_wait_sec"], self.waited = round(self.waited, 3), 0.0
        if self._refresh is not None:  # (statistics_read_after_sync: one an epoch where H is shorter than one)
            facts["batch_norm_re_estimations"], self.estimations = self.estimations, 0
        return facts

    def checkpoints_to_keep(self, steps_per_epoch):
        # a worker is at most H steps ahead of the slowest (2H with overlapped syncs: a sync waits for the
        # previous one's exchange only), so at most ceil(that / steps per epoch) epochs: keep those, the common
        # one before them, and one spare
        ahead = self.every * (2 if self.overlap else 1)
        return 2 + -(-ahead // steps_per_epoch)

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
    from it: on MobileNetV2 (its state then a variable per weight) the first run of the sync took 3.2 s
    with it and 1.1 s without, the re-estimation's 2.4 s and 0.9 s, and every later sync as long. The option is the
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


def checksum(variable):
    """The sum of the variable's bits: the same on every worker when they hold the same values."""
    return tf.reduce_sum(tf.cast(tf.bitcast(variable.value(), tf.int32), tf.int64))


def nesterov_step(mean_change, momentum, lr, mu):
    """DiLoCo's outer step: Nesterov momentum as torch.optim.SGD(nesterov=True) takes it, on the outer
    gradient -mean_change, written in the direction of the change. Returns (the step to add to the
    anchor, the new momentum): momentum' = mu * momentum + mean_change, step = lr * (mean_change +
    mu * momentum'). lr 1 and mu 0: the mean change itself, i.e. plain averaging."""
    momentum = mu * momentum + mean_change
    return lr * (mean_change + mu * momentum), momentum


class Background:
    """One call at a time on a thread of its own (an overlapped sync's exchange): start() runs it, result()
    waits for it and returns its value or raises its error. A daemon thread: a worker that fails or stops
    while a peer is gone exits without waiting for a collective that cannot end."""

    def __init__(self, fn):
        self.fn, self.thread = fn, None

    def start(self, *args):
        assert self.thread is None, "an exchange is already in flight"
        self.value = self.error = None

        def run():
            try:
                self.value = self.fn(*args)
            except BaseException as err:  # (raised again on the training thread, by result())
                self.error = err

        self.thread = threading.Thread(target=run, name="localsgd-exchange", daemon=True)
        self.thread.start()

    def result(self):
        self.thread.join()
        self.thread = None
        if self.error is not None:
            raise self.error
        return self.value
