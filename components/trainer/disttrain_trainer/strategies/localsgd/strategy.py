"""localsgd's Strategy: its techniques (schedule.py, wire.py, outer.py, overlap.py, statistics.py; the package's
docstring lists them) composed around the anchor, the synced weights, the same on every worker.

A sync (every H steps of the schedule): each worker's change since the last sync, `w - anchor`, goes on the wire
(wire.SyncWire: its codec and error feedback), the workers' changes are summed (the same total on every
worker), and the mean moves the anchor (outer.OuterOptimizer); the model's weights are set to it. Overlapped
(overlap.py), the sum is the previous sync's, applied one sync late. Where something reads the batch-norm
statistics before the next sync, they are re-estimated for the new weights (statistics.py).

Between two syncs each worker trains its own model, so an epoch's end that falls between syncs evaluates and
checkpoints the chief's own model of up to H steps past the last sync, not the group's. With --sync-at-epoch-end
the syncs are every H steps counted from each epoch's start and at each epoch's end (schedule.next_sync): every
epoch's evaluation then reads the group's model right after its outer step, the model the run would publish if it
ended there, the same on every worker (DiLoCo's papers evaluate that model too; docs/strategies.md compares the
two curves). The price, where H does not divide an epoch: a short interval and one sync more an epoch
(ceil(S / H) instead of S / H).

What is not synced: the inner optimizer's state (outer.py says why), and integer state (the dropout layers'
random generators), which stays per worker too.

No meeting per epoch: the syncs are the only collectives. Every worker evaluates its own model on the held-out
split after each epoch and records its own shard's training loss and accuracy, as `average` workers do. (An
epoch-end collective to sum the metrics, with the chief alone evaluating, made every other worker wait for the
chief's evaluation at its next sync.) Between two syncs the workers' models differ, so their per-epoch curves
differ a little (with --sync-at-epoch-end they are the same); after the last sync every worker holds the same
weights, and the chief's evaluation of them is the run's result.

Checkpoints: each worker keeps its own (its model differs from the others' between syncs), every epoch, with the
anchor, the outer momentum, the wire's residual and what an overlapped sync has in flight: a resumed run goes on
exactly as an undisturbed one. The syncs bound how far apart the workers are: no worker is more than H steps
(overlapped: 2H) ahead of another, so each keeps enough checkpoints (checkpoints_to_keep) that the last epoch
every worker saved is still on disk, and a restarted group resumes every worker from it.
"""

import contextlib
import os
import re
import time

import keras
import numpy as np
import tensorflow as tf

from disttrain_trainer import preemption
from disttrain_trainer.strategies.localsgd.options import outer_settings
from disttrain_trainer.strategies.base import Connected
from disttrain_trainer.strategies.localsgd.outer import OuterOptimizer
from disttrain_trainer.strategies.localsgd.overlap import OverlappedSyncs
from disttrain_trainer.strategies.localsgd.schedule import next_sync, statistics_read_after_sync
from disttrain_trainer.strategies.localsgd.statistics import StatisticsRefresh
from disttrain_trainer.strategies.localsgd.wire import SyncWire


class Strategy(OverlappedSyncs, StatisticsRefresh, Connected):
    name = "localsgd"

    def __init__(self, config, placement, cluster=None):
        super().__init__(config, placement, cluster)
        settings = config.strategy_settings  # (options.LocalSGDSettings: the flags, or their defaults)
        self.every = settings.sync_every
        self.outer = OuterOptimizer(settings)  # (outer.py: --outer-optimizer, --outer-lr, --outer-momentum)
        self.wire_dtype = settings.allreduce_dtype
        self.batch_norm_batches = settings.sync_batch_norm_batches
        self.overlap = settings.outer_overlap if settings.outer_overlap != "none" else None
        self.at_epoch_end = settings.sync_at_epoch_end  # (schedule.next_sync: the syncs' schedule)
        self.settings = outer_settings(settings)
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
        return {
            "sync_every": self.every,
            **self.settings,
            "sync_state": "one vector",
            **({"sync_batch_norm_batches": self.batch_norm_batches} if self.norms else {}),
        }

    def bind(self, model):
        self.model = model
        self.bind_statistics(model)
        self.weights = [w for w in model.weights if keras.backend.is_float_dtype(w.dtype)]
        self.sizes = [int(np.prod(w.shape)) for w in self.weights]
        # The sync's state is one float32 vector per kind, every weight's values end to end (flatten()), not
        # a variable per weight: the per-weight ops made a graph whose tracing took 2.2 s of MobileNetV2's
        # start-up (its 262 weights). The arithmetic is elementwise either way: the same values.
        # the weights at the last sync, the same on every worker (at first: the shared initialisation)
        self.anchor = tf.Variable(self.flatten(), trainable=False, name="anchor")
        self.outer.bind(self.weights, self.sizes)
        self.sync_wire = SyncWire(self.wire_dtype, sum(self.sizes))
        # what a lossy wire rounded off at the last sync (wire.py: error feedback)
        self.residual = (
            tf.Variable(tf.zeros([sum(self.sizes)]), trainable=False, name="wire_residual")
            if self.sync_wire.lossy
            else None
        )
        self._sync = tf.function(self._sync_fn)
        if self.overlap:
            self.bind_overlap()

    def checkpoint_state(self):
        state = {"anchors": self.anchor}
        if self.outer.momentum is not None:
            state["outer_momenta"] = self.outer.momentum
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
            self.trace_overlap(step)
        else:
            self._sync.get_concrete_function()
        if self._refresh is not None:
            with self.refresh_momentum():
                self._refresh.get_concrete_function()

    def next_sync(self, step):
        return next_sync(step, self.every, self.steps_per_epoch, self.at_epoch_end)

    def steps_to_sync(self, step):
        return self.next_sync(step) - step

    def syncs_at(self, step):
        """Whether the schedule (next_sync) puts a sync at `step`."""
        return self.next_sync(step - 1) == step

    def train_epoch(
        self, train_call, iterator, step, steps_per_epoch, steps_per_call, progress, notice=None, done=0, sums=None
    ):
        self.notice = notice  # (an overlapped sync agrees on stopping itself: sync)
        self.steps_per_epoch = steps_per_epoch
        return super().train_epoch(
            train_call, iterator, step, steps_per_epoch, steps_per_call, progress, notice, done, sums
        )

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
                if self._refresh is not None and statistics_read_after_sync(
                    step, self.next_sync(step), self.steps_per_epoch, self.epochs * self.steps_per_epoch
                ):
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

    def _sync_fn(self):
        """One sync: every worker sends its change since the last sync (with the residual of a lossy
        wire), and applies the same update to the same anchor. Returns a checksum of the synced weights (the sum of
        their bits), the same on every worker (a batch-norm re-estimation after it returns its own: it changes the
        statistics)."""
        workers = self.cluster.num_replicas_in_sync

        def replica_fn():
            change = self.flatten() - self.anchor.value()
            # A lossy wire codes the change as one vector too: the codec's ops per tensor made a graph whose
            # tracing and first run took 18 s of MobileNetV2's start-up (its 262 weights; 27 s against plain
            # localsgd's 9, bench/results/time_to_accuracy.json).
            return self.sync_wire.sum_changes(
                self.wire, change, None if self.residual is None else self.residual.value()
            )

        total, residual = (self.cluster.experimental_local_results(t)[0] for t in self.cluster.run(replica_fn))
        self.outer_step(total / workers)
        if self.residual is not None:
            self.residual.assign(residual)
        return self.anchor_checksum()

    def outer_step(self, mean):
        """The anchor moved by the workers' mean change (--outer-optimizer: outer.py), and the weights set to it."""
        synced = self.outer.moved_anchor(self.anchor, mean)
        self.anchor.assign(synced)
        self.assign_weights(synced)

    def anchor_checksum(self):
        """The sum of the synced weights' bits (the anchor's): the same on every worker when they hold the same
        values. Every sync's function returns it (epoch_facts records it)."""
        return tf.reduce_sum(tf.cast(tf.bitcast(self.anchor.value(), tf.int32), tf.int64))

    def marker_info(self):
        return {"wire_bytes_per_sync": self.sync_wire.bytes_per_sync}

    def epoch_metrics(self, sums):
        return sums  # this worker's own: no collective at the epoch's end (see the module's docstring)

    def epoch_facts(self):
        # the checksum of the last sync's weights: every worker's record of an epoch says the same one
        facts = {
            "training_metrics_of": "this worker",
            "last_sync_step": self.synced_at,
            "synced_weights_checksum": self.synced_checksum,
            # what this epoch's syncs cost this worker (its share of wall_time_sec), to set beside the advisor's
            "syncs": self.syncs,
            "sync_sec": round(self.sync_seconds, 3),
        }
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
    return sorted(
        int(m.group(1)) for path in state.all_model_checkpoint_paths if (m := re.search(r"ckpt-(\d+)$", path))
    )
