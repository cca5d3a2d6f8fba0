"""The run's report: built (a contract report.Report), printed as a table, plotted (report.png) and
written with the model (report.json, report.png, analysis.png, model.keras, each atomically).

The report's fields and their JSON are the contract's (disttrain_contract.report); this module fills
them from what the aggregator measured."""

import contextlib
import os
import time

import numpy as np

from disttrain_aggregator import analysis
from disttrain_aggregator.data_summary import data_summary
from disttrain_contract import ContractError, atomic_path
from disttrain_contract.artifact import save_model
from disttrain_contract.layout import REPORT_FILE
from disttrain_contract.metrics import metrics_of
from disttrain_contract.records import RecordError
from disttrain_contract.report import MetricSummary, ModelRow, Privacy, Report, write_report
from disttrain_contract.strategies import strategy_of
from disttrain_contract.tasks import task_of
from disttrain_contract.trainer_records import metrics_path, read_epoch_records


def build_report(
    manifest,
    metric,
    strategy,
    markers,
    rows,
    left_out,
    final_metrics,
    trained_on,
    combined,
    final_meta,
    histories,
    data_dir,
):
    """The report of what was measured: `rows` the evaluated worker models (or the promoted chief's), the
    final model's `final_metrics` on `trained_on` examples, `combined` the --combine candidates (average);
    `markers` the workers' TrainerMarkers, `histories` their EpochRecords."""
    return Report(
        strategy=strategy,
        task=manifest.task,
        problem=manifest.problem,
        target=manifest.target,
        # the metric the models are ranked and gated by; every model's row has test_<name> of each of
        # metrics.metrics_of(task, problem) (regression: rmse, mae, r2, loss = the mean squared error)
        primary_metric=MetricSummary.of(metric),
        metrics=[m.name for m in metrics_of(manifest.task, manifest.problem)],
        labels=manifest.labels,
        source=manifest.source,
        seed=final_meta.get("seed"),
        split_seed=manifest.seed,
        init_weights_sha256=markers[0].init_weights_sha256,
        workers=[ModelRow.from_json(row, manifest.task, manifest.problem, named=True) for row in rows],
        missing_workers=left_out or None,
        final=ModelRow(examples=trained_on, metrics=dict(final_metrics)),
        combine=combined or None,
        test_examples=manifest.test.examples,
        epochs=markers[0].epochs,
        # learning rate, batch, epochs, width, dropout, and whether they came from the trainer's flags
        # or the sweep's best.json (trainer --params-from); absent for models of older trainers
        training_parameters=final_meta.get("training_parameters"),
        parameters_origin=final_meta.get("parameters_origin"),
        training_wall_time_sec=max((sum(e.wall_time_sec for e in h) for h in histories), default=None),
        ps_facts=ps_facts(markers) if strategy_of(strategy).parameter_servers else None,
        data=data_summary(data_dir, manifest),  # the copier's statistics and validation result
        privacy=run_privacy(markers),
        created_at=time.time(),
    )


def run_privacy(markers):
    """A differentially private run's budget (the trainers' markers' privacy sections), or None. Workers that
    trained alone on disjoint shards (average, localsgd) each have their own ε; the run's is the largest. With a
    private vocabulary each section's ε and δ are already its total (training plus vocabulary, the same vocabulary
    for every worker), and its `training` and `vocabulary` parts pass through."""
    sections = [m.privacy for m in markers if m.privacy]
    if not sections:
        return None
    worst = max(sections, key=lambda section: section.epsilon)
    details = dict(worst.details)
    if len(sections) > 1:
        details["epsilon_by_worker"] = [m.privacy.epsilon if m.privacy else None for m in markers]
    return Privacy(worst.epsilon, worst.delta, worst.mechanism, details)


def missing_workers(manifest, missing):
    """What the report says of each worker left out by --min-workers: its shard's share of the data."""
    return [
        {
            "worker_index": i,
            "shard_examples": manifest.shard(i).examples,
            "share_of_training_data": manifest.shard(i).examples / manifest.train_examples,
        }
        for i in missing
    ]


def ps_facts(markers):
    """Parameter-server training, per role: who was what, and how many steps each worker started."""
    chief = markers[0]
    return {
        "tasks": [{"index": m.worker_index, "role": m.role, "examples": m.examples} for m in markers],
        "steps_scheduled": chief.steps_scheduled,
        "steps_started_by_worker": chief.steps_started_by_worker,
        "steps_retried": chief.steps_retried,
    }


def load_metrics(worker_dir):
    """A worker's EpochRecords; [] when its metrics.json is missing or unreadable (the report then has no curve
    of it), a RecordError when a record is not of the form."""
    try:
        return read_epoch_records(metrics_path(worker_dir))
    except RecordError:
        raise  # a record of another form: refused, naming its field
    except ContractError:  # not JSON, not readable: as ever, the report has no curve of it
        return []


def print_table(report):
    """The report (a contract report.Report) as a table of its metric columns (report.metric_columns):
    accuracy and loss for classifiers; RMSE, MAE, R², MSE for regression; retrieval distances for faces."""
    columns = report.columns
    rows = [(r.name, r) for r in report.workers] + [(report.final_label, report.final)]
    print(f"\n{'model':<24}{'examples':>10}" + "".join(f"{c.short:>12}" for c in columns))
    print("-" * (34 + 12 * len(columns)))
    for name, row in rows:
        print(f"{name:<24}{row.examples:>10}" + "".join(f"{row[c.key]:>12.4f}" for c in columns))
    held_out = f"{report.test_examples} held-out examples"
    if report.retrieval:
        held_out += f" of {report.final['test_people']} people never seen in training"
    if report.problem == "regression":
        held_out += f"; target {report.target!r}, RMSE and MAE in its unit (lower is better), R² of 1 is a perfect fit"
    if report.privacy is not None:
        held_out += (
            f"; differentially private: ε = {report.privacy.epsilon:.2f} at δ = {report.privacy.delta:g} "
            f"({report.privacy.details.get('accountant', 'RDP')})"
        )
        parts = report.privacy.details
        if parts.get("vocabulary"):  # a private vocabulary: the total is the two parts added
            held_out += (
                f", the sum of training's ε = {parts['training']['epsilon']:.2f} and the private vocabulary's "
                f"ε = {parts['vocabulary']['epsilon']:.2f}"
            )
    print(held_out + "\n")
    if report.retrieval and "test_darker_margin" in report.final.metrics:
        print_hard_queries(report.final.metrics)


def print_hard_queries(final):
    """The harder retrieval (evaluation.evaluate_retrieval): each held-out person's gallery photo, altered."""
    print(f"{'final model, query':<24}{'top-1':>10}{'right dist':>12}{'wrong dist':>12}{'margin':>10}")
    print("-" * 68)
    for kind, title in (("darker", "0.7x darker"), ("rotated", "rotated 6 degrees"), ("smaller", "1/3 resolution")):
        print(
            f"{title:<24}{final[f'test_{kind}_top1_accuracy']:>10.4f}{final[f'test_{kind}_right_distance']:>12.4f}"
            f"{final[f'test_{kind}_nearest_wrong_distance']:>12.4f}{final[f'test_{kind}_margin']:>9.2f}x"
        )
    print("margin: mean distance to the nearest wrong person / to the right one\n")


def plot_report(report, histories, path):
    """Bars: the held-out primary metric (accuracy; regression: RMSE) per worker, per combine
    candidate (average runs) and final, with the quality gate's trivial predictor as a line. Curves: its per-epoch held-out value for each worker (the
    trainers' test_<metric>), with the final model as a line. Under them, one
    line of the copier's data validation (when the dataset has it)."""
    # (matplotlib keeps its font cache where MPLCONFIGDIR says, the images set /tmp; never in the published
    # directory, whose every file the server and the next stage read)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from disttrain_contract import atomic_path

    hard = task_of(report).retrieval and "test_darker_margin" in report["final"]  # the faces' harder queries
    primary = report.get("primary_metric") or {"name": "accuracy", "label": "accuracy", "direction": "max"}
    key, fraction = f"test_{primary['name']}", primary["name"] == "accuracy"
    ylabel = (
        "held-out top-1 retrieval"
        if task_of(report).retrieval
        else f"held-out {primary['label']}"
        + ("" if fraction else f" ({'lower' if primary['direction'] == 'min' else 'higher'} is better)")
    )
    fig, axes = plt.subplots(1, 3 if hard else 2, figsize=(16 if hard else 11, 4))
    plot_bars(axes[0], report, key, fraction, ylabel)
    plot_curves(axes[1], report, histories, key, ylabel)
    if hard:
        plot_hard_queries(axes[2], report["final"])
    data = report.get("data")
    if data:
        fig.text(0.01, 0.01, data_line(report, data), fontsize=8, color="#555555")
        fig.tight_layout(rect=(0, 0.04, 1, 1))
    else:
        fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def plot_bars(bars, report, key, fraction, ylabel):
    """The held-out `key` of each worker, each available combine candidate and the final model, with the
    quality gate's trivial predictor as a dotted line."""
    candidates = [
        (name, c)
        for name, c in (report.get("combine") or {}).get("candidates", {}).items()
        if c.get("available") is not False
    ]
    names = (
        [r["name"] for r in report["workers"]]
        + [f"best (w{c['worker_index']})" if name == "best" else name for name, c in candidates]
        + ["final"]
    )
    values = [r[key] for r in report["workers"]] + [c[key] for _, c in candidates] + [report["final"][key]]
    colors = ["#8da0cb"] * len(report["workers"]) + ["#66c2a5"] * len(candidates) + ["#fc8d62"]
    bars.bar(names, values, color=colors)
    for x, v in enumerate(values):
        bars.text(
            x,
            v,
            f"{v:.3f}" if fraction else f"{v:.4g}",
            ha="center",
            va="bottom",
            fontsize=8 if len(values) > 5 else 10,
        )
    if len(values) > 5:
        bars.tick_params(axis="x", labelrotation=30, labelsize=8)
    # the quality gate's floor: what a model that ignores its input scores (gate.py's trivial check)
    floor = next((c for c in (report.get("gate") or {}).get("checks", []) if c["name"] == "trivial"), None)
    if floor:
        bars.axhline(
            floor["reference_value"],
            color="#555555",
            linestyle=":",
            label=f"trivial predictor ({floor['predictor']['name']}): {floor['reference_value']:.4g}",
        )
        bars.legend(fontsize=8, loc="lower right")
    finite = [v for v in values if np.isfinite(v)] + ([floor["reference_value"]] if floor else [])
    bars.set_ylim(0, 1.05 if fraction else 1.15 * max(finite + [1e-9]))
    bars.set_ylabel(ylabel)
    bars.set_title(bars_title(report))


def bars_title(report):
    """The task and strategy, the combine mode published, and the privacy guarantee when there is one."""
    return (
        f"{report['task']} / {report['strategy']}"
        + (f": {report['combine']['published']} published" if report.get("combine") else "")
        + (
            f"\n{'DP-SGD + private vocabulary' if report['privacy'].get('vocabulary') else 'DP-SGD'}: "
            f"ε = {report['privacy']['epsilon']:.2f}, δ = {report['privacy']['delta']:g}"
            if report.get("privacy")
            else ""
        )
    )


def plot_curves(curves, report, histories, key, ylabel):
    """Each worker's per-epoch held-out `key` (the epochs it evaluated), with the final model's as a dashed line."""
    import matplotlib.ticker

    for i, history in enumerate(histories):
        evaluated = [e for e in history if key in e.metrics]  # multiworker, localsgd: the chief evaluates
        if evaluated:
            curves.plot(
                [e.epoch for e in evaluated], [e.metrics[key] for e in evaluated], marker="o", label=f"worker {i}"
            )
    curves.axhline(report["final"][key], color="#fc8d62", linestyle="--", label="final model")
    curves.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    curves.set_xlabel("epoch")
    curves.set_ylabel("held-out accuracy" if task_of(report).retrieval else ylabel)
    curves.set_title("training curves")
    curves.legend()


def data_line(report, data):
    """The copier's data validation in one line, under the plots."""
    skew = [v for v in (data.get("label_skew") or {}).values() if isinstance(v, (int, float))]
    return (
        f"data: validation {'passed' if data['passed'] else 'FAILED'}, {len(data['warnings'])} warning(s), "
        f"{data['leaked_duplicates']} held-out input(s) also in training"
        + (f", largest label skew {max(skew):.3f} (total-variation distance)" if skew else "")
        + f"; {report['final']['examples']:,} training / {report['test_examples']:,} held-out examples"
    )


def plot_hard_queries(axis, final):
    """The final model's distances to the right person and to the nearest wrong one, per altered query."""
    kinds = [("darker", "0.7x darker"), ("rotated", "rotated 6°"), ("smaller", "1/3 resolution")]
    x = np.arange(len(kinds))
    right = [final[f"test_{k}_right_distance"] for k, _ in kinds]
    wrong = [final[f"test_{k}_nearest_wrong_distance"] for k, _ in kinds]
    axis.bar(x - 0.2, right, 0.4, label="right person", color="#66c2a5")
    axis.bar(x + 0.2, wrong, 0.4, label="nearest wrong person", color="#e78ac3")
    for i, (k, _) in enumerate(kinds):
        axis.text(
            i,
            max(right[i], wrong[i]),
            f"top-1 {final[f'test_{k}_top1_accuracy']:.2f}\n{final[f'test_{k}_margin']:.1f}x",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    axis.set_xticks(x, [title for _, title in kinds])
    axis.set_ylabel("mean embedding distance")
    axis.set_ylim(0, max(wrong + right) * 1.35)
    axis.set_title("final model: altered gallery photos as queries")
    axis.legend(fontsize=8, loc="upper left")


def write_model_and_report(directory, savefile, final, meta, report, histories, staged=None):
    """The model, report.json (`report`, a contract report.Report) and report.png into `directory`, each
    atomically; `staged`: the exports (exports.Staged), renamed into place first."""
    os.makedirs(directory, exist_ok=True)
    # The report is renamed into place only after the model is (both atomically): a full
    # disk while writing the model leaves no new report next to the old model, and no
    # temporary behind.
    with contextlib.ExitStack() as publish:
        report_tmp, png_tmp, analysis_tmp = (
            publish.enter_context(atomic_path(os.path.join(directory, name)))
            for name in (REPORT_FILE, "report.png", "analysis.png")
        )
        plotted = report.to_json()  # (the plots read the report's JSON form)
        plot_report(plotted, histories, png_tmp)
        started = time.perf_counter()
        analysis.plot(plotted["analysis"], plotted, analysis_tmp)
        report.analysis["plot_sec"] = time.perf_counter() - started
        if staged:  # before the model: a server or TF Serving that sees the new model.keras finds its exports
            staged.publish(directory)
        write_report(report_tmp, report)
        save_model(final, savefile, meta)


def print_exports(section, final_dir):
    """One line per export: where it is, and the TFLite model's numbers against the Keras model's."""
    saved = section.get("saved_model")
    if saved:
        signatures = ", ".join(f"{key}({', '.join(sig['inputs'])})" for key, sig in saved["signatures"].items())
        print(
            f"aggregator: SavedModel {os.path.join(final_dir, saved['path'])} (TF Serving --model_base_path="
            f"{os.path.join(final_dir, saved['base_path'])}): {signatures}; outputs within "
            f"{saved['max_abs_diff_vs_keras']:.2g} of the Keras model's",
            flush=True,
        )
    lite = section.get("tflite")
    if lite and "skipped" in lite:
        print(f"aggregator: no TFLite model: {lite['skipped']}", flush=True)
    elif lite:
        name = lite.get("metric", "accuracy")
        title = "accuracy" if name == "accuracy" else name.upper() if name in ("rmse", "mae") else name
        print(
            f"aggregator: TFLite {os.path.join(final_dir, lite['path'])} "
            f"({', '.join(i['name'] for i in lite['inputs'])} in): "
            f"{lite['size_bytes']:,} bytes, builtin ops only; held-out {title} {lite[f'test_{name}']:.4f} "
            f"(Keras {lite[f'keras_test_{name}']:.4f}); one instance {lite['latency_ms']['tflite_median']:.2f} ms "
            f"(Keras {lite['latency_ms']['keras_median']:.2f} ms)",
            flush=True,
        )
