"""disttrain-sweep: hyper-parameter search with Optuna, between the copier and the trainer.

    disttrain-sweep --workdir workdir --trials 12                       # one process
    disttrain-sweep --workdir workdir --trials 12 --process-index 1 &   # any number more, same study

Every process works on one study in WORKDIR/sweep/study.journal (Optuna's JournalFileBackend:
a file on the shared volume, meant for NFS; no database server). Each trial is a real
`disttrain-trainer` process (python -m disttrain_trainer.main: the trainer's own code, model and
data path, no copy of them) on a validation split carved from the training shards (split.py);
its per-epoch validation accuracy goes to Optuna, whose pruner stops a bad trial early.

Budget: --trials trials finish (complete or pruned) in total, whatever the number of processes.
The decision to start one more trial (count the finished and running ones, then ask) is made
under a lock file (Optuna's JournalFileOpenLock, also NFS-safe), so processes do not start more
trials than the budget; a failed trial is told FAIL and enqueued again under the same lock, so no
process counts the gap between the two.

A process killed mid-trial: its trial stays RUNNING in the journal. Optuna's heartbeat
(fail_stale_trials) is implemented for RDBStorage only (Optuna 5.0.0: JournalStorage is not a
BaseHeartbeat), so the heartbeat is ours: a running trial's process rewrites a counter in
WORKDIR/sweep/heartbeats/trial-N every --heartbeat seconds; another process that sees the counter
unchanged for --stale-after seconds (by its own clock: no clock comparison between hosts) marks
the trial FAIL and Optuna's RetryHeartbeatStaleTrialCallback enqueues it again, with the same parameters,
as a new trial. The other processes go on; the failed trial is never run again under its number.

localsgd trials (--strategy localsgd --trial-workers N): a trial is a group of N trainer processes
training with local SGD over loopback (ports from a free block), each on its trial shard, and
the search space gains sync_every (H). H only matters between workers, so only such trials can
search it; the group is scored by worker 0's validation accuracy. A sweep pod then runs N
trainers: give it N cores (sweep.resources).

Outputs, written by every process that sees the study done (atomic renames: the same content):
best.json (--params-from of the trainer), trials.csv, history.png, importances.png,
parallel.png, and the marker WORKDIR/sweep/_SUCCESS.
"""

import argparse
import contextlib
import csv
import ctypes
import dataclasses
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings

from disttrain_contract.metrics import primary_metric
from disttrain_contract import (
    ContractError,
    Workdir,
    atomic_path,
    atomic_write_bytes,
    atomic_write_json,
    default_workdir,
    job_completion_index,
    read_marker,
    run_cli,
    wait_for_marker,
    write_marker,
)
from disttrain_contract.layout import worker_dirname
from disttrain_contract.manifest import Manifest
from disttrain_contract.ports import free_port_block
from disttrain_contract.strategies import names_where, strategy_of
from disttrain_contract.trainer_records import metrics_path, read_epoch_records
from disttrain_contract.user_model import local_model_file
from disttrain_sweep import split
from disttrain_sweep.space import DEFAULTS, SYNC_EVERY_DEFAULT, build_space, distribution_sketch, params_of, parse_start

SWEPT = names_where(lambda s: s.sweep_dimensions is not None)  # the strategies a trial can use

STUDY_NAME = "disttrain"
METRICS_POLL_SECONDS = 0.25  # how often a trial's worker 0's metrics.json is looked at (a stat; read when replaced)
# this process's last study.tell time, added to its next trial's optuna_sec (a told trial is read-only)
TELL_SECONDS = [0.0]


def parse_args(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    check_args(p, args)
    return args


def build_parser():
    """The sweep's flags, in --help's order (the epilog: the search space's syntax and defaults)."""
    p = argparse.ArgumentParser(
        prog="disttrain-sweep",
        description="Hyper-parameter search with Optuna on the shared working directory (between copier and trainer).",
        epilog="Search space: LOW:HIGH (a range; learning rate on a log scale), A,B,C (a choice) or V (fixed). "
        "Defaults: text "
        + "; ".join(f"{k} {v}" for k, v in DEFAULTS["text"].items())
        + "; image "
        + "; ".join(f"{k} {v}" for k, v in DEFAULTS["image"].items())
        + ".",
    )
    add_study_flags(p)
    add_space_flags(p)
    add_trial_flags(p)
    add_retry_flags(p)
    add_process_flags(p)
    return p


def add_study_flags(p):
    """The study: the working directory, the data, the budget of trials, this process's number."""
    p.add_argument(
        "--workdir",
        default=default_workdir(),
        help="shared working directory (default $DISTTRAIN_WORKDIR or ./workdir)",
    )
    p.add_argument("--data", help="the copier's output (default WORKDIR/data)")
    p.add_argument(
        "--trials",
        type=int,
        default=12,
        help="trials to finish (complete or pruned) in total, over every process (default 12)",
    )
    p.add_argument(
        "--process-index",
        type=int,
        default=job_completion_index(0),
        help="this process's number among the sweep processes: seeds its sampler (default $JOB_COMPLETION_INDEX, else 0)",
    )


def add_space_flags(p):
    """The search space: one flag per parameter, the strategy (localsgd adds H), the first trial."""
    for name in DEFAULTS["text"]:
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, help="search space (default: per task, below)")
    p.add_argument(
        "--strategy",
        choices=SWEPT,
        default=SWEPT[0],
        help="average (default): a trial is one trainer; localsgd: a trial is a group of --trial-workers "
        "trainers with local SGD, and the space gains --sync-every",
    )
    p.add_argument(
        "--trial-workers",
        type=int,
        default=2,
        help="--strategy localsgd: trainer processes per trial (default 2; the sweep process needs that many cores)",
    )
    p.add_argument(
        "--sync-every",
        dest="sync_every",
        help=f"--strategy localsgd: search space of H, the steps between two averages (default {SYNC_EVERY_DEFAULT})",
    )
    p.add_argument(
        "--start", help="the first trial's parameters, NAME=VALUE,... (e.g. a known-bad learning rate to beat)"
    )


def add_trial_flags(p):
    """What every trial trains on and with: the validation split, the user's model, the seed."""
    p.add_argument(
        "--validation-fraction",
        type=float,
        default=0.2,
        help="share of the training shards' examples the trials are scored on (default 0.2)",
    )
    p.add_argument(
        "--model-file",
        metavar="PATH",
        help="the trials train this .keras model (the trainer's --model-file; an s3:// URL is downloaded "
        "once by each sweep process into WORKDIR/sweep, and its trials read that copy)",
    )
    p.add_argument("--model-module", metavar="MODULE[:FUNCTION]", help="the trainer's --model-module, for every trial")
    p.add_argument(
        "--seed",
        type=int,
        default=42,
        help="seed of the validation split, the trials' initial weights and the sampler (default 42)",
    )


def add_retry_flags(p):
    """Trials stopped early (the pruner) or run again (failures, lost heartbeats)."""
    p.add_argument(
        "--pruner",
        choices=("median", "halving", "none"),
        default="median",
        help="stop bad trials early: median (MedianPruner), halving (SuccessiveHalvingPruner) or none (default median)",
    )
    p.add_argument(
        "--retries", type=int, default=1, help="times a failed trial is run again, as a new trial (default 1)"
    )
    p.add_argument(
        "--heartbeat", type=float, default=5.0, help="seconds between a running trial's heartbeats (default 5)"
    )
    p.add_argument(
        "--stale-after",
        type=float,
        default=60.0,
        help="seconds without a heartbeat after which another process fails the trial and retries it (default 60)",
    )


def add_process_flags(p):
    """Each trial's trainer threads and the wait for the copier."""
    p.add_argument("--threads", type=int, default=1, help="TensorFlow threads of each trial's trainer (default 1)")
    p.add_argument(
        "--wait-timeout", type=float, default=600, help="seconds to wait for the copier's marker (default 600)"
    )


def check_args(p, args):
    """The checks of the flags' values (p.error: one line, exit 2); one trainer per trial unless the strategy
    connects several."""
    if args.trials < 1:
        p.error("--trials must be >= 1")
    if args.retries < 0 or args.threads < 0 or args.process_index < 0:
        p.error("--retries, --threads and --process-index must be >= 0")
    if not 0 < args.heartbeat < args.stale_after:
        p.error("--heartbeat must be > 0 and below --stale-after")
    if strategy_of(args.strategy).connected and args.trial_workers < 2:
        p.error(f"--trial-workers must be >= 2 with --strategy {args.strategy} (one worker has nothing to average)")
    if not strategy_of(args.strategy).connected:
        args.trial_workers = 1


def main(argv=None):
    args = parse_args(argv)
    workdir = Workdir(args.workdir)
    data_dir = args.data or workdir.data
    sweep_dir = workdir.sweep
    tag = f"sweep[{args.process_index}]"
    wait_for_marker(data_dir, args.wait_timeout, "the copier's dataset")
    manifest = Manifest.read(data_dir)
    space = build_space(
        manifest.task, {name: getattr(args, name) for name in (*DEFAULTS["text"], "sync_every")}, args.strategy
    )
    if args.model_file or args.model_module:  # the user's model has no --width or --dropout of ours to search
        space = {name: dim for name, dim in space.items() if name not in ("width", "dropout")}
    start = parse_start(args.start, space)
    # the objective: the problem's primary metric on the validation carve, in its direction (RMSE: lower)
    args.metric = primary_metric(manifest.task, manifest.problem)
    if read_marker(sweep_dir) is not None:
        print(f"{tag}: {sweep_dir} already holds a finished sweep (best.json); delete it to search again", flush=True)
        return 0
    # the trials' model file: an s3:// one downloaded once for this process's trials (removed when it ends)
    args.local_model_file = local_model_file(args.model_file, sweep_dir) if args.model_file else None

    sweep, split_manifest = open_study(args, workdir, data_dir, manifest, space, start, tag)
    print(
        f"{tag}: {manifest.task} task, {args.trials} trials in total"
        + (f" of {args.trial_workers} {args.strategy} workers each" if strategy_of(args.strategy).connected else "")
        + ", search space "
        + ", ".join(f"{k} {d.describe()}" for k, d in space.items()),
        flush=True,
    )
    started = time.monotonic()
    run_trials(sweep)
    write_outputs(sweep.study, space, sweep_dir, split_manifest, manifest, args, tag)
    print(f"{tag}: done in {time.monotonic() - started:.0f}s -> {os.path.join(sweep_dir, 'best.json')}", flush=True)
    return 0


@dataclasses.dataclass(frozen=True)
class Sweep:
    """This process's part of the sweep: the flags, the study and what its trials share."""

    args: argparse.Namespace
    workdir: Workdir
    sweep_dir: str
    tag: str
    space: dict  # name -> space.Dimension
    study: object  # optuna.Study
    storage: object  # its JournalStorage
    schedule: object  # the lock (JournalFileOpenLock) every decision about the budget is made under
    retry: object  # RetryHeartbeatStaleTrialCallback: a failed trial enqueued again, --retries times
    beats: "HeartbeatWatch"


def open_study(args, workdir, data_dir, manifest, space, start, tag):
    """(Sweep, the trials' split manifest): the study in WORKDIR/sweep/study.journal, created or joined
    (refused when its settings are other than these flags'), and the validation split carved once, both under
    the schedule lock."""
    # Optuna after the flags: a bad flag costs no import time. Its experimental-API warnings
    # (the matplotlib plots) and per-trial INFO lines would drown ours.
    import optuna
    from optuna.storages import JournalStorage, RetryHeartbeatStaleTrialCallback
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

    sweep_dir = workdir.sweep
    os.makedirs(os.path.join(sweep_dir, "heartbeats"), exist_ok=True)
    os.makedirs(os.path.join(sweep_dir, "trials"), exist_ok=True)
    schedule = JournalFileOpenLock(os.path.join(sweep_dir, "schedule"))
    journal = os.path.join(sweep_dir, "study.journal")
    storage = JournalStorage(JournalFileBackend(journal, lock_obj=JournalFileOpenLock(journal)))
    pruner = {
        "median": lambda: optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=1),
        "halving": lambda: optuna.pruners.SuccessiveHalvingPruner(),
        "none": lambda: optuna.pruners.NopPruner(),
    }[args.pruner]()
    # each process its own sampler stream: the same seed everywhere would propose the same
    # random start-up trials in every process
    sampler = optuna.samplers.TPESampler(seed=args.seed * 1000 + args.process_index, n_startup_trials=4)
    config = {
        "task": manifest.task,
        "space": distribution_sketch(space),
        "start": start,
        "trials": args.trials,
        "validation_fraction": args.validation_fraction,
        "seed": args.seed,
        "pruner": args.pruner,
        "dataset": [s.sha256 for s in manifest.shards],
    }
    if strategy_of(args.strategy).connected:  # (a study of unconnected trials keeps the config's earlier form)
        config.update(strategy=args.strategy, trial_workers=args.trial_workers)
    if args.metric.name != "accuracy" or args.model_file or args.model_module:  # (likewise)
        config.update(metric=args.metric.name, model_file=args.model_file, model_module=args.model_module)
    with locked(schedule):
        split_manifest = split.prepare(
            data_dir,
            os.path.join(sweep_dir, "data"),
            args.validation_fraction,
            args.seed,
            log=lambda line: print(f"{tag}: {line.removeprefix('sweep: ')}", flush=True),
            n_shards=args.trial_workers,
        )
        study = optuna.create_study(
            study_name=STUDY_NAME,
            storage=storage,
            sampler=sampler,
            direction="maximize" if args.metric.direction == "max" else "minimize",
            pruner=pruner,
            load_if_exists=True,
        )
        if "config" not in study.user_attrs:
            study.set_user_attr("config", config)
            if start:
                study.enqueue_trial({k: v for k, v in start.items() if not space[k].fixed}, user_attrs={"start": True})
        elif study.user_attrs["config"] != config:
            raise ContractError(
                f"{journal} is a study with other settings ({study.user_attrs['config']}); "
                "delete WORKDIR/sweep to start a new sweep, or run with the same flags"
            )
    sweep = Sweep(
        args,
        workdir,
        sweep_dir,
        tag,
        space,
        study,
        storage,
        schedule,
        RetryHeartbeatStaleTrialCallback(max_retry=args.retries),
        HeartbeatWatch(os.path.join(sweep_dir, "heartbeats"), args.stale_after),
    )
    return sweep, split_manifest


def run_trials(sweep):
    """Trials until --trials have finished (complete or pruned) over every process: each decision to start
    one more, and the failing of a trial whose heartbeat stopped, under the schedule lock."""
    import optuna

    args, study, storage, tag = sweep.args, sweep.study, sweep.storage, sweep.tag
    running = optuna.trial.TrialState.RUNNING
    while True:
        # ------------------------------------------------- decide, under the lock
        scheduling = time.monotonic()
        with locked(sweep.schedule):
            trials = study.get_trials(deepcopy=False)
            for stale in sweep.beats.stale(trials, running):
                with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
                    if storage.set_trial_state_values(stale._trial_id, state=optuna.trial.TrialState.FAIL):
                        print(
                            f"{tag}: trial {stale.number} has had no heartbeat for {args.stale_after:g}s "
                            "(its process died?): failed, and enqueued again as a new trial",
                            flush=True,
                        )
                        sweep.retry(study, storage.get_trial(stale._trial_id))
                trials = study.get_trials(deepcopy=False)
            count = {
                s: sum(t.state.name == s for t in trials) for s in ("COMPLETE", "PRUNED", "RUNNING", "WAITING", "FAIL")
            }
            finished = count["COMPLETE"] + count["PRUNED"]
            if count["FAIL"] > args.trials * (args.retries + 1):
                raise ContractError(
                    f"{count['FAIL']} trials failed (see WORKDIR/sweep/trials/*/trainer.log); giving up"
                )
            trial = None
            if finished < args.trials and (count["WAITING"] or finished + count["RUNNING"] < args.trials):
                trial = study.ask()
                sweep.beats.start(trial.number)
        scheduling = time.monotonic() - scheduling
        if finished >= args.trials:
            return
        if trial is None:  # the last trials run in other processes: wait, in case one dies
            time.sleep(args.heartbeat)
            continue
        run_trial(sweep, trial, scheduling)


@dataclasses.dataclass
class TrialRun:
    """How a trial's trainers ended: the values reported to the pruner (one per evaluated epoch of worker 0),
    whether it pruned them, worker 0's output lines (or the first failed peer's), the group's exit code."""

    values: list = dataclasses.field(default_factory=list)
    pruned: bool = False
    lines: list = dataclasses.field(default_factory=list)
    returncode: int | None = None
    optuna_sec: float = 0.0  # the pruner's time (trial.report, should_prune)


def run_trial(sweep, trial, scheduling):
    """One trial: disttrain-trainer process(es) on the validation split, worker 0's epochs reported to the pruner,
    then told to the study."""
    args, tag = sweep.args, sweep.tag
    optuna_seconds = scheduling
    clock = time.monotonic()
    params = {name: dim.suggest(trial) for name, dim in sweep.space.items()}
    retry_of = sweep.storage.get_trial(trial._trial_id).system_attrs.get("failed_trial")
    trial.set_user_attr("process", f"{socket.gethostname()}:{os.getpid()}")
    optuna_seconds += time.monotonic() - clock
    trial_dir = os.path.join(sweep.sweep_dir, "trials", f"trial-{trial.number:05d}")
    os.makedirs(trial_dir)  # exist_ok=False: a trial number is run once, by one process
    described = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())
    print(
        f"{tag}: trial {trial.number} starts ({described})"
        + (f", a retry of trial {retry_of}" if retry_of is not None else ""),
        flush=True,
    )
    began = time.monotonic()
    run = train_trial(sweep, trial, trial_dir, params)
    seconds = time.monotonic() - began
    # the trial's models and checkpoints are not needed (the distributed run retrains): keep the logs and metrics
    for index in range(args.trial_workers):
        worker = os.path.join(trial_dir, worker_dirname(index))
        for leftover in ("checkpoints", "model.keras", "tensorboard"):
            path = os.path.join(worker, leftover)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.exists(path):
                os.unlink(path)
    # attributes before tell (a finished trial cannot change); the tell's own time is counted
    # with this process's next trial (TELL_SECONDS)
    trial.set_user_attr("trial_sec", seconds)
    trial.set_user_attr("optuna_sec", optuna_seconds + run.optuna_sec + TELL_SECONDS.pop())
    clock = time.monotonic()
    outcome = tell(sweep, trial, run)
    TELL_SECONDS.append(time.monotonic() - clock)
    sweep.beats.stop(trial.number)
    best = best_so_far(sweep.study)
    print(
        f"{tag}: trial {trial.number}: {outcome} in {seconds:.1f}s"
        + (f" (best so far {best.value:.4f}, trial {best.number})" if best else ""),
        flush=True,
    )


def trainer_command(sweep, trial_dir, params):
    """(the trainers' TrainConfig for one trial, their environment): the sweep's data, model, strategy and seed
    with the trial's parameters (a strategy's own, e.g. localsgd's sync_every, in its part of the configuration).
    Each worker runs `worker_command(config, index)`."""
    from disttrain_trainer import TrainConfig
    from disttrain_trainer.strategies.options import REGISTRY

    args = sweep.args
    settings = REGISTRY[args.strategy].settings
    own = {name: value for name, value in params.items() if name in settings.__dataclass_fields__}
    # a localsgd group over loopback: ports base..base+workers-1 (TF_CONFIG built by the trainer); a port
    # taken by another process in between fails the trial, which is retried (--retries)
    placement = (
        {"port": free_port_block(args.trial_workers), "peer_wait": float(int(args.stale_after))}
        if args.trial_workers > 1
        else {}
    )
    config = TrainConfig(
        workdir=sweep.workdir.root,
        data=os.path.join(sweep.sweep_dir, "data"),
        out=trial_dir,
        workers=args.trial_workers,
        strategy=args.strategy,
        strategy_settings=settings(**own),
        seed=args.seed,
        threads=args.threads,
        wait_timeout=0.0,
        model_file=args.local_model_file if args.model_file else None,
        model_module=args.model_module or None,
        **placement,
        **{name: value for name, value in params.items() if name not in own},
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "JOB_COMPLETION_INDEX")}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return config, env


def worker_command(config, index):
    """The command line of trial worker `index` (TrainConfig.to_argv: the trainer parses it back to `config`)."""
    return [sys.executable, "-m", "disttrain_trainer.main", *dataclasses.replace(config, worker_index=index).to_argv()]


def train_trial(sweep, trial, trial_dir, params):
    """The trial's trainers, run to their end or until the pruner stops them: worker 0's output into
    trainer.log (the others' into trainer-<i>.log), its epochs' validation values, read from its metrics.json
    as the trainer replaces it after each epoch, to the pruner. A TrialRun."""
    args, tag = sweep.args, sweep.tag
    config, env = trainer_command(sweep, trial_dir, params)
    run = TrialRun()
    epochs = EpochReports(metrics_path(os.path.join(trial_dir, worker_dirname(0))), args.metric)
    with (
        sweep.beats.beating(trial.number, args.heartbeat),
        open(os.path.join(trial_dir, "trainer.log"), "w") as log,
        contextlib.ExitStack() as peer_logs,
    ):
        peers = [
            subprocess.Popen(
                worker_command(config, i),
                stdout=peer_logs.enter_context(open(os.path.join(trial_dir, f"trainer-{i}.log"), "w")),
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=die_with_parent,
            )
            for i in range(1, args.trial_workers)
        ]
        proc = subprocess.Popen(
            worker_command(config, 0),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            preexec_fn=die_with_parent,
        )
        forward = threading.Thread(
            target=copy_lines, args=(proc.stdout, log, run.lines), name=f"log-{trial.number}", daemon=True
        )
        forward.start()
        try:
            while True:
                ended = proc.poll() is not None  # (before the read: the last read after the end sees every epoch)
                for epoch, value in epochs.new():
                    run.values.append(value)
                    clock = time.monotonic()
                    trial.report(value, epoch)
                    run.pruned = trial.should_prune()
                    run.optuna_sec += time.monotonic() - clock
                    print(
                        f"{tag}: trial {trial.number} epoch {epoch}/{params['epochs']}: validation "
                        f"{args.metric.label} {value:.4f}" + (" -> pruned" if run.pruned else ""),
                        flush=True,
                    )
                    if run.pruned:
                        for p in (proc, *peers):
                            p.terminate()
                        break
                if ended or run.pruned:
                    break
                time.sleep(METRICS_POLL_SECONDS)
            if not run.pruned:  # worker 0 is done; the others end their last epoch and save, or fail
                for p in peers:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        p.wait(timeout=args.stale_after)
        finally:  # (a peer still running now is stuck, or this process is being stopped)
            for p in (proc, *peers):
                if p.poll() is None and not run.pruned:
                    p.kill()
                p.wait()
            forward.join()
    run.returncode = proc.returncode
    failed_peer = next((i for i, p in enumerate(peers, 1) if p.returncode != 0), None)
    # the group failed, though worker 0 ended well
    if not run.pruned and run.returncode == 0 and failed_peer is not None:
        with open(os.path.join(trial_dir, f"trainer-{failed_peer}.log")) as peer_log:
            run.lines = [f"worker {failed_peer}: {line.rstrip()}" for line in peer_log]
        run.returncode = peers[failed_peer - 1].returncode
    return run


def copy_lines(stream, log, lines):
    """Worker 0's output, line by line, into its log and `lines` (a thread's: until the trainer closes it)."""
    for line in stream:
        log.write(line)
        lines.append(line.rstrip())


class EpochReports:
    """A trainer's metrics.json, read each time the trainer has replaced it (the whole list, atomically, after
    each epoch): new() is the (epoch, value of `metric`) of each epoch not seen before that has the metric
    (`metric.key`: a trial's "test" split is its validation carve), in order.

    The value is the one the trainer's epoch line prints (4 decimals), which is what the sweep read before it
    read metrics.json: the same values reach the pruner and the study."""

    def __init__(self, path, metric):
        self.path, self.metric = path, metric
        self.seen = 0  # the last epoch reported
        self.version = None  # (inode, mtime, size) of the file last read: a replaced file is another inode

    def new(self):
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return []
        if (stat.st_ino, stat.st_mtime_ns, stat.st_size) == self.version:
            return []
        self.version = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        fresh = [record for record in read_epoch_records(self.path) if record.epoch > self.seen]
        if fresh:
            self.seen = fresh[-1].epoch
        return [
            (record.epoch, float(f"{record.metrics[self.metric.key]:.4f}"))
            for record in fresh
            if self.metric.key in record.metrics
        ]


def tell(sweep, trial, run):
    """The trial's result told to the study: pruned, its last value, or FAIL and enqueued again (a trainer that
    refused its arguments: ContractError, every trial would). The outcome in words."""
    import optuna

    args, study, states = sweep.args, sweep.study, optuna.trial.TrialState
    try:
        if run.pruned:
            study.tell(trial, state=states.PRUNED)
            return f"pruned after {len(run.values)} epoch(s) at {run.values[-1]:.4f}"
        if run.returncode == 0 and run.values:
            study.tell(trial, run.values[-1])
            return f"validation {args.metric.label} {run.values[-1]:.4f}"
        last = next((line for line in reversed(run.lines) if line.strip()), "no output")
        with locked(sweep.schedule):  # FAIL and its retry together: the budget never sees the gap
            study.tell(trial, state=states.FAIL)
            if run.returncode == 2:  # the trainer refused its input: every trial would
                raise ContractError(f"trial {trial.number}: the trainer refused its arguments: {last}")
            sweep.retry(study, sweep.storage.get_trial(trial._trial_id))
        return f"FAILED (exit {run.returncode}: {last}); enqueued again"
    except optuna.exceptions.UpdateFinishedTrialError:
        return "already failed by another process (no heartbeat seen): result dropped, its retry counts instead"


def best_so_far(study):
    try:
        return study.best_trial
    except ValueError:  # no complete trial yet
        return None


def write_outputs(study, space, sweep_dir, split_manifest, manifest, args, tag):
    """best.json, trials.csv and the plots, each under its final name in one rename; then the marker."""
    trials = study.get_trials()
    best = best_so_far(study)
    if best is None:
        raise ContractError(f"no trial of the study in {sweep_dir} completed (all were pruned or failed)")
    counts = {}
    for t in trials:
        counts[t.state.name.lower()] = counts.get(t.state.name.lower(), 0) + 1
    atomic_write_json(
        os.path.join(sweep_dir, "best.json"),
        {
            "params": params_of(best, space),
            "value": best.value,
            "trial": best.number,
            "metric": f"validation {args.metric.label} after the last epoch",
            "direction": args.metric.direction,
            "task": manifest.task,
            "source": manifest.source,
            "trials": counts,
            "space": distribution_sketch(space),
            "validation_examples": split_manifest.test.examples,
            "train_examples": split_manifest.train_examples,
            "validation_fraction": args.validation_fraction,
            "seed": args.seed,
            "pruner": args.pruner,
            "strategy": args.strategy,
            "trial_workers": args.trial_workers,
            "created_at": time.time(),
        },
    )
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(
        ["number", "state", "value", *space, "epochs_reported", "trial_sec", "optuna_sec", "retry_of", "process"]
    )
    for t in trials:
        values = {**t.user_attrs, **t.params}
        writer.writerow(
            [
                t.number,
                t.state.name,
                "" if t.value is None else f"{t.value:.6f}",
                *(values.get(name, "") for name in space),
                len(t.intermediate_values),
                f"{t.user_attrs.get('trial_sec', 0):.3f}",
                f"{t.user_attrs.get('optuna_sec', 0):.4f}",
                t.system_attrs.get("failed_trial", ""),
                t.user_attrs.get("process", ""),
            ]
        )
    atomic_write_bytes(os.path.join(sweep_dir, "trials.csv"), out.getvalue().encode())
    write_plots(study, sweep_dir, tag)
    write_marker(
        sweep_dir, "sweep", best_value=best.value, best_trial=best.number, params=params_of(best, space), trials=counts
    )
    print(
        f"{tag}: best trial {best.number}: validation {args.metric.label} {best.value:.4f} with "
        + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params_of(best, space).items()),
        flush=True,
    )


def write_plots(study, sweep_dir, tag):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as plots

    for name, plot in (
        ("history", plots.plot_optimization_history),
        ("importances", plots.plot_param_importances),
        ("parallel", plots.plot_parallel_coordinate),
    ):
        try:
            axes = plot(study)
        except (ValueError, RuntimeError, ZeroDivisionError) as err:  # e.g. importances of fewer than 2 trials
            print(f"{tag}: no {name}.png: {err}", flush=True)
            continue
        figure = (axes.flat[0] if hasattr(axes, "flat") else axes).figure
        figure.set_size_inches(9, 5)
        figure.tight_layout()
        with atomic_path(os.path.join(sweep_dir, f"{name}.png")) as tmp:
            figure.savefig(tmp, format="png", dpi=100)
        plt.close(figure)


class HeartbeatWatch:
    """This process's heartbeats (one thread per running trial, rewriting a counter file), and the
    watch over the others': a RUNNING trial whose counter has not changed for `stale_after`
    seconds of this process's monotonic clock is stale. Only the sweep's main thread calls
    start/stale/stop; the beating thread only writes its own trial's file."""

    def __init__(self, directory, stale_after):
        self.directory, self.stale_after = directory, stale_after
        self.seen = {}  # trial number -> (last counter read, monotonic time it was first read)
        self.mine = set()

    def path(self, number):
        return os.path.join(self.directory, f"trial-{number:05d}")

    def start(self, number):
        self.mine.add(number)
        atomic_write_bytes(self.path(number), b"0")

    def stop(self, number):
        self.mine.discard(number)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path(number))

    @contextlib.contextmanager
    def beating(self, number, interval):
        stop = threading.Event()

        def beat():
            count = 0
            while not stop.wait(interval):
                count += 1
                with contextlib.suppress(ContractError):  # a full disk must not kill the trial; the watch decides
                    atomic_write_bytes(self.path(number), str(count).encode())

        thread = threading.Thread(target=beat, name=f"heartbeat-{number}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def stale(self, trials, running):
        now, found = time.monotonic(), []
        for t in trials:
            if t.state != running or t.number in self.mine:
                continue
            try:
                with open(self.path(t.number), "rb") as fh:
                    counter = fh.read()
            except FileNotFoundError:
                counter = None  # not started yet, or its process died before the first write
            last = self.seen.get(t.number)
            if last is None or last[0] != counter:
                self.seen[t.number] = (counter, now)
            elif now - last[1] >= self.stale_after:
                found.append(t)
        return found


@contextlib.contextmanager
def locked(lock):
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


def die_with_parent():
    """In the trainer child, before exec: SIGKILL it when the sweep process dies (kill -9 included),
    so a killed sweep leaves no trainer training for nobody (Linux prctl PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)


def cli():
    run_cli(main)


if __name__ == "__main__":
    cli()
