"""multiworker's options: the all-reduce family's flags (options_base.AllReduce) and its part of a TrainConfig."""

from dataclasses import dataclass

from disttrain_trainer.strategies.options_base import AllReduce, AllReduceSettings


@dataclass(frozen=True)
class MultiWorkerSettings(AllReduceSettings):
    pass


class MultiWorker(AllReduce):
    name = "multiworker"
    settings = MultiWorkerSettings


OPTIONS = MultiWorker
