"""average's flags (--validation-fraction, --linger-for-peers) and its part of a TrainConfig, without TensorFlow."""

from dataclasses import dataclass

from disttrain_trainer.strategies.options_base import Options, StrategySettings


@dataclass(frozen=True)
class AverageSettings(StrategySettings):
    validation_fraction: float = 0.0
    linger_for_peers: float = 0.0


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


OPTIONS = Average
