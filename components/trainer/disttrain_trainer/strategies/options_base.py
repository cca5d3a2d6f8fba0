"""What every strategy's options share, without TensorFlow: the base classes each strategy's package extends in its
options.py (strategies/<name>/options.py), and the wire's choices.

  StrategySettings  the frozen part of a TrainConfig that holds the chosen strategy's own settings
  Options           a strategy's flags, their checks, the refusal of its flags given to another strategy, its
                    settings' defaults, its TF_CONFIG and how its tasks name themselves (strategies/options.py
                    says what each method is for)
A family of strategies shares its flags through a base class here: Connected (multiworker, localsgd,
parameterserver: addresses, ports, the peers' deadline), AllReduce (multiworker, localsgd: the wire), with
AllReduceSettings.
"""

from dataclasses import dataclass

from disttrain_contract.strategies import STRATEGIES
from disttrain_trainer.cluster import configure

# --allreduce-dtype (collectives.WIRE_DTYPES; int8 and int4: localsgd only, wire_codecs.py). Not bfloat16, although
# TensorFlow's collective ops take it: float16 sends the same bytes with 3 more significant bits (11 against 8),
# and int8 half as many.
ALLREDUCE_DTYPES = ("float32", "float16", "int8", "int4")
BLOCK_WIRES = ("int8", "int4")  # a scale per block, sent by all-gather (wire_codecs.BLOCK_WIRES): localsgd only
LOSSY_WIRES = ("float16", *BLOCK_WIRES)  # localsgd keeps what they round off for the next sync (error feedback)
# TensorFlow's coordination service's heartbeat timeout, instead of its 10 s, which a slow link's syncs once exceeded
# (collectives.join_cluster says how). 120 s: above a float32 sync of 100 MB between 2 workers at 10 Mbit/s (about 90 s).
DEFAULT_HEARTBEAT_TIMEOUT = 120.0


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
class AllReduceSettings(StrategySettings):
    allreduce_dtype: str = "float32"
    allreduce_pack_bytes: int = 0
    heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT


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
