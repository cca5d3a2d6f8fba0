"""average: every worker trains alone on its shard, and the aggregator averages (or ensembles, or picks) their
models at the end. strategy.py: its training code (base.Base's, unchanged); cost.py: its cost model."""

from disttrain_trainer.strategies import training_class

__getattr__ = training_class(__name__)
