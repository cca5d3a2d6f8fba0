"""average's cost model (the advisor's; no TensorFlow): the workers never talk, so an epoch is its steps alone.

  seconds per epoch   S_N * t_N            (no communication; the aggregator averages at the end)
  epochs to target    f = N: each worker takes S_N steps per epoch, N times fewer than one worker alone

S_N, t_N: cost_base's docstring. One average at the end carries a note (accuracy as one-shot averaging gives it),
and with batch normalisation an accuracy risk.
"""

from disttrain_trainer.strategies.cost_base import CostModel, seconds_text, sync_seconds


class AverageCost(CostModel):
    name = "average"
    simplicity = 1

    def note(self, probe, options, lower_bound):
        if probe.batch_norm:  # the rarest averaging of all
            return (
                "one average at the end of a batch-norm model: averaged statistics do not fit averaged weights "
                "(averaging every 400 steps took MobileNetV2 to 0.399)"
            ), True
        return (
            "one average at the end: accuracy as one-shot averaging gives it (check with --validation-fraction)",
            False,
        )

    def reason(self, choice, predictions, probe, link, t, where, speed):
        if link is None:
            return f"one average at the end{speed}"
        full_sync = sync_seconds(probe, link, max(choice.workers, 2), "float32")
        return (
            f"one average at the end: a sync costs {seconds_text(full_sync)} at {where} against {seconds_text(t)} "
            f"steps{speed}"
        )


COST_MODEL = AverageCost()
