"""Model analysis: beyond one accuracy number, on the held-out split, for every worker
model, every combine candidate and the final model.

Classifiers (text, image), from the predicted probabilities the held-out evaluation already
computed (evaluation.evaluate(outputs=...): no model runs twice over the split):
  * the confusion matrix, per-class precision / recall / F1 / support and macro-F1
    (scikit-learn's metrics);
  * calibration: the expected calibration error (ECE) over CALIBRATION_BINS equal-width bins of
    the top-label confidence (the highest probability): the example-weighted mean, over the
    bins, of |accuracy - mean confidence|; and each bin's figures, for a reliability diagram;
  * slices: text by length in tokens as the model sees them (TextVectorization's
    standardisation, manifest.tokenize), in buckets cut at the quartiles of the held-out
    lengths; images by true class.
Faces (an embedding model, people never seen in training: no classes to confuse): the retrieval
figures of evaluation.evaluate_retrieval broken down by held-out person: for the augmented query
and each harder query (darker, rotated, smaller), whether the nearest gallery photo is the
person's own, the distance to it and to the nearest wrong person, who that is, and the margin.

Regression (problem "regression", a model with the head "value"), from the predicted values
evaluate() kept: the residuals (prediction - target: their mean, the bias, their spread, quantiles
of the absolute error), predicted against actual in RESIDUAL_BINS bins cut at the deciles of the true
target (the mean true and the mean predicted value in each: a model that shrinks towards the mean
shows a flatter line than the diagonal), slices by quartile of the true target (RMSE, MAE, bias in
each), and a sample of up to RESIDUAL_POINTS (actual, predicted) pairs of the final model and the
best worker for the scatter plots. No confusion matrix (there are no classes) and no calibration:
calibration compares a classifier's predicted probabilities with how often it is right, and a
regression model outputs one value with no probability or interval to calibrate; the section's
method says so ("calibration": {"skipped": ...}).

At the top of the section ("compare"): the final model against the best worker (by the held-out
primary metric, in its direction: accuracy, or the lowest RMSE; for the comparison only, never to
choose) and a 1-worker baseline's report when --baseline names one; a plain run has none, and the
section says so.
"""

import os
import time

import numpy as np

from disttrain_contract import ContractError, read_json
from disttrain_contract.evaluation import regression_metrics
from disttrain_contract.faces import HARD_QUERIES
from disttrain_contract.manifest import tokenize
from disttrain_contract.report import Report
from disttrain_contract.metrics import primary_metric
from disttrain_contract.strategies import STRATEGIES
from disttrain_contract.tasks import task_of

CALIBRATION_BINS = 10
LENGTH_QUANTILES = (0.25, 0.5, 0.75)  # text slices: cut at the quartiles of the held-out lengths
QUERIES = ("query",) + HARD_QUERIES  # faces: the augmented query, then the harder ones
RESIDUAL_BINS = 10  # regression: predicted vs actual, in bins cut at the deciles of the true target
RESIDUAL_POINTS = 300  # regression: (actual, predicted) pairs kept for the scatter plots (final, best worker)
TARGET_QUANTILES = (0.25, 0.5, 0.75)  # regression slices: the quartiles of the true target
CALIBRATION_SKIPPED = (
    "calibration compares a classifier's predicted probabilities with how often it is right; a "
    "regression model outputs one value with no probability or interval to calibrate (see the "
    "residuals and predicted vs actual instead)"
)


# --------------------------------------------------------------------------- classification
def calibration(probabilities, labels, bins=CALIBRATION_BINS):
    """(ECE, the reliability diagram's bins). Bin i holds the examples whose top-label confidence
    is in [i/bins, (i+1)/bins) (the last bin includes 1.0); an empty bin has no accuracy."""
    probabilities, labels = np.asarray(probabilities, dtype=np.float64), np.asarray(labels)
    confidence = probabilities.max(axis=1)
    correct = probabilities.argmax(axis=1) == labels
    edges = np.linspace(0.0, 1.0, bins + 1)
    index = np.clip(np.digitize(confidence, edges[1:-1]), 0, bins - 1)
    rows, ece = [], 0.0
    for i in range(bins):
        inside = index == i
        count = int(inside.sum())
        row = {
            "lower": float(edges[i]),
            "upper": float(edges[i + 1]),
            "examples": count,
            "confidence": None,
            "accuracy": None,
        }
        if count:
            row["confidence"], row["accuracy"] = float(confidence[inside].mean()), float(correct[inside].mean())
            ece += count / len(labels) * abs(row["accuracy"] - row["confidence"])
        rows.append(row)
    return float(ece), rows


def length_buckets(texts, quantiles=LENGTH_QUANTILES):
    """(bucket of each text, the buckets' names and token ranges): lengths in tokens as the model
    sees them, cut at the given quantiles of these lengths (values that occur, so the ranges are
    whole numbers; equal quantiles merge; an empty bucket is dropped)."""
    lengths = np.array([len(tokenize(str(t))) for t in texts])
    if not len(lengths):
        return np.zeros(0, dtype=int), []
    edges = np.unique(np.quantile(lengths, quantiles, method="lower")).astype(int)
    bucket = np.searchsorted(edges, lengths, side="left")  # length <= edges[0] -> 0, ...
    lows = [int(lengths.min())] + [int(e) + 1 for e in edges]
    highs = [int(e) for e in edges] + [int(lengths.max())]
    buckets, remap = [], np.full(len(edges) + 1, -1)
    for i, (low, high) in enumerate(zip(lows, highs)):
        if (bucket == i).any():
            remap[i] = len(buckets)
            name = f"{low}-{high} tokens" if low != high else f"{low} token" + ("" if low == 1 else "s")
            buckets.append({"slice": name, "min_tokens": low, "max_tokens": high})
    return remap[bucket], buckets


def classification(probabilities, labels, label_names, slice_of, slices):
    """One classifier's analysis; slice_of: each example's slice index into `slices` (dicts with
    at least "slice", the name)."""
    from sklearn.metrics import accuracy_score, confusion_matrix, f1_score, precision_recall_fscore_support

    classes = list(range(len(label_names)))
    predicted = np.asarray(probabilities).argmax(axis=1)
    precision, recall, f1, support = precision_recall_fscore_support(labels, predicted, labels=classes, zero_division=0)
    ece, bins = calibration(probabilities, labels)
    return {
        "accuracy": float(accuracy_score(labels, predicted)),
        "macro_f1": float(f1_score(labels, predicted, labels=classes, average="macro", zero_division=0)),
        "ece": ece,
        # rows: the true class, columns: the predicted one, in the order of "labels"
        "confusion_matrix": confusion_matrix(labels, predicted, labels=classes).tolist(),
        "per_class": [
            {"label": name, "precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
            for name, p, r, f, s in zip(label_names, precision, recall, f1, support)
        ],
        "reliability": bins,
        "slices": [
            dict(
                s,
                examples=int((slice_of == i).sum()),
                accuracy=float(accuracy_score(labels[slice_of == i], predicted[slice_of == i])),
            )
            for i, s in enumerate(slices)
            if (slice_of == i).any()
        ],
    }


# ---------------------------------------------------------------------------------- regression
def quantile_bins(values, quantiles):
    """(bin index of each value, [(low, high)]): cut at the given quantiles of `values` (equal cuts
    merge; an empty bin is dropped)."""
    values = np.asarray(values, dtype=np.float64)
    if not len(values):
        return np.zeros(0, dtype=int), []
    edges = np.unique(np.quantile(values, quantiles))
    index = np.searchsorted(edges, values, side="right")  # value < edges[0] -> 0, ...
    lows = [float(values.min())] + [float(e) for e in edges]
    highs = [float(e) for e in edges] + [float(values.max())]
    kept, remap = [], np.full(len(edges) + 1, -1)
    for i in range(len(edges) + 1):
        if (index == i).any():
            remap[i] = len(kept)
            kept.append((lows[i], highs[i]))
    return remap[index], kept


def target_slices(targets, quantiles=TARGET_QUANTILES):
    """(slice of each example, the slices): the true target's quartiles."""
    slice_of, ranges = quantile_bins(targets, quantiles)
    return slice_of, [
        {"slice": f"{low:.4g} to {high:.4g}", "min_target": low, "max_target": high} for low, high in ranges
    ]


def regression(predictions, targets, slice_of, slices, points=RESIDUAL_POINTS):
    """One regression model's analysis (see the module docstring): predictions [n] or [n, 1]."""
    predicted = np.asarray(predictions, dtype=np.float64).reshape(len(predictions), -1)[:, 0]
    actual = np.asarray(targets, dtype=np.float64)
    residual = predicted - actual
    error = np.abs(residual)
    figures = regression_metrics(predicted, actual)
    bin_of, ranges = quantile_bins(actual, np.linspace(0, 1, RESIDUAL_BINS + 1)[1:-1])
    bins = [
        {
            "min_target": low,
            "max_target": high,
            "examples": int((bin_of == i).sum()),
            "mean_target": float(actual[bin_of == i].mean()),
            "mean_predicted": float(predicted[bin_of == i].mean()),
        }
        for i, (low, high) in enumerate(ranges)
    ]
    sample = np.sort(np.random.default_rng(0).choice(len(actual), size=min(points, len(actual)), replace=False))
    return {
        "rmse": figures["rmse"],
        "mae": figures["mae"],
        "r2": figures["r2"],
        "bias": float(residual.mean()) if len(residual) else 0.0,
        "residual_std": float(residual.std()) if len(residual) else 0.0,
        "abs_error_quantiles": {
            key: float(np.quantile(error, q)) if len(error) else 0.0
            for key, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))
        },
        "predicted_vs_actual": bins,
        "slices": [
            dict(
                s,
                examples=int((slice_of == i).sum()),
                rmse=float(np.sqrt(np.mean(residual[slice_of == i] ** 2))),
                mae=float(error[slice_of == i].mean()),
                bias=float(residual[slice_of == i].mean()),
            )
            for i, s in enumerate(slices)
            if (slice_of == i).any()
        ],
        "points": {"actual": actual[sample].tolist(), "predicted": predicted[sample].tolist()},
    }


# -------------------------------------------------------------------------------------- faces
def retrieval_per_person(outputs, label_names):
    """One face model's retrieval figures per held-out person (evaluate_retrieval's outputs).
    The margin here is the person's own: nearest wrong distance / right distance."""
    people = list(outputs["people"])
    n = len(people)
    rows = []
    for i, person in enumerate(people):
        row = {"person": label_names[person]}
        for kind in QUERIES:
            distances = np.asarray(outputs["distances" if kind == "query" else f"{kind}_distances"])[i]
            right = float(distances[i])
            figures = {"top1": bool(distances.argmin() == i), "right_distance": right}
            if n > 1:
                wrong = np.where(np.arange(n) == i, np.inf, distances)
                nearest = int(wrong.argmin())
                figures.update(
                    nearest_wrong_distance=float(wrong[nearest]),
                    nearest_wrong_person=label_names[people[nearest]],
                    margin=float(wrong[nearest] / max(right, 1e-9)),
                )
            row[kind] = figures
        rows.append(row)
    return {
        "accuracy": float(np.mean([r["query"]["top1"] for r in rows])) if rows else 0.0,
        "people_right": {kind: int(sum(r[kind]["top1"] for r in rows)) for kind in QUERIES},
        "people_count": n,
        "people": rows,
    }


# ---------------------------------------------------------------------------------- the run
def read_baseline(path, report):
    """A 1-worker run's report.json on the same data (--baseline), as a contract report.Report, or
    ContractError naming why not. `report`: this run's facts (a dict of report.json's keys)."""
    obj = read_json(path, what=f"--baseline {path}")
    if obj is None:
        raise ContractError(f"--baseline {path}: no such file")
    baseline = Report.from_json(obj, what=f"--baseline {path}")  # RecordError: the bad field, in one line
    if len(baseline.workers) != 1 or not getattr(STRATEGIES.get(baseline.strategy), "model_per_worker", False):
        raise ContractError(
            f"--baseline {path} is a {len(baseline.workers)}-worker {baseline.strategy} run, not a 1-worker one"
        )
    for key in ("task", "source", "split_seed", "test_examples", "labels", "problem", "target"):
        default = "classification" if key == "problem" else None  # reports before this round: classification
        if getattr(baseline, key) != report.get(key, default):
            raise ContractError(
                f"--baseline {path} is of other data: its {key} is {getattr(baseline, key)!r}, "
                f"this run's {report.get(key)!r}"
            )
    return baseline


def baseline_row(path, report):
    if path is None:
        return None, {
            "available": False,
            "why": "no 1-worker baseline given: a plain run has none (aggregator "
            "--baseline names a 1-worker run's report.json on the same data; the benchmarks and "
            "tests/integration/test_pipeline.py train one)",
        }
    baseline = read_baseline(path, report)
    if report.get("problem") == "regression":
        row = {
            "model": "1-worker baseline",
            **{key: baseline.final.get(f"test_{key}") for key in ("rmse", "mae", "r2")},
        }
        return row, {"available": True, "report": os.path.abspath(path), "created_at": baseline.created_at}
    final = (baseline.analysis or {}).get("models", {}).get("final", {})
    row = {
        "model": "1-worker baseline",
        "accuracy": baseline.final["test_accuracy"],
        **{key: final[key] for key in ("macro_f1", "ece") if key in final},
    }
    return row, {"available": True, "report": os.path.abspath(path), "created_at": baseline.created_at}


def run_models(report, outputs):
    """[(name, role, outputs)] of the run: the workers, the combine candidates, the final model."""
    models = [(row["name"], "worker", outputs[row["name"]]) for row in report["workers"]]
    combine = report.get("combine")
    if combine:
        for name, candidate in combine["candidates"].items():
            if candidate.get("available") is False:
                continue
            key = f"worker {candidate['worker_index']}" if name == "best" else name
            models.append((name, "candidate", outputs[key]))
        final = dict((name, out) for name, _, out in models)[combine["published"]]
    else:
        final = outputs["final"]
    return models + [("final", "final", final)]


def analyse(report, outputs, x_test, y_test, baseline=None):
    """report.json's "analysis" section. outputs: {model name: what evaluate(outputs=...) kept},
    named as main.py names them (the workers' row names, "average", "ensemble", "final")."""
    started = time.perf_counter()
    task, labels = report["task"], report["labels"]
    problem = report.get("problem", "classification")
    metric = primary_metric(task, problem)
    facts = task_of(task)
    y = np.asarray(y_test)
    if problem == "regression":
        slice_of, slices = target_slices(y)
        method = {
            "kind": "regression",
            "residual": "prediction - target (bias: their mean)",
            "predicted_vs_actual": f"{RESIDUAL_BINS} bins cut at the deciles of the true target: the mean true "
            "and the mean predicted value in each",
            "slices": "quartiles of the true target",
            "points": f"up to {RESIDUAL_POINTS} (actual, predicted) pairs of the final model and the best "
            "worker, a fixed random sample, for the scatter plots",
            "calibration": {"skipped": CALIBRATION_SKIPPED},
        }
        analyse_one = lambda out: regression(out["predictions"], y, slice_of, slices)  # noqa: E731
    elif facts.retrieval:
        method = {
            "kind": "retrieval per held-out person",
            "queries": "query: an augmented other photo of the person (their only photo when they have one); "
            + ", ".join(HARD_QUERIES)
            + ": their gallery photo altered (evaluation.evaluate_retrieval)",
            "margin": "per person: distance to the nearest wrong person / distance to the right one",
        }
        analyse_one = lambda out: retrieval_per_person(out, labels)  # noqa: E731
    else:
        if facts.vocabulary:
            slice_of, slices = length_buckets(np.asarray(x_test).ravel())
            slicing = (
                "input length in tokens as the model sees them (lower case, punctuation stripped, split on "
                "whitespace: TextVectorization's standardisation), in buckets cut at the 25/50/75 % quantiles "
                "of the held-out lengths"
            )
        else:
            slice_of, slices = y, [{"slice": name} for name in labels]
            slicing = "true class"
        method = {
            "kind": "classification",
            "calibration_bins": CALIBRATION_BINS,
            "ece": f"expected calibration error: {CALIBRATION_BINS} equal-width bins of the top-label confidence, "
            "the example-weighted mean of |accuracy - mean confidence| over the bins",
            "slices": slicing,
            "metrics": "scikit-learn (confusion_matrix, precision_recall_fscore_support, f1_score)",
        }
        analyse_one = lambda out: classification(out["probabilities"], y, labels, slice_of, slices)  # noqa: E731
    models, order = {}, []
    for name, role, out in run_models(report, outputs):
        models[name] = dict(analyse_one(out), role=role)
        order.append(name)
    workers = [name for name in order if models[name]["role"] == "worker"]
    value = metric.name if problem != "regression" else "rmse"
    best_value = metric.best([models[name][value] for name in workers])
    best_worker = next(
        (name for name in workers if models[name][value] == best_value), workers[0]
    )  # the first of equals
    keys = (
        ("rmse", "mae", "r2")
        if problem == "regression"
        else ("accuracy",)
        if facts.retrieval
        else ("accuracy", "macro_f1", "ece")
    )
    final_label = "final" + (f" ({report['combine']['published']})" if report.get("combine") else "")
    by = "accuracy" if metric.unit == "fraction" else metric.label
    rows = [
        {"model": final_label, **{k: models["final"][k] for k in keys}},
        {"model": f"best worker ({best_worker}, by held-out {by})", **{k: models[best_worker][k] for k in keys}},
    ]
    if problem == "regression":  # the scatter plots' samples: the final model's and the best worker's only
        for name in order:
            if name not in ("final", best_worker):
                models[name].pop("points", None)
    baseline_figures, baseline_facts = baseline_row(baseline, report)
    if baseline_figures:
        rows.append(baseline_figures)
    return {
        "compare": {"rows": rows, "best_worker": best_worker, "baseline": baseline_facts},
        "method": method,
        "models": models,
        "order": order,
        "compute_sec": time.perf_counter() - started,
    }


def print_summary(section):
    """One short line per model under the aggregator's table."""
    models = section["models"]
    if section["method"]["kind"] == "regression":
        print(f"{'model':<24}{'bias':>10}{'resid sd':>10}{'p90 |err|':>11}  (residual = prediction - target)")
        for name in section["order"]:
            m = models[name]
            print(f"{name:<24}{m['bias']:>10.4g}{m['residual_std']:>10.4g}{m['abs_error_quantiles']['p90']:>11.4g}")
        print("calibration: none for regression (" + section["method"]["calibration"]["skipped"].split(";")[0] + ")")
    elif section["method"]["kind"] == "classification":
        print(f"{'model':<24}{'macro-F1':>10}{'ECE':>8}  ({section['method']['calibration_bins']} bins)")
        for name in section["order"]:
            print(f"{name:<24}{models[name]['macro_f1']:>10.4f}{models[name]['ece']:>8.4f}")
    else:
        print(f"{'model':<24}" + "".join(f"{kind:>10}" for kind in QUERIES) + "  (people right, top-1)")
        for name in section["order"]:
            right = models[name]["people_right"]
            print(f"{name:<24}" + "".join(f"{right[kind]:>7}/{models[name]['people_count']:<2}" for kind in QUERIES))
    baseline = section["compare"]["baseline"]
    print(
        "baseline: "
        + (baseline["report"] if baseline["available"] else "none (" + baseline["why"].split(":")[0] + ")")
        + "\n"
    )


# -------------------------------------------------------------------------------------- plots
FINAL, BEST, OTHER = "#fc8d62", "#8da0cb", "#b3b3b3"


def plot(section, report, path):
    """analysis.png: classifiers: the final model's confusion matrix, a reliability diagram (final vs
    workers), per-class F1 and slice accuracy (final vs the best worker); faces: per person, top-1 of
    each query kind (final) and the margin (final vs the best worker). Written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from disttrain_contract import atomic_path

    if section["method"]["kind"] == "regression":
        fig, axes = plt.subplots(2, 2, figsize=(13, 10))
        target = report.get("target") or "target"
        plot_predicted_vs_actual(axes[0, 0], section, target)
        plot_residuals(axes[0, 1], section, target)
        plot_residual_histogram(axes[1, 0], section)
        plot_slice_errors(axes[1, 1], section, target)
    elif section["method"]["kind"] == "classification":
        fig, axes = plt.subplots(2, 2, figsize=(13, 10))
        plot_confusion(axes[0, 0], section, report["labels"])
        plot_reliability(axes[0, 1], section)
        plot_paired_bars(
            axes[1, 0],
            section,
            [c["label"] for c in section["models"]["final"]["per_class"]],
            lambda m: [c["f1"] for c in m["per_class"]],
            "F1",
            "per-class F1",
        )
        plot_paired_bars(
            axes[1, 1],
            section,
            [s["slice"] for s in section["models"]["final"]["slices"]],
            lambda m: [s["accuracy"] for s in m["slices"]],
            "held-out accuracy",
            "accuracy by slice: " + ("input length" if task_of(report).vocabulary else "true class"),
            counts=[s["examples"] for s in section["models"]["final"]["slices"]],
        )
    else:
        fig, axes = plt.subplots(1, 2, figsize=(14, max(4, 0.3 * section["models"]["final"]["people_count"] + 2)))
        plot_people_top1(axes[0], section)
        plot_people_margin(axes[1], section)
    fig.suptitle(
        f"{report['task']} / {report['strategy']}: analysis on {report['test_examples']} held-out examples", fontsize=13
    )
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=90)
    plt.close(fig)


def plot_predicted_vs_actual(axis, section, target):
    """Final model (and the best worker, faded): each sampled example, the deciles' means, the diagonal."""
    best = section["compare"]["best_worker"]
    final = section["models"]["final"]
    shown = [(best, BEST, 0.35, f"best worker ({best})"), ("final", FINAL, 0.6, "final")] if best != "final" else []
    for name, color, alpha, label in shown:
        points = section["models"][name].get("points") or {"actual": [], "predicted": []}
        axis.scatter(points["actual"], points["predicted"], s=10, color=color, alpha=alpha, label=label)
    bins = final["predicted_vs_actual"]
    axis.plot(
        [b["mean_target"] for b in bins],
        [b["mean_predicted"] for b in bins],
        color="black",
        marker="o",
        linewidth=1.5,
        label="final: mean per decile of the target",
    )
    values = final["points"]["actual"] + final["points"]["predicted"]
    if values:
        low, high = min(values), max(values)
        axis.plot([low, high], [low, high], color="black", linestyle=":", linewidth=1, label="predicted = actual")
    axis.set_xlabel(f"actual {target}")
    axis.set_ylabel(f"predicted {target}")
    axis.set_title(
        f"predicted vs actual (final: RMSE {final['rmse']:.4g}, MAE {final['mae']:.4g}, R² {final['r2']:.3f})"
    )
    axis.legend(fontsize=8, loc="upper left")


def plot_residuals(axis, section, target):
    final = section["models"]["final"]
    points = final["points"]
    residual = np.asarray(points["predicted"]) - np.asarray(points["actual"])
    axis.scatter(points["predicted"], residual, s=10, color=FINAL, alpha=0.6)
    axis.axhline(0.0, color="black", linestyle=":", linewidth=1)
    axis.axhline(
        final["bias"], color=FINAL, linestyle="--", linewidth=1, label=f"bias (mean residual) {final['bias']:.4g}"
    )
    axis.set_xlabel(f"predicted {target}")
    axis.set_ylabel("residual: prediction - target")
    axis.set_title(
        "final model: residuals against the prediction\n(no pattern: the errors do not depend on it)", fontsize=10
    )
    axis.legend(fontsize=8, loc="upper left")


def plot_residual_histogram(axis, section):
    best = section["compare"]["best_worker"]
    for name, color, label in ((best, BEST, f"best worker ({best})"), ("final", FINAL, "final")):
        points = section["models"][name].get("points")
        if not points or not points["actual"]:
            continue
        residual = np.asarray(points["predicted"]) - np.asarray(points["actual"])
        axis.hist(
            residual,
            bins=30,
            color=color,
            alpha=0.55,
            label=f"{label}, sd {section['models'][name]['residual_std']:.3g}",
        )
    axis.axvline(0.0, color="black", linestyle=":", linewidth=1)
    axis.set_xlabel("residual: prediction - target")
    axis.set_ylabel("examples (the plotted sample)")
    axis.set_title("residuals: final vs best worker")
    axis.legend(fontsize=8, loc="upper right")


def plot_slice_errors(axis, section, target):
    best = section["compare"]["best_worker"]
    slices = section["models"]["final"]["slices"]
    x = np.arange(len(slices))
    axis.bar(x - 0.2, [s["rmse"] for s in slices], 0.4, color=FINAL, label="final")
    axis.bar(
        x + 0.2, [s["rmse"] for s in section["models"][best]["slices"]], 0.4, color=BEST, label=f"best worker ({best})"
    )
    axis.set_xticks(x, [f"{s['slice']}\n({s['examples']} ex.)" for s in slices], fontsize=8)
    axis.set_ylabel("RMSE (lower is better)")
    axis.set_title(f"RMSE by quartile of the true {target}")
    axis.legend(fontsize=8, loc="upper left")
    axis.grid(axis="y", alpha=0.3)


def plot_confusion(axis, section, labels):
    import matplotlib.colors

    matrix = np.asarray(section["models"]["final"]["confusion_matrix"])
    # a power norm: the few errors off the diagonal stay visible next to its large counts
    image = axis.imshow(matrix, cmap="Blues", norm=matplotlib.colors.PowerNorm(0.35, vmin=0, vmax=max(matrix.max(), 1)))
    limit = matrix.max() / 2 if matrix.size else 0
    for (i, j), count in np.ndenumerate(matrix):
        if count:
            axis.text(
                j, i, str(count), ha="center", va="center", fontsize=8, color="white" if count > limit else "black"
            )
    axis.set_xticks(
        range(len(labels)),
        labels,
        rotation=45 if max(map(len, labels)) > 2 else 0,
        ha="right" if max(map(len, labels)) > 2 else "center",
    )
    axis.set_yticks(range(len(labels)), labels)
    axis.set_xlabel("predicted")
    axis.set_ylabel("true")
    final = section["models"]["final"]
    axis.set_title(
        f"final model: confusion matrix (accuracy {final['accuracy']:.3f}, macro-F1 {final['macro_f1']:.3f})"
    )
    axis.figure.colorbar(image, ax=axis, fraction=0.046)


def plot_reliability(axis, section):
    import matplotlib.pyplot as plt

    axis.plot([0, 1], [0, 1], color="black", linestyle=":", linewidth=1, label="perfectly calibrated")
    shown = [name for name in section["order"] if section["models"][name]["role"] != "candidate"]
    worker_colors = plt.cm.viridis(np.linspace(0.15, 0.75, max(len(shown) - 1, 1)))
    total = sum(b["examples"] for b in section["models"]["final"]["reliability"]) or 1
    for i, name in enumerate(shown):
        model = section["models"][name]
        filled = [b for b in model["reliability"] if b["examples"]]
        final = name == "final"
        color = FINAL if final else worker_colors[i]
        x, y = [b["confidence"] for b in filled], [b["accuracy"] for b in filled]
        axis.plot(
            x,
            y,
            color=color,
            linewidth=2.5 if final else 1,
            alpha=1 if final else 0.7,
            label=f"{name} (ECE {model['ece']:.3f})",
            zorder=3 if final else 2,
        )
        # the marker's area: the bin's share of the examples (a bin of 2 examples says little)
        axis.scatter(
            x,
            y,
            s=[8 + 600 * b["examples"] / total for b in filled],
            color=color,
            alpha=1 if final else 0.7,
            zorder=3 if final else 2,
        )
    axis.set_xlim(0, 1.02)
    axis.set_ylim(0, 1.02)
    axis.set_xlabel(f"mean top-label confidence in the bin ({section['method']['calibration_bins']} equal-width bins)")
    axis.set_ylabel("accuracy in the bin")
    axis.set_title("reliability: final vs workers (below the diagonal: over-confident)")
    axis.legend(fontsize=8, loc="upper left", title="marker area: the bin's examples", title_fontsize=8)


def plot_paired_bars(axis, section, names, values_of, ylabel, title, counts=None):
    best = section["compare"]["best_worker"]
    x = np.arange(len(names))
    final_values, best_values = values_of(section["models"]["final"]), values_of(section["models"][best])
    axis.bar(x - 0.2, final_values, 0.4, color=FINAL, label="final")
    axis.bar(x + 0.2, best_values, 0.4, color=BEST, label=f"best worker ({best})")
    low = min(final_values + best_values + [1.0])
    axis.set_ylim(max(0.0, low - 0.1) if low > 0.5 else 0.0, 1.0)
    ticks = names if counts is None else [f"{n}\n({c} ex.)" for n, c in zip(names, counts)]
    axis.set_xticks(x, ticks, fontsize=8)
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    axis.legend(fontsize=8, loc="lower right")
    axis.grid(axis="y", alpha=0.3)


def plot_people_top1(axis, section):
    people = section["models"]["final"]["people"]
    grid = np.array([[person[kind]["top1"] for kind in QUERIES] for person in people], dtype=float)
    axis.imshow(grid, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
    axis.set_xticks(range(len(QUERIES)), QUERIES)
    axis.set_yticks(range(len(people)), [p["person"] for p in people], fontsize=8)
    right = section["models"]["final"]["people_right"]
    axis.set_title(
        "final model: nearest gallery photo is the right person\n(green yes, red no; right: "
        + ", ".join(f"{kind} {right[kind]}/{len(people)}" for kind in QUERIES)
        + ")",
        fontsize=10,
    )


def plot_people_margin(axis, section):
    best = section["compare"]["best_worker"]
    people = section["models"]["final"]["people"]
    y = np.arange(len(people))
    for offset, name, color in ((-0.2, "final", FINAL), (0.2, best, BEST)):
        margins = [p["query"].get("margin", 0.0) for p in section["models"][name]["people"]]
        axis.barh(y + offset, margins, 0.4, color=color, label=name if name == "final" else f"best worker ({name})")
    axis.axvline(1.0, color="black", linestyle=":", linewidth=1)
    axis.set_yticks(y, [p["person"] for p in people], fontsize=8)
    axis.invert_yaxis()
    axis.set_xlabel("margin: nearest wrong person's distance / right person's (query; < 1: retrieved wrong)")
    axis.set_title("per person margin: final vs best worker", fontsize=10)
    axis.legend(fontsize=8, loc="lower right")
