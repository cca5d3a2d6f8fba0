"""What every strategy does unless it says otherwise: train alone, with no communication,
on TensorFlow's default one-replica strategy; keep, restore, evaluate and publish its own
model. (That is all of the `average` strategy.)"""

import math
import os

import tensorflow as tf


class Base:
    name = "base"
    reduce_gradients = None  # the step does not sum gradients across workers
    run_call = None  # how a compiled train call runs (step.make_train_call): None = here, now
    serves = False  # a task that serves the others (parameter servers, workers) instead of training

    def __init__(self, config, placement):
        self.workers, self.index, self.is_chief = placement.workers, placement.index, placement.index == 0
        self.tf_strategy = tf.distribute.get_strategy()  # the default: one replica, no communication

    def scope(self):
        """Where the model and the optimizer are created."""
        return self.tf_strategy.scope()

    def run_config(self):
        """What else a checkpoint must agree on to be resumed (see main.check_run_config)."""
        return {}

    def checkpoint_state(self):
        """Strategy state that a checkpoint must hold besides the model and the optimizer."""
        return {}

    def serve(self, config, chief_dir, own_dir, notice):
        """The whole life of a serving task (`serves`); returns the exit code. `notice`: its
        preemption.Notice (SIGTERM: exit at once, nothing of its own to save)."""
        raise NotImplementedError

    # ------------------------------------------------------------------------- data
    def train_shards(self, manifest):
        """The shards this task reads (parameter-server training: the chief reads every worker's)."""
        return [manifest.shard(self.index)]

    def examples_per_epoch(self, manifest, examples):
        """Examples per epoch, `examples` being those of train_shards."""
        return examples

    def shuffle_seed(self, seed):
        """The seed of this worker's shuffle (called inside the dataset function)."""
        return seed + self.index

    def iterator(self, dataset_fn, batches_done):
        """An iterator over the distributed dataset; `dataset_fn(context, batches_done)`."""
        return iter(
            self.tf_strategy.distribute_datasets_from_function(lambda context: dataset_fn(context, batches_done))
        )

    def train_epoch(
        self, train_call, iterator, step, steps_per_epoch, steps_per_call, progress, notice=None, done=0, sums=None
    ):
        """Run one epoch's steps; returns ([loss sum, hits, examples], the step count after it).
        `done`, `sums`: the part of the epoch a restored mid-epoch checkpoint already did. With a
        `notice` (preemption.Notice), the workers ask before each train call whether to stop
        (agree_to_stop) and raise preemption.Stop where they are if so."""
        from disttrain_trainer.preemption import Stop

        sums = list(sums) if sums else [0.0, 0.0, 0.0]
        while done < steps_per_epoch:
            if notice is not None and self.agree_to_stop(notice.requested, step):
                raise Stop(step, done, sums)
            steps = min(steps_per_call, steps_per_epoch - done, self.steps_to_sync(step))
            sums = [a + b for a, b in zip(sums, train_call(iterator, steps).tolist())]
            done, step = done + steps, step + steps
            if notice is not None:
                notice.steps_done = step
            self.after_steps(step)
            progress(done, sums)
        return sums, step

    def agree_to_stop(self, requested, step):
        """Whether to stop before the next train call, `requested` being this worker's own SIGTERM.
        Called by every worker at the same steps (a connected strategy asks its peers here)."""
        return requested

    def marker_info(self):
        """What else the trainer's marker says."""
        return {}

    def epoch_facts(self):
        """What else an epoch's record in metrics.json says."""
        return {}

    # ------------------------------------------------------------------------- sync
    def bind(self, model):
        """Called once the model exists (before any checkpoint is restored)."""

    def bind_data(self, batches):
        """Called once after bind: `batches()` makes this worker's training stream from its start (a
        tf.data Dataset of (inputs, labels) batches, in the order every run takes them)."""

    def before_training(self, step):
        """Called once on every worker, after any checkpoint is restored and before the first
        step; `step` is where the run (re)starts."""

    def steps_to_sync(self, step):
        return math.inf

    def after_steps(self, step):
        """Called after each train call; `step` counts this run's steps over all epochs."""

    def finish(self, step):
        """Called after the last epoch's steps, before its evaluation and checkpoint."""

    def epoch_metrics(self, sums):
        return sums

    # ------------------------------------------------------------------------- save
    @property
    def evaluates(self):
        """Whether this worker evaluates the held-out split each epoch."""
        return True

    @property
    def writes_model(self):
        return True

    def checkpoint_dirs(self, own_dir, chief_dir):
        """(where this worker restores from, where it writes) checkpoints."""
        own = os.path.join(own_dir, "checkpoints")
        return own, own

    def resume_checkpoint(self, read_dir, checkpoint_dir_of, steps_per_epoch):
        """The checkpoint to restore, or None for a fresh start: the last epoch's, or a state
        saved on SIGTERM after it (preemption.py)."""
        from disttrain_trainer import preemption

        return preemption.newest(tf.train.latest_checkpoint(read_dir), read_dir, steps_per_epoch)

    def checkpoints_to_keep(self, steps_per_epoch):
        """How many epochs' checkpoints a worker keeps (the newest and one before it)."""
        return 2

    def cleanup(self, write_dir):
        """Called after the last checkpoint."""


class Connected(Base):
    """A strategy whose workers talk: they join one MultiWorkerMirroredStrategy cluster
    (TF_CONFIG, set by main.py; creating the strategy waits for every worker), take the
    same number of steps per epoch (a collective waits for all of them), and sum the
    epoch's metrics over all workers once per epoch."""

    def __init__(self, config, placement, cluster=None):
        """`cluster`: a MultiWorkerMirroredStrategy this process already joined (the advisor's probe, which times
        the trainer's own localsgd syncs on its cluster); None: join TF_CONFIG's."""
        from disttrain_trainer.collectives import Wire, join_cluster

        super().__init__(config, placement)
        settings = config.strategy_settings
        self.cluster = cluster if cluster is not None else join_cluster(settings.heartbeat_timeout)
        self.wire = Wire(settings.allreduce_dtype, settings.allreduce_pack_bytes)

    def examples_per_epoch(self, manifest, examples):
        # every worker takes the same number of steps (a collective needs all of them)
        return max(s.examples for s in manifest.shards)

    def epoch_metrics(self, sums):
        from disttrain_trainer.collectives import sum_across_workers

        return sum_across_workers(self.cluster, sums)

    def agree_to_stop(self, requested, step):
        """Stop when any worker had SIGTERM: one small all-reduce per train call, which fails (and
        the worker exits) like any collective when a peer is gone."""
        return self.any_worker(requested)

    def any_worker(self, flag):
        from disttrain_trainer.collectives import sum_across_workers

        return sum_across_workers(self.cluster, [1.0 if flag else 0.0])[0] > 0
