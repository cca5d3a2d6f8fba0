"""train(config): one worker's whole run, as named phases (the CLI, main.py, is a thin layer over it).

    from disttrain_trainer import TrainConfig, train
    train(TrainConfig(workdir="workdir", strategy="multiworker", workers=2, worker_index=1, epochs=5))

The phases, in order (`train` composes them; each is a method of Training):
  join       wait for the copier's data, create the strategy (a connected one joins its group here);
  serve      a parameter server or a parameterserver worker only serves until the chief is done;
  read       the task (built-in or the user's model, checked before anything is written) and its data;
  build      the model from the shared seed (or the user's file) and the optimizer, under the strategy;
  restore    the checkpoints of this run (refused when they belong to another), resumed where they end;
  epochs     the loop: train calls, one metrics record and one checkpoint per epoch;
  publish    the model (the workers that write one), then the marker the aggregator waits for.
SIGTERM during training saves where the workers agree to stop (preemption.py) and exits with its code.
"""

import dataclasses
import json
import os
import time

from disttrain_contract import (
    ContractError,
    GroupLost,
    Workdir,
    atomic_write_json,
    read_json,
    read_marker,
    wait_for_marker,
    wait_for_quorum,
)
from disttrain_contract.artifact import save_model, weights_fingerprint
from disttrain_contract.evaluation import compiled
from disttrain_contract.layout import PROGRESS_FILE
from disttrain_contract.manifest import Manifest, read_split
from disttrain_contract.report import Privacy
from disttrain_contract.trainer_records import (
    EpochRecord,
    MetricValue,
    TrainerMarker,
    metrics_path,
    read_epoch_records,
    write_epoch_records,
    write_trainer_marker,
)
from disttrain_contract.tensorflow_import import import_tensorflow
from disttrain_trainer import malloc_settings, peers, preemption, privacy, strategies
from disttrain_trainer.progress import ProgressFile, TerminalBar
from disttrain_trainer.strategies import options


def train(config):
    """Train this worker (config.worker_index) of the group as `config` says; returns the exit code (0)."""
    run = Training(config)
    run.join()
    if run.strategy.serves:  # a parameter server or worker of parameterserver: serves until the chief is done
        return run.strategy.serve(config, run.workdir.worker(0, run.train_dir), run.worker_dir, run.notice)
    run.read()
    run.build()
    run.restore()
    run.begin()
    run.notice.training()
    try:
        run.epochs()
        run.publish()
    except preemption.Stop as stop:  # SIGTERM: the workers agreed to stop here
        run.stopped(stop)
    except BaseException as err:  # (the page says so; run_cli reports it as before)
        run.failed(err)
        raise
    run.notice.done()
    print(f"{run.tag}: done -> {run.worker_dir}", flush=True)
    if run.settings.linger_for_peers:
        linger_for_peers(
            run.tag,
            [run.workdir.worker(i, run.train_dir) for i in range(run.placement.workers)],
            run.settings.linger_for_peers,
        )
    return 0


class Training:
    """The state one run's phases share. `config` is frozen; `self.config` becomes the configuration with the
    task's defaults once the task is known (read)."""

    def __init__(self, config):
        self.config, self.settings = config, config.strategy_settings
        self.epoch_started = time.monotonic()
        self.workdir = Workdir(config.workdir)
        self.data_dir = config.data or self.workdir.data
        self.train_dir = config.out or self.workdir.train

    # ------------------------------------------------------------------ join
    def join(self):
        """The data contract, this task's place in the group, and the strategy (which joins the group)."""
        config = self.config
        wait_for_marker(self.data_dir, config.wait_timeout, "the copier's dataset")
        self.manifest = manifest = Manifest.read(self.data_dir)
        malloc_settings.apply(config.threads, config.malloc)  # before TensorFlow starts its threads (malloc_settings)
        self.tf = tf = import_tensorflow()  # before keras, which imports it: quietly (see tensorflow_import)
        # Connected strategies: TF_CONFIG names every task and this one's index (given, or built from the
        # Job's index and the headless Service); TensorFlow connects them when the strategy is created.
        self.chosen = options.REGISTRY[config.strategy]
        self.placement = placement = self.chosen.configure(
            config, config.workers or manifest.n_shards, config.worker_index or 0
        )
        if placement.workers != manifest.n_shards:
            raise ContractError(
                f"{placement.workers} workers but the dataset has {manifest.n_shards} shards; run the "
                f"copier with --n-shards {placement.workers}"
            )
        self.index = placement.index
        self.worker_dir = self.workdir.worker(placement.index, self.train_dir)
        self.tag = self.chosen.tag(placement)
        if config.threads:
            tf.config.threading.set_intra_op_parallelism_threads(config.threads)
            tf.config.threading.set_inter_op_parallelism_threads(config.threads)
        if self.chosen.connected:
            # one deadline for the peers' names and for their joining (peers.py says why both)
            tasks, deadline = peers.tasks_of(placement.tf_config), peers.Deadline(config.peer_wait)
            print(f"{self.tag}: joining the cluster {json.loads(placement.tf_config)['cluster']} ...", flush=True)
            peers.wait_for_names(self.tag, tasks, deadline)
            with peers.watch(self.tag, tasks, deadline):
                self.strategy = strategies.create(config, placement)
        else:
            self.strategy = strategies.create(config, placement)
        # SIGTERM: exit at once until training starts (preemption.py). Installed only now: TensorFlow's
        # coordination service, which the connected strategies start, installs a SIGTERM handler of its own.
        self.notice = preemption.Notice(self.tag).install()

    # ------------------------------------------------------------------ read
    def read(self):
        """The task and its data. The task (the user's model, or the built-in one) after the strategy: a
        connected strategy must be created before anything starts TensorFlow's runtime, which loading a model
        does. A user's model is loaded and checked here, before any step, and before anything is written."""
        import numpy as np

        from disttrain_trainer import tasks
        from disttrain_trainer.data import concat_rows, take_rows

        manifest, strategy = self.manifest, self.strategy
        self.task, self.config = task, config = tasks.create(manifest, self.config)
        task.check(config)
        shards = strategy.train_shards(manifest)  # one; parameterserver's chief: every worker's
        parts = [read_split(self.data_dir, manifest, s) for s in shards]
        x_train = concat_rows([x for x, _ in parts])  # (a typed table's: a dict of columns)
        y_train = np.concatenate([y for _, y in parts]) if len(parts) > 1 else parts[0][1]
        self.examples = sum(s.examples for s in shards)
        self.x_validation = self.y_validation = None
        if self.settings.validation_fraction:  # average only: a carve of this worker's own shard
            from disttrain_contract.validation import carve

            kept, held = carve(len(y_train), self.settings.validation_fraction, config.seed)
            self.x_validation, self.y_validation = task.model_input(take_rows(x_train, held)), y_train[held]
            x_train, y_train, self.examples = take_rows(x_train, kept), y_train[kept], len(kept)
        x_test, self.y_test = read_split(self.data_dir, manifest, manifest.test)
        # the held-out split goes through the published model once, here, not in every step (text: token
        # ids; the published model has the vectorizer in front)
        self.x_test = task.model_input(x_test)
        self.x_train, self.y_train = task.prepare(self.data_dir, x_train), y_train
        epoch_examples = strategy.examples_per_epoch(manifest, self.examples)
        self.steps_per_epoch = -(-epoch_examples * task.views // config.batch)
        self.private = None
        if privacy.enabled(config):  # (a bad δ, faces: one line, exit 2, before any model is built)
            replicas = strategy.tf_strategy.num_replicas_in_sync if strategy.reduce_gradients else 1
            self.private = privacy.Plan(
                config,
                strategy=config.strategy,
                workers=self.placement.workers,
                training_examples=manifest.train_examples,
                vocabulary=manifest.vocab,
                epoch_examples=epoch_examples,
                steps_per_epoch=self.steps_per_epoch,
                synchronous_replicas=replicas,
            )
            if task.name == "faces":
                raise ContractError(privacy.refusal("faces", None))
            task.private_sampling = self.private.sampling

    def dataset(self, _input_context=None, batches_done=0):
        """This worker's batches. Each worker already has its own shard on disk: no auto-sharding. The stream is
        the same on every run (seeded), and a resumed run skips the batches its restored epochs already took: it
        sees the data an undisturbed run would, in the same order (tests: a resumed model equals an undisturbed
        one)."""
        ds = self.task.dataset(
            self.x_train, self.y_train, self.config.batch, self.strategy.shuffle_seed(self.config.seed), self.index
        )
        return ds.skip(batches_done).prefetch(2)

    # ------------------------------------------------------------------ build
    def build(self):
        """The model from the shared seed (or the user's file) and its optimizer, under the strategy's scope."""
        import keras

        from disttrain_trainer.optimizers import describe

        config, strategy, tf = self.config, self.strategy, self.tf
        keras.utils.set_random_seed(config.seed)
        with strategy.scope():
            self.model = model = self.task.build()
            self.optimizer = self.task.build_optimizer(config)  # (bound to the strategy it is created under)
            self.optimizer.build(model.trainable_variables)
            self.epoch_counter = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
            self.position = preemption.Position()  # where in an epoch a checkpoint saved on SIGTERM was taken
        if self.private is not None and privacy.refusal(self.task.name, model):
            raise ContractError(privacy.refusal(self.task.name, model))
        self.published = self.task.publish(model)
        self.inference = compiled(self.published)  # the held-out evaluation, every epoch
        self.init_sha = weights_fingerprint(model.get_weights())
        self.optimizer_text = describe(self.optimizer)
        print(f"{self.tag}: optimizer {self.optimizer_text}: {self.task.optimizer_source(config)}", flush=True)
        strategy.bind(model)
        strategy.bind_data(lambda: self.dataset())  # (called only by a strategy that reads it)

    # ------------------------------------------------------------------ restore
    def run_config(self):
        """What a checkpoint must agree on to be resumed (run.json beside the checkpoints)."""
        config, private = self.config, self.private
        return {
            "strategy": config.strategy,
            "seed": config.seed,
            "workers": self.placement.workers,
            "batch": config.batch,
            "learning_rate": config.learning_rate,
            "optimizer": config.optimizer,
            "init_weights_sha256": self.init_sha,
            "margin": config.margin,
            "width": config.width,
            "dropout": config.dropout,
            "dataset": [s.sha256 for s in self.manifest.shards],
            **self.strategy.run_config(),
            **self.task.run_config(),
            # (only when set: checkpoints of a run without it still resume)
            **({"validation_fraction": self.settings.validation_fraction} if self.settings.validation_fraction else {}),
            **(private.run_config() if private is not None else {}),
        }

    def restore(self):
        """This run's checkpoints (refused when another run's), resumed where they end; the train call."""
        strategy, tf, model = self.strategy, self.tf, self.model
        chief_dir = self.workdir.worker(0, self.train_dir)
        read_dir, self.write_dir = strategy.checkpoint_dirs(self.worker_dir, chief_dir)
        check_run_config(read_dir, self.run_config(), write=read_dir == self.write_dir)
        # The model's weights reach the checkpoint through the optimizer; its other state (the dropout layers'
        # random-generator state, batch-norm statistics) is listed here, or a resumed run would draw other
        # dropout masks than an undisturbed one.
        self.checkpoint = tf.train.Checkpoint(
            model=model,
            optimizer=self.optimizer,
            epoch=self.epoch_counter,
            model_state=list(model.non_trainable_variables),
            epoch_position=self.position.variables,
            **strategy.checkpoint_state(),
        )
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, self.write_dir, max_to_keep=strategy.checkpoints_to_keep(self.steps_per_epoch)
        )
        resume_from = strategy.resume_checkpoint(
            read_dir,
            lambda i: strategy.checkpoint_dirs(self.workdir.worker(i, self.train_dir), chief_dir)[0],
            self.steps_per_epoch,
        )
        if resume_from:
            self.checkpoint.restore(resume_from).expect_partial()
            position = self.position.steps()
            within = f" and {position} steps of epoch {int(self.epoch_counter.numpy()) + 1}" if position else ""
            print(
                f"{self.tag}: resumed from {resume_from} after epoch {int(self.epoch_counter.numpy())}{within}",
                flush=True,
            )
        self.start_epoch = int(self.epoch_counter.numpy())
        self.start_step = self.start_epoch * self.steps_per_epoch + self.position.steps()  # SIGTERM's: mid-epoch
        self.metrics_path = metrics_path(self.worker_dir)
        self.history = [r for r in read_epoch_records(self.metrics_path) if r.epoch <= self.start_epoch]

        from disttrain_trainer.step import make_train_call

        self.train_call = make_train_call(
            strategy.tf_strategy,
            model,
            self.optimizer,
            self.task.loss_and_score,
            strategy.reduce_gradients,
            strategy.run_call,
            self.private.gradient() if self.private is not None else None,
            # (a user's model whose class has its own train_step or compute_loss: stepped by its train_step)
            model_step_score=self.task.score.name if self.task.own_step else None,
        )

    # ------------------------------------------------------------------ epochs
    def begin(self):
        """What the loop writes to (TensorBoard, progress.json) and reads from (the batches' iterator); a
        pre-trained model's held-out metric before the first step."""
        config, task, strategy, tf = self.config, self.task, self.strategy, self.tf
        os.makedirs(self.worker_dir, exist_ok=True)
        self.summaries = tf.summary.create_file_writer(os.path.join(self.worker_dir, "tensorboard"))
        iterator = strategy.iterator(self.dataset, self.start_step)
        strategy.before_training(self.start_step)
        self.initial_metric = None
        if self.start_epoch == 0 and strategy.evaluates and task.evaluate_before_training():
            before = task.evaluate(self.inference, self.x_test, self.y_test)  # a pre-trained model: where it starts
            self.initial_metric = before.get(task.primary.name)
            print(f"{self.tag}: held-out {task.primary.label} before training: {self.initial_metric:.4f}", flush=True)
        print(
            f"{self.tag}: {config.strategy}, {task.describe()} task, {self.manifest.problem}, shard(s) {self.examples} "
            f"examples, {self.steps_per_epoch} steps/epoch x batch {config.batch} x "
            f"{strategy.tf_strategy.num_replicas_in_sync} replica(s), epochs {self.start_epoch + 1}..{config.epochs}, "
            f"init {self.init_sha[:12]}",
            flush=True,
        )
        self.progress = ProgressFile(
            os.path.join(self.worker_dir, PROGRESS_FILE),
            config.progress_interval,
            worker=self.index,
            tag=self.tag,
            strategy=config.strategy,
            epochs=config.epochs,
            steps_per_epoch=self.steps_per_epoch,
            start_epoch=self.start_epoch,
            history=[r.to_json() for r in self.history],
            score=task.score.name,
        )
        self.iterator = iterator

    def epochs(self):
        """The loop: each epoch's train calls, its metrics record (metrics.json, TensorBoard, the log line,
        progress.json) and its checkpoint."""
        step = self.start_step  # this run's steps over all epochs (local SGD syncs every H of them)
        for epoch in range(self.start_epoch + 1, self.config.epochs + 1):
            step = self.epoch(epoch, self.iterator, step)

    def epoch(self, epoch, iterator, step):
        """One epoch: its steps, then its record and checkpoint; returns the step count after it."""
        config, task, strategy, progress = self.config, self.task, self.strategy, self.progress
        done_before, sums_before, seconds_before = self.position.take()  # (a resumed epoch's first part)
        self.epoch_started = time.monotonic() - seconds_before
        bar = TerminalBar(f"{self.tag} epoch {epoch}/{config.epochs}", self.steps_per_epoch, task.score.name)
        progress.start_epoch(epoch)

        def on_steps(done, sums):
            bar.update(done, sums)
            progress.update(done, sums)

        sums, step = strategy.train_epoch(
            self.train_call,
            iterator,
            step,
            self.steps_per_epoch,
            config.steps_per_call,
            on_steps,
            self.notice,
            done_before,
            sums_before,
        )
        if epoch == config.epochs:
            strategy.finish(step)
        bar.close()
        if strategy.evaluates or self.x_validation is not None:
            progress.evaluating()
        loss_sum, score_sum, seen = strategy.epoch_metrics(sums)  # one collective per epoch, not per step
        wall = time.monotonic() - self.epoch_started
        metrics = {task.score.name: score_sum / seen}
        if strategy.evaluates:
            held_out = task.evaluate(self.inference, self.x_test, self.y_test)
            metrics.update({f"test_{key}": value for key, value in held_out.items()})
        if self.x_validation is not None:
            validation = task.evaluate(self.inference, self.x_validation, self.y_validation)
            metrics.update({f"validation_{key}": value for key, value in validation.items()})
        record = EpochRecord(
            epoch=epoch,
            loss=loss_sum / seen,
            examples=int(seen),
            examples_per_sec=seen / wall,
            wall_time_sec=wall,
            metrics=metrics,
            **strategy.epoch_facts(),
            epsilon=self.private.epsilon_after(epoch) if self.private is not None else None,
        )
        print(epoch_line(self.tag, epoch, config.epochs, record.to_json(), task.score.name), flush=True)
        with self.summaries.as_default(step=epoch):
            for key, value in record.to_json().items():
                if key != "epoch" and isinstance(value, (int, float)):  # (not parameterserver's steps per worker)
                    self.tf.summary.scalar(key, value)
        self.summaries.flush()
        self.epoch_counter.assign(epoch)
        self.manager.save(checkpoint_number=epoch)
        # the epoch's whole cycle (training, the held-out evaluation, the checkpoint): what a user waits per
        # epoch, where wall_time_sec counts the training alone
        record = dataclasses.replace(record, cycle_sec=time.monotonic() - self.epoch_started)
        self.history.append(record)
        write_epoch_records(self.metrics_path, self.history)
        progress.end_epoch(record.to_json())
        return step

    # ------------------------------------------------------------------ publish
    def publish(self):
        """The model (the workers that write one), then the marker: the last thing this worker writes."""
        config, task, manifest, chosen = self.config, self.task, self.manifest, self.chosen
        self.notice.finishing()
        if getattr(self.optimizer, "use_ema", False):  # as model.fit ends: the weights become their moving average
            self.optimizer.finalize_variable_values(self.model.trainable_variables)
        self.strategy.cleanup(self.write_dir)
        preemption.discard(self.write_dir)
        model_file = None
        if self.strategy.writes_model:
            model_file = "model.keras"
            save_model(
                self.published,
                os.path.join(self.worker_dir, model_file),
                {
                    "task": manifest.task,
                    "labels": manifest.labels,
                    "input": manifest.input,
                    "init_weights_sha256": self.init_sha,
                    "strategy": config.strategy,
                    "seed": config.seed,
                    "worker_index": self.index,
                    "workers": self.placement.workers,
                    "epochs": config.epochs,
                    "examples": chosen.model_examples(self.examples, manifest),
                    **task.metadata(self.published),
                    **chosen.model_meta(self.settings),
                    "training_parameters": {
                        "learning_rate": config.learning_rate,
                        "batch": config.batch,
                        "epochs": config.epochs,
                        "optimizer": self.optimizer_text,
                        # (--width and --dropout shape the built-in models only)
                        **(
                            {"width": config.width, "dropout": config.dropout} if task.model_source == "builtin" else {}
                        ),
                        **chosen.model_meta(self.settings),
                    },
                    "parameters_origin": dict(config.params_origin),
                },
            )
        self.write_marker(model_file)
        self.progress.finish("done")

    def write_marker(self, model_file):
        """The marker (disttrain_contract.trainer_records.TrainerMarker): what this worker trained and how it ended."""
        last = self.history[-1].metrics if self.history else {}
        primary, private = self.task.primary, self.private
        validation = (
            {
                "validation_fraction": self.settings.validation_fraction,
                "validation_examples": len(self.y_validation),
                "validation_accuracy": last.get("validation_accuracy"),
                "validation_metric": MetricValue.of(primary, last.get(f"validation_{primary.name}")),
            }
            if self.x_validation is not None
            else {}
        )
        write_trainer_marker(
            self.worker_dir,
            TrainerMarker(
                worker_index=self.index,
                workers=self.placement.workers,
                strategy=self.config.strategy,
                epochs=self.config.epochs,
                init_weights_sha256=self.init_sha,
                examples=self.examples,
                model=model_file,
                final_weights_sha256=weights_fingerprint(self.model.get_weights()),
                problem=self.manifest.problem,
                final_test_accuracy=last.get("test_accuracy"),
                **self.strategy.marker_info(),
                privacy=Privacy.from_json(private.summary(self.config.epochs)) if private is not None else None,
                final_test_metric=MetricValue.of(primary, last.get(primary.key)),
                initial_test_metric=(
                    MetricValue.of(primary, self.initial_metric) if self.initial_metric is not None else None
                ),
                **validation,
            ),
        )

    # ------------------------------------------------------------------ the ends that are not success
    def stopped(self, stop):
        """SIGTERM, and the workers agreed where to stop: save there and exit with preemption.EXIT_CODE."""
        saved = preemption.save(
            self.checkpoint, self.position, self.write_dir, stop, time.monotonic() - self.epoch_started, self.start_step
        )
        self.progress.finish("preempted")
        print(self.notice.stopped_line(stop, saved), flush=True)
        self.notice.exit(preemption.EXIT_CODE)

    def failed(self, err):
        """Training failed: say so in progress.json. SIGTERM followed by a lost peer is a preemption (exit with
        its code); a peer gone mid-collective is one line (GroupLost), no traceback; the rest is re-raised."""
        tf = self.tf
        if self.notice.requested and preemption.lost_peer(err):  # SIGTERM, then the group came apart: not a failure
            self.progress.finish("preempted", error=(str(err) or type(err).__name__)[:500])
            print(
                f"{self.tag}: preempted: SIGTERM, then a collective failed (a peer is gone) before the group could "
                f"save: the last checkpoint stands; exiting with code {preemption.EXIT_CODE}",
                flush=True,
            )
            self.notice.exit(preemption.EXIT_CODE)
        self.progress.finish("failed", error=(str(err) or type(err).__name__)[:500])
        # a peer gone mid-collective (kill -9, an eviction, a lost node): one line, no traceback (GroupLost)
        if self.chosen.connected and isinstance(err, (tf.errors.UnavailableError, tf.errors.AbortedError)):
            raise GroupLost(
                f"{self.tag}: the group lost a peer mid-run ({type(err).__name__}: "
                f"{peers.group_lost_reason(err.message)}); this worker stops too, and started again "
                "the group resumes from its last checkpoint"
            ) from None


def linger_for_peers(tag, worker_dirs, seconds):
    """Exit only when every worker has its marker, or `seconds` from now (this one's marker
    is there: the quorum of 1 is met at once, and the wait never fails)."""
    pending = [d for d in worker_dirs if read_marker(d) is None]
    if pending:
        print(
            f"{tag}: waiting up to {seconds:g}s for {len(pending)} other worker(s) to finish before exiting, so that "
            "the Job does not stop them",
            flush=True,
        )
    markers = wait_for_quorum(worker_dirs, seconds, 1, seconds, log=None)
    if None in markers:
        print(
            f"{tag}: exiting without worker(s) " + ", ".join(str(i) for i, m in enumerate(markers) if m is None),
            flush=True,
        )


def epoch_line(tag, epoch, epochs, record, score="accuracy"):
    """The one line per epoch: fixed words, then key=value pairs a log collector can split."""
    from disttrain_contract.faces import HARD_QUERIES

    fields = [("loss", record["loss"], ".4f"), (score, record[score], ".4f")]
    # (faces: the harder retrieval's 12 numbers stay in metrics.json; the aggregator's table shows them)
    hard = tuple(f"test_{kind}_" for kind in HARD_QUERIES)
    fields += [
        (key, record[key], ".4f")
        for key in sorted(record)
        if key.startswith(("test_", "validation_")) and not key.startswith(hard)
    ]
    fields += [("epsilon", record["epsilon"], ".3f")] if "epsilon" in record else []  # (a private run's ε so far)
    fields += [("examples_per_sec", record["examples_per_sec"], ".0f"), ("seconds", record["wall_time_sec"], ".2f")]
    return f"{tag} epoch {epoch}/{epochs}: " + " ".join(f"{key}={value:{spec}}" for key, value, spec in fields)


def check_run_config(checkpoint_dir, config, write):
    """Refuse to resume checkpoints that belong to a different run."""
    path = os.path.join(checkpoint_dir, "run.json")
    previous = read_json(path, None)
    if previous is not None and previous != config:
        changed = sorted(k for k in {**previous, **config} if previous.get(k) != config.get(k))  # (a key only one has)
        raise ContractError(
            f"the checkpoints in {checkpoint_dir} are from a different run (changed: {', '.join(changed)}); "
            "delete that directory or use another --out"
        )
    if previous is None and write:
        atomic_write_json(path, config)
