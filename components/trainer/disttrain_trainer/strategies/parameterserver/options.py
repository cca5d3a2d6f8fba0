"""parameterserver's flags (--ps, --serve-timeout) and its part of a TrainConfig, without TensorFlow."""

from dataclasses import dataclass

from disttrain_trainer.cluster import ps_task
from disttrain_trainer.strategies.options_base import Connected, StrategySettings


SERVE_TIMEOUT = 7 * 24 * 3600.0  # a parameter-server task serves this long for the chief's marker by default


@dataclass(frozen=True)
class ParameterServerSettings(StrategySettings):
    ps: int = 1
    serve_timeout: float = SERVE_TIMEOUT


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


OPTIONS = ParameterServer
