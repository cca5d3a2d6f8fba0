"""localsgd: periodic model averaging (local SGD; Lin et al., "Don't Use Large Mini-Batches,
Use Local SGD", ICLR 2020). Each worker takes --sync-every H optimizer steps alone on its
own shard, then the workers average their weights with one all-reduce over the same
cluster as multiworker (TF_CONFIG). H=1 communicates every step; an H longer than the
whole run averages once, at the end (one-shot averaging, like `average` but inside the
trainer).

What is averaged: every floating-point weight of the model (including batch-norm
statistics), sent as the change since the last sync (`w - anchor`), so a float16 wire
rounds the small change, not the weight itself; every worker then holds exactly the same
weights (anchor + the same sum / N). What is not: the optimizer's state. Each worker keeps
its own Adam moments and step count; they describe its own gradients, and averaging them
would double the bytes of every sync for no measured gain. Integer state (the dropout
layers' random generators) stays per worker too.

No meeting per epoch: the syncs are the only collectives. Every worker evaluates its own
model on the held-out split after each epoch and records its own shard's training loss and
accuracy, as `average` workers do. (An epoch-end collective to sum the metrics, with the
chief alone evaluating, made every other worker wait for the chief's evaluation at its next
sync: about 0.1 s per movie-reviews epoch, bench/README.md.) Between two syncs the workers'
models differ, so their per-epoch curves differ a little; after the last sync every worker
holds the same weights, and the chief's evaluation of them is the run's result.

Checkpoints: each worker keeps its own (its model differs from the others' between syncs),
every epoch. The syncs bound how far apart the workers are: no worker is more than H steps
ahead of another, so each keeps enough checkpoints (checkpoints_to_keep) that the last epoch
every worker saved is still on disk, and a restarted group resumes every worker from it.
"""

import os
import re

import keras
import tensorflow as tf

from disttrain_trainer import preemption
from disttrain_trainer.strategies.base import Connected


class Strategy(Connected):
    name = "localsgd"

    def __init__(self, args, workers, index):
        super().__init__(args, workers, index)
        self.every = args.sync_every  # (options.LocalSGD.resolve: --sync-every, or its default)
        self.synced_at = None

    def run_config(self):
        return {"sync_every": self.every}

    def bind(self, model):
        self.weights = [w for w in model.weights if keras.backend.is_float_dtype(w.dtype)]
        # the weights at the last sync, the same on every worker (at first: the shared initialisation)
        self.anchors = [tf.Variable(w.value, trainable=False, name=f"anchor_{i}") for i, w in enumerate(self.weights)]
        self._average = tf.function(self._average_fn)

    def checkpoint_state(self):
        return {"anchors": self.anchors}

    def before_training(self, step):
        # The first sync traces the averaging function and opens the collective's communicator:
        # 0.25 s on digits, 2.5 s on MobileNetV2 (bench/results/train_scaling.json, the epoch of
        # the first sync), a start-up cost like the train step's tracing in epoch 1. Pay it here,
        # in start-up. At a sync point every worker holds exactly the anchor (at step 0: the shared
        # initialisation; on a resume at a multiple of H: the last average), so this sync sums zero
        # changes and leaves every weight as it is. Every worker resumes at the same step, so all
        # of them take this branch or none does. Elsewhere (a resume between two syncs) it would
        # average early: only trace then.
        if step % self.every == 0:
            self.sync(step)
        else:
            self._average.get_concrete_function()

    def steps_to_sync(self, step):
        return self.every - step % self.every

    def after_steps(self, step):
        if step % self.every == 0:
            self.sync(step)

    def agree_to_stop(self, requested, step):
        # Only at an average, where every worker holds the same weights: each then saves its own
        # checkpoint of that one step. Between two averages a worker that had SIGTERM trains on
        # to the next one (at most H steps).
        return step % self.every == 0 and self.any_worker(requested)

    def finish(self, step):
        if self.synced_at != step:  # the published model is the average, whatever H is
            self.sync(step)

    def sync(self, step):
        self._average()
        self.synced_at = step

    def _average_fn(self):
        def replica_fn():
            return self.wire.all_reduce_sum([w.value - a for w, a in zip(self.weights, self.anchors)])

        summed = self.cluster.run(replica_fn)
        workers = self.cluster.num_replicas_in_sync
        for weight, anchor, total in zip(self.weights, self.anchors, summed):
            averaged = anchor + self.cluster.experimental_local_results(total)[0] / workers
            anchor.assign(averaged)
            weight.assign(averaged)

    def epoch_metrics(self, sums):
        return sums  # this worker's own: no collective at the epoch's end (see the module's docstring)

    def epoch_facts(self):
        return {"training_metrics_of": "this worker"}

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


def saved_epochs(checkpoint_dir):
    """The epochs a checkpoint directory holds (CheckpointManager's ckpt-<epoch>), oldest first."""
    state = tf.train.get_checkpoint_state(checkpoint_dir)
    if state is None:
        return []
    return sorted(int(m.group(1)) for path in state.all_model_checkpoint_paths
                  if (m := re.search(r"ckpt-(\d+)$", path)))
