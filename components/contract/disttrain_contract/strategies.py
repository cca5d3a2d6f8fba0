"""The training strategies, one object each: every fact about a strategy that more than one stage, or
more than one place, branches on. The stages look a strategy up here (`strategy_of(name)`, `STRATEGIES[name]`)
and read its facts instead of comparing its name; a new strategy is one more entry, plus its package in the
trainer (`disttrain_trainer.strategies`: its flags' parsing and checks, its training code, its cost model).

    strategy         tasks talk  models      the aggregator          final weights      extra tasks          a step
    average          no          per worker  combines (--combine)    differ             -                    alone
    multiworker      all-reduce  one         promotes the chief's    the same           -                    all-reduced
    localsgd         all-reduce  one         promotes the chief's    the same (checked) -                    alone
    parameterserver  ps          one         promotes the chief's    on the servers     1 chief + P servers  on the servers

`settings` names each flag that only some strategies take, with the chart value that sets it: the trainer's
option classes define the flags (tests/unit/test_strategy_registry.py keeps both sides equal), the chart passes
each only to its strategies and refuses it for the others, and the Kubeflow launcher keeps each only for its
strategies (both checked against this table by the same tests).

Importing this module imports nothing but the standard library (the chart's and the pipeline's tests read it,
and the copier and the server run without TensorFlow).
"""

import dataclasses

from disttrain_contract.registry import entry_of


@dataclasses.dataclass(frozen=True)
class Setting:
    """A trainer flag that only some strategies take, and the chart value (a key path) that sets it; None: no chart
    value sets it (the chart derives it from another value, or leaves the trainer's default)."""

    flag: str
    chart_value: str = None


@dataclasses.dataclass(frozen=True)
class Strategy:
    name: str
    summary: str  # one line, for --help and the docs
    # its tasks talk to each other (TF_CONFIG, stable addresses, the peers' deadline --peer-wait); a connected
    # group ends together: it has no result without every task (no --min-workers quorum)
    connected: bool
    # each worker trains and writes its own model, which the aggregator combines (--combine average, ensemble,
    # best) and reports one row for each; otherwise the group trains one model, written by the chief (worker 0),
    # which the aggregator promotes as it is, under the row name `promoted_as`
    model_per_worker: bool
    promoted_as: str = None
    # its workers all-reduce over MultiWorkerMirroredStrategy's collectives (--allreduce-dtype, --heartbeat-timeout)
    all_reduce: bool = False
    # every worker ends with the chief's weights, which the aggregator checks (the markers' final_weights_sha256)
    same_final_weights: bool = False
    # the group has parameter-server tasks: Job index 0 the chief, 1..P the servers, then the workers; the
    # aggregator waits for every task's marker, and the report carries the servers' facts
    parameter_servers: bool = False
    # its workers apply their steps in no fixed order: the same command gives other weights each run (every other
    # strategy is reproducible to the bit with --threads 1), and DP-SGD's noise cannot be added once per batch of a
    # known sampling rate
    asynchronous: bool = False
    # a step is this worker's alone: it reads and moves this worker's own weights, with no collective inside it
    # (a model's own train_step can then be the step); multiworker sums the workers' gradients inside each step,
    # and parameterserver's steps run on the servers' variables, scheduled by the chief
    steps_alone: bool = False
    # the flags only this strategy takes (besides those of its family, all_reduce)
    settings: tuple = ()
    # the hyper-parameter sweep's trials can use it (a trial of a connected strategy is a group of --trial-workers
    # processes), searching these dimensions besides the task's; None: the sweep does not run it
    sweep_dimensions: tuple = None

    @property
    def one_model(self):
        """The group trains one model (the chief's is the group's)."""
        return not self.model_per_worker


# the flags of the all-reduce family, taken by every strategy of it (the connected family's flags, --host-pattern,
# --port, --peer-wait, are taken by every strategy: an unconnected worker ignores them)
ALL_REDUCE_SETTINGS = (
    Setting("--allreduce-dtype", "allreduceDtype"),
    Setting("--heartbeat-timeout", "trainer.heartbeatTimeoutSeconds"),
    Setting("--allreduce-pack-bytes"),
)

STRATEGIES = {
    strategy.name: strategy
    for strategy in (
        Strategy(
            "average",
            "each worker trains alone on its shard; the aggregator averages (or ensembles, or picks) "
            "their models at the end",
            connected=False,
            model_per_worker=True,
            steps_alone=True,
            settings=(Setting("--validation-fraction", "trainer.validationFraction"), Setting("--linger-for-peers")),
            sweep_dimensions=(),
        ),  # (the chart: aggregator.stragglerWaitSeconds, under a quorum)
        Strategy(
            "multiworker",
            "synchronous all-reduce of the gradients every step: one model",
            connected=True,
            model_per_worker=False,
            promoted_as="chief (synchronised)",
            all_reduce=True,
        ),
        Strategy(
            "localsgd",
            "each worker steps alone and the weights are averaged every --sync-every steps (with "
            "--outer-optimizer nesterov: DiLoCo): one model",
            connected=True,
            model_per_worker=False,
            promoted_as="chief (local SGD)",
            all_reduce=True,
            same_final_weights=True,
            steps_alone=True,
            settings=(
                Setting("--sync-every", "syncEvery"),
                Setting("--outer-optimizer", "outerOptimizer"),
                Setting("--outer-lr", "outerLearningRate"),
                Setting("--outer-momentum", "outerMomentum"),
                Setting("--outer-overlap", "outerOverlap"),
                Setting("--sync-at-epoch-end", "syncAtEpochEnd"),
                Setting("--sync-batch-norm-batches", "syncBatchNormBatches"),
            ),
            sweep_dimensions=("sync_every",),
        ),
        Strategy(
            "parameterserver",
            "asynchronous: the variables live on parameter servers, the workers' steps are "
            "scheduled by a chief: one model",
            connected=True,
            model_per_worker=False,
            promoted_as="chief (parameter servers)",
            parameter_servers=True,
            asynchronous=True,
            settings=(Setting("--ps", "parameterServers"), Setting("--serve-timeout")),
        ),
    )
}
NAMES = tuple(STRATEGIES)
DEFAULT = NAMES[0]


def strategy_of(name_or_record):
    """The Strategy of a name, or of anything that names one (a marker or report dict's "strategy", an object's
    .strategy). KeyError for an unknown one."""
    return entry_of(STRATEGIES, "strategy", name_or_record)


def settings_of(strategy):
    """Every flag `strategy` takes that not every strategy takes: its family's and its own."""
    return (ALL_REDUCE_SETTINGS if strategy.all_reduce else ()) + strategy.settings


def users_of_flag(flag):
    """The names of the strategies that take `flag`; None: every strategy takes it (it is nobody's setting)."""
    users = tuple(s.name for s in STRATEGIES.values() if any(x.flag == flag for x in settings_of(s)))
    return users or None


def names_where(predicate):
    """The names of the strategies a fact holds for, in the registry's order (for messages and tables)."""
    return tuple(s.name for s in STRATEGIES.values() if predicate(s))
