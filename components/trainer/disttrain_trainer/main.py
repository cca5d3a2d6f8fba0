"""disttrain-trainer: train one worker on its shard.

    disttrain-trainer --worker-index 0 --workers 2 --epochs 5 --workdir workdir
    disttrain-trainer --strategy multiworker --workers 2 --worker-index 1 ...
    disttrain-trainer --strategy localsgd --sync-every 32 --workers 2 --worker-index 1 ...
    disttrain-trainer --strategy parameterserver --ps 1 --workers 2 --worker-index 0 ...  (0 = chief, 1 = ps, 2-3 workers)

Four strategies, one module each (disttrain_trainer/strategies/):
  average      each worker trains alone on its shard, starting from the same
               initial weights (drawn from --seed); the aggregator averages them.
  multiworker  synchronous data parallelism with MultiWorkerMirroredStrategy:
               gradients are summed across workers every step; the chief (index 0)
               writes the model.
  localsgd     each worker trains alone for --sync-every steps, then the workers
               average their weights (one all-reduce), or take DiLoCo's outer step
               (--outer-optimizer nesterov); the chief writes the model.
  parameterserver  asynchronous training with ParameterServerStrategy: a chief (the
               coordinator) schedules steps on --workers workers, the variables live on --ps
               parameter servers; the chief writes the model, the others serve until it has.

Why a custom training loop: Keras 3's model.fit fails under
MultiWorkerMirroredStrategy (keras-team/keras#20585, "PerReplica ... to a
Tensor"). A loop around strategy.run works with Keras 3, keeps one code path
for every strategy (step.py), and makes checkpoint/resume explicit.
"""

import argparse
import json
import os
import time

from disttrain_contract import (ContractError, GroupLost, Workdir, atomic_write_json, default_workdir, job_completion_index,
                                read_json, read_marker, run_cli, wait_for_marker, wait_for_quorum, write_marker)
from disttrain_contract.artifact import save_model, weights_fingerprint
from disttrain_contract.evaluation import compiled
from disttrain_contract.manifest import Manifest, read_split
from disttrain_contract.layout import PROGRESS_FILE
from disttrain_contract.params import read_params_file
from disttrain_contract.tensorflow_import import import_tensorflow
from disttrain_trainer import malloc_settings, peers, preemption, privacy, strategies
from disttrain_trainer.progress import ProgressFile, TerminalBar
from disttrain_trainer.strategies import options

IMAGE_MODELS = ("cnn", "mobilenetv2", "resnet50")  # --model (models.build_image_model)
OPTIMIZERS = ("lazyadam", "adam", "sgd")  # (adam and lazyadam: the same for dense gradients)


def parse_args(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    check_args(p, args)
    return args


def build_parser(prog="disttrain-trainer", description="Train one worker on its shard (stage 2 of disttrain)."):
    """The trainer's flags (disttrain-advise adds its own to them: the same flags mean the same things)."""
    p = argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog="Addresses of connected strategies (multiworker, localsgd): TF_CONFIG is used as given when set; "
        "otherwise it is built from --workers, --worker-index and --host-pattern ({job}-{index}.{service}:{port} "
        "when --service is set, else 127.0.0.1:{index_port} = base port + index).",
    )
    p.add_argument("--workdir", default=default_workdir(), help="shared working directory (default $DISTTRAIN_WORKDIR or ./workdir)")
    p.add_argument("--data", help="the copier's output (default WORKDIR/data)")
    p.add_argument("--out", "--savemodel", dest="out", help="where worker directories go (default WORKDIR/train)")
    options.add_flags(p)  # --strategy and each strategy's own flags (strategies/options.py)
    p.add_argument("--epochs", "--epoch", dest="epochs", type=int, default=5, help="default 5")
    p.add_argument("--batch", type=int, default=64, help="examples per step per worker (default 64)")
    p.add_argument("--learning-rate", type=float, default=None,
                   help="the optimizer's learning rate (default: the task's, 0.003 for text, 0.001 otherwise; "
                        "1.0 for differentially private text training)")
    p.add_argument("--seed", type=int, default=42, help="seed of the shared initial weights (default 42)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default=None,
                   help="adam (default): Keras' Adam, which updates every embedding row every step; lazyadam: Adam that "
                        "updates only the embedding rows a batch touched, 3-5x faster text steps "
                        "(disttrain_trainer/optimizers.py, bench/README.md); sgd: SGD with momentum 0.9, the default of "
                        "differentially private text training (docs/privacy.md)")
    p.add_argument("--steps-per-call", type=int, default=32,
                   help="training steps per compiled call: Python overhead is paid once per call (default 32)")
    own = p.add_argument_group("your own model (instead of the task's built-in one; contract user_model)")
    own.add_argument("--model-file", metavar="PATH",
                     help="a Keras 3 .keras file (model.save()): its weights are every worker's starting point (fresh: "
                          "training from scratch; trained: fine-tuning), its compiled loss is used; loaded in safe mode "
                          "(no Lambda layers: register custom layers in a --model-module). An s3://bucket/key is "
                          "downloaded once into WORKDIR (the AWS_* variables configure the store)")
    own.add_argument("--model-module", metavar="MODULE[:FUNCTION]",
                     help="a module on the Python path (a derived image or a mounted directory on PYTHONPATH): its "
                          "FUNCTION(spec) (default build) returns the keras.Model; with --model-file it is only imported, "
                          "for the custom layers the file uses. The aggregator and the server need the same module")
    p.add_argument("--model", choices=IMAGE_MODELS, default="cnn",
                   help="image task: the small CNN (default) or a keras.applications network trained from scratch")
    p.add_argument("--image-size", type=int, default=None,
                   help="--model mobilenetv2/resnet50: resize images to this size inside the model (default: 32 or the image size)")
    p.add_argument("--width", type=int, default=None,
                   help="text: embedding width; image (--model cnn), table: hidden units (default 64)")
    p.add_argument("--dropout", type=float, default=None,
                   help="the built-in models' dropout rate before the output (default 0.5 text, 0.3 image, 0.1 table)")
    p.add_argument("--params-from", metavar="BEST_JSON",
                   help="take learning_rate, batch, epochs, width and dropout from the sweep's WORKDIR/sweep/best.json "
                        "(they replace those flags); an unknown key or a bad value is an error (exit 2)")
    p.add_argument("--embedding-size", type=int, default=64, help="faces: embedding dimensions (default 64)")
    p.add_argument("--margin", type=float, default=0.2, help="faces: triplet-loss margin (default 0.2)")
    p.add_argument("--views", type=int, default=2, help="faces: views per person in a batch (default 2)")
    p.add_argument("--workers", type=int, default=None, help="number of workers (default: the dataset's shard count)")
    p.add_argument("--worker-index", type=int, default=job_completion_index(None),
                   help="this worker's index (default $JOB_COMPLETION_INDEX, else 0)")
    p.add_argument("--job", default=os.environ.get("DISTTRAIN_JOB", ""), help="on Kubernetes: the Indexed Job's name")
    p.add_argument("--service", default=os.environ.get("DISTTRAIN_SERVICE", ""), help="on Kubernetes: the headless Service's name")
    p.add_argument("--wait-timeout", type=float, default=600, help="seconds to wait for the copier's marker (default 600)")
    p.add_argument("--threads", type=int, default=0,
                   help="TensorFlow intra- and inter-op threads (default 0 = TensorFlow decides); with 1 and --malloc tuned, "
                        "glibc's malloc keeps one arena (a multiworker epoch up to 22 %% shorter; MALLOC_ARENA_MAX overrides)")
    p.add_argument("--malloc", choices=malloc_settings.MODES, default="tuned",
                   help="tuned (default): glibc's malloc keeps large blocks in its heap instead of mapping and unmapping "
                        "them every step (mmap threshold 32 MiB, trim threshold 64 MiB: a multiworker text epoch 20 %% shorter), "
                        "and one arena at --threads 1; the environment's own MALLOC_* or GLIBC_TUNABLES settings win. "
                        "glibc: glibc's defaults")
    p.add_argument("--progress-interval", type=float, default=1.0, metavar="SECONDS",
                   help="rewrite the worker directory's progress.json (epoch, step, loss, examples/s, ETA, the "
                        "per-epoch history; the server's page shows it live) at most every SECONDS, and at the end "
                        "of each epoch; 0 = never write it (default 1)")
    privacy.add_flags(p)
    return p


def check_args(p, args):
    """The checks of the flags' values (p.error: one line, exit 2) and --params-from."""
    apply_params_file(args)
    if args.width is not None and args.width < 1:
        p.error("--width must be >= 1")
    if args.dropout is not None and not 0 <= args.dropout < 1:
        p.error("--dropout must be >= 0 and < 1")
    for name in ("epochs", "batch", "embedding_size", "views", "steps_per_call"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if (args.learning_rate is not None and args.learning_rate <= 0) or args.margin <= 0:
        p.error("--learning-rate and --margin must be > 0")
    if args.workers is not None and args.workers < 1:
        p.error("--workers must be >= 1")
    options.check(args, p.error)  # the strategy's flags: their values, and none of another strategy's
    privacy.check(args, p.error)
    if not args.progress_interval >= 0:  # (also refuses nan)
        p.error("--progress-interval must be >= 0 (0: no progress.json)")
    if args.image_size is not None and args.model == "cnn":
        p.error("--image-size applies to --model mobilenetv2 or resnet50")
    if args.image_size is not None and args.image_size < 32:
        p.error("--image-size must be >= 32 (the keras.applications networks need it)")


def apply_params_file(args):
    """--params-from: the sweep's parameters replace the flags of the same name. Records where the
    training parameters came from (args.params_origin), for the model's metadata and the report."""
    args.params_origin = {"source": "flags"}
    if not args.params_from:
        return
    path = os.path.abspath(args.params_from)
    params = read_params_file(path)  # ContractError: run_cli prints it and exits 2
    for name in params:
        users = options.users_of(name)  # a strategy's own parameter (sync_every: localsgd's)
        if users is not None and args.strategy not in users:
            raise ContractError(f"--params-from {path}: {name} was searched by {', '.join(users)} trials, but this "
                                f"run's --strategy is {args.strategy}: sweep with the strategy you train with")
    best = read_json(path)
    for name, value in params.items():
        setattr(args, name, value)
    args.params_origin = {"source": "sweep", "file": path, "trial": best.get("trial"),
                          "validation_accuracy": best.get("value")}
    print("trainer: parameters from " + path + ": " + ", ".join(f"{k}={v:g}" for k, v in sorted(params.items())),
          flush=True)


def main(argv=None):
    args = parse_args(argv)
    workdir = Workdir(args.workdir)
    data_dir = args.data or workdir.data
    train_dir = args.out or workdir.train

    # -------------------------------------------------------------- the data contract
    wait_for_marker(data_dir, args.wait_timeout, "the copier's dataset")
    manifest = Manifest.read(data_dir)
    workers = args.workers or manifest.n_shards
    index = args.worker_index or 0
    malloc_settings.apply(args.threads, args.malloc)  # before TensorFlow starts its threads (malloc_settings says why)
    tf = import_tensorflow()  # before keras, which imports it: quietly (see tensorflow_import)

    # ---------------------------------------------------------- distributed setup
    # Connected strategies: TF_CONFIG names every task and this one's index (given, or built from the
    # Job's index and the headless Service); TensorFlow connects them when the strategy is created.
    chosen = options.REGISTRY[args.strategy]
    workers, index, tf_config = chosen.configure(args, workers, index)
    if workers != manifest.n_shards:
        raise ContractError(f"{workers} workers but the dataset has {manifest.n_shards} shards; run the copier with --n-shards {workers}")
    worker_dir = workdir.worker(index, train_dir)
    tag = chosen.tag(args, index, workers)

    import keras
    import numpy as np

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    if chosen.connected:
        # one deadline for the peers' names and for their joining (peers.py says why both)
        tasks, deadline = peers.tasks_of(tf_config), peers.Deadline(args.peer_wait)
        print(f"{tag}: joining the cluster {json.loads(tf_config)['cluster']} ...", flush=True)
        peers.wait_for_names(tag, tasks, deadline)
        with peers.watch(tag, tasks, deadline):
            strategy = strategies.create(args.strategy, args, workers, index)
    else:
        strategy = strategies.create(args.strategy, args, workers, index)
    # SIGTERM: exit at once until training starts (preemption.py). Installed only now: TensorFlow's
    # coordination service, which the connected strategies start, installs a SIGTERM handler of its own.
    notice = preemption.Notice(tag).install()
    if strategy.serves:  # a parameter server or worker of parameterserver: serves until the chief is done
        return strategy.serve(args, workdir.worker(0, train_dir), worker_dir, notice)

    # ------------------------------------------------------------------- task
    # The data's kind and the model (the user's, or the built-in one), after the strategy: a connected
    # strategy must be created before anything starts TensorFlow's runtime, which loading a model does.
    # A user's model is loaded and checked here, before any step, and before anything is written.
    from disttrain_trainer import tasks

    task = tasks.create(manifest, args)
    task.apply_defaults(args)
    task.check(args)

    # ------------------------------------------------------------------- data
    shards = strategy.train_shards(manifest)  # one; parameterserver's chief: every worker's
    parts = [read_split(data_dir, manifest, s) for s in shards]
    x_train, y_train = (np.concatenate(a) if len(parts) > 1 else a[0] for a in zip(*parts))
    examples = sum(s.examples for s in shards)
    x_validation = y_validation = None
    if args.validation_fraction:  # average only (parse_args): a carve of this worker's own shard
        from disttrain_contract.validation import carve

        kept, held = carve(len(y_train), args.validation_fraction, args.seed)
        pick = (lambda x, rows: [x[i] for i in rows]) if isinstance(x_train, list) else (lambda x, rows: x[rows])
        x_validation, y_validation = task.model_input(pick(x_train, held)), y_train[held]
        x_train, y_train, examples = pick(x_train, kept), y_train[kept], len(kept)
    x_test, y_test = read_split(data_dir, manifest, manifest.test)
    x_test = task.model_input(x_test)  # the held-out split goes through the published model
    # once, here, not in every step (text: token ids; the published model has the vectorizer in front)
    x_train = task.prepare(data_dir, x_train)
    steps_per_epoch = -(-strategy.examples_per_epoch(manifest, examples) * task.views // args.batch)
    private = None
    if privacy.enabled(args):  # (a bad δ, faces: one line, exit 2, before any model is built)
        private = privacy.Plan(args, strategy=args.strategy, workers=workers, training_examples=manifest.train_examples, vocabulary=manifest.vocab,
                               epoch_examples=strategy.examples_per_epoch(manifest, examples), steps_per_epoch=steps_per_epoch,
                               synchronous_replicas=strategy.tf_strategy.num_replicas_in_sync if strategy.reduce_gradients else 1)
        if task.name == "faces":
            raise ContractError(privacy.refusal("faces", None))
        task.private_sampling = private.sampling

    def dataset_fn(_input_context, batches_done=0):
        # each worker already has its own shard on disk: no auto-sharding.
        # The stream is the same on every run (seeded), and a resumed run skips the
        # batches its restored epochs already took: it sees the data an undisturbed
        # run would, in the same order (tests: a resumed model equals an undisturbed one).
        ds = task.dataset(x_train, y_train, args.batch, strategy.shuffle_seed(args.seed), index)
        return ds.skip(batches_done).prefetch(2)

    # ------------------------------------------------ model from the shared seed (or the user's file)
    keras.utils.set_random_seed(args.seed)
    with strategy.scope():
        model = task.build()
        from disttrain_trainer.optimizers import build_optimizer

        optimizer = build_optimizer(args.optimizer, args.learning_rate)
        optimizer.build(model.trainable_variables)
        epoch_counter = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        position = preemption.Position()  # where in an epoch a checkpoint saved on SIGTERM was taken
    if private is not None and privacy.refusal(task.name, model):
        raise ContractError(privacy.refusal(task.name, model))
    published = task.publish(model)
    inference = compiled(published)  # the held-out evaluation, every epoch
    init_sha = weights_fingerprint(model.get_weights())
    strategy.bind(model)
    strategy.bind_data(lambda: dataset_fn(None))  # (called only by a strategy that reads it: no extra dataset otherwise)

    # ------------------------------------------------- checkpoints and resume
    read_dir, write_dir = strategy.checkpoint_dirs(worker_dir, workdir.worker(0, train_dir))
    run_config = {
        "strategy": args.strategy, "seed": args.seed, "workers": workers, "batch": args.batch,
        "learning_rate": args.learning_rate, "optimizer": args.optimizer, "init_weights_sha256": init_sha, "margin": args.margin,
        "width": args.width, "dropout": args.dropout,
        "dataset": [s.sha256 for s in manifest.shards], **strategy.run_config(), **task.run_config(),
        # (only when set: checkpoints of a run without it still resume)
        **({"validation_fraction": args.validation_fraction} if args.validation_fraction else {}),
        **(private.run_config() if private is not None else {}),
    }
    check_run_config(read_dir, run_config, write=read_dir == write_dir)
    # The model's weights reach the checkpoint through the optimizer; its other state (the
    # dropout layers' random-generator state, batch-norm statistics) is listed here, or a
    # resumed run would draw other dropout masks than an undisturbed one.
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=epoch_counter,
                                     model_state=list(model.non_trainable_variables), epoch_position=position.variables,
                                     **strategy.checkpoint_state())
    manager = tf.train.CheckpointManager(checkpoint, write_dir, max_to_keep=strategy.checkpoints_to_keep(steps_per_epoch))
    resume_from = strategy.resume_checkpoint(read_dir, lambda i: strategy.checkpoint_dirs(
        workdir.worker(i, train_dir), workdir.worker(0, train_dir))[0], steps_per_epoch)
    if resume_from:
        checkpoint.restore(resume_from).expect_partial()
        within = f" and {position.steps()} steps of epoch {int(epoch_counter.numpy()) + 1}" if position.steps() else ""
        print(f"{tag}: resumed from {resume_from} after epoch {int(epoch_counter.numpy())}{within}", flush=True)
    start_epoch = int(epoch_counter.numpy())
    start_step = start_epoch * steps_per_epoch + position.steps()  # a state saved on SIGTERM: mid-epoch
    metrics_path = os.path.join(worker_dir, "metrics.json")
    history = [m for m in read_json(metrics_path, []) if m["epoch"] <= start_epoch]

    # ------------------------------------------------------------- train step
    from disttrain_trainer.step import make_train_call

    train_call = make_train_call(strategy.tf_strategy, model, optimizer, task.loss_and_score, strategy.reduce_gradients,
                                 strategy.run_call, private.gradient() if private is not None else None)

    # -------------------------------------------------------------- the loop
    os.makedirs(worker_dir, exist_ok=True)
    summaries = tf.summary.create_file_writer(os.path.join(worker_dir, "tensorboard"))
    iterator = strategy.iterator(dataset_fn, start_step)
    strategy.before_training(start_step)
    if start_epoch == 0 and strategy.evaluates and task.evaluate_before_training():
        before = task.evaluate(inference, x_test, y_test)  # a pre-trained model: where fine-tuning starts
        initial_metric = before.get(task.primary.name)
        print(f"{tag}: held-out {task.primary.label} before training: {initial_metric:.4f}", flush=True)
    else:
        initial_metric = None
    print(
        f"{tag}: {args.strategy}, {task.describe()} task, {manifest.problem}, shard(s) {examples} examples, {steps_per_epoch} steps/epoch "
        f"x batch {args.batch} x {strategy.tf_strategy.num_replicas_in_sync} replica(s), epochs {start_epoch + 1}..{args.epochs}, "
        f"init {init_sha[:12]}", flush=True,
    )
    progress = ProgressFile(os.path.join(worker_dir, PROGRESS_FILE), args.progress_interval, worker=index, tag=tag,
                            strategy=args.strategy, epochs=args.epochs, steps_per_epoch=steps_per_epoch,
                            start_epoch=start_epoch, history=history, score=task.score.name)
    step = start_step  # this run's steps over all epochs (local SGD syncs every H of them)
    notice.training()
    try:
        for epoch in range(start_epoch + 1, args.epochs + 1):
            done_before, sums_before, seconds_before = position.take()  # (a resumed epoch's first part)
            started = time.monotonic() - seconds_before
            bar = TerminalBar(f"{tag} epoch {epoch}/{args.epochs}", steps_per_epoch, task.score.name)
            progress.start_epoch(epoch)

            def on_steps(done, sums):
                bar.update(done, sums)  # noqa: B023  called only within this epoch's train_epoch
                progress.update(done, sums)

            sums, step = strategy.train_epoch(train_call, iterator, step, steps_per_epoch, args.steps_per_call, on_steps,
                                              notice, done_before, sums_before)
            if epoch == args.epochs:
                strategy.finish(step)
            bar.close()
            if strategy.evaluates or x_validation is not None:
                progress.evaluating()
            loss_sum, score_sum, seen = strategy.epoch_metrics(sums)  # one collective per epoch, not per step
            wall = time.monotonic() - started
            record = {
                "epoch": epoch, "loss": loss_sum / seen, task.score.name: score_sum / seen, "examples": int(seen),
                "examples_per_sec": seen / wall, "wall_time_sec": wall, **strategy.epoch_facts(),
                **({"epsilon": private.epsilon_after(epoch)} if private is not None else {}),
            }
            if strategy.evaluates:
                held_out = task.evaluate(inference, x_test, y_test)
                record.update({f"test_{key}": value for key, value in held_out.items()})
            if x_validation is not None:
                validation = task.evaluate(inference, x_validation, y_validation)
                record.update({f"validation_{key}": value for key, value in validation.items()})
            history.append(record)
            print(epoch_line(tag, epoch, args.epochs, record, task.score.name), flush=True)
            with summaries.as_default(step=epoch):
                for key, value in record.items():
                    if key != "epoch" and isinstance(value, (int, float)):  # (not parameterserver's steps per worker, localsgd's scope)
                        tf.summary.scalar(key, value)
            summaries.flush()
            epoch_counter.assign(epoch)
            manager.save(checkpoint_number=epoch)
            # the epoch's whole cycle (training, the held-out evaluation, the checkpoint): what a
            # user waits per epoch, where wall_time_sec counts the training alone
            record["cycle_sec"] = time.monotonic() - started
            atomic_write_json(metrics_path, history)
            progress.end_epoch(record)

        # --------------------------------------------------------- the artifacts
        notice.finishing()
        strategy.cleanup(write_dir)
        preemption.discard(write_dir)
        model_file = None
        if strategy.writes_model:
            model_file = "model.keras"
            save_model(published, os.path.join(worker_dir, model_file), {
                "task": manifest.task, "labels": manifest.labels, "input": manifest.input,
                "init_weights_sha256": init_sha, "strategy": args.strategy, "seed": args.seed,
                "worker_index": index, "workers": workers, "epochs": args.epochs,
                "examples": chosen.model_examples(examples, manifest),
                **task.metadata(published),
                **chosen.model_meta(args),
                "training_parameters": {"learning_rate": args.learning_rate, "batch": args.batch, "epochs": args.epochs,
                                        # (--width and --dropout shape the built-in models only)
                                        **({"width": args.width, "dropout": args.dropout}
                                           if task.model_source == "builtin" else {}),
                                        **chosen.model_meta(args)},
                "parameters_origin": args.params_origin,
            })
        last = history[-1] if history else {}
        primary = task.primary
        write_marker(
            worker_dir, "trainer", worker_index=index, workers=workers, strategy=args.strategy, epochs=args.epochs,
            init_weights_sha256=init_sha, examples=examples, model=model_file,
            final_weights_sha256=weights_fingerprint(model.get_weights()), problem=manifest.problem,
            final_test_accuracy=last.get("test_accuracy"), **strategy.marker_info(),
            **({"privacy": private.summary(args.epochs)} if private is not None else {}),
            final_test_metric={"name": primary.name, "value": last.get(primary.key), "direction": primary.direction},
            **({"initial_test_metric": {"name": primary.name, "value": initial_metric, "direction": primary.direction}}
               if initial_metric is not None else {}),
            **({"validation_fraction": args.validation_fraction, "validation_examples": len(y_validation),
                "validation_accuracy": last.get("validation_accuracy"),
                "validation_metric": {"name": primary.name, "value": last.get(f"validation_{primary.name}"),
                                      "direction": primary.direction}}
               if x_validation is not None else {}),
        )
        progress.finish("done")
    except preemption.Stop as stop:  # SIGTERM: the workers agreed to stop here
        saved = preemption.save(checkpoint, position, write_dir, stop, time.monotonic() - started, start_step)
        progress.finish("preempted")
        print(notice.stopped_line(stop, saved), flush=True)
        notice.exit(preemption.EXIT_CODE)
    except BaseException as err:  # (the page says so; run_cli reports it as before)
        if notice.requested and preemption.lost_peer(err):  # SIGTERM, then the group came apart: not a failure
            progress.finish("preempted", error=(str(err) or type(err).__name__)[:500])
            print(f"{tag}: preempted: SIGTERM, then a collective failed (a peer is gone) before the group could "
                  f"save: the last checkpoint stands; exiting with code {preemption.EXIT_CODE}", flush=True)
            notice.exit(preemption.EXIT_CODE)
        progress.finish("failed", error=(str(err) or type(err).__name__)[:500])
        # a peer gone mid-collective (kill -9, an eviction, a lost node): one line, no traceback (GroupLost)
        if chosen.connected and isinstance(err, (tf.errors.UnavailableError, tf.errors.AbortedError)):
            raise GroupLost(f"{tag}: the group lost a peer mid-run ({type(err).__name__}: "
                            f"{peers.group_lost_reason(err.message)}); this worker stops too, and started again "
                            "the group resumes from its last checkpoint") from None
        raise
    notice.done()
    print(f"{tag}: done -> {worker_dir}", flush=True)
    if args.linger_for_peers:
        linger_for_peers(tag, [workdir.worker(i, train_dir) for i in range(workers)], args.linger_for_peers)
    return 0


def linger_for_peers(tag, worker_dirs, seconds):
    """Exit only when every worker has its marker, or `seconds` from now (this one's marker
    is there: the quorum of 1 is met at once, and the wait never fails)."""
    pending = [d for d in worker_dirs if read_marker(d) is None]
    if pending:
        print(f"{tag}: waiting up to {seconds:g}s for {len(pending)} other worker(s) to finish before exiting, so that "
              "the Job does not stop them", flush=True)
    markers = wait_for_quorum(worker_dirs, seconds, 1, seconds, log=None)
    if None in markers:
        print(f"{tag}: exiting without worker(s) " + ", ".join(str(i) for i, m in enumerate(markers) if m is None), flush=True)


def epoch_line(tag, epoch, epochs, record, score="accuracy"):
    """The one line per epoch: fixed words, then key=value pairs a log collector can split."""
    from disttrain_contract.faces import HARD_QUERIES

    fields = [("loss", record["loss"], ".4f"), (score, record[score], ".4f")]
    # (faces: the harder retrieval's 12 numbers stay in metrics.json; the aggregator's table shows them)
    hard = tuple(f"test_{kind}_" for kind in HARD_QUERIES)
    fields += [(key, record[key], ".4f") for key in sorted(record) if key.startswith(("test_", "validation_")) and not key.startswith(hard)]
    fields += [("epsilon", record["epsilon"], ".3f")] if "epsilon" in record else []  # (a private run's ε so far)
    fields += [("examples_per_sec", record["examples_per_sec"], ".0f"), ("seconds", record["wall_time_sec"], ".2f")]
    return f"{tag} epoch {epoch}/{epochs}: " + " ".join(f"{key}={value:{spec}}" for key, value, spec in fields)


def check_run_config(checkpoint_dir, config, write):
    """Refuse to resume checkpoints that belong to a different run."""
    path = os.path.join(checkpoint_dir, "run.json")
    previous = read_json(path, None)
    if previous is not None and previous != config:
        changed = sorted(k for k in {**previous, **config} if previous.get(k) != config.get(k))  # (a key only one has too)
        raise ContractError(
            f"the checkpoints in {checkpoint_dir} are from a different run (changed: {', '.join(changed)}); "
            "delete that directory or use another --out"
        )
    if previous is None and write:
        atomic_write_json(path, config)


def cli():
    run_cli(main)


if __name__ == "__main__":
    cli()
