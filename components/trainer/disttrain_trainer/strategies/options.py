"""What each strategy asks of the command line, without TensorFlow. What a strategy is (whether its tasks talk,
one model or one per worker, its chart values) is its entry in disttrain_contract.strategies, which every stage
reads; this module holds one Options per entry (REGISTRY, in the contract's order), each owning
  flags      the flags only it (or its family) takes, with their help, defaults and value checks;
  misplaced  the refusal of its flags given to another strategy ("--sync-every applies to --strategy
             localsgd, not average");
  resolve    the defaults that depend on the strategy being chosen (parameterserver: one ps);
  cluster    TF_CONFIG for a connected strategy (cluster.configure) and how a task names itself in
             logs (`tag`);
  metadata   what its models record besides every strategy's facts (localsgd: sync_every, the outer
             optimizer and the wire when not the defaults) and how many
             examples a model says it was trained on.
The training itself is the strategy's package (strategies/<name>/strategy.py, imported by strategies.create
once the flags are checked): `--help` and a flag error cost no TensorFlow import.

A family of strategies shares its flags through a base class here: Connected (multiworker, localsgd,
parameterserver: addresses, ports, the peers' deadline), AllReduce (multiworker, localsgd: the wire).
"""

import argparse
from dataclasses import dataclass

from disttrain_contract.strategies import STRATEGIES, users_of_flag
from disttrain_trainer.cluster import configure, ps_task

# --allreduce-dtype (collectives.WIRE_DTYPES; int8 and int4: localsgd only, wire_codecs.py). Not bfloat16, although
# TensorFlow's collective ops take it: float16 sends the same bytes with 3 more significant bits (11 against 8),
# and int8 half as many.
ALLREDUCE_DTYPES = ("float32", "float16", "int8", "int4")
BLOCK_WIRES = ("int8", "int4")  # a scale per block, sent by all-gather (wire_codecs.BLOCK_WIRES): localsgd only
LOSSY_WIRES = ("float16", *BLOCK_WIRES)  # localsgd keeps what they round off for the next sync (error feedback)
DEFAULT_SYNC_EVERY = 32  # chosen by measurement: bench/README.md, "local SGD: choosing H"
OUTER_OPTIMIZERS = ("none", "nesterov")
OUTER_OVERLAPS = ("none", "delayed", "eager")  # localsgd/overlap.py says what each does
DEFAULT_OUTER_LR, DEFAULT_OUTER_MOMENTUM = 0.7, 0.9  # DiLoCo's (Douillard et al. 2023)
# batches of a worker's shard that re-estimate the batch-norm statistics after a sync (localsgd/statistics.py)
DEFAULT_SYNC_BATCH_NORM_BATCHES = 8
# TensorFlow's coordination service's heartbeat timeout, instead of its 10 s, which a slow link's syncs once exceeded
# (collectives.join_cluster says how). 120 s: above a float32 sync of 100 MB between 2 workers at 10 Mbit/s (about 90 s).
DEFAULT_HEARTBEAT_TIMEOUT = 120.0
SERVE_TIMEOUT = 7 * 24 * 3600.0  # a parameter-server task serves this long for the chief's marker by default


# ------------------------------------------------------------------ each strategy's part of a TrainConfig
@dataclass(frozen=True)
class StrategySettings:
    """The chosen strategy's own settings (TrainConfig.strategy_settings), its defaults resolved: one frozen
    dataclass per family of flags below, its fields named as the flags' dests. The field defaults are the
    resolved defaults (TrainConfig.to_argv leaves out a field at its default)."""

    # (class attributes, not fields: what a strategy without these flags answers)
    validation_fraction = 0.0
    linger_for_peers = 0.0
    ps = 0  # parameter-server tasks


@dataclass(frozen=True)
class AverageSettings(StrategySettings):
    validation_fraction: float = 0.0
    linger_for_peers: float = 0.0


@dataclass(frozen=True)
class AllReduceSettings(StrategySettings):
    allreduce_dtype: str = "float32"
    allreduce_pack_bytes: int = 0
    heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT


@dataclass(frozen=True)
class MultiWorkerSettings(AllReduceSettings):
    pass


@dataclass(frozen=True)
class LocalSGDSettings(AllReduceSettings):
    sync_every: int = DEFAULT_SYNC_EVERY
    outer_optimizer: str = "none"
    outer_lr: float = DEFAULT_OUTER_LR
    outer_momentum: float = DEFAULT_OUTER_MOMENTUM
    outer_overlap: str = "none"
    sync_at_epoch_end: bool = False
    sync_batch_norm_batches: int = DEFAULT_SYNC_BATCH_NORM_BATCHES


@dataclass(frozen=True)
class ParameterServerSettings(StrategySettings):
    ps: int = 1
    serve_timeout: float = SERVE_TIMEOUT


class Options:
    """Every strategy: no flags of its own, a model trained on the worker's own examples. What a strategy is
    (whether its tasks talk, how many models it ends with, ...) is its contract entry, `facts`."""

    name = None
    title = None  # the --help group of the flags this class introduces
    settings = StrategySettings  # the frozen type of its part of a TrainConfig

    @property
    def facts(self):
        """The strategy's entry in the contract's registry (disttrain_contract.strategies)."""
        return STRATEGIES[self.name]

    @property
    def connected(self):
        return self.facts.connected

    @classmethod
    def add_flags(cls, group):
        """The flags this class introduces (not its base classes')."""

    @classmethod
    def check(cls, args, error):
        """Value checks of this class's own flags, whatever the strategy (error: parser.error)."""

    @classmethod
    def misplaced(cls, args, strategy):
        """The refusal (one line) of this class's flags given to `strategy`, which does not take them; None."""
        return None

    def resolve(self, args, error):
        """This strategy's settings from the checked flags `args` (not changed): each field the flag's value, or
        its default where the flag was not given, with the checks that depend on this strategy being chosen."""
        return self.settings(**{name: getattr(args, name) for name in self.settings.__dataclass_fields__})

    def configure(self, config, workers, index):
        """This task's place in the group, a cluster.Placement: TF_CONFIG in the environment for a connected
        strategy, none for the others (cluster.configure)."""
        return configure(config, workers, index, connected=self.connected)

    def tag(self, placement):
        """How this task names itself in its log lines and progress file (`placement`: cluster.Placement)."""
        return f"worker {placement.index}/{placement.workers}"

    def model_examples(self, examples, manifest):
        """The examples a worker's model says it was trained on: its own (this worker trained alone)."""
        return examples

    def model_meta(self, settings):
        """What else a worker model's disttrain.json, and its training_parameters, record (`settings`: its
        StrategySettings)."""
        return {}


class Average(Options):
    name = "average"
    title = "strategy average"
    settings = AverageSettings

    @classmethod
    def add_flags(cls, group):
        group.add_argument(
            "--validation-fraction",
            type=float,
            default=0,
            metavar="FRACTION",
            help="average: hold this fraction of the worker's shard out of training (the sweep's seeded "
            "carve, disttrain_contract.validation) and record the accuracy on it per epoch in "
            "metrics.json and in the marker; the aggregator's --combine best ranks the workers by it, "
            "never by the held-out split (default 0: train on the whole shard)",
        )
        group.add_argument(
            "--linger-for-peers",
            type=float,
            default=0,
            metavar="SECONDS",
            help="average: once done, wait up to SECONDS for every other worker's marker before exiting "
            "(default 0). For a Kubernetes Job whose success policy counts fewer than all workers "
            "(chart value trainer.minWorkers): the Job stops the workers still running once that many "
            "pods have exited, and a worker lingering keeps a slower one from being stopped",
        )

    @classmethod
    def check(cls, args, error):
        if args.validation_fraction and not 0 < args.validation_fraction < 1:  # (also refuses nan)
            error("--validation-fraction must be between 0 and 1 (0: no validation split)")
        if args.linger_for_peers < 0:
            error("--linger-for-peers must be >= 0")

    @classmethod
    def misplaced(cls, args, strategy):
        if args.validation_fraction:
            return (
                f"--validation-fraction applies to --strategy average, not {strategy} (its workers end with one model)"
            )
        if args.linger_for_peers:
            return f"--linger-for-peers applies to --strategy average, not {strategy}"
        return None


class Connected(Options):
    """Strategies whose tasks talk: TF_CONFIG names every task (given, or built from these flags)."""

    title = "connected strategies (multiworker, localsgd, parameterserver)"

    @classmethod
    def add_flags(cls, group):
        group.add_argument(
            "--host-pattern", help="multiworker, localsgd, parameterserver: address of task i (see below)"
        )
        group.add_argument("--port", type=int, default=12345, help="multiworker, localsgd: base port (default 12345)")
        group.add_argument(
            "--peer-wait",
            type=float,
            default=600,
            help="multiworker, localsgd, parameterserver: seconds to wait for the other tasks (their names to "
            "resolve, then them to join) before failing with exit code 3; 0 = no deadline (default 600)",
        )

    @classmethod
    def check(cls, args, error):
        if args.peer_wait < 0:
            error("--peer-wait must be >= 0 (0: no deadline)")

    def model_examples(self, examples, manifest):
        return manifest.train_examples  # the group's one model saw every shard


class AllReduce(Connected):
    """Connected strategies that all-reduce over MultiWorkerMirroredStrategy's collectives."""

    title = "all-reduce strategies (multiworker, localsgd)"

    @classmethod
    def add_flags(cls, group):
        group.add_argument(
            "--allreduce-dtype",
            choices=ALLREDUCE_DTYPES,
            default="float32",
            help="multiworker, localsgd: dtype of the gradients/weight changes on the wire (default float32). "
            "float16 halves the bytes; int8 (localsgd only) quarters them and int4 (localsgd only) "
            "takes an eighth: a scale per block of 256 values, sent by all-gather and summed in worker "
            "order. localsgd on float16, int8 or int4 always uses error feedback: what the wire rounds off is added to the next sync's change "
            "(and checkpointed)",
        )
        group.add_argument(
            "--allreduce-pack-bytes",
            type=int,
            default=0,
            help="multiworker, localsgd: split collectives into packs of this size (default 0: one pack)",
        )
        group.add_argument(
            "--heartbeat-timeout",
            type=float,
            default=DEFAULT_HEARTBEAT_TIMEOUT,
            metavar="SECONDS",
            help="multiworker, localsgd: seconds without a worker's heartbeat after which TensorFlow's "
            "coordination service fails the group (TensorFlow's own default: 10). Heartbeats share "
            "the link with the syncs' bytes: keep this well above the time one sync takes on it (the "
            "model's bytes on the wire x 8 / the link's bits per second). A worker that dies fails "
            "the group's next collective at once; this bounds how long a stalled worker keeps the "
            f"others waiting (default {DEFAULT_HEARTBEAT_TIMEOUT:g})",
        )

    @classmethod
    def check(cls, args, error):
        if args.allreduce_pack_bytes < 0:
            error("--allreduce-pack-bytes must be >= 0")
        if not args.heartbeat_timeout >= 1:  # (also refuses nan)
            error("--heartbeat-timeout must be >= 1 second")


class MultiWorker(AllReduce):
    name = "multiworker"
    settings = MultiWorkerSettings


class LocalSGD(AllReduce):
    name = "localsgd"
    title = "strategy localsgd"
    settings = LocalSGDSettings

    @classmethod
    def add_flags(cls, group):
        group.add_argument(
            "--sync-every",
            type=int,
            default=None,
            help=f"localsgd: optimizer steps between two syncs of the weights (default {DEFAULT_SYNC_EVERY})",
        )
        group.add_argument(
            "--outer-optimizer",
            choices=OUTER_OPTIMIZERS,
            default=None,
            help="localsgd: what a sync does with the workers' mean change of the weights since the last "
            "sync. none (default): add it, i.e. average the weights; nesterov: take a Nesterov-momentum "
            "step along it, scaled by --outer-lr (DiLoCo). Each worker keeps its own inner optimizer "
            "state across syncs; batch-norm statistics are averaged either way",
        )
        group.add_argument(
            "--outer-lr",
            type=float,
            default=None,
            help=f"localsgd --outer-optimizer nesterov: the outer learning rate (> 0, default {DEFAULT_OUTER_LR})",
        )
        group.add_argument(
            "--outer-momentum",
            type=float,
            default=None,
            help=f"localsgd --outer-optimizer nesterov: the outer momentum (>= 0 and < 1, default "
            f"{DEFAULT_OUTER_MOMENTUM})",
        )
        group.add_argument(
            "--outer-overlap",
            choices=OUTER_OVERLAPS,
            default=None,
            help="localsgd: run each sync's collective beside the next --sync-every inner steps instead of "
            "waiting for it, the outer step then one sync late. none (default): wait; delayed: apply "
            "the previous sync's mean change (the workers stay identical); eager: with this worker's "
            "own new change in place of its stale one (DiLoCo's eager updates; the workers differ "
            "by their own changes until the run ends with their average). For slow links, where a "
            "sync's collective takes a good part of H steps",
        )
        group.add_argument(
            "--sync-at-epoch-end",
            action="store_true",
            default=None,
            help="localsgd: sync at each epoch's end as well, counting --sync-every from each epoch's start, "
            "so that each epoch's held-out evaluation and checkpoint are the group's model (the one "
            "the run would publish), the same on every worker, not the chief's own model of up to "
            "H steps past the last sync. Costs one sync an epoch more where H does not divide the "
            "epoch; H of an epoch or more then syncs once an epoch. Not with --outer-overlap",
        )
        group.add_argument(
            "--sync-batch-norm-batches",
            type=int,
            default=None,
            metavar="N",
            help="localsgd, a model with batch normalization: after a sync whose statistics are read (the "
            "last sync before an epoch's end, where the held-out evaluation and the checkpoint read "
            "them, and the run's last), re-estimate its moving "
            "statistics for the synced weights from N batches of the worker's shard (forward passes "
            "in training mode, the mean of their batch statistics, averaged over the workers): "
            "statistics averaged across workers do not fit weights averaged or moved by the outer "
            f"optimizer. 0: keep the averaged statistics (default {DEFAULT_SYNC_BATCH_NORM_BATCHES})",
        )

    @classmethod
    def check(cls, args, error):
        if args.sync_every is not None and args.sync_every < 1:
            error("--sync-every must be >= 1")
        if args.sync_batch_norm_batches is not None and args.sync_batch_norm_batches < 0:
            error("--sync-batch-norm-batches must be >= 0")
        if args.outer_lr is not None and not args.outer_lr > 0:  # (also refuses nan)
            error("--outer-lr must be > 0")
        if args.outer_momentum is not None and not 0 <= args.outer_momentum < 1:
            error("--outer-momentum must be >= 0 and < 1")

    @classmethod
    def misplaced(cls, args, strategy):
        if args.sync_every is not None:
            return f"--sync-every applies to --strategy localsgd, not {strategy}"
        if (args.outer_optimizer, args.outer_lr, args.outer_momentum) != (None, None, None):
            return f"--outer-optimizer, --outer-lr and --outer-momentum apply to --strategy localsgd, not {strategy}"
        if args.sync_batch_norm_batches is not None:
            return f"--sync-batch-norm-batches applies to --strategy localsgd, not {strategy}"
        if args.outer_overlap is not None:
            return f"--outer-overlap applies to --strategy localsgd, not {strategy}"
        if args.sync_at_epoch_end is not None:
            return f"--sync-at-epoch-end applies to --strategy localsgd, not {strategy}"
        if args.allreduce_dtype in BLOCK_WIRES:
            return (
                f"--allreduce-dtype {args.allreduce_dtype} applies to --strategy localsgd, not {strategy} "
                "(TensorFlow's all-reduce refuses int8; use float16)"
            )
        return None

    def resolve(self, args, error):
        if args.outer_optimizer in (None, "none") and (args.outer_lr, args.outer_momentum) != (None, None):
            error("--outer-lr and --outer-momentum apply to --outer-optimizer nesterov, not none")
        if args.sync_at_epoch_end and args.outer_overlap not in (None, "none"):
            # (an overlapped sync's outer step lands one sync late, and under eager the workers differ until the end:
            # an epoch's end would still not hold the group's model)
            error(
                f"--sync-at-epoch-end does not go with --outer-overlap {args.outer_overlap}: an overlapped sync "
                "applies its exchange one sync late, so an epoch's end would not hold the group's model"
            )
        given = {name: getattr(args, name) for name in self.settings.__dataclass_fields__}
        return self.settings(**{name: value for name, value in given.items() if value is not None})

    def model_meta(self, settings):
        """H, and what differs from plain averaging over a float32 wire (a default run records what it did)."""
        return {"sync_every": settings.sync_every, **outer_settings(settings)}


def outer_settings(settings):
    """localsgd's settings beyond H that change what a sync computes, only where they differ from plain
    averaging over a float32 wire: the model's metadata and the checkpoints' run.json record them, so a run
    with the defaults records (and resumes) what it did before these options existed."""
    differs = {}
    if settings.outer_optimizer != "none":
        differs.update(
            outer_optimizer=settings.outer_optimizer, outer_lr=settings.outer_lr, outer_momentum=settings.outer_momentum
        )
    if settings.allreduce_dtype in LOSSY_WIRES:
        differs["allreduce_dtype"] = settings.allreduce_dtype  # (with error feedback: always, on these wires)
    if settings.outer_overlap != "none":
        differs["outer_overlap"] = settings.outer_overlap
    if settings.sync_at_epoch_end:
        differs["sync_at_epoch_end"] = True
    return differs


class ParameterServer(Connected):
    name = "parameterserver"
    title = "strategy parameterserver"
    settings = ParameterServerSettings

    @classmethod
    def add_flags(cls, group):
        group.add_argument(
            "--ps",
            type=int,
            default=None,
            help="parameterserver: number of parameter-server tasks (default 1); "
            "the group is 1 chief + ps + --workers tasks, Job indexes 0, 1..ps, then the workers",
        )
        group.add_argument(
            "--serve-timeout",
            type=float,
            default=None,
            help="parameterserver: seconds a ps or worker task serves waiting for the chief's marker "
            "before it gives up and fails (default one week)",
        )

    @classmethod
    def misplaced(cls, args, strategy):
        if args.ps is not None or args.serve_timeout is not None:
            return f"--ps and --serve-timeout apply to --strategy parameterserver, not {strategy}"
        return None

    def resolve(self, args, error):
        if args.ps is not None and args.ps < 1:
            error("--ps must be >= 1")
        given = {name: getattr(args, name) for name in self.settings.__dataclass_fields__}
        return self.settings(**{name: value for name, value in given.items() if value is not None})

    def tag(self, placement):
        role, number = ps_task(placement.index, placement.parameter_servers, placement.workers)
        return f"{role} {number} (task {placement.index})"


# one Options per entry of the contract's registry, in its order (a strategy without one fails here, at import)
REGISTRY = {options.name: options() for options in (Average, MultiWorker, LocalSGD, ParameterServer)}
assert tuple(REGISTRY) == tuple(STRATEGIES), "every strategy of disttrain_contract.strategies needs its Options here"
NAMES = tuple(REGISTRY)
CONNECTED = tuple(name for name, options in REGISTRY.items() if options.connected)


def families():
    """Every class that introduces flags, once, in the order of the registry (a strategy's bases first)."""
    seen = []
    for options in REGISTRY.values():
        for cls in reversed(type(options).__mro__):
            if issubclass(cls, Options) and cls is not Options and "add_flags" in vars(cls) and cls not in seen:
                seen.append(cls)
    return seen


def add_flags(parser: argparse.ArgumentParser):
    """--strategy, and every strategy's own flags, one --help group per family."""
    parser.add_argument("--strategy", choices=NAMES, default="average", help="default: average")
    for cls in families():
        cls.add_flags(parser.add_argument_group(cls.title))


def check(args, error):
    """Refuse values no strategy takes and flags of another strategy than the chosen one; then the chosen
    strategy's settings, its defaults resolved (its StrategySettings; `args` is not changed). `error`:
    parser.error (exit 2)."""
    chosen = REGISTRY[args.strategy]
    for cls in families():  # (each family's own checks, not those it inherits: they run for their own family)
        if "check" in vars(cls):
            cls.check(args, error)
    for cls in families():
        message = (
            cls.misplaced(args, args.strategy) if "misplaced" in vars(cls) and not isinstance(chosen, cls) else None
        )
        if message:
            error(message)
    return chosen.resolve(args, error)


def users_of(dest):
    """The strategies that take the flag storing `dest` (a --params-from key), as the registry's settings name
    them (disttrain_contract.strategies; a test keeps them equal to these classes' flags); None: every
    strategy takes it."""
    users = users_of_flag("--" + dest.replace("_", "-"))
    return None if users is None else list(users)
