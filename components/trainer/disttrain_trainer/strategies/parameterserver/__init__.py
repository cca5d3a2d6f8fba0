"""parameterserver: asynchronous training, the variables on parameter servers and the workers' steps scheduled by
a chief: one model. strategy.py: its training code (every task's role); cost.py: its cost model."""

from disttrain_trainer.strategies import training_class

__getattr__ = training_class(__name__)
