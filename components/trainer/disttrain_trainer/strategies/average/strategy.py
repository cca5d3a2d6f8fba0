"""average: every worker trains alone on its own shard from the shared initial weights
(--seed); there is no communication at all. The aggregator averages the worker models,
weighted by shard size (one-shot model averaging)."""

from disttrain_trainer.strategies.base import Base


class Strategy(Base):
    name = "average"
