"""multiworker: synchronous data parallelism, every step's gradients summed across the workers: one model.
strategy.py: its training code; cost.py: its cost model."""

from disttrain_trainer.strategies import training_class

__getattr__ = training_class(__name__)
