"""The strategy advisor's performance model: seconds per epoch and time to a target for each strategy,
from what the probe measured. Pure arithmetic (no TensorFlow), so that tests check it number by number.
Each configuration's terms are its CostModel (COST_MODELS: SINGLE below, and one per strategy of the registry,
disttrain_contract.strategies, from its package: strategies/<name>/cost.py, which says its formulas); the
link, the collectives and the steps' seconds they share are strategies/cost_base.py's. This module composes
them: the predictions, the candidates, the recommendation and its reason, the table. What each term was
checked against, with the figures: docs/benchmarks, "The advisor's model, term by term"; how well the whole
predicts the measured rows: docs/strategies.md.

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
  T_ps      seconds per epoch of the trainer's own parameterserver run on this host (chief, 1 parameter server,
            2 workers; None: not run, the budget being too short)
and the start-up (process start to the first step), one held-out evaluation, the examples per epoch.

Seconds per epoch (each cost model's epoch_seconds):
  single           S_1 * t1
  (ceiling)        S_1 * t_N: each of N independent 1-worker runs on the whole data at once (never
                   recommended: the benchmark's reference, N S_1 t1 / that is the most any strategy gains)
  a strategy       its cost.py's formula

Time to the target: start-up + ceil(E_s) * (seconds per epoch + one held-out evaluation) (+ a connected
strategy's time to join its peers), where E_s = f_s * E_1, E_1 being one worker's epochs to the target
(--epochs-to-target, else the run's --epochs): a held-out evaluation closes each epoch, so the target shows
at the first evaluation at or after E_s. E_1 may be a fraction: where one worker's curve crossed the target
between two evaluations (bench/advisor_accuracy.py interpolates it so). The convergence model counts the
steps of the one model the group trains, not epochs (no learning-rate scaling: the trainer uses the same
rate at any N): f = 1 for single, and each cost model's epochs_needed for the strategies (average,
multiworker and plain localsgd f = N, parameterserver f = 1, DiLoCo its own count: their cost.py says why).
The model errs where the group's batch is small for the model (larger batches then lose little) and says
nothing about the accuracy a strategy ends at: plain averaging rarely, and one average at the end, carry a
note.
"""

import importlib
import math
from dataclasses import asdict, dataclass, field

from disttrain_contract.strategies import STRATEGIES as REGISTRY, names_where
from disttrain_trainer.strategies.cost_base import CostModel, ModelError, seconds_text, step_seconds, steps_per_epoch

# the advisor's reference: one worker alone (a one-worker run of the unconnected strategy); not a strategy of
# the registry (disttrain_contract.strategies), but a configuration the advisor predicts like theirs
SINGLE = "single"
# Predictions this close (relative) count as a tie: the simpler strategy is recommended
TIE = 0.05


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
    batch_norm_bytes: int = (
        0  # its moving statistics in float32 (localsgd re-estimates and all-reduces them: cost.refreshes)
    )
    multiworker_step_seconds: float | None = None  # t_mw (None: not timed)
    trainer_sync_seconds: dict = field(default_factory=dict)  # T_sync: {wire: seconds} of the wires timed
    parameterserver_epoch_seconds: float | None = (
        None  # T_ps: the trainer's own, 2 workers on this host (None: not timed)
    )
    notes: list = field(default_factory=list)

    @classmethod
    def from_dict(cls, data):
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})

    def to_dict(self):
        return asdict(self)


def ceiling_seconds_per_epoch(probe, processes=2):
    """Seconds per epoch of each of `processes` independent 1-worker runs on the whole data set at once:
    the time-to-accuracy benchmark's ceiling (what the host gives processes that never talk), so
    `processes` x single / this is the most any strategy can gain here."""
    return steps_per_epoch(probe.train_examples, 1, probe.batch) * step_seconds(probe, processes)


# --------------------------------------------------------------------------- the decision
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


def diloco(strategy, options):
    """Whether a configuration is localsgd with an outer optimizer (DiLoCo)."""
    return COST_MODELS[strategy].diloco(options)


def convergence_factor(strategy, workers):
    """Epochs to the target relative to one worker's (f in the module's docstring) of every strategy but DiLoCo,
    whose epochs epochs_needed counts."""
    return COST_MODELS[strategy].convergence_factor(workers)


def epochs_needed(probe, strategy, workers, options, epochs_to_target):
    """(this configuration's epochs to the target, whether DiLoCo's count is plain averaging's) from one worker's
    (the module's docstring): its cost model's count (CostModel.epochs_needed)."""
    return COST_MODELS[strategy].epochs_needed(probe, workers, options, epochs_to_target)


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
        note = model.plain_note(probe, workers, options, epochs_to_target)
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
        if options.get("sync_at_epoch_end") and options["sync_every"] >= steps_per_epoch(
            probe.train_examples, workers, probe.batch
        ):
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
        return p.model.simplicity, p.workers, p.model.preference(o), cost_of(p)

    return min(close, key=simplicity)


def reason(choice, predictions, probe, link):
    """One sentence: why `choice` (a Prediction of `predictions`), and the faster lower bound it passed over."""
    why = _reason(choice, predictions, probe, link)
    bounds = [p for p in predictions if p.lower_bound and not p.accuracy_risk and cost_of(p) < cost_of(choice)]
    if bounds and not choice.lower_bound:
        bound = min(bounds, key=cost_of)
        why += (
            f"; {bound.label()} ({bound.workers} workers) is predicted faster, but only as a lower bound "
            f"(its note says what was not probed)"
        )
    return why


def _reason(choice, predictions, probe, link):
    single = next((p for p in predictions if p.strategy == SINGLE), None)
    t = step_seconds(probe, max(choice.workers, 1))
    where = link.name if link is not None else "no link"
    speed = ""
    if single is not None and choice.strategy != SINGLE:
        speed = f", predicted {cost_of(single) / cost_of(choice):.2f}x as fast as one worker"
    return choice.model.reason(choice, predictions, probe, link, t, where, speed)


def table(predictions, choice=None):
    """The predictions as a text table, fastest first (DiLoCo's rows too: they cost what plain averaging
    costs per epoch, but need fewer epochs). A row's note is a number in the table and its text below it,
    once: many rows share one (every wire of a DiLoCo H, every rare plain average)."""
    has_target = any(p.time_to_target_seconds is not None for p in predictions)
    head = [
        "strategy",
        "workers",
        "s/epoch",
        "compute",
        "comm.",
        "sync",
        "epochs" if has_target else "",
        "to target" if has_target else "",
        "note",
    ]
    rows, notes = [], {}
    for p in sorted(predictions, key=lambda p: (cost_of(p), p.model.simplicity)):
        mark = " <-" if p is choice else ""
        number = notes.setdefault(p.note, len(notes) + 1) if p.note else None
        rows.append(
            [
                p.label() + mark,
                str(p.workers),
                f"{p.seconds_per_epoch:.3f}",
                f"{p.compute_seconds:.3f}",
                f"{p.communication_seconds:.3f}",
                seconds_text(p.sync_seconds) if p.sync_seconds else "-",
                (f"{p.epochs_to_target:.3g}" if p.epochs_to_target is not None else "") if has_target else "",
                (seconds_text(p.time_to_target_seconds) if p.time_to_target_seconds is not None else "")
                if has_target
                else "",
                f"[{number}]" if number else "",
            ]
        )
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [head] + rows]
    lines += [f"[{number}] {note}" for note, number in notes.items()]
    return "\n".join(lines)


# --------------------------------------------------------------------------- the configurations' cost models
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
            why += (
                f" (two workers on this host step at {probe.step_seconds_pair * 1000:.1f} ms against "
                f"{probe.step_seconds_alone * 1000:.1f} ms alone)"
            )
        return why


# one worker alone, then one cost model per strategy of the registry, in its order (the candidates' order): its
# package's cost.py, COST_MODEL (no TensorFlow: a strategy's package imports its training code only when asked)
COST_MODELS = {
    SINGLE: SingleCost(),
    **{name: importlib.import_module(f"disttrain_trainer.strategies.{name}.cost").COST_MODEL for name in REGISTRY},
}
assert all(model.name == name for name, model in COST_MODELS.items()), "a cost model filed under another's name"
