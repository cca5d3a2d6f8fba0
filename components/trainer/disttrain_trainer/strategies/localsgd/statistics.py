"""Batch normalization after a localsgd sync (--sync-batch-norm-batches N, default 8): the statistics re-estimated
for the synced weights.

The averaged moving statistics describe no model the group holds (each worker's fit its own weights, and the
outer step moves the weights further), so right after a sync the model's inference is off (docs/strategies.md).
Training itself uses each batch's statistics and does not notice, but an evaluation or an export at a sync does,
and the published model is always a sync's. So after a sync whose statistics something reads before the next
sync replaces them (schedule.statistics_read_after_sync: the last sync before an epoch's end, where the held-out
evaluation and the checkpoint read them, and the run's last) every worker re-estimates the statistics for the
synced weights from the first N batches of its shard, and the workers average those:
  mean_w, var_w = (1 / N) * sum over the N batches b of (mean_b, var_b)  (forward passes in training mode with
                  momentum 0, as torch.optim.swa_utils.update_bn does after averaging)
  mean, var     = (1 / W) * sum over the W workers of (mean_w, var_w)  (one float32 all-reduce), written to the
                  layers' moving statistics and to the anchor
Invariants: the same N batches every time (kept at bind_data), and the same syncs (a rule of the step), so a
resumed run does what an undisturbed one does; every worker ends with the same statistics. It costs N forward
passes (about N / 3 steps) once an epoch where H is shorter than an epoch. (Re-estimating after every sync would
give every evaluation the same statistics, each re-estimation replacing the last whole, momentum 0, at the price
of more of them.)

StatisticsRefresh is a part of localsgd's Strategy (strategy.py): it reads the strategy's model, weights, anchor
and cluster.
"""

import contextlib

import keras
import numpy as np
import tensorflow as tf

from disttrain_trainer.collectives import Wire
from disttrain_trainer.models import find_layers


class StatisticsRefresh:
    """The re-estimation's batches and function, for localsgd's Strategy (`batch_norm_batches`: N, 0 for none)."""

    def bind_statistics(self, model):
        """Called by bind: the model's batch-norm layers (none to refresh when N is 0)."""
        self.norms = find_layers(model, keras.layers.BatchNormalization) if self.batch_norm_batches else []
        self._refresh = None

    def bind_data(self, batches):
        """Keep the refresh's batches (base.Base.bind_data), once the weights are bound."""
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
        self.statistics_at = tf.constant(
            np.concatenate(
                [np.arange(offsets[v.path], offsets[v.path] + int(np.prod(v.shape))) for v in self.statistics]
            )[:, None],
            tf.int64,
        )
        self.statistics_wire = Wire("float32")
        self._refresh = tf.function(self._refresh_fn)

    def refresh(self):
        """Re-estimate the batch-norm statistics for the synced weights (the module's docstring); returns the
        checksum of the synced weights."""
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
                self.model(
                    tf.nest.map_structure(lambda x: x[start : start + self.refresh_batch], self.refresh_inputs),  # noqa: B023
                    training=True,
                )
                totals = [t + v.value for t, v in zip(totals, variables)]
            return self.statistics_wire.all_reduce_sum([t / self.refresh_count for t in totals])

        summed = self.cluster.run(replica_fn)
        workers = self.cluster.num_replicas_in_sync
        means = [self.cluster.experimental_local_results(t)[0] / workers for t in summed]
        for variable, mean in zip(variables, means):
            variable.assign(mean)
        self.anchor.scatter_nd_update(self.statistics_at, tf.concat([tf.reshape(m, [-1]) for m in means], 0))
        return self.anchor_checksum()
