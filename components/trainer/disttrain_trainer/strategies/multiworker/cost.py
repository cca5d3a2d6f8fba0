"""multiworker's cost model (the advisor's; no TensorFlow): every step exchanges the gradients.

  seconds per epoch   S_N * (t_N + g + x) + (S_N / k) * alpha + alpha
      g: the per-step gradient exchange (dense gradients all-reduced, an embedding's rows all-gathered:
         gradient_seconds), k steps per train call (one agreement per call whether to stop, one sum of the
         metrics per epoch; a model with an embedding compiles one step per call of the step function, which the
         probe's t_mw includes, but still agrees once per k steps);
      x = max(0, t_mw - t_2 - g on the probe's link, 2 workers, float32): what a real multiworker step took
         beyond the compute and the exchange (the collective's own work on cores the other worker's compute
         wants, waiting for the slower worker), taken the same at any N and on any link
         (multiworker_extra_seconds); 0 when t_mw was not timed, and the row is then a lower bound (its note
         says so)
  epochs to target    f = N: one step of N batches, N times fewer steps per epoch

S_N, t_N, alpha and the collectives: cost_base's docstring; t_mw: perfmodel.Probe.
"""

import math

from disttrain_trainer.strategies.cost_base import (
    WIRE_BYTES,
    CostModel,
    ModelError,
    allgather_seconds,
    allreduce_seconds,
    link_of,
    seconds_text,
    step_seconds,
    steps_per_epoch,
)


def gradient_seconds(probe, link, workers, dtype="float32"):
    """One multiworker step's gradient exchange."""
    if dtype not in ("float32", "float16"):
        raise ModelError(f"multiworker sends float32 or float16 gradients, not {dtype}")
    nbytes = int(probe.gradient_bytes * WIRE_BYTES[dtype] // 4)
    return (allgather_seconds if probe.gradient_sparse else allreduce_seconds)(nbytes, workers, link)


def multiworker_extra_seconds(probe):
    """x in this module's docstring: what the probe's real multiworker step took beyond its compute and
    its modelled exchange (0 when it was not timed)."""
    if probe.multiworker_step_seconds is None or probe.step_seconds_pair is None or probe.latency_seconds is None:
        return 0.0
    exchange = gradient_seconds(probe, link_of(probe), 2)
    return max(0.0, probe.multiworker_step_seconds - probe.step_seconds_pair - exchange)


class MultiWorkerCost(CostModel):
    name = "multiworker"
    simplicity = 3

    def label(self, options):
        dtype = options.get("allreduce_dtype", "float32")
        return self.name if dtype == "float32" else f"{self.name} {dtype}"

    def epoch_seconds(self, probe, link, workers, options, epochs):
        steps = steps_per_epoch(probe.train_examples, workers, probe.batch)
        compute = steps * step_seconds(probe, workers)
        g = gradient_seconds(probe, link, workers, options.get("allreduce_dtype", "float32"))
        calls = math.ceil(
            steps / probe.steps_per_call
        )  # the workers agree whether to stop once per train call of k steps
        comm = steps * (g + multiworker_extra_seconds(probe)) + calls * link.latency_seconds + link.latency_seconds
        return compute + comm, compute, comm, g

    def lower_bound(self, probe):
        return probe.multiworker_step_seconds is None

    def note(self, probe, options, lower_bound):
        if lower_bound:
            return (
                "a lower bound: no real multiworker step was timed within the probe's budget (a longer "
                "--budget-seconds times them), so the collective's own work is not in it; MobileNetV2 took 1.5x "
                "this on one host"
            ), False
        return None

    def candidates(self, workers, outer_optimizers):
        return [(self.name, workers, {"allreduce_dtype": dtype}) for dtype in ("float32", "float16")]

    def preference(self, options):
        return (-WIRE_BYTES.get(options.get("allreduce_dtype", "float32"), 4),)  # the wider wire (float16 rounds)

    def run_options(self, settings):
        return {"allreduce_dtype": settings.allreduce_dtype}

    def chart_values(self, options):
        return {"allreduceDtype": options.get("allreduce_dtype", "float32")}

    def reason(self, choice, predictions, probe, link, t, where, speed):
        return (
            f"a step's gradient exchange costs {seconds_text(choice.sync_seconds)} "
            f"at {where} against {seconds_text(t)} of compute{speed}"
        )


COST_MODEL = MultiWorkerCost()
