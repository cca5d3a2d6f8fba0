"""parameterserver's cost model (the advisor's; no TensorFlow): every step pulls the model from the parameter
server and pushes its gradients there.

  seconds per epoch   max(S_P * (t_N + 2 alpha + (B + B_g) * per_byte) + S * y , S * max(B, B_g) * per_byte)
      every step reads the variables from the parameter server whole (B: Keras reads a variable as one tensor, an
      embedding's table too, before its lookup takes the rows) and sends its gradients there (B_g, sparse rows for
      an embedding); S = ceil(examples / batch) steps of the group per epoch, S_P = S / N of them per worker; the
      second term is the one parameter server's link, which carries every worker's traffic: the pulls out, the
      pushes in, each direction at the link's rate (parameterserver_bounds).
      y: the runtime's own work per step of the group (remote reads and sends as operations of their own, the
      optimizer on the server, the coordinator), which the probe's two processes cannot time (they form a
      MultiWorkerMirrored cluster, and a variable placed on the other process there crashed TensorFlow). When
      what is left of the budget fits it, the advisor runs the trainer itself as parameterserver on this host
      (chief, 1 parameter server, 2 workers; disttrain_advisor/parameterserver_phase.py) for a few epochs: T_ps,
      its steady seconds per epoch, gives y = (T_ps - the workers' bound above at N = 2 on the probe's link) / S, taken the
      same at any N and on any link (so at N = 2 on the probe's link the prediction is T_ps). On that link the
      bounds can also be above T_ps: they price the bytes at an all-reduce's cost per byte, which on loopback is
      copying both ways on the same cores. There y may be negative, and the server's bound is at most T_ps (the
      timed run carried its traffic); on other links y >= 0 (parameterserver_extra_seconds). Not timed: y = 0,
      and the row is a lower bound (its note says so).
  epochs to target    f = 1: every worker's step updates the one model, S steps per epoch as one worker takes
                      (staleness not counted)

t_N, alpha, per_byte: cost_base's docstring; B, B_g, T_ps: perfmodel.Probe.
"""

from disttrain_trainer.strategies.cost_base import CostModel, link_of, seconds_text, step_seconds, steps_per_epoch


def parameterserver_group_steps(probe):
    """S: the steps of the whole group per epoch (every worker draws from all the examples)."""
    return steps_per_epoch(probe.train_examples, 1, probe.batch)


def parameterserver_bounds(probe, link, workers):
    """(the workers' bound, the server's bound, one step's exchange) of a parameter-server epoch: the group's S
    steps shared by the workers, each pulling the whole model (B) and pushing its gradients (B_g); the one
    server's link carries them all, the pulls out and the pushes in (each direction on its own: full duplex)."""
    group_steps = parameterserver_group_steps(probe)
    pull, push = probe.weight_bytes, probe.gradient_bytes
    exchange = 2 * link.latency_seconds + (pull + push) * link.per_byte_seconds
    workers_bound = group_steps / workers * (step_seconds(probe, workers) + exchange)
    return workers_bound, group_steps * max(pull, push) * link.per_byte_seconds, exchange


def parameterserver_extra_seconds(probe, own_link=False):
    """y in this module's docstring: what the trainer's parameter-server epoch took per step of the group beyond the
    workers' bound, on the probe's host and link with 2 workers (0 when it was not timed). Beyond the workers'
    bound, not the larger of the two: y is added to that bound, so the prediction there is the time measured.
    `own_link`: for that link itself, where a run faster than the bound corrects it (y < 0: the bound priced the
    exchange at loopback's all-reduce cost per byte, copying both ways); elsewhere the bound stands (y >= 0)."""
    if probe.parameterserver_epoch_seconds is None or probe.latency_seconds is None or probe.step_seconds_pair is None:
        return 0.0
    workers_bound, _, _ = parameterserver_bounds(probe, link_of(probe), 2)
    extra = (probe.parameterserver_epoch_seconds - workers_bound) / parameterserver_group_steps(probe)
    return extra if own_link else max(0.0, extra)


class ParameterServerCost(CostModel):
    name = "parameterserver"
    simplicity = 4

    def epoch_seconds(self, probe, link, workers, options, epochs):
        # the workers run the group's steps between them; each step pulls and pushes the model
        group_steps = parameterserver_group_steps(probe)
        workers_bound, server_bound, exchange = parameterserver_bounds(probe, link, workers)
        timed_here = probe.parameterserver_epoch_seconds is not None and link == link_of(probe)
        if timed_here:  # the timed run carried the server's traffic on this link (the module's docstring)
            server_bound = min(server_bound, probe.parameterserver_epoch_seconds)
        total = max(workers_bound + group_steps * parameterserver_extra_seconds(probe, timed_here), server_bound)
        compute = group_steps / workers * step_seconds(probe, workers)
        return total, compute, total - compute, exchange

    def convergence_factor(self, workers):
        return 1.0  # (the group's steps draw from every shard: one worker's epochs)

    def lower_bound(self, probe):
        return probe.parameterserver_epoch_seconds is None

    def note(self, probe, options, lower_bound):
        if lower_bound:
            return (
                "a lower bound: the parameter-server runtime's own work per step (remote reads and sends, the "
                "optimizer on the server) was not timed within the probe's budget (a longer --budget-seconds times "
                "it); a text model took up to 1.5x this on one host"
            ), False
        return None

    def candidates(self, workers, outer_optimizers):
        return [(self.name, workers, {"ps": 1})]

    def chart_values(self, options):
        return {"parameterServers": options.get("ps", 1)}

    def reason(self, choice, predictions, probe, link, t, where, speed):
        return (
            f"a step's pull and push cost {seconds_text(choice.sync_seconds)} "
            f"at {where} against {seconds_text(t)} of compute{speed}"
        )


COST_MODEL = ParameterServerCost()
