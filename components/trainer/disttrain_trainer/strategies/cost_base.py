"""What every strategy's cost model (strategies/<name>/cost.py) is made of: the `CostModel` interface, the link,
and the seconds of the collectives and of the steps. Pure arithmetic (no TensorFlow); perfmodel composes the cost
models into the advisor's predictions and says what the probe measures (perfmodel.Probe: t1, t2, B, alpha, c, ...).

The link (`Link`): alpha and the seconds per byte. With --link-mbit L a byte costs the larger of the
wire's 8 / (L * 1e6) seconds and what the probe measured (on loopback: serialising and copying, which
happen on any link). A stream pipelines the two: the next chunk is copied while the last is on the
wire, so the slower stage sets the rate (their sum was checked too, and was the worse fit).

Communication, N workers (Patarasuk and Yuan's ring; TensorFlow's collectives on CPU use a ring):
  all-reduce of B bytes   alpha + 2 (N - 1) / N * B * per_byte    each worker sends and receives
                          2 (N-1)/N of B (reduce-scatter, then all-gather): B at N = 2, so a 9.1 MB
                          float32 model between 2 workers at 10 Mbit/s costs 9.1e6 * 8 / 1e7 = 7.3 s
  all-gather of G bytes   2 alpha + (N - 1) * G * per_byte        each worker receives every other
                          worker's G (a length exchange, then the data: two collectives); int8 and
                          int4 travel this way (TensorFlow's all-reduce refuses int8) and so do the rows
                          of an embedding's sparse gradient
  a sync of the weights   every weight's change as one vector on the wire (float32 4 bytes a weight, float16 2;
                          int8 1 and int4 half a byte, plus a float32 scale per block of WIRE_BLOCK weights, by
                          all-gather): localsgd's sync, and what an average of the workers' models would cost

Compute, N workers (steps per worker per epoch S_N = ceil(ceil(examples / N) / batch), the copier's
shards being as equal as it can make them):
  one worker per host     t_N = t2 for N >= 2 (each on its own host, the pair measured them)
  one host, C cores       t_N = t1 * N / (e * min(N, C)), e = 2 t1 / (t2 * min(2, C)): each busy core
                          gives what the pair's did; workers beyond the cores take turns
"""

import math
from dataclasses import dataclass

from disttrain_contract.strategies import STRATEGIES as REGISTRY
from disttrain_trainer.strategies.options_base import BLOCK_WIRES

WIRE_BYTES = {"float32": 4, "float16": 2, "int8": 1, "int4": 0.5}
# weights per float32 scale on the block wires: wire_codecs.BLOCK (kept here so this module needs no
# TensorFlow; a unit test checks that the two agree)
WIRE_BLOCK = 256


class ModelError(ValueError):
    """An impossible input to the model (the CLI turns it into one line and exit 2)."""


@dataclass
class Link:
    name: str  # "loopback", "10 Mbit/s", "measured"
    latency_seconds: float
    per_byte_seconds: float
    mbit: float | None = None


def link_of(probe, mbit=None):
    """The link the predictions are for: the probe's own, or the probe's costs plus a wire of `mbit` Mbit/s."""
    if probe.latency_seconds is None or probe.per_byte_seconds is None:
        if mbit is None:
            return None
        return Link(f"{mbit:g} Mbit/s", 0.0, 8 / (mbit * 1e6), mbit)
    if mbit is None:
        name = (
            "loopback"
            if probe.link_measured == "loopback"
            else f"measured {8 / probe.per_byte_seconds / 1e6:,.0f} Mbit/s"
            if probe.per_byte_seconds > 0
            else "measured"
        )
        return Link(name, probe.latency_seconds, probe.per_byte_seconds)
    if mbit <= 0:
        raise ModelError(f"a link of {mbit:g} Mbit/s carries nothing")
    # copying and sending pipelined (the module's docstring); a probe between real hosts measured a real wire,
    # which a given speed replaces when slower
    per_byte = max(probe.per_byte_seconds, 8 / (mbit * 1e6))
    return Link(f"{mbit:g} Mbit/s", probe.latency_seconds, per_byte, mbit)


# --------------------------------------------------------------------------- communication
def allreduce_seconds(nbytes, workers, link):
    """A ring all-reduce of `nbytes` (per worker) among `workers`."""
    if workers < 2:
        return 0.0
    return link.latency_seconds + 2 * (workers - 1) / workers * nbytes * link.per_byte_seconds


def allgather_seconds(nbytes, workers, link):
    """An all-gather of `nbytes` from each worker: each receives the other workers' (two collectives)."""
    if workers < 2:
        return 0.0
    return 2 * link.latency_seconds + (workers - 1) * nbytes * link.per_byte_seconds


def sync_bytes(probe, dtype):
    """Bytes per worker of one localsgd sync in `dtype` (int8: one byte per weight, int4 half a byte, plus a
    float32 scale per block of WIRE_BLOCK weights; every weight's change travels as one vector)."""
    if dtype not in WIRE_BYTES:
        raise ModelError(f"unknown wire dtype {dtype!r} (choose from {', '.join(WIRE_BYTES)})")
    if dtype in BLOCK_WIRES:
        weights = probe.weight_bytes // 4
        return math.ceil(weights * WIRE_BYTES[dtype]) + 4 * -(-weights // WIRE_BLOCK)
    return probe.weight_bytes * WIRE_BYTES[dtype] // 4


def sync_seconds(probe, link, workers, dtype):
    """One localsgd sync of the weights' changes."""
    nbytes = sync_bytes(probe, dtype)
    if dtype in BLOCK_WIRES:
        return allgather_seconds(nbytes, workers, link)
    return allreduce_seconds(nbytes, workers, link)


# --------------------------------------------------------------------------- compute
def steps_per_epoch(examples, workers, batch):
    """Steps per worker per epoch: every worker takes its shard's (the largest shard's, when connected)."""
    return math.ceil(math.ceil(examples / workers) / batch)


def step_seconds(probe, workers):
    """Seconds per step of each of `workers` workers training at once (see the module's docstring)."""
    if workers < 1:
        raise ModelError(f"workers must be >= 1, got {workers}")
    t1, t2 = probe.step_seconds_alone, probe.step_seconds_pair
    if workers == 1:
        return t1
    if t2 is None:
        raise ModelError("no step time of two workers at once was measured")
    if not probe.one_host:
        return t2
    cores = max(probe.cores, 1)
    per_core = 2 * t1 / (t2 * min(2, cores))  # e: what a core gives when the others are busy (1.0: independent cores)
    return t1 * workers / (per_core * min(workers, cores))


# --------------------------------------------------------------------------- the cost models' interface
class CostModel:
    """What the advisor knows of one kind of configuration: a strategy of the registry (disttrain_contract.strategies,
    `facts`; its package's cost.py), or perfmodel.SINGLE, one worker alone. Each says what its epochs cost, how many
    it needs, how it is written (label, the trainer's flags and the chart's values) and why it is advised;
    perfmodel's decisions compose them and name no strategy."""

    name = None
    simplicity = 0  # recommend()'s tie-break: the simpler configuration first (lower)

    @property
    def facts(self):
        """Its strategy's entry in the registry."""
        return REGISTRY[self.name]

    @property
    def connected(self):
        """Its workers join a cluster at start-up (what --peer-wait waits for), so it needs a link."""
        return self.facts.connected

    def check(self, workers, link):
        if self.connected and workers < 2:
            raise ModelError(f"{self.name} needs >= 2 workers")
        if self.connected and link is None:
            raise ModelError(f"{self.name}: no link measured or given (--link-mbit)")

    def label(self, options):
        return self.name

    def epoch_seconds(self, probe, link, workers, options, epochs):
        """(seconds per epoch, compute part, communication part, one sync's seconds); its arguments checked."""
        compute = steps_per_epoch(probe.train_examples, workers, probe.batch) * step_seconds(probe, workers)
        return compute, compute, 0.0, 0.0

    def convergence_factor(self, workers):
        """f of perfmodel's docstring: its epochs to the target over one worker's (the group's shards are N times
        one worker's examples per step of a worker: N times the epochs at the same steps)."""
        return float(workers)

    def epochs_needed(self, probe, workers, options, epochs_to_target):
        """(its epochs to the target from one worker's `epochs_to_target`, whether they are counted as plain
        averaging's for want of outer steps, which its `plain_note` then says): f times one worker's."""
        return epochs_to_target * self.convergence_factor(workers), False

    def diloco(self, options):
        return False

    def lower_bound(self, probe):
        """Part of its cost was not probed (the note says which)."""
        return False

    def note(self, probe, options, lower_bound):
        """(note, accuracy risk) of its own that replace the prediction's, or None."""
        return None

    def candidates(self, workers, outer_optimizers):
        """(strategy, workers, options) of its configurations the advisor compares at `workers` >= 2 workers."""
        return [(self.name, workers, {})]

    def preference(self, options):
        """recommend()'s tie-break among its own configurations: a tuple, the preferred one lower."""
        return ()

    def run_options(self, settings):
        """The options of the run a TrainConfig's strategy_settings describe, in the predictions' terms."""
        return {}

    def chart_values(self, options):
        """The chart's values beyond strategy and workers that run a configuration with these options."""
        return {}

    def chart_strategy(self):
        """The chart's `strategy` value that runs it."""
        return self.name

    def reason(self, choice, predictions, probe, link, t, where, speed):
        """Why `choice` (of this model) is advised: a clause; `t` its step's seconds, `speed` how much faster it is
        than one worker (", predicted 1.8x as fast as one worker", or "")."""
        raise NotImplementedError


def seconds_text(value):
    """Seconds as the table and the reasons write them (2 or 3 significant digits, in ms below one)."""
    if value >= 10:
        return f"{value:.0f} s"
    if value >= 1:
        return f"{value:.1f} s"
    if value >= 0.01:
        return f"{value * 1000:.0f} ms"
    return f"{value * 1000:.1f} ms"


def megabytes_text(nbytes):
    """Bytes as the reasons write them (MB, kB below 100 kB)."""
    return f"{nbytes / 1e6:.1f} MB" if nbytes >= 1e5 else f"{nbytes / 1e3:.0f} kB"
