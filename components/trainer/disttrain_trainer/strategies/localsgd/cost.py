"""localsgd's cost model (the advisor's; no TensorFlow): syncs of the weights every H steps, plain averaging or
DiLoCo's outer step, on four wires, waited for or overlapped with the next H steps.

Seconds per epoch:
  S_N * t_N + (syncs per run * (sync + alpha + o) + re-estimations per run * bn) / epochs
    sync: all-reduce of B at the wire's bytes per weight (float32 4, float16 2), or, for int8, all-gather of
      B / 4 (int4: B / 8) plus a float32 scale per block of 256 weights (all the weights as one vector:
      cost_base.sync_seconds); syncs per run = every H steps and one at the end: ceil(S_N * epochs / H); with
      sync_at_epoch_end every H steps of each epoch and at its end: epochs * ceil(S_N / H) (schedule.sync_steps).
    o: what a sync does beyond its exchange (flattening the weights, the codec and its error feedback, the outer
      step, setting the weights): T_sync of the wire less its modelled exchange (sync + alpha) on the probe's link
      at N = 2, taken the same at any N and on any link; 0 where the wire's sync was not timed (sync_own_seconds).
    bn: a model with batch normalisation re-estimates its statistics after a sync whose statistics are read (the
      last before each epoch's end, and the run's last: refreshes(), one an epoch at H shorter than an epoch):
      R forward passes (R = --sync-batch-norm-batches, 8; a forward pass taken as a third of a step, the backward
      pass being about twice the forward) and an all-reduce of the statistics (B_bn bytes in float32):
      R t_N / 3 + all-reduce(B_bn).
Overlapped syncs (--outer-overlap): a sync waits for its own work (o) and for what the next H steps leave of its
exchange X (the run's end for the whole last one, and with eager updates for one float32 all-reduce of the
weights, which makes the workers' models one: eager_end_seconds). The steps beside an exchange do not run at full
speed: while its bytes are on the wire they lose OVERLAP_STEP_LOSS (a third) of its time, so a sync costs
max(X - H t_N, X / 3) beyond its H steps (overlapped_sync_seconds). The third is fitted to measured rows, not
derived.

Epochs to the target, from one worker's E_1 (perfmodel's docstring):
  plain averaging  f = N: averaging N workers' H steps from the same weights moves the model about as far as H
                   steps of an N-times larger batch
  DiLoCo           (an outer optimizer) E_s = min(E_1 + H / S_N, N E_1): one worker's epochs and one outer step
                   more (its outer momentum makes up for the averaging, but the group's model moves only at a
                   sync, an outer step behind a worker that steps alone; with syncs at each epoch's end an outer
                   step is the mean of an epoch's, 1 / ceil(S_N / H) epochs: outer_step_epochs), never more than
                   plain averaging's (with an outer step or less before the target, S_N E_1 / H <= 1 / (N - 1),
                   the momentum has not built up: the row's note says so)
  overlapped       one more outer step: the outer step, one sync late, puts the group about H steps further
                   behind (overlap_lag_epochs, on top of DiLoCo's own)
DiLoCo is a candidate at H >= DILOCO_MIN_SYNC_EVERY only: its outer learning rate and momentum are the paper's
for H = 500, and measured at H = 50, 100 and 250; a shorter H would compound the momentum on top of the inner
optimizer's every few steps. Plain averaging rarer than PLAIN_SYNC_RISK steps carries an accuracy risk.

S_N, t_N, alpha and the collectives: cost_base's docstring; B, B_bn, T_sync: perfmodel.Probe.
"""

import math

from disttrain_trainer.strategies.cost_base import (
    CostModel,
    ModelError,
    allreduce_seconds,
    link_of,
    megabytes_text,
    seconds_text,
    step_seconds,
    steps_per_epoch,
    sync_bytes,
    sync_seconds,
)
from disttrain_trainer.strategies.localsgd.options import DEFAULT_SYNC_BATCH_NORM_BATCHES, DEFAULT_SYNC_EVERY
from disttrain_trainer.strategies.localsgd.schedule import statistics_read_after_sync, sync_steps

# localsgd's H: the default, and rarer ones (500: the DiLoCo paper's); the time-to-accuracy benchmark's too
SYNC_EVERY = (32, 50, 100, 250, 500)
DILOCO_MIN_SYNC_EVERY = 50  # the outer optimizer's candidates (the module's docstring)
# batches that re-estimate the batch-norm statistics after a sync (the trainer's --sync-batch-norm-batches
# default), and a forward pass's share of a step
REFRESH_BATCHES, FORWARD_SHARE = DEFAULT_SYNC_BATCH_NORM_BATCHES, 1 / 3
# localsgd's wires among the candidates (multiworker's: float32 and float16)
WIRE_DTYPES = ("float32", "float16", "int8", "int4")
# The share of an overlapped exchange's time on the wire that the inner steps beside it lose (the module's
# docstring; fitted to the text model's rows with eager updates on shaped links, in two sittings)
OVERLAP_STEP_LOSS = 1 / 3
# DiLoCo's overlapped syncs among the candidates: eager updates only (delayed updates ended 0.61 against 0.975
# on the digits CNN at H = 5, docs/strategies.md)
OVERLAPS = ("eager",)
# Plain averaging (no outer optimizer) more than this many steps apart: the table marks the accuracy risk
# (MobileNetV2 on digits fell to 0.399 held-out accuracy with plain averaging every 400 steps).
PLAIN_SYNC_RISK = 128


def sync_exchange_seconds(probe, link, workers, dtype):
    """One localsgd sync as the steps wait for it: its exchange and alpha (the module's docstring: sync + alpha)."""
    return sync_seconds(probe, link, workers, dtype) + link.latency_seconds


def sync_own_seconds(probe, dtype):
    """o in the module's docstring: what one localsgd sync in `dtype` costs beyond its exchange, from the trainer's
    own sync the probe timed on its link (0 where it was not timed)."""
    measured = probe.trainer_sync_seconds.get(dtype)
    link = link_of(probe)
    if measured is None or link is None:
        return 0.0
    return max(0.0, measured - sync_exchange_seconds(probe, link, 2, dtype))


def sync_cost_seconds(probe, link, workers, dtype):
    """One localsgd sync as the steps wait for it, without an overlap: its exchange and its own work."""
    return sync_exchange_seconds(probe, link, workers, dtype) + sync_own_seconds(probe, dtype)


def overlapped_sync_seconds(exchange, beside):
    """What an overlapped sync's exchange (`exchange` seconds on the wire) adds to the `beside` seconds of the H
    steps that run beside it. While it is in flight the steps run 1 / (1 - OVERLAP_STEP_LOSS) times slower: those
    that fit in it take the exchange's time and do (1 - OVERLAP_STEP_LOSS) of it in steps; the rest run at full
    speed after it. So the H steps and the exchange end after max(exchange, beside + OVERLAP_STEP_LOSS * exchange):
    the exchange outlasting the slowed steps (a slow link) costs what they leave of it, a short one a third of its
    time."""
    return max(exchange - beside, OVERLAP_STEP_LOSS * exchange, 0.0)


def outer_step_epochs(probe, workers, options):
    """One outer step of a localsgd configuration in epochs: H / S_N; with syncs at each epoch's end, an epoch over
    its ceil(S_N / H) syncs (the mean step between two: 50, 50 and 25 steps of a 125-step epoch at H = 50)."""
    every = options.get("sync_every") or DEFAULT_SYNC_EVERY
    steps = steps_per_epoch(probe.train_examples, workers, probe.batch)
    if options.get("sync_at_epoch_end"):
        return 1 / math.ceil(steps / every)
    return every / steps


def overlap_lag_epochs(probe, workers, options):
    """The epochs an overlapped run needs beyond a waiting one to reach the same accuracy: its outer step lands
    one sync late, so the group's model is about H steps further behind (measured: MobileNetV2 on distorted
    digits, DiLoCo at H = 100, 125 steps an epoch, reached 0.90 one epoch later with eager updates, float32 and
    int8 alike, bench/results/outer_overlap.json; the text model two epochs later, at 80 steps an epoch)."""
    return outer_step_epochs(probe, workers, options) if overlapped(options) else 0.0


def overlapped(options):
    """Whether a localsgd configuration runs its syncs' exchanges beside the next inner steps (--outer-overlap)."""
    return (options.get("outer_overlap") or "none") != "none"


def eager(options):
    """Whether an overlapped localsgd configuration takes eager updates (its workers' weights differ until the end)."""
    return options.get("outer_overlap") == "eager"


def eager_end_seconds(probe, link, workers):
    """The end of a run with eager updates: its workers' weights differ by their own last changes, so they are
    averaged (strategy.py, finish): one all-reduce of the weights in float32, whatever the wire: a
    float32 sync's cost. (The text model at 50 Mbit/s: 5.1 MB, about 0.9 s, one twenty-fifth of it in each of its
    25 epochs.)"""
    return sync_seconds(probe, link, workers, "float32")


def refreshes(steps_per_epoch, every, epochs, at_epoch_end=False):
    """The syncs of a localsgd run of `epochs` epochs that re-estimate the batch-norm statistics: of its syncs
    (schedule.sync_steps), the ones whose statistics an epoch's end reads (the trainer's own rule,
    schedule.statistics_read_after_sync). One an epoch at H shorter than an epoch; every sync at H of an epoch or more."""
    last, syncs = steps_per_epoch * epochs, sync_steps(every, steps_per_epoch, epochs, at_epoch_end)
    # (each sync's following one is the next in the list; the last is the run's end, which always re-estimates)
    return sum(
        statistics_read_after_sync(step, following, steps_per_epoch, last)
        for step, following in zip(syncs, [*syncs[1:], last])
    )


def refresh_batches(probe, options):
    """The batches that re-estimate the batch-norm statistics after a localsgd sync (0: none, or no batch
    normalisation; refreshes() counts the syncs)."""
    return options.get("sync_batch_norm_batches", REFRESH_BATCHES) if probe.batch_norm else 0


def outer_steps(probe, workers, options, epochs_to_target):
    """DiLoCo's outer steps (syncs) before the target, at one worker's epochs to it."""
    return epochs_to_target / outer_step_epochs(probe, workers, options)


class LocalSGDCost(CostModel):
    name = "localsgd"
    simplicity = 2

    def label(self, o):
        outer = "" if o.get("outer_optimizer", "none") == "none" else f" {o['outer_optimizer']}"
        overlap = "" if not overlapped(o) else f" {o['outer_overlap']}"
        at_end = " +epoch ends" if o.get("sync_at_epoch_end") else ""
        return f"{self.name} H={o['sync_every']}{at_end} {o.get('allreduce_dtype', 'float32')}{outer}{overlap}"

    def epoch_seconds(self, probe, link, workers, options, epochs):
        steps = steps_per_epoch(probe.train_examples, workers, probe.batch)
        t = step_seconds(probe, workers)
        compute = steps * t
        every = options.get("sync_every") or DEFAULT_SYNC_EVERY
        if not isinstance(every, int) or every < 1:
            raise ModelError(f"sync_every must be an integer >= 1, got {every!r}")
        dtype = options.get("allreduce_dtype", "float32")
        exchange, own = sync_exchange_seconds(probe, link, workers, dtype), sync_own_seconds(probe, dtype)
        refresh = refresh_batches(probe, options)
        local = (
            refresh * FORWARD_SHARE * t + allreduce_seconds(probe.batch_norm_bytes, workers, link) if refresh else 0.0
        )
        at_end = bool(options.get("sync_at_epoch_end"))
        if at_end and overlapped(options):
            raise ModelError("sync_at_epoch_end does not go with outer_overlap (the trainer refuses it)")
        syncs = len(sync_steps(every, steps, epochs, at_end))  # every H steps (of each epoch), and one at the end
        estimations = refreshes(steps, every, epochs, at_end) * local
        if overlapped(options):
            # the exchange runs beside the next H steps, which lose OVERLAP_STEP_LOSS of its time: a sync costs the
            # larger of that and what the steps leave of the exchange, and the run's end waits for the whole last one,
            # whose landing the statistics' re-estimation follows once more (with eager updates, after the average of
            # the workers' weights that makes them one model); its own work (the codec, the outer step with the last
            # exchange) the steps wait for all the same
            exposed = overlapped_sync_seconds(exchange, every * t)
            end = exchange - exposed + local + (eager_end_seconds(probe, link, workers) if eager(options) else 0.0)
            comm = (syncs * (exposed + own) + estimations + end) / epochs
            return compute + comm, compute, comm, exposed + own + local
        comm = (syncs * (exchange + own) + estimations) / epochs
        return compute + comm, compute, comm, exchange + own + local

    def diloco(self, options):
        return (options.get("outer_optimizer") or "none") != "none"

    def epochs_needed(self, probe, workers, options, epochs_to_target):
        # (the module's docstring) DiLoCo one outer step more, at most plain averaging's (then counted as plain
        # averaging's: plain_note); an overlapped sync one outer step more again
        plain, _ = super().epochs_needed(probe, workers, options, epochs_to_target)
        if not self.diloco(options):
            return plain, False
        own = epochs_to_target + outer_step_epochs(probe, workers, options)
        return min(own, plain) + overlap_lag_epochs(probe, workers, options), own >= plain

    def plain_note(self, probe, workers, options, epochs_to_target):
        """The note of a DiLoCo row whose epochs_needed counted plain averaging's epochs."""
        return (
            f"{outer_steps(probe, workers, options, epochs_to_target):.1f} outer steps before the target: too few "
            f"for the outer momentum (counted as plain averaging's epochs; a shorter --sync-every gives more)"
        )

    def preference(self, options):
        # no outer optimizer, then no overlap, then syncs at each epoch's end, then the most frequent syncs
        # (perfmodel.recommend says why); the wire is no tie-break
        return (
            self.diloco(options),
            overlapped(options),
            not options.get("sync_at_epoch_end"),
            options.get("sync_every", 0),
        )

    def note(self, probe, options, lower_bound):
        if (options.get("sync_every") or DEFAULT_SYNC_EVERY) <= PLAIN_SYNC_RISK:
            return None
        if not self.diloco(options):
            return (
                "plain averaging this rarely can lose accuracy (MobileNetV2 did): add --outer-optimizer nesterov",
                True,
            )
        if probe.batch_norm and not refresh_batches(probe, options):
            return (
                "with batch normalisation and --sync-batch-norm-batches 0 an outer step this rare leaves the "
                "statistics behind the weights (MobileNetV2 at H=250 scored 0.09-0.65 after each sync)"
            ), True
        return None

    def candidates(self, workers, outer_optimizers):
        rows = []
        for every in SYNC_EVERY:
            for dtype in WIRE_DTYPES:
                for outer in outer_optimizers:
                    if outer != "none" and every < DILOCO_MIN_SYNC_EVERY:
                        continue
                    rows.append(
                        (self.name, workers, {"sync_every": every, "allreduce_dtype": dtype, "outer_optimizer": outer})
                    )
                    if outer != "none":  # DiLoCo with syncs at each epoch's end, and with eager updates (OVERLAPS)
                        rows.append(
                            (
                                self.name,
                                workers,
                                {
                                    "sync_every": every,
                                    "allreduce_dtype": dtype,
                                    "outer_optimizer": outer,
                                    "sync_at_epoch_end": True,
                                },
                            )
                        )
                        rows += [
                            (
                                self.name,
                                workers,
                                {
                                    "sync_every": every,
                                    "allreduce_dtype": dtype,
                                    "outer_optimizer": outer,
                                    "outer_overlap": overlap,
                                },
                            )
                            for overlap in OVERLAPS
                        ]
        return rows

    def run_options(self, settings):
        return {
            "sync_every": settings.sync_every,
            "allreduce_dtype": settings.allreduce_dtype,
            "outer_optimizer": settings.outer_optimizer,
            **({"sync_at_epoch_end": True} if settings.sync_at_epoch_end else {}),
        }

    def chart_values(self, o):
        values = {
            "syncEvery": o["sync_every"],
            "allreduceDtype": o.get("allreduce_dtype", "float32"),
            "outerOptimizer": o.get("outer_optimizer") or "none",
        }
        if overlapped(o):
            values["outerOverlap"] = o["outer_overlap"]
        if o.get("sync_at_epoch_end"):
            values["syncAtEpochEnd"] = "true"
        return values

    def reason(self, choice, predictions, probe, link, t, where, speed):
        o = choice.options
        between = o["sync_every"] * t
        # the sync alone: Prediction.sync_seconds adds a batch-norm re-estimation, which follows one sync an epoch
        cost = sync_cost_seconds(probe, link, choice.workers, o["allreduce_dtype"])
        at_end = (
            ", and one at each epoch's end, so that every evaluation and checkpoint holds the group's model"
            if o.get("sync_at_epoch_end")
            else ""
        )
        return (
            f"each {o['allreduce_dtype']} sync of "
            f"{megabytes_text(sync_bytes(probe, o['allreduce_dtype']))} costs {seconds_text(cost)} at {where}, "
            f"{100 * cost / between:.0f} % of the {seconds_text(between)} of steps between two syncs"
            f"{at_end}{speed}"
        )


COST_MODEL = LocalSGDCost()
