"""One process of the advisor's probe: the user's model on the user's data, timed the way the trainer runs it.

The advisor (main.py) starts two of these on one host (loopback), or one per pod (index 0 and 1, on the
real link between them). Each joins a two-worker cluster (MultiWorkerMirroredStrategy: TensorFlow wants the
cluster before anything starts its runtime), builds the task's model and input exactly as the trainer
does (tasks.create, step.make_train_call), and then, between barriers (one small collective each):
  1. worker 0 alone: steps at the run's batch (t1), and one held-out evaluation; worker 1 waits;
  2. both at once: steps (t2: how the host's cores share, or each host's own speed);
  3. collectives: one all-reduce of a float (latency) and of the model's weights in float32 and float16
     (seconds per byte on this link), as localsgd sends them (collectives.Wire);
  4. the trainer's own localsgd sync (strategies/localsgd/, DiLoCo's outer step, no batch-norm
     re-estimation: the advisor prices that apart) in each wire, both workers at once, on the link:
     what a sync costs beyond its exchange (flattening the weights, the codec and its error feedback,
     the outer step, setting the weights), which the advisor adds to every sync's modelled exchange.
     Best-effort like phase 5: a wire is timed only when what is left of the deadline looks enough for
     it, and worker 0 prints its result again after the phase;
  5. multiworker steps: a second copy of the model under MultiWorkerMirroredStrategy, its gradients
     all-reduced in every step as the trainer's multiworker does, both workers at once (what a
     multiworker step costs beyond the compute and the exchange phases 2 and 3 measured: the
     collective's own work on cores the other worker's compute also wants). Only when what is left of
     the deadline looks enough for its tracing (three times the first step's) and timing; it is
     best-effort: each worker prints its result (`RESULT {json}`) before it (worker 1's says it took
     part) and worker 0 again, with the multiworker step, after it; the advisor keeps worker 0's last
     line before the deadline. Without it the advisor predicts multiworker from phases 2 and 3 alone.
Each phase gets a share of what is left of the deadline.
"""

import dataclasses
import itertools
import json
import math
import os
import statistics
import sys
import time

from disttrain_contract import ContractError
from disttrain_contract.evaluation import compiled
from disttrain_contract.manifest import Manifest, read_split
from disttrain_contract.tensorflow_import import import_tensorflow
from disttrain_trainer import malloc_settings
from disttrain_trainer.strategies.cost_base import WIRE_BYTES

RESULT = "RESULT "
CALL_SECONDS = 0.5  # a timed call lasts about this long at most (fewer steps per call when steps are long)
# A step phase ends at its share of the budget or once it has timed this many calls, whichever comes first: the
# median of 64 calls is steady, and a small table's 0.35 ms steps filled 5 s with 450 calls of 32 steps (the
# text model's 3.3 ms steps fill 5 s with 47: the cap ends its phases only on a host 1.4x faster)
ENOUGH_CALLS = 64
ALLREDUCE_REPS = 5


def say(index, text):
    print(f"probe worker {index}: {text}", file=sys.stderr, flush=True)


def run(args, data_dir, index, addresses, launched, deadline):
    """The probe of worker `index` of `addresses` (two host:port); `launched`, `deadline`: time.time() values.
    Worker 0 prints its result (`RESULT {json}`) after phase 3 and again after each best-effort phase."""
    probe = ProbeWorker(args, data_dir, index, addresses, launched, deadline)
    probe.join()
    probe.build()
    probe.barrier()
    probe.alone()
    probe.barrier()
    probe.pair()
    probe.collectives()
    # The result so far, now: phases 4 and 5 are best-effort. If it runs past the deadline the advisor stops the
    # probe and keeps this line (the last RESULT line counts), predicting multiworker from phases 2 and 3.
    # Worker 1 prints its own too: on a pod of its own, that line says it took part.
    print(RESULT + json.dumps(probe.result), flush=True)
    if not probe.trainer_syncs():
        return  # (its collectives are aborted: no further phase)
    if index == 0:
        print(RESULT + json.dumps(probe.result), flush=True)
    if not probe.multiworker_steps():
        return  # (its collectives are aborted: no barrier)
    probe.barrier()  # (neither leaves while the other still needs it)
    if index == 0:
        print(RESULT + json.dumps(probe.result), flush=True)


class ProbeWorker:
    """One probe process's state across its phases (the module's docstring numbers them)."""

    def __init__(self, args, data_dir, index, addresses, launched, deadline):
        self.args, self.data_dir, self.index, self.addresses = args, data_dir, index, addresses
        self.launched, self.deadline = launched, deadline
        self.result = {}

    def join(self):
        """The two-worker cluster, before anything starts TensorFlow's runtime."""
        args, index = self.args, self.index
        os.environ["TF_CONFIG"] = json.dumps(
            {"cluster": {"worker": list(self.addresses)}, "task": {"type": "worker", "index": index}}
        )
        # as the trainer does, so that the probe's steps cost what the trainer's do
        malloc_settings.apply(args.train.threads, args.train.malloc)
        self.tf = tf = import_tensorflow()
        if args.train.threads:
            tf.config.threading.set_intra_op_parallelism_threads(args.train.threads)
            tf.config.threading.set_inter_op_parallelism_threads(args.train.threads)
        from disttrain_trainer.collectives import join_cluster

        joining = time.time()
        # (its all-reduce of the weights on a slow link: the trainer's syncs)
        self.cluster = join_cluster(args.probe_wire.heartbeat_timeout)
        self.joined = time.time() - joining
        say(index, f"joined {self.addresses[1 - index]} in {self.joined:.1f} s")

    def build(self):
        """The task's model and input exactly as the trainer builds them; its step traced and one warm step."""
        import keras
        import numpy as np

        from disttrain_trainer import privacy, tasks
        from disttrain_trainer.step import make_train_call

        tf, index, data_dir = self.tf, self.index, self.data_dir
        self.manifest = manifest = Manifest.read(data_dir)
        self.task, self.train = task, train = tasks.create(manifest, self.args.train)  # (with the task's defaults)
        task.check(train)
        x, y = read_split(data_dir, manifest, manifest.shard(index % manifest.n_shards))
        self.x, self.y = x, y = task.prepare(data_dir, x), y
        self.iterator = iterator = iter(task.dataset(x, y, train.batch, train.seed + index, index).prefetch(2))
        keras.utils.set_random_seed(train.seed)
        self.model = model = task.build()
        optimizer = task.build_optimizer(train)
        optimizer.build(model.trainable_variables)
        # a private run (--dp-*) is timed with its own step: per-example gradients, clipping and noise
        self.private = private = privacy.Plan.probe_gradient(train) if privacy.enabled(train) else None
        self.train_call = make_train_call(
            tf.distribute.get_strategy(), model, optimizer, task.loss_and_score, private=private
        )
        tracing = time.perf_counter()
        self.train_call(iterator, 1)  # traces the step
        self.tracing = time.perf_counter() - tracing
        # one warm step sizes the timed calls (the traced first call, seconds long, would make them one step each:
        # the per-call overhead then counted as step time, 1.5x the trainer's step on text)
        first = time.perf_counter()
        self.train_call(iterator, 1)
        self.one = time.perf_counter() - first
        ready = time.time()
        say(index, f"model built and traced, {ready - self.launched:.1f} s after start")

        self.weights = [w for w in model.weights if keras.backend.is_float_dtype(w.dtype)]
        self.weight_bytes = sum(int(np.prod(w.shape)) * 4 for w in self.weights)
        self.gradient_bytes, self.sparse = gradient_wire_bytes(tf, model, task, iterator)
        if private is not None:  # the noise covers every row: a private gradient is dense, all of it on the wire
            self.gradient_bytes, self.sparse = sum(int(np.prod(v.shape)) * 4 for v in model.trainable_variables), False
        from disttrain_trainer.models import find_layers

        norms = find_layers(model, keras.layers.BatchNormalization)
        self.result = {
            "startup_seconds": ready - self.launched,
            "join_seconds": self.joined,
            "views": task.views,
            "batch_norm": bool(norms),
            "batch_norm_bytes": sum(
                4 * int(np.prod(v.shape)) for n in norms for v in (n.moving_mean, n.moving_variance)
            ),
        }

    # ------------------------------------------------------------------ agreement between the two workers
    def sum_across(self, values):
        from disttrain_trainer.collectives import sum_across_workers

        return sum_across_workers(self.cluster, values)

    def barrier(self):
        self.sum_across([1.0])

    def any_worker(self, flag):
        """Whether any worker's flag is set (one small collective: both workers must call it)."""
        return self.sum_across([1.0 if flag else 0.0])[0] > 0

    def the_same(self, steps):
        """Worker 0's `steps`, on both workers. Each sizes its calls from its own first step's time, and two
        timings of one step can round to different counts (int(0.5 / 35 ms) is 14, of 36 ms 13): in a
        multiworker call each step runs its collectives, so different counts left one worker's gradient
        all-reduce facing the other's next agreement, and TensorFlow aborted the phase ("Collective instance
        208 expected type 2 and data_type 3 but got type 0 and data_type 2"): the text model's multiworker
        steps were never timed."""
        return int(self.sum_across([steps if self.index == 0 else 0.0])[0])

    def share(self, fraction, most):
        return max(0.2, min(most, (self.deadline - time.time()) * fraction))

    # ------------------------------------------------------------------ phases
    def alone(self):
        """1. worker 0 alone: steps at the run's batch, and one held-out evaluation; worker 1 waits."""
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        if self.index != 0:
            return
        task, result = self.task, self.result
        result["step_seconds_alone"] = time_steps(
            self.train_call, self.iterator, call_steps(self.train.steps_per_call, self.one), self.share(0.2, 5.0)
        )
        inference = compiled(task.publish(self.model))
        x_test, y_test = read_split(self.data_dir, self.manifest, self.manifest.test)
        x_test = task.model_input(x_test)
        started = time.perf_counter()
        task.evaluate(inference, x_test, y_test)  # (the first includes tracing, as the trainer's first epoch does)
        result["eval_seconds"] = time.perf_counter() - started
        say(
            self.index,
            f"alone: {result['step_seconds_alone'] * 1000:.2f} ms per step; evaluation {result['eval_seconds']:.2f} s",
        )

    def pair(self):
        """2. both at once: steps (how the host's cores share, or each host's own speed)."""
        index = self.index
        # what worker 1 used of the host while worker 0 measured alone (it waits in a collective: ~nothing)
        waiting = (time.process_time() - self.cpu) / max(time.perf_counter() - self.wall, 1e-9) if index == 1 else 0.0
        # Both workers time the same calls at the same time: a barrier before each (outside the timed part), and
        # they stop together. Each on its own clock and window, a worker's calls could run while the other's
        # had ended: the pair then measured no contention (two text workers at 2.5 ms a step against 2.6 ms alone,
        # where two independent runs measured 1.39x).
        mine = time_steps(
            self.train_call,
            self.iterator,
            self.the_same(call_steps(self.train.steps_per_call, self.one)),
            self.share(0.3, 5.0),
            together=self.any_worker,
        )
        both = self.sum_across([mine if index == 0 else 0.0, mine if index == 1 else 0.0, waiting]).tolist()
        self.result.update(
            step_seconds_pair=max(both[:2]), step_seconds_pair_each=both[:2], waiting_worker_cores=both[2]
        )
        say(index, f"two at once: {mine * 1000:.2f} ms per step")

    def collectives(self):
        """3. on the link between the two workers: one all-reduce of a float (latency) and of the model's weights
        in float32 and float16 (seconds per byte), as localsgd sends them (collectives.Wire)."""
        from disttrain_trainer.collectives import Wire

        tf, cluster = self.tf, self.cluster

        def timed_allreduce(make_tensors, dtype):
            wire = Wire(dtype)

            def replica_fn():
                return wire.all_reduce_sum(make_tensors())

            @tf.function
            def call():
                summed = cluster.run(replica_fn)
                return [cluster.experimental_local_results(t)[0] for t in summed]

            call()  # traces, and opens the communicator
            stop = time.time() + self.share(0.3, 10.0)
            return statistics.median(
                times_together(
                    lambda: [t.numpy() for t in call()],
                    self.any_worker,
                    lambda times: len(times) >= ALLREDUCE_REPS or (time.time() >= stop and len(times) >= 2),
                )
            )

        def changes():
            # what localsgd sends: tensors computed from the weights (a variable's own value, reduced as
            # such, makes MultiWorkerMirroredStrategy look for the variable's devices: "destinations can not be empty")
            return [w.value * 1.0 for w in self.weights]

        latency = timed_allreduce(lambda: [tf.ones([1])], "float32")
        weights32 = timed_allreduce(changes, "float32")
        weights16 = timed_allreduce(changes, "float16")
        weight_bytes = self.weight_bytes
        self.result.update(
            {
                "latency_seconds": latency,
                "allreduce_float32_seconds": weights32,
                "allreduce_float16_seconds": weights16,
                "per_byte_seconds": max(weights32 - latency, 0.0) / weight_bytes if weight_bytes else 0.0,
                "weight_bytes": weight_bytes,
                "weight_tensors": len(self.weights),
                "gradient_bytes": self.gradient_bytes,
                "gradient_sparse": self.sparse,
            }
        )
        say(
            self.index,
            f"all-reduce: {latency * 1000:.2f} ms for a float, {weights32 * 1000:.1f} ms for the weights "
            f"({weight_bytes / 1e6:.2f} MB in float32), {weights16 * 1000:.1f} ms in float16",
        )

    def trainer_syncs(self):
        """4. the trainer's syncs, while both workers have the time; False when its collectives failed."""
        try:
            self.result["trainer_sync_seconds"] = time_trainer_syncs(
                self.args, self.cluster, self.model, self.index, self.deadline, self.result, self.any_worker
            )
        except self.tf.errors.OpError as err:  # best-effort: the earlier RESULT line stands, and the log says why
            say(self.index, f"the trainer's sync not timed: {str(err).strip().splitlines()[0]}")
            return False
        return True

    def multiworker_steps(self):
        """5. multiworker steps, if both workers have the time (each reads its own deadline: they agree); False when
        its collectives failed."""
        import keras

        from disttrain_trainer.collectives import Wire
        from disttrain_trainer.step import make_train_call

        task, train, cluster, index = self.task, self.train, self.cluster, self.index
        room = self.deadline - time.time() >= 3 * self.tracing + 5.0
        if self.any_worker(not room):
            say(
                index,
                "multiworker steps not timed: too little of the budget left (the advisor predicts them from "
                "the steps and the all-reduce)",
            )
            return True
        try:
            with cluster.scope():
                keras.utils.set_random_seed(train.seed)
                replicated = task.build()
                replicated_optimizer = task.build_optimizer(train)
                replicated_optimizer.build(replicated.trainable_variables)
            wire = Wire("float32", self.args.probe_wire.allreduce_pack_bytes)
            multiworker_call = make_train_call(
                cluster,
                replicated,
                replicated_optimizer,
                task.loss_and_score,
                wire.all_reduce_sum,
                private=self.private,
            )
            distributed = iter(
                cluster.distribute_datasets_from_function(
                    lambda _context: task.dataset(self.x, self.y, train.batch, train.seed + index, index).prefetch(2)
                )
            )
            multiworker_call(distributed, 1)  # traces the step
            first = time.perf_counter()
            multiworker_call(distributed, 1)
            steps = self.the_same(call_steps(train.steps_per_call, time.perf_counter() - first))
            step = time_steps(multiworker_call, distributed, steps, self.share(0.8, 5.0), together=self.any_worker)
            self.result["multiworker_step_seconds"] = max(
                self.sum_across([step if index == 0 else 0.0, step if index == 1 else 0.0]).tolist()
            )
            say(index, f"multiworker: {step * 1000:.2f} ms per step (gradients all-reduced in float32)")
        except self.tf.errors.OpError as err:  # best-effort: the earlier RESULT line stands, and the log says why
            say(index, f"multiworker steps not timed: {str(err).strip().splitlines()[0]}")
            return False
        return True


# the wires whose sync phase 4 times, the fewest bytes first (on a slow link the widest may not fit the deadline),
# and the timed syncs of each after its first (which traces, and opens the sync's collectives)
SYNC_WIRES = ("int4", "int8", "float16", "float32")
SYNC_REPS = 3
SYNC_SETUP_SECONDS = 3.0  # the first wire's building and tracing, before one was timed (MobileNetV2: about 2 s)


def time_trainer_syncs(args, cluster, model, index, deadline, result, any_worker):
    """{wire: median seconds of one localsgd sync as the trainer runs it, between the two workers on the probe's
    link} for the wires of SYNC_WIRES that fit the deadline (phase 4 in the module's docstring). The trainer's own
    code (localsgd.Strategy on this cluster, bound to the probe's model), with DiLoCo's outer step (plain
    averaging's is a little less work) and no batch-norm re-estimation. The syncs move no weight: the model has
    not trained since the strategy took its anchor, so every change is zero (the codec and the outer step cost
    the same for any values)."""
    from disttrain_trainer.cluster import Placement
    from disttrain_trainer.strategies import localsgd
    from disttrain_trainer.strategies.localsgd.options import LocalSGDSettings

    timed, setup = {}, SYNC_SETUP_SECONDS
    for dtype in SYNC_WIRES:
        # the wire's bytes at the cost per byte phase 3 measured on the link
        exchange = (
            result["latency_seconds"] + result["weight_bytes"] * WIRE_BYTES[dtype] / 4 * result["per_byte_seconds"]
        )
        room = deadline - time.time() >= setup + (1 + SYNC_REPS) * 2 * exchange + 2.0
        if any_worker(not room):
            missing = ", ".join(SYNC_WIRES[SYNC_WIRES.index(dtype) :])
            say(
                index,
                f"the trainer's sync not timed in {missing}: too little of the budget left (the advisor "
                "counts its exchange alone there)",
            )
            break
        started = time.perf_counter()
        settings = LocalSGDSettings(
            allreduce_dtype=dtype,
            allreduce_pack_bytes=args.probe_wire.allreduce_pack_bytes,
            heartbeat_timeout=args.probe_wire.heartbeat_timeout,
            sync_every=1,
            outer_optimizer="nesterov",
            sync_batch_norm_batches=0,
        )
        sync_config = dataclasses.replace(args.train, strategy="localsgd", strategy_settings=settings)
        strategy = localsgd.Strategy(sync_config, Placement(2, index), cluster=cluster)
        strategy.bind(model)
        strategy.before_training(0)  # traces the sync, as the trainer's start-up does
        strategy.sync(0)  # its first run
        setup = time.perf_counter() - started
        steps = itertools.count(1)
        times = times_together(
            lambda: strategy.sync(next(steps)),  # noqa: B023 (run within this wire)
            any_worker,
            lambda times: len(times) >= SYNC_REPS or time.time() + 2 * times[-1] >= deadline - 2.0,
        )
        timed[dtype] = statistics.median(times)
        say(index, f"the trainer's sync in {dtype}: {timed[dtype] * 1000:.1f} ms (DiLoCo, {len(times)} timed)")
    return timed


def times_together(call, any_worker, enough):
    """The seconds of each `call()`, repeated by both workers at once until any worker has `enough(times)`. Both must
    make the same number of calls (each is a collective), and each reads its own clock: they go on only while every
    worker wants another (`any_worker`: one small collective, outside the timed call)."""
    times = []
    while True:
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
        if any_worker(enough(times)):  # any worker done: both stop here
            return times


def call_steps(steps_per_call, one_step):
    """Steps per timed call: the trainer's steps per call, fewer when a call would last over CALL_SECONDS."""
    return max(1, min(steps_per_call, int(CALL_SECONDS / max(one_step, 1e-6))))


def time_steps(train_call, iterator, steps, seconds, together=None):
    """Median seconds per step over calls of `steps` steps, for about `seconds` or ENOUGH_CALLS calls if sooner; at
    least two calls.
    `together(done)`: the workers timing at once agree before each call (a collective: it also lines their
    calls up) and stop when any is done; they must pass the same `steps` (the_same says why)."""
    per_step, stop = [], time.perf_counter() + seconds
    train_call(iterator, steps)  # the first call of a new size runs colder
    while True:
        done = (time.perf_counter() >= stop and len(per_step) >= 2) or len(per_step) >= ENOUGH_CALLS
        if together(done) if together is not None else done:
            return statistics.median(per_step)
        started = time.perf_counter()
        train_call(iterator, steps)
        per_step.append((time.perf_counter() - started) / steps)


# batches whose touched embedding rows the probe averages: how many rows a batch touches varies with its examples
SPARSE_BATCHES = 8


def gradient_wire_bytes(tf, model, task, iterator, batches=SPARSE_BATCHES):
    """(bytes one worker sends per multiworker step in float32, whether a gradient is sparse): dense gradients
    whole; an embedding's as the unique rows a real batch touched, each with its two int32 tags
    (collectives.Wire._gather_rows), the mean of `batches` batches (a model without one: its first batch's)."""
    dense, sparse_bytes = 0, []
    for batch in range(batches):
        x, y = next(iterator)
        with tf.GradientTape() as tape:
            per_example, _ = task.loss_and_score(y, model(x, training=True))
            loss = tf.reduce_mean(per_example)
        touched = None
        for grad in tape.gradient(loss, model.trainable_variables):
            if grad is None:
                continue
            if isinstance(grad, tf.IndexedSlices):
                rows = int(tf.shape(tf.unique(grad.indices)[0])[0])
                touched = (touched or 0) + rows * (int(math.prod(grad.values.shape[1:])) * 4 + 8)
            elif batch == 0:
                dense += int(math.prod(grad.shape)) * 4
        if touched is None:
            return dense, False
        sparse_bytes.append(touched)
    return dense + round(sum(sparse_bytes) / len(sparse_bytes)), True


def main(args, data_dir, index, addresses, launched, deadline):
    """Run one probe worker; ContractError: one line, exit 2 (the advisor relays it)."""
    try:
        run(args, data_dir, index, addresses, launched, deadline)
    except ContractError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return err.exit_code
    return 0
