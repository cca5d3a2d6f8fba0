"""parameterserver: asynchronous training with ParameterServerStrategy and a ClusterCoordinator.

The group is 1 + --ps + --workers tasks of one Indexed Job (cluster.ps_task): index 0 is
the chief, the coordinator, the only task that runs this module's training side: it
builds the model and the optimizer under the strategy's scope (their variables live on
the parameter servers, whole variables placed round-robin), schedules the compiled train
calls (step.make_train_call, --steps-per-call steps each) on whichever worker is free,
evaluates, checkpoints each epoch and publishes the model. The parameter servers and
workers only run a tf.distribute.Server (`serve`) until the chief's marker appears, then
write their own marker and exit 0.

Every worker draws its batches from all the training examples (every shard), each in its
own order: the dataset function, created on every worker from the same function, seeds
its shuffle with the index of the worker running it (experimental_get_current_worker_index()).
Why not each worker on its own shard, as the other strategies do: the steps go to whichever
worker is free, so a slow or lost worker would make its shard rarer in the model's
training. Measured (kill -9 of one of 2 workers, tests/faults/test_kill_parameterserver.py):
the other worker took 77 % of the steps, and held-out accuracy fell 2.2 points below an
undisturbed run's, whose 8 repetitions spread over 0.771-0.779. The examples travel to the
workers inside that function (TensorFlow's 2 GB graph limit bounds the data set).

Fault tolerance is TensorFlow's: a worker lost mid-call makes the coordinator run that
call again on another worker (and on the same one once it is back: its per-worker
dataset is recreated); the steps the lost call had already applied stay applied
(asynchronous training). The chief counts, on the parameter servers, the steps each
worker *started*; started - scheduled = the steps retried. A parameter server or the
chief lost fails the chief's run; the Job restarts it and it resumes from its last
checkpoint (each epoch), as every strategy does.

Why no variable partitioner: a partitioned (sharded) variable breaks Keras 3's layers
("'ShardedVariable' object has no attribute 'handle'" in the gradient tape, Keras 3.15,
TF 2.21; keras-team/keras#18624), while whole Keras 3 variables under the strategy's
scope work with the custom loop, the checkpoint and save_model. With --ps 2 the variables
are spread over both servers, each on one.
"""

import os
import threading

import numpy as np
import tensorflow as tf

from disttrain_contract import wait_for_marker
from disttrain_contract.trainer_records import TrainerMarker, read_trainer_marker, write_trainer_marker
from disttrain_trainer.cluster import ps_task
from disttrain_trainer.strategies.base import Base

# How often the chief, waiting for an epoch's calls, tells the progress file it is alive (which writes
# at most once per --progress-interval).
PROGRESS_POLL_SEC = 0.25


class Strategy(Base):
    name = "parameterserver"

    def __init__(self, config, placement):
        super().__init__(config, placement)
        self.ps = placement.parameter_servers  # (--ps, or TF_CONFIG's: cluster.configure)
        self.role, self.task_index = ps_task(self.index, self.ps, self.workers)
        self.serves = self.role != "chief"
        if self.serves:
            return
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        self.tf_strategy = tf.distribute.ParameterServerStrategy(resolver)
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(self.tf_strategy)
        self.run_call = self._schedule
        self._scheduled = None
        self.steps_scheduled = 0

    # ------------------------------------------------------------------ serving tasks
    def serve(self, config, chief_dir, own_dir, notice):
        cluster = tf.train.ClusterSpec(tf.distribute.cluster_resolver.TFConfigClusterResolver().cluster_spec())
        tf.distribute.Server(cluster, job_name=self.role, task_index=self.task_index, protocol="grpc", start=True)
        notice.install()  # again: the server's coordination agent installed its own SIGTERM handler; SIGTERM: exit 75
        tag = f"{self.role} {self.task_index} (task {self.index})"  # as main.py's
        print(f"{tag}: serving {cluster.as_dict()} until the chief finishes", flush=True)
        wait_for_marker(
            chief_dir, config.strategy_settings.serve_timeout, "the chief's model", poll=1.0, log=open(os.devnull, "w")
        )
        chief = read_trainer_marker(chief_dir)
        if chief.strategy != self.name:
            raise RuntimeError(f"the chief's marker in {chief_dir} is not from parameter-server training: {chief}")
        write_trainer_marker(
            own_dir,
            TrainerMarker(
                worker_index=self.index,
                workers=self.workers,
                strategy=self.name,
                role=self.role,
                epochs=chief.epochs,
                init_weights_sha256=chief.init_weights_sha256,
                model=None,
                examples=0 if self.role == "ps" else chief.examples_by_worker[self.task_index],
            ),
        )
        print(f"{tag}: the chief has finished; exiting", flush=True)
        return 0

    # ------------------------------------------------------------------------- data
    def train_shards(self, manifest):
        # what each worker draws from (its marker says so; the aggregator checks it)
        self.examples_by_worker = [manifest.train_examples] * self.workers
        return list(manifest.shards)  # every shard, for every worker

    def shuffle_seed(self, seed):
        return seed + tf.cast(tf.distribute.coordinator.experimental_get_current_worker_index(), tf.int64)

    def iterator(self, dataset_fn, batches_done):
        per_worker = batches_done // self.workers  # about: the workers do not take turns exactly
        return iter(
            self.coordinator.create_per_worker_dataset(
                lambda: self.tf_strategy.distribute_datasets_from_function(
                    lambda context: dataset_fn(context, per_worker)
                )
            )
        )

    # ------------------------------------------------------------------------- steps
    def bind(self, model):
        with self.tf_strategy.scope():  # on a parameter server: every worker's step adds to it
            self.steps_started = tf.Variable(tf.zeros([self.workers], tf.int64), trainable=False, name="steps_started")

    def _schedule(self, compiled, iterator, steps):
        if self._scheduled is None:

            @tf.function
            def scheduled(iterator, steps):
                # counted before the steps run: a call lost with its worker and run again counts twice
                worker = tf.distribute.coordinator.experimental_get_current_worker_index()
                self.steps_started.assign_add(
                    tf.one_hot(worker, self.workers, dtype=tf.int64) * tf.cast(steps, tf.int64)
                )
                return compiled(iterator, steps)

            self._scheduled = scheduled
        self.steps_scheduled += int(steps)
        return self.coordinator.schedule(self._scheduled, args=(iterator, steps))

    def train_epoch(
        self, train_call, iterator, step, steps_per_epoch, steps_per_call, progress, notice=None, done=0, sums=None
    ):
        """Schedule the whole epoch at once, then wait: the workers take calls as they are free.
        On SIGTERM the chief stops at the next epoch's start: the calls scheduled run on the
        workers whatever the chief does, and it saves no state mid-epoch (so `done` is always 0)."""
        from disttrain_trainer.preemption import Stop

        if notice is not None and notice.requested:
            raise Stop(step, 0, [0.0, 0.0, 0.0])
        calls = [train_call(iterator, steps) for steps in split_epoch(steps_per_epoch, steps_per_call, self.workers)]
        done = steps_per_epoch
        # The steps run on the workers, and the coordinator has no public count of the calls finished
        # so far (RemoteValue.fetch blocks): until the epoch ends, the progress file only says that the
        # chief is alive (its time and ETA move, its step does not). join() waits in a thread so that
        # this one can say so, and returns the moment the calls are done (no polling delay).
        raised = []
        joiner = threading.Thread(
            target=join_into, args=(self.coordinator, raised), name="coordinator-join", daemon=True
        )
        joiner.start()
        joiner.join(PROGRESS_POLL_SEC)
        while joiner.is_alive():
            progress(0, None)
            joiner.join(PROGRESS_POLL_SEC)
        if raised:
            raise raised[0]  # what a call raised (a lost parameter server: UnavailableError)
        sums = np.sum([call.fetch() for call in calls], axis=0).tolist()
        progress(done, sums)
        if notice is not None:
            notice.steps_done = step + done
        return sums, step + done

    def epoch_facts(self):
        return {"steps_started_by_worker": [int(n) for n in self.steps_started.numpy()]}  # this run's, so far

    def marker_info(self):
        started = [int(n) for n in self.steps_started.numpy()]
        return {
            "role": "chief",
            "ps": self.ps,
            "tasks": 1 + self.ps + self.workers,
            "steps_scheduled": self.steps_scheduled,
            "steps_started_by_worker": started,
            "steps_retried": sum(started) - self.steps_scheduled,
            "examples_by_worker": self.examples_by_worker,
        }


def join_into(coordinator, raised):
    """coordinator.join() (in a thread): what it raises goes into `raised` for the chief's thread to raise."""
    try:
        coordinator.join()
    except BaseException as err:  # (re-raised by train_epoch)
        raised.append(err)


def split_epoch(steps_per_epoch, steps_per_call, workers):
    """The epoch's steps as calls of at most steps_per_call steps, at least 2 per worker and a
    multiple of the worker count, of equal sizes (+-1): with 5 calls of 32 steps for 2 workers
    one worker would take 3 and the epoch would last 96 steps of it instead of 80."""
    calls = max(-(-steps_per_epoch // steps_per_call), 2 * workers)
    calls = min(-(-calls // workers) * workers, steps_per_epoch)
    return [steps_per_epoch // calls + (1 if i < steps_per_epoch % calls else 0) for i in range(calls)]
