"""The metrics every stage reports, each with its direction, in one place.

The trainer's step sums [loss, score, count] per call; what "score" is depends on the problem:
the examples right (classification: the arg-max is the label; faces: the nearest view is the same
person) or the absolute errors (regression). The per-epoch record holds "loss" and the score's
name ("accuracy" or "mae"), held-out evaluation adds "test_<name>" for every metric evaluate()
returns, and the stages that rank or gate models (the aggregator's --combine best and quality
gate, the sweep's objective, the dashboard) read the problem's *primary* metric through
`primary_metric` and compare values with `Metric.better`, never by assuming that higher is better.
"""

import dataclasses
import math

from disttrain_contract.tasks import TASKS


@dataclasses.dataclass(frozen=True)
class Metric:
    name: str  # the key in evaluate()'s dict; "test_" + name in records and reports
    direction: str  # "max" or "min"
    label: str  # what a person reads in a table or plot
    unit: str  # "fraction" (0..1, shown in points where a difference is meant) or "target" (the target's own unit)

    def better(self, a, b):
        """Whether value a is strictly better than value b (None and nan are worse than anything)."""
        if not _number(a):
            return False
        if not _number(b):
            return True
        return a > b if self.direction == "max" else a < b

    def best(self, values):
        """The best of values (None and nan ignored); None when there is none."""
        candidates = [v for v in values if _number(v)]
        if not candidates:
            return None
        return max(candidates) if self.direction == "max" else min(candidates)

    def shortfall(self, value, reference):
        """How much worse value is than reference, >= 0 when worse: in points (fraction * 100) for a
        fraction, relative to the reference (1.0 = 100 % worse) for a metric in the target's unit."""
        gap = (reference - value) if self.direction == "max" else (value - reference)
        return 100.0 * gap if self.unit == "fraction" else gap / max(abs(reference), 1e-12)

    @property
    def key(self):
        return f"test_{self.name}"


ACCURACY = Metric("accuracy", "max", "accuracy", "fraction")
TOP1 = Metric("accuracy", "max", "top-1 retrieval", "fraction")
RMSE = Metric("rmse", "min", "RMSE", "target")
MAE = Metric("mae", "min", "MAE", "target")
R2 = Metric("r2", "max", "R²", "target")
LOSS = Metric("loss", "min", "loss", "target")

# the training score the step sums, per problem: hits (accuracy) or absolute errors (mean = MAE)
TRAINING_SCORE = {"classification": ACCURACY, "regression": MAE}


def primary_metric(task=None, problem="classification"):
    """The metric a run is judged by: held-out accuracy (faces: top-1 retrieval), RMSE for regression."""
    if problem == "regression":
        return RMSE
    return TOP1 if _retrieval(task) else ACCURACY


def metrics_of(task=None, problem="classification"):
    """Every held-out metric evaluate() returns for a problem, the primary one first (faces: more)."""
    if problem == "regression":
        return [RMSE, MAE, R2, LOSS]
    return [TOP1] if _retrieval(task) else [primary_metric(task, problem), LOSS]


def training_score(problem="classification"):
    return TRAINING_SCORE[problem]


def _retrieval(task):
    """Whether a task is judged by retrieval (tasks.Task.retrieval); None (or a name no task has): not."""
    return task in TASKS and TASKS[task].retrieval


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
