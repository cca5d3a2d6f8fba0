"""The strategy advisor's performance model: seconds per epoch and time to a target for each strategy,
from what the probe measured. Pure arithmetic (no TensorFlow), so that tests check it number by number.
Each configuration's terms are its CostModel below (SINGLE and one per strategy of the registry,
disttrain_contract.strategies). What each term was checked against, with the figures: docs/benchmarks,
"The advisor's model, term by term"; how well the whole predicts the measured rows: docs/strategies.md.

What the probe gives (`Probe`):
  t1        seconds per training step of one worker alone on its host, at the run's batch
  t2        seconds per step of each of two workers training at the same time (on one host: how its
            cores share; on two hosts: each host's own speed); the slower of the two
  B         bytes of the model's floating-point weights in float32 (what localsgd averages), and the
            bytes one worker sends per multiworker step (its gradients: dense ones whole, an
            embedding's as the rows a batch touched)
  alpha     seconds of one collective of a few bytes (latency: the fixed cost of any sync)
  c         seconds per byte of an all-reduce on the probe's link, beyond alpha
  t_mw      seconds per multiworker step of the two workers at once, on the probe's link (None: not
            timed, the budget being too short for its tracing)
  T_sync    seconds of one localsgd sync of the trainer's own code in each wire, the two workers at once on
            the probe's link (the wires the budget left time for)
and the start-up (process start to the first step), one held-out evaluation, the examples per epoch.

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

Compute, N workers (steps per worker per epoch S_N = ceil(ceil(examples / N) / batch), the copier's
shards being as equal as it can make them):
  one worker per host     t_N = t2 for N >= 2 (each on its own host, the pair measured them)
  one host, C cores       t_N = t1 * N / (e * min(N, C)), e = 2 t1 / (t2 * min(2, C)): each busy core
                          gives what the pair's did; workers beyond the cores take turns

Seconds per epoch:
  single           S_1 * t1
  (ceiling)        S_1 * t_N: each of N independent 1-worker runs on the whole data at once (never
                   recommended: the benchmark's reference, N S_1 t1 / that is the most any strategy gains)
  average          S_N * t_N                            (no communication; the aggregator averages)
  multiworker      S_N * (t_N + g + x) + (S_N / k) * alpha + alpha
                   g: the per-step gradient exchange (dense gradients all-reduced, an embedding's rows
                   all-gathered), k steps per train call (one agreement per call whether to stop, one sum
                   of the metrics per epoch; a model with an embedding compiles one step per call of
                   the step function, which the probe's t_mw includes, but still agrees once per k steps);
                   x = max(0, t_mw - t_2 - g on the probe's link, 2 workers, float32): what a real
                   multiworker step took beyond the compute and the exchange (the collective's own
                   work on cores the other worker's compute wants, waiting for the slower worker),
                   taken the same at any N and on any link; 0 when t_mw was not timed, and the row is
                   then a lower bound (its note says so)
  localsgd         S_N * t_N + (syncs per run * (sync + alpha + o) + re-estimations per run * bn) / epochs
                   sync: all-reduce of B at the wire's bytes per weight (float32 4, float16 2), or, for
                   int8, all-gather of B / 4 (int4: B / 8) plus a float32 scale per block of 256 weights (all the
                   weights as one vector); syncs per run = every H
                   steps and one at the end: ceil(S_N * epochs / H); with sync_at_epoch_end every H steps
                   of each epoch and at its end: epochs * ceil(S_N / H) (localsgd/schedule.py: sync_steps).
                   o: what a sync does beyond its exchange (flattening the weights, the codec and its error
                   feedback, the outer step, setting the weights): T_sync of the wire less its modelled
                   exchange (sync + alpha) on the probe's link at N = 2, taken the same at any N and on any
                   link; 0 where the wire's sync was not timed. A model with
                   batch normalisation re-estimates its statistics after a sync whose statistics are read
                   (the last before each epoch's end, and the run's last: refreshes(), one an epoch at
                   H shorter than an epoch): bn = R forward passes (R = --sync-batch-norm-batches, 8; a
                   forward pass taken as a third of a step, the backward pass being about twice the
                   forward) and an all-reduce of the statistics (B_bn bytes in float32): R t_N / 3 +
                   all-reduce(B_bn)
  parameterserver  max(S_P * (t_N + 2 alpha + (B + B_g) * per_byte) + S * y , S * max(B, B_g) * per_byte)
                   every step reads the variables from the parameter server whole (B: Keras reads a
                   variable as one tensor, an embedding's table too, before its lookup takes the rows)
                   and sends its gradients there (B_g, sparse rows for an embedding); S = ceil(examples
                   / batch) steps of the group per epoch, S_P = S / N of them per worker; the second
                   term is the one parameter server's link, which carries every worker's traffic: the
                   pulls out, the pushes in, each direction at the link's rate.
                   y: the runtime's own work per step of the group (remote reads and sends as
                   operations of their own, the optimizer on the server, the coordinator), which the
                   probe's two processes cannot time (they form a MultiWorkerMirrored cluster, and a
                   variable placed on the other process there crashed TensorFlow). When what is left of
                   the budget fits it, the advisor runs the trainer itself as parameterserver on this host
                   (chief, 1 parameter server, 2 workers; disttrain_advisor/parameterserver_phase.py) for a few
                   epochs: T_ps, its steady seconds per epoch, gives y = (T_ps - the workers' bound
                   above at N = 2 on the probe's link) / S, taken the same at any N and on any link (so
                   at N = 2 on the probe's link the prediction is T_ps). On that link the bounds can
                   also be above T_ps: they price the bytes at an all-reduce's cost per byte, which on
                   loopback is copying both ways on the same cores. There y may be negative, and
                   the server's bound is at most T_ps (the timed run carried its traffic); on other
                   links y >= 0. Not timed: y = 0, and the row is a lower bound (its note says so).

Time to the target: start-up + ceil(E_s) * (seconds per epoch + one held-out evaluation) (+ a connected
strategy's time to join its peers), where E_s = f_s * E_1, E_1 being one worker's epochs to the target
(--epochs-to-target, else the run's --epochs): a held-out evaluation closes each epoch, so the target shows
at the first evaluation at or after E_s. E_1 may be a fraction: where one worker's curve crossed the target
between two evaluations (bench/advisor_accuracy.py interpolates it so). The convergence model counts the
steps of the one model the group trains, not epochs (no learning-rate scaling: the trainer uses the same
rate at any N):
  f = 1  single; parameterserver (every worker's step updates the one model: S steps per epoch, as
         one worker takes; staleness not counted)
  f = N  multiworker (one step of N batches: N times fewer steps per epoch), localsgd averaging
         plainly (averaging N workers' H steps from the same weights moves the model about as far as
         H steps of an N-times larger batch), average (each worker takes S_N steps per epoch)
  DiLoCo (localsgd with an outer optimizer): E_s = min(E_1 + H / S_N, N E_1): one worker's epochs and
         one outer step more (its outer momentum makes up for the averaging, but the group's model
         moves only at a sync, an outer step behind a worker that steps alone; with syncs at each epoch's
         end an outer step is the mean of an epoch's, 1 / ceil(S_N / H) epochs), never more than
         plain averaging's (with an outer step or less before the target, S_N E_1 / H <= 1 / (N - 1),
         the momentum has not built up: the row's note says so)
The model errs where the group's batch is small for the model (larger batches then lose little) and says
nothing about the accuracy a strategy ends at: plain averaging rarely, and one average at the end, carry a
note.
Overlapped syncs (--outer-overlap): a sync waits for its own work (o) and for what the next H steps leave
of its exchange X (the run's end for the whole last one, and with eager updates for one float32 all-reduce
of the weights, which makes the workers' models one). The steps beside an exchange do not run at full
speed: while its bytes are on the wire they lose OVERLAP_STEP_LOSS (a third) of its time, so a sync
costs max(X - H t_N, X / 3) beyond its H steps (overlapped_sync_seconds). The third is fitted to measured
rows, not derived. The outer step, one sync late, puts the group about H steps further behind
(overlap_lag_epochs: one more outer step's H / S_N epochs, on top of DiLoCo's own).
DiLoCo is a candidate at H >= DILOCO_MIN_SYNC_EVERY only: its outer learning rate and momentum are
the paper's for H = 500, and measured at H = 50, 100 and 250; a shorter H would compound the momentum on top
of the inner optimizer's every few steps.
"""

import math
from dataclasses import asdict, dataclass, field

from disttrain_contract.strategies import STRATEGIES as REGISTRY, names_where
from disttrain_trainer.strategies.localsgd.schedule import statistics_read_after_sync, sync_steps
from disttrain_trainer.strategies.options import BLOCK_WIRES

WIRE_BYTES = {"float32": 4, "float16": 2, "int8": 1, "int4": 0.5}
# weights per float32 scale on the block wires: wire_codecs.BLOCK (kept here so this module needs no
# TensorFlow; a unit test checks that the two agree)
WIRE_BLOCK = 256
# the advisor's reference: one worker alone (a one-worker run of the unconnected strategy); not a strategy of
# the registry (disttrain_contract.strategies), but a configuration the advisor predicts like theirs
SINGLE = "single"
DEFAULT_SYNC_EVERY = 32  # the trainer's --sync-every default (strategies/options.py)
# localsgd's H: the default, and rarer ones (500: the DiLoCo paper's); the time-to-accuracy benchmark's too
SYNC_EVERY = (32, 50, 100, 250, 500)
DILOCO_MIN_SYNC_EVERY = 50  # the outer optimizer's candidates (the module's docstring)
# batches that re-estimate the batch-norm statistics after a sync: the trainer's --sync-batch-norm-batches
# default (strategies/options.py; a unit test checks that the two agree), and a forward pass's share of a step
REFRESH_BATCHES, FORWARD_SHARE = 8, 1 / 3
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
# Predictions this close (relative) count as a tie: the simpler strategy is recommended
TIE = 0.05


class ModelError(ValueError):
    """An impossible input to the model (the CLI turns it into one line and exit 2)."""


@dataclass
class Probe:
    step_seconds_alone: float  # t1
    step_seconds_pair: float | None  # t2 (None: no pair measured)
    weight_bytes: int  # float weights in float32 (localsgd's sync)
    weight_tensors: int
    gradient_bytes: int  # what one worker sends per multiworker step in float32 (sparse rows: as gathered)
    gradient_sparse: bool  # the model has an embedding (sparse gradient rows, all-gathered under multiworker)
    latency_seconds: float | None  # alpha
    per_byte_seconds: float | None  # c, on the probe's link
    link_measured: str  # "loopback", "peers" or "none"
    train_examples: int
    batch: int
    steps_per_call: int
    cores: int
    one_host: bool  # every worker on this host (else one worker per host)
    startup_seconds: float = 0.0
    join_seconds: float = 0.0
    eval_seconds: float = 0.0
    batch_norm: bool = False  # the model has batch normalisation (averaging it far apart is an accuracy risk)
    batch_norm_bytes: int = 0  # its moving statistics in float32 (localsgd re-estimates and all-reduces them: refreshes())
    multiworker_step_seconds: float | None = None  # t_mw (None: not timed)
    trainer_sync_seconds: dict = field(default_factory=dict)  # T_sync: {wire: seconds} of the wires timed
    parameterserver_epoch_seconds: float | None = None  # T_ps: the trainer's own, 2 workers on this host (None: not timed)
    notes: list = field(default_factory=list)

    @classmethod
    def from_dict(cls, data):
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})

    def to_dict(self):
        return asdict(self)


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
        name = "loopback" if probe.link_measured == "loopback" else \
            f"measured {8 / probe.per_byte_seconds / 1e6:,.0f} Mbit/s" if probe.per_byte_seconds > 0 else "measured"
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


def gradient_seconds(probe, link, workers, dtype="float32"):
    """One multiworker step's gradient exchange."""
    if dtype not in ("float32", "float16"):
        raise ModelError(f"multiworker sends float32 or float16 gradients, not {dtype}")
    nbytes = int(probe.gradient_bytes * WIRE_BYTES[dtype] // 4)
    return (allgather_seconds if probe.gradient_sparse else allreduce_seconds)(nbytes, workers, link)


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


def ceiling_seconds_per_epoch(probe, processes=2):
    """Seconds per epoch of each of `processes` independent 1-worker runs on the whole data set at once:
    the time-to-accuracy benchmark's ceiling (what the host gives processes that never talk), so
    `processes` x single / this is the most any strategy can gain here."""
    return steps_per_epoch(probe.train_examples, 1, probe.batch) * step_seconds(probe, processes)


# --------------------------------------------------------------------------- strategies
@dataclass
class Prediction:
    strategy: str
    workers: int
    options: dict
    seconds_per_epoch: float
    compute_seconds: float  # per epoch
    communication_seconds: float  # per epoch
    sync_seconds: float  # one sync (localsgd), one step's exchange (multiworker), one step's pull+push (ps); 0
    time_to_target_seconds: float | None
    epochs_to_target: float | None = None  # this configuration's: f times one worker's (the module's docstring)
    note: str = ""
    accuracy_risk: bool = False  # measured to lose accuracy (the note says how): never recommended
    lower_bound: bool = False  # part of its cost was not probed (the note says which): recommended only when no
    #                            configuration predicted in full is left

    def to_dict(self):
        return asdict(self)

    @property
    def model(self):
        """Its configuration's cost model (COST_MODELS)."""
        return COST_MODELS[self.strategy]

    def label(self):
        return self.model.label(self.options)


def epoch_seconds(probe, link, strategy, workers, options=None, epochs=1):
    """(seconds per epoch, compute part, communication part, one sync's seconds) of `strategy`."""
    options = options or {}
    if strategy not in COST_MODELS:
        raise ModelError(f"unknown strategy {strategy!r}")
    model = COST_MODELS[strategy]
    model.check(workers, link)
    if epochs < 1:
        raise ModelError(f"epochs must be >= 1, got {epochs}")
    return model.epoch_seconds(probe, link, workers, options, epochs)


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
    averaged (strategies/localsgd/strategy.py, finish): one all-reduce of the weights in float32, whatever the wire: a
    float32 sync's cost. (The text model at 50 Mbit/s: 5.1 MB, about 0.9 s, one twenty-fifth of it in each of its
    25 epochs.)"""
    return sync_seconds(probe, link, workers, "float32")


def multiworker_extra_seconds(probe):
    """x in the module's docstring: what the probe's real multiworker step took beyond its compute and
    its modelled exchange (0 when it was not timed)."""
    if probe.multiworker_step_seconds is None or probe.step_seconds_pair is None or probe.latency_seconds is None:
        return 0.0
    exchange = gradient_seconds(probe, link_of(probe), 2)
    return max(0.0, probe.multiworker_step_seconds - probe.step_seconds_pair - exchange)


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
    """y in the module's docstring: what the trainer's parameter-server epoch took per step of the group beyond the
    workers' bound, on the probe's host and link with 2 workers (0 when it was not timed). Beyond the workers'
    bound, not the larger of the two: y is added to that bound, so the prediction there is the time measured.
    `own_link`: for that link itself, where a run faster than the bound corrects it (y < 0: the bound priced the
    exchange at loopback's all-reduce cost per byte, copying both ways); elsewhere the bound stands (y >= 0)."""
    if probe.parameterserver_epoch_seconds is None or probe.latency_seconds is None or probe.step_seconds_pair is None:
        return 0.0
    workers_bound, _, _ = parameterserver_bounds(probe, link_of(probe), 2)
    extra = (probe.parameterserver_epoch_seconds - workers_bound) / parameterserver_group_steps(probe)
    return extra if own_link else max(0.0, extra)


def refreshes(steps_per_epoch, every, epochs, at_epoch_end=False):
    """The syncs of a localsgd run of `epochs` epochs that re-estimate the batch-norm statistics: of its syncs
    (schedule.sync_steps), the ones whose statistics an epoch's end reads (the trainer's own rule,
    strategies/localsgd/schedule.py). One an epoch at H shorter than an epoch; every sync at H of an epoch or more."""
    last, syncs = steps_per_epoch * epochs, sync_steps(every, steps_per_epoch, epochs, at_epoch_end)
    # (each sync's following one is the next in the list; the last is the run's end, which always re-estimates)
    return sum(statistics_read_after_sync(step, following, steps_per_epoch, last) for step, following in zip(syncs, [*syncs[1:], last]))


def refresh_batches(probe, options):
    """The batches that re-estimate the batch-norm statistics after a localsgd sync (0: none, or no batch
    normalisation; refreshes() counts the syncs)."""
    return options.get("sync_batch_norm_batches", REFRESH_BATCHES) if probe.batch_norm else 0


def outer_steps(probe, workers, options, epochs_to_target):
    """DiLoCo's outer steps (syncs) before the target, at one worker's epochs to it."""
    return epochs_to_target / outer_step_epochs(probe, workers, options)


def diloco(strategy, options):
    """Whether a configuration is localsgd with an outer optimizer (DiLoCo)."""
    return COST_MODELS[strategy].diloco(options)


def convergence_factor(strategy, workers):
    """Epochs to the target relative to one worker's (f in the module's docstring) of every strategy but DiLoCo,
    whose epochs epochs_needed counts."""
    return COST_MODELS[strategy].convergence_factor(workers)


def epochs_needed(probe, strategy, workers, options, epochs_to_target):
    """(this configuration's epochs to the target, whether DiLoCo's count is plain averaging's) from one worker's
    (the module's docstring): f times them; DiLoCo one outer step more, at most plain averaging's; an overlapped
    sync one outer step more again."""
    plain = epochs_to_target * convergence_factor(strategy, workers)
    if not diloco(strategy, options):
        return plain, False
    own = epochs_to_target + outer_step_epochs(probe, workers, options)
    return min(own, plain) + overlap_lag_epochs(probe, workers, options), own >= plain


def predict(probe, link, strategy, workers, options=None, epochs=1, epochs_to_target=None):
    """One row of the table: a Prediction of `strategy` with `workers` workers over `epochs` epochs;
    `epochs_to_target`: one worker's (the module's docstring)."""
    options = dict(options or {})
    total, compute, comm, one = epoch_seconds(probe, link, strategy, workers, options, epochs)
    model = COST_MODELS[strategy]
    to_target = needed = None
    as_plain = False
    if epochs_to_target is not None:
        # every worker evaluates the held-out split after each epoch: on one host they share its cores too
        evaluation = probe.eval_seconds * (step_seconds(probe, workers) / probe.step_seconds_alone)
        start = probe.startup_seconds + (probe.join_seconds if model.connected else 0.0)
        needed, as_plain = epochs_needed(probe, strategy, workers, options, epochs_to_target)
        needed = math.ceil(needed - 1e-9)  # the evaluation that shows it (1e-9: 3 * 1.0 is 3, not 3.0000000001)
        to_target = start + needed * (total + evaluation)
    note, risk = "", False
    if epochs_to_target is not None and as_plain:
        note = (f"{outer_steps(probe, workers, options, epochs_to_target):.1f} outer steps before the target: too few "
                f"for the outer momentum (counted as plain averaging's epochs; a shorter --sync-every gives more)")
    lower_bound = model.lower_bound(probe)
    note, risk = model.note(probe, options, lower_bound) or (note, risk)
    return Prediction(strategy, workers, options, total, compute, comm, one, to_target, needed, note, risk, lower_bound)


def candidates(worker_counts, outer_optimizers=("none", "nesterov")):
    """(strategy, workers, options) of every configuration the advisor compares: one worker alone, then each
    worker count's configurations of each strategy, in the registry's order."""
    rows = [(SINGLE, 1, {})]
    for n in sorted(set(w for w in worker_counts if w >= 2)):
        for model in COST_MODELS.values():
            rows += model.candidates(n, outer_optimizers)
    return rows


def predict_all(probe, link, worker_counts, epochs, epochs_to_target=None, outer_optimizers=("none", "nesterov")):
    """Every candidate's Prediction; those that need a link when there is none are left out, and so are syncs at
    each epoch's end where H is an epoch or more (they would sync once an epoch: another H, not this one's)."""
    out = []
    for strategy, workers, options in candidates(worker_counts, outer_optimizers):
        if COST_MODELS[strategy].connected and link is None:
            continue
        if options.get("sync_at_epoch_end") and options["sync_every"] >= steps_per_epoch(probe.train_examples, workers,
                                                                                       probe.batch):
            continue
        out.append(predict(probe, link, strategy, workers, options, epochs, epochs_to_target))
    return out


def cost_of(prediction):
    """What the recommendation minimises: the time to the target, else the seconds per epoch."""
    if prediction.time_to_target_seconds is not None:
        return prediction.time_to_target_seconds
    return prediction.seconds_per_epoch


def recommend(predictions):
    """The prediction to recommend: the fastest without a measured accuracy risk and predicted in full (a
    lower bound wins only when nothing else is left: it is the configuration most likely to be slower
    than predicted; the reason names it when it would have been faster), or, within TIE of it,
    the simplest (average before localsgd before multiworker before parameterserver; fewer workers; for
    multiworker the wider wire, as float16 gradients are rounded; for localsgd no outer optimizer, then
    no overlap, then syncs at each epoch's end, then the most frequent syncs). The syncs at each epoch's end win a
    tie because each evaluation and checkpoint then holds the group's model, the one the run publishes, where
    without them it holds the chief's own, trained alone since the last sync: the convergence model counts the
    group's (on MobileNetV2 at H = 50 the chief's own showed 0.90 an evaluation later, 0.890 against the group's
    0.929 at the fifth, one worker's crossing plus an outer step being 4.98 epochs). localsgd's wire is no tie-break: on float16, int8 and int4 it keeps what
    it rounds off for the next sync (error feedback), and measured no accuracy loss for it (MobileNetV2 on
    distorted digits, DiLoCo at H = 100: 0.963 in int8, 0.960 in float16, 0.962 in float32; at H = 50 0.964 in
    int4 against one worker's 0.956), so there the faster wire is the advice."""
    if not predictions:
        raise ModelError("nothing to recommend")
    safe = [p for p in predictions if not p.accuracy_risk] or predictions
    safe = [p for p in safe if not p.lower_bound] or safe
    best = min(cost_of(p) for p in safe)
    close = [p for p in safe if cost_of(p) <= best * (1 + TIE)]

    def simplicity(p):
        o = p.options
        return (p.model.simplicity, p.workers, p.model.wider(o), diloco(p.strategy, o), overlapped(o),
                not o.get("sync_at_epoch_end"), o.get("sync_every", 0), cost_of(p))
    return min(close, key=simplicity)


def _seconds(value):
    if value >= 10:
        return f"{value:.0f} s"
    if value >= 1:
        return f"{value:.1f} s"
    if value >= 0.01:
        return f"{value * 1000:.0f} ms"
    return f"{value * 1000:.1f} ms"


def _megabytes(nbytes):
    return f"{nbytes / 1e6:.1f} MB" if nbytes >= 1e5 else f"{nbytes / 1e3:.0f} kB"


def reason(choice, predictions, probe, link):
    """One sentence: why `choice` (a Prediction of `predictions`), and the faster lower bound it passed over."""
    why = _reason(choice, predictions, probe, link)
    bounds = [p for p in predictions if p.lower_bound and not p.accuracy_risk and cost_of(p) < cost_of(choice)]
    if bounds and not choice.lower_bound:
        bound = min(bounds, key=cost_of)
        why += (f"; {bound.label()} ({bound.workers} workers) is predicted faster, but only as a lower bound "
                f"(its note says what was not probed)")
    return why


def _reason(choice, predictions, probe, link):
    single = next((p for p in predictions if p.strategy == SINGLE), None)
    t = step_seconds(probe, max(choice.workers, 1))
    where = link.name if link is not None else "no link"
    speed = ""
    if single is not None and choice.strategy != SINGLE:
        speed = f", predicted {cost_of(single) / cost_of(choice):.2f}x as fast as one worker"
    return choice.model.reason(choice, predictions, probe, link, t, where, speed)


# --------------------------------------------------------------------------- the configurations' cost models
class CostModel:
    """What the advisor knows of one kind of configuration: a strategy of the registry (disttrain_contract.strategies,
    `facts`), or SINGLE, one worker alone. Each says what its epochs cost, how many it needs, how it is written
    (label, the trainer's flags and the chart's values) and why it is advised; the functions above and below
    compose them and name no strategy."""
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
        """f of the module's docstring: its epochs to the target over one worker's (the group's shards are N times
        one worker's examples per step of a worker: N times the epochs at the same steps)."""
        return float(workers)

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

    def wider(self, options):
        """recommend()'s tie-break within a strategy: the wider wire first (lower)."""
        return 0

    def run_options(self, args):
        """The options of the run the trainer's flags (`args`) describe, in the predictions' terms."""
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


class SingleCost(CostModel):
    name = SINGLE

    @property
    def facts(self):
        return REGISTRY[names_where(lambda s: not s.connected)[0]]  # a one-worker run of the unconnected strategy

    def check(self, workers, link):
        if workers != 1:
            raise ModelError("single is one worker")

    def convergence_factor(self, workers):
        return 1.0

    def candidates(self, workers, outer_optimizers):
        return []  # (one worker alone is the first candidate whatever the worker counts: candidates())

    def chart_strategy(self):
        return self.facts.name

    def reason(self, choice, predictions, probe, link, t, where, speed):
        single = choice
        pair = [p for p in predictions if p.workers >= 2]
        if not pair:
            return f"no second worker could be predicted ({where})"
        best_pair = min([p for p in pair if not p.lower_bound] or pair, key=cost_of)  # (reason() names a faster bound)
        ratio = cost_of(best_pair) / cost_of(single)
        best = f"the best option with more workers ({best_pair.label()}, {best_pair.workers} workers)"
        if round(100 * abs(1 - ratio)) == 0:  # (rounds to 0 % either way: "0 % slower" would say nothing)
            why = f"{best} is predicted to take the same time, to within 1 %"
        elif ratio < 1:
            why = f"{best} would save only {100 * (1 - ratio):.0f} % of the time"
        else:
            why = f"{best} is predicted {100 * (ratio - 1):.0f} % slower"
        if probe.one_host and probe.step_seconds_pair:
            why += f" (two workers on this host step at {probe.step_seconds_pair * 1000:.1f} ms against " \
                   f"{probe.step_seconds_alone * 1000:.1f} ms alone)"
        return why


class AverageCost(CostModel):
    name = "average"
    simplicity = 1

    def note(self, probe, options, lower_bound):
        if probe.batch_norm:  # the rarest averaging of all
            return ("one average at the end of a batch-norm model: averaged statistics do not fit averaged weights "
                    "(averaging every 400 steps took MobileNetV2 to 0.399)"), True
        return "one average at the end: accuracy as one-shot averaging gives it (check with --validation-fraction)", False

    def reason(self, choice, predictions, probe, link, t, where, speed):
        if link is None:
            return f"one average at the end{speed}"
        full_sync = sync_seconds(probe, link, max(choice.workers, 2), "float32")
        return f"one average at the end: a sync costs {_seconds(full_sync)} at {where} against {_seconds(t)} steps{speed}"


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
        calls = math.ceil(steps / probe.steps_per_call)  # the workers agree whether to stop once per train call of k steps
        comm = steps * (g + multiworker_extra_seconds(probe)) + calls * link.latency_seconds + link.latency_seconds
        return compute + comm, compute, comm, g

    def lower_bound(self, probe):
        return probe.multiworker_step_seconds is None

    def note(self, probe, options, lower_bound):
        if lower_bound:
            return ("a lower bound: no real multiworker step was timed within the probe's budget (a longer "
                    "--budget-seconds times them), so the collective's own work is not in it; MobileNetV2 took 1.5x "
                    "this on one host"), False
        return None

    def candidates(self, workers, outer_optimizers):
        return [(self.name, workers, {"allreduce_dtype": dtype}) for dtype in ("float32", "float16")]

    def wider(self, options):
        return -WIRE_BYTES.get(options.get("allreduce_dtype", "float32"), 4)

    def run_options(self, args):
        return {"allreduce_dtype": args.allreduce_dtype}

    def chart_values(self, options):
        return {"allreduceDtype": options.get("allreduce_dtype", "float32")}

    def reason(self, choice, predictions, probe, link, t, where, speed):
        return (f"a step's gradient exchange costs {_seconds(choice.sync_seconds)} "
                f"at {where} against {_seconds(t)} of compute{speed}")


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
        local = refresh * FORWARD_SHARE * t + allreduce_seconds(probe.batch_norm_bytes, workers, link) if refresh else 0.0
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

    def note(self, probe, options, lower_bound):
        if (options.get("sync_every") or DEFAULT_SYNC_EVERY) <= PLAIN_SYNC_RISK:
            return None
        if not self.diloco(options):
            return "plain averaging this rarely can lose accuracy (MobileNetV2 did): add --outer-optimizer nesterov", True
        if probe.batch_norm and not refresh_batches(probe, options):
            return ("with batch normalisation and --sync-batch-norm-batches 0 an outer step this rare leaves the "
                    "statistics behind the weights (MobileNetV2 at H=250 scored 0.09-0.65 after each sync)"), True
        return None

    def candidates(self, workers, outer_optimizers):
        rows = []
        for every in SYNC_EVERY:
            for dtype in WIRE_DTYPES:
                for outer in outer_optimizers:
                    if outer != "none" and every < DILOCO_MIN_SYNC_EVERY:
                        continue
                    rows.append((self.name, workers, {"sync_every": every, "allreduce_dtype": dtype, "outer_optimizer": outer}))
                    if outer != "none":  # DiLoCo with syncs at each epoch's end, and with eager updates (OVERLAPS)
                        rows.append((self.name, workers, {"sync_every": every, "allreduce_dtype": dtype,
                                                          "outer_optimizer": outer, "sync_at_epoch_end": True}))
                        rows += [(self.name, workers, {"sync_every": every, "allreduce_dtype": dtype,
                                                       "outer_optimizer": outer, "outer_overlap": overlap})
                                 for overlap in OVERLAPS]
        return rows

    def run_options(self, args):
        return {"sync_every": args.sync_every, "allreduce_dtype": args.allreduce_dtype,
                "outer_optimizer": args.outer_optimizer,
                **({"sync_at_epoch_end": True} if args.sync_at_epoch_end else {})}

    def chart_values(self, o):
        values = {"syncEvery": o["sync_every"], "allreduceDtype": o.get("allreduce_dtype", "float32"),
                  "outerOptimizer": o.get("outer_optimizer") or "none"}
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
        at_end = (", and one at each epoch's end, so that every evaluation and checkpoint holds the group's model"
                  if o.get("sync_at_epoch_end") else "")
        return (f"each {o['allreduce_dtype']} sync of "
                f"{_megabytes(sync_bytes(probe, o['allreduce_dtype']))} costs {_seconds(cost)} at {where}, "
                f"{100 * cost / between:.0f} % of the {_seconds(between)} of steps between two syncs"
                f"{at_end}{speed}")


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
            return ("a lower bound: the parameter-server runtime's own work per step (remote reads and sends, the "
                    "optimizer on the server) was not timed within the probe's budget (a longer --budget-seconds times "
                    "it); a text model took up to 1.5x this on one host"), False
        return None

    def candidates(self, workers, outer_optimizers):
        return [(self.name, workers, {"ps": 1})]

    def chart_values(self, options):
        return {"parameterServers": options.get("ps", 1)}

    def reason(self, choice, predictions, probe, link, t, where, speed):
        return (f"a step's pull and push cost {_seconds(choice.sync_seconds)} "
                f"at {where} against {_seconds(t)} of compute{speed}")


# one cost model per strategy of the registry, in its order, after one worker alone (the candidates' order)
COST_MODELS = {model.name: model for model in (SingleCost(), AverageCost(), MultiWorkerCost(), LocalSGDCost(),
                                               ParameterServerCost())}
assert tuple(COST_MODELS)[1:] == tuple(REGISTRY), "every strategy of disttrain_contract.strategies needs a cost model"


def table(predictions, choice=None):
    """The predictions as a text table, fastest first (DiLoCo's rows too: they cost what plain averaging
    costs per epoch, but need fewer epochs). A row's note is a number in the table and its text below it,
    once: many rows share one (every wire of a DiLoCo H, every rare plain average)."""
    has_target = any(p.time_to_target_seconds is not None for p in predictions)
    head = ["strategy", "workers", "s/epoch", "compute", "comm.", "sync", "epochs" if has_target else "",
            "to target" if has_target else "", "note"]
    rows, notes = [], {}
    for p in sorted(predictions, key=lambda p: (cost_of(p), p.model.simplicity)):
        mark = " <-" if p is choice else ""
        number = notes.setdefault(p.note, len(notes) + 1) if p.note else None
        rows.append([p.label() + mark, str(p.workers), f"{p.seconds_per_epoch:.3f}", f"{p.compute_seconds:.3f}",
                     f"{p.communication_seconds:.3f}", _seconds(p.sync_seconds) if p.sync_seconds else "-",
                     (f"{p.epochs_to_target:.3g}" if p.epochs_to_target is not None else "") if has_target else "",
                     (_seconds(p.time_to_target_seconds) if p.time_to_target_seconds is not None else "") if has_target else "",
                     f"[{number}]" if number else ""])
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [head] + rows]
    lines += [f"[{number}] {note}" for note, number in notes.items()]
    return "\n".join(lines)
