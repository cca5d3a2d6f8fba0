"""The quality gate: whether the final model may replace the published one.

A pure decision over held-out values of the run's primary metric (metrics.primary_metric: accuracy,
faces' top-1 retrieval, regression's RMSE) and thresholds; main.py measures the values and acts on the
verdict. How much worse a value is than its reference is the metric's own `shortfall`, in the
metric's unit of difference:
  * a fraction (accuracy, top-1; higher is better): percentage POINTS below the reference, the
    thresholds --max-drop-vs-best-worker and --max-regression (as before this round);
  * a metric in the target's unit (RMSE; lower is better): PERCENT worse than the reference,
    relative to it (RMSE 1.05 against 1.00 is 5 % worse), the thresholds
    --max-relative-drop-vs-best-worker and --max-relative-regression.
Three checks:

* best worker: the final model may be at most the threshold worse than the best single worker
  model -- averaging that made the model worse than one of its parts is refused. A promoted
  strategy's only row is the final model itself, so the check passes trivially and says so;
* published: at most the threshold worse than the currently published model, measured on THIS
  run's held-out split (an old report's number may be of other data). No published model, or one
  that cannot be compared (another task, problem, target or other labels), does not block: there
  is nothing it could protect.
"""

from disttrain_contract import ContractError
from disttrain_contract.metrics import ACCURACY

# the exit code of a refusal: 2 and 3 are the contract's (bad input, timeout); a refusal
# is neither, and the chart fails the aggregator Job at once on it (a retry would
# evaluate the same models again)
EXIT_REFUSED = 4

# accuracies are averages over the same examples; a float rounding difference must not
# decide (an identical model must pass a 0-point threshold)
EPSILON_POINTS = 1e-6


class GateRefused(ContractError):
    """The final model failed the gate: not published (run_cli: one line, exit 4)."""

    exit_code = EXIT_REFUSED


def points(fraction):
    return round(100 * fraction, 4)


def unit_of(metric):
    """ "points" for a fraction (accuracy), "percent" (relative) for a metric in the target's unit."""
    return "points" if metric.unit == "fraction" else "percent"


def shortfall(metric, value, reference):
    """How much worse `value` is than `reference` in the gate's unit (points or percent; < 0: better)."""
    gap = metric.shortfall(value, reference)
    return round(gap if metric.unit == "fraction" else 100 * gap, 4)


def flags_for(metric):
    """The three flags whose thresholds apply to `metric`: (best worker, published, trivial)."""
    if metric.unit == "fraction":
        return "--max-drop-vs-best-worker", "--max-regression", "--min-gain-vs-trivial"
    return "--max-relative-drop-vs-best-worker", "--max-relative-regression", "--min-relative-gain-vs-trivial"


def _figures(metric, reference, final, gap, limit):
    """A check's numbers: generic keys for every metric, and the accuracy-named ones of before
    this round for a fraction (report readers of classification runs keep working)."""
    out = {
        "metric": metric.name,
        "direction": metric.direction,
        "unit": unit_of(metric),
        "reference_value": reference,
        "final_value": final,
        "shortfall": gap,
        "max_shortfall": limit,
    }
    if metric.unit == "fraction":
        out.update(reference_accuracy=reference, final_accuracy=final, drop_points=gap, max_drop_points=limit)
    return out


def _worse(metric, final, gap, reference, limit, flag, what, where=""):
    """One refusal sentence."""
    if metric.unit == "fraction":
        return (
            f"held-out {metric.name} {final:.4f} is {gap:.2f} points below {what} {reference:.4f}"
            f"{where} (at most {limit:g} allowed: {flag})"
        )
    return (
        f"held-out {metric.label} {final:.4g} is {gap:.2f} % worse than {what} {reference:.4g}"
        f"{where} (at most {limit:g} % allowed: {flag})"
    )


def _trivial_check(metric, final, trivial, min_gain, flag):
    """The floor: (check, refusal sentence or None). gain: how much better than the trivial predictor
    (points, or percent of its RMSE); passes when > 0 and at least `min_gain` (exactly the margin passes)."""
    gain = 0.0 - shortfall(metric, final, trivial["value"])  # (0.0 -: never "-0.0")
    passed = gain > EPSILON_POINTS and gain >= min_gain - EPSILON_POINTS
    check = {
        "name": "trivial",
        "reference": trivial["description"],
        "predictor": {key: value for key, value in trivial.items() if key != "value"},
        "metric": metric.name,
        "direction": metric.direction,
        "unit": unit_of(metric),
        "reference_value": trivial["value"],
        "final_value": final,
        "gain": gain,
        "min_gain": min_gain,
        "passed": passed,
    }
    if passed:
        return check, None
    if metric.unit == "fraction":
        how = (
            f"only {gain:.2f} points above"
            if gain > EPSILON_POINTS
            else "no better than"
            if gain > -EPSILON_POINTS
            else f"{-gain:.2f} points below"
        )
        return check, (
            f"held-out {metric.name} {final:.4f} is {how} the trivial predictor's {trivial['value']:.4f} "
            f"({trivial['description']}; at least {min_gain:g} point{'' if min_gain == 1 else 's'} above "
            f"required: {flag})"
        )
    how = (
        f"only {gain:.2f} % better than"
        if gain > EPSILON_POINTS
        else "no better than"
        if gain > -EPSILON_POINTS
        else f"{-gain:.2f} % worse than"
    )
    return check, (
        f"held-out {metric.label} {final:.5g} is {how} the trivial predictor's {trivial['value']:.5g} "
        f"({trivial['description']}; at least {min_gain:g} % better required: {flag})"
    )


def decide(
    final,
    workers,
    published,
    max_drop_vs_best_worker,
    max_regression,
    promoted=False,
    metric=None,
    *,
    trivial,
    min_gain_vs_trivial,
):
    """The gate's verdict.

    final: the final model's held-out value of `metric` (default: accuracy); workers: [(name,
    value)] of the worker models evaluated (a promoted strategy: just the promoted model);
    published: None (no published model), {"comparable": False, "why": ...} or {"comparable": True,
    "test_<metric>": ...} (evaluated on this run's split); thresholds in the metric's unit (points
    for a fraction, percent for a metric in the target's unit: see the module docstring).
    trivial: the trivial predictor (trivial.trivial_predictor: "name", "description", its held-out
    "value"); min_gain_vs_trivial: the margin the final model must beat it by, in the same unit.
    Returns {"passed", "metric", "reasons" (one sentence per failed check), "checks"}."""
    metric = metric or ACCURACY
    best_flag, published_flag, trivial_flag = flags_for(metric)
    checks, reasons = [], []

    best = metric.best([value for _, value in workers])  # in the metric's direction; nan never the best
    best_name, best = next(((n, v) for n, v in workers if v == best), workers[0])
    drop = shortfall(metric, final, best)
    check = {
        "name": "best_worker",
        "reference": best_name,
        **_figures(metric, best, final, drop, max_drop_vs_best_worker),
        "passed": drop <= max_drop_vs_best_worker + EPSILON_POINTS,
    }
    if promoted:
        check["note"] = "promoted strategy: the only worker model is the final model, so this check passes trivially"
    elif not check["passed"]:
        reasons.append(_worse(metric, final, drop, best, max_drop_vs_best_worker, best_flag, f"{best_name}'s"))
    checks.append(check)

    if published is None:
        checks.append({"name": "published", "passed": True, "note": "no published model to compare with"})
    elif not published.get("comparable"):
        checks.append(
            {
                "name": "published",
                "passed": True,
                "comparable": False,
                "why": published.get("why"),
                "note": f"the published model is not comparable ({published.get('why')}), so it does not block",
            }
        )
    else:
        old = published[metric.key]
        drop = shortfall(metric, final, old)
        check = {
            "name": "published",
            "comparable": True,
            "reference": published.get("path"),
            **_figures(metric, old, final, drop, max_regression),
            "passed": drop <= max_regression + EPSILON_POINTS,
        }
        if not check["passed"]:
            reasons.append(
                _worse(
                    metric,
                    final,
                    drop,
                    old,
                    max_regression,
                    published_flag,
                    "the published model's",
                    " on this run's held-out split",
                )
            )
        checks.append(check)

    check, reason = _trivial_check(metric, final, trivial, min_gain_vs_trivial, trivial_flag)
    checks.append(check)
    if reason:
        reasons.append(reason)

    return {
        "passed": not reasons,
        "metric": {"name": metric.name, "direction": metric.direction, "label": metric.label, "unit": unit_of(metric)},
        "reasons": reasons,
        "checks": checks,
    }


def comparable(published_meta, manifest):
    """Why a published model cannot be evaluated on this run's held-out split (`manifest`'s),
    or None if it can. Accuracy over other labels, another task's metric, or the error on another
    target is not the same number; another input shape cannot even be fed to it."""
    if published_meta.get("task") != manifest.task:
        return f"the published model is for task {published_meta.get('task')!r}, this run's is {manifest.task!r}"
    problem = getattr(manifest, "problem", "classification")
    if published_meta.get("problem", "classification") != problem:
        return (
            f"the published model is a {published_meta.get('problem', 'classification')} model, this run's is {problem}"
        )
    if problem == "regression" and published_meta.get("target") != getattr(manifest, "target", None):
        return (
            f"the published model predicts {published_meta.get('target')!r}, this run's target is "
            f"{getattr(manifest, 'target', None)!r}"
        )
    if list(published_meta.get("labels") or []) != list(manifest.labels or []):
        return "the published model has other labels than this run's data"
    if published_meta.get("input") != manifest.input:
        return f"the published model takes input {published_meta.get('input')}, this run's data is {manifest.input}"
    return None


def summary(verdict):
    """The verdict in one line, each check with its numbers: what the aggregator prints."""
    parts = []
    for check in verdict["checks"]:
        what = "best worker" if check["name"] == "best_worker" else "published model"
        state = "ok" if check["passed"] else "FAILED"
        if check["name"] == "trivial":
            gain, reference, margin = check["gain"], check["reference_value"], check["min_gain"]
            predictor = check["predictor"]["name"] + (
                f" {check['predictor']['label']!r}" if "label" in check["predictor"] else ""
            )
            if check["unit"] == "points":
                parts.append(
                    f"{abs(gain):.2f} points {'above' if gain >= 0 else 'below'} the trivial predictor's "
                    f"{reference:.4f} ({predictor}; at least {margin:g} above: {state})"
                )
            else:
                parts.append(
                    f"{(verdict.get('metric') or {}).get('label', check['metric'])} {abs(gain):.2f} % "
                    f"{'better' if gain >= 0 else 'worse'} than the trivial predictor's {reference:.4g} "
                    f"({predictor}; at least {margin:g} % better: {state})"
                )
        elif "shortfall" not in check:
            parts.append(check["note"])
        elif check.get("note"):  # the promoted strategies' best-worker check
            parts.append(f"{what}: the final model itself (promoted)")
        else:
            gap, reference, limit = check["shortfall"], check["reference_value"], check["max_shortfall"]
            if check["unit"] == "points":
                parts.append(
                    f"{abs(gap):.2f} points {'below' if gap >= 0 else 'above'} the {what}'s "
                    f"{reference:.4f} (at most {limit:g} below: {state})"
                )
            else:
                parts.append(
                    f"{(verdict.get('metric') or {}).get('label', check['metric'])} {abs(gap):.2f} % {'worse' if gap >= 0 else 'better'} than the {what}'s "
                    f"{reference:.4g} (at most {limit:g} % worse: {state})"
                )
    outcome = "passed" if verdict["passed"] else "failed, forced" if verdict.get("forced") else "failed"
    return f"quality gate {outcome}: " + "; ".join(parts)
