"""The quality gate: whether the final model may replace the published one.

A pure decision over held-out accuracies (fractions, 0..1) and thresholds (accuracy
percentage points, as the flags and the chart values give them); main.py measures the
accuracies and acts on the verdict. Two checks:

* best worker: the final model may be at most `max_drop_vs_best_worker` points below
  the best single worker model -- averaging that made the model worse than one of its
  parts is refused. A promoted strategy's only row is the final model itself, so the
  check passes trivially and says so;
* published: at most `max_regression` points below the currently published model,
  measured on THIS run's held-out split (an old report's number may be of other data).
  No published model, or one that cannot be compared (another task or other labels),
  does not block: there is nothing it could protect.
"""

from disttrain_contract import ContractError

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


def decide(final, workers, published, max_drop_vs_best_worker, max_regression, promoted=False):
    """The gate's verdict.

    final: the final model's held-out accuracy; workers: [(name, accuracy)] of the worker
    models evaluated (a promoted strategy: just the promoted model); published: None (no
    published model), {"comparable": False, "why": ...} or {"comparable": True,
    "test_accuracy": ...} (evaluated on this run's split); thresholds in points.
    Returns {"passed", "reasons" (one sentence per failed check), "checks"}."""
    checks, reasons = [], []

    best_name, best = max(workers, key=lambda w: w[1])
    drop = points(best - final)
    check = {"name": "best_worker", "reference": best_name, "reference_accuracy": best, "final_accuracy": final,
             "drop_points": drop, "max_drop_points": max_drop_vs_best_worker,
             "passed": drop <= max_drop_vs_best_worker + EPSILON_POINTS}
    if promoted:
        check["note"] = "promoted strategy: the only worker model is the final model, so this check passes trivially"
    elif not check["passed"]:
        reasons.append(f"held-out accuracy {final:.4f} is {drop:.2f} points below {best_name}'s {best:.4f} "
                       f"(at most {max_drop_vs_best_worker:g} allowed: --max-drop-vs-best-worker)")
    checks.append(check)

    if published is None:
        checks.append({"name": "published", "passed": True, "note": "no published model to compare with"})
    elif not published.get("comparable"):
        checks.append({"name": "published", "passed": True, "comparable": False, "why": published.get("why"),
                       "note": f"the published model is not comparable ({published.get('why')}), so it does not block"})
    else:
        old = published["test_accuracy"]
        drop = points(old - final)
        check = {"name": "published", "comparable": True, "reference": published.get("path"),
                 "reference_accuracy": old, "final_accuracy": final, "drop_points": drop,
                 "max_drop_points": max_regression, "passed": drop <= max_regression + EPSILON_POINTS}
        if not check["passed"]:
            reasons.append(f"held-out accuracy {final:.4f} is {drop:.2f} points below the published model's {old:.4f} "
                           f"on this run's held-out split (at most {max_regression:g} allowed: --max-regression)")
        checks.append(check)

    return {"passed": not reasons, "reasons": reasons, "checks": checks}


def comparable(published_meta, manifest):
    """Why a published model cannot be evaluated on this run's held-out split (`manifest`'s),
    or None if it can. Accuracy over other labels, or another task's metric, is not the same
    number; another input shape cannot even be fed to it."""
    if published_meta.get("task") != manifest.task:
        return f"the published model is for task {published_meta.get('task')!r}, this run's is {manifest.task!r}"
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
        if "drop_points" not in check:
            parts.append(check["note"])
        elif check.get("note"):  # the promoted strategies' best-worker check
            parts.append(f"{what}: the final model itself (promoted)")
        else:
            drop = check["drop_points"]
            parts.append(f"{abs(drop):.2f} points {'below' if drop >= 0 else 'above'} the {what}'s "
                         f"{check['reference_accuracy']:.4f} (at most {check['max_drop_points']:g} below: "
                         f"{'ok' if check['passed'] else 'FAILED'})")
    outcome = "passed" if verdict["passed"] else "failed, forced" if verdict.get("forced") else "failed"
    return f"quality gate {outcome}: " + "; ".join(parts)
