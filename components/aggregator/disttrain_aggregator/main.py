"""disttrain-aggregator: check the worker models, combine them, evaluate, publish.

    disttrain-aggregator --expect 2 --workdir workdir

1. wait for every worker's marker (one overall --timeout; checks.wait_for_workers);
2. check the markers belong together (checks.py): same strategy, same worker count, same
   initial-weights hash (recorded by each trainer from the shared seed);
   refuse otherwise -- averaging unrelated networks gives garbage;
3. one worker model at a time: load it (--model-module imported first, for an own
   model's registered layers), check it against its marker, the dataset (task,
   problem, labels, a head that fits the problem) and the first model (initial
   weights, architecture, vocabulary, head, inputs, outputs, model code), evaluate it
   on the held-out split (its primary metric: accuracy, or RMSE for regression, with
   the problem's other metrics), add its weights to a running weighted sum, drop it -- so the
   memory held is one worker model besides the first and the sum, for any count
   (until combine.py's ensemble, which holds all of them: see step 4);
4. average: weighted mean of every weight array, weights = shard sizes; then
   combine.py evaluates it beside the ensemble of the worker models and the best
   worker by its validation value of the primary metric (in the metric's direction:
   the lowest RMSE), and --combine says which one is published;
   multiworker, localsgd: the workers end in sync (localsgd: their markers' final
   weight hashes must agree), the chief's model is promoted; parameterserver: the
   chief's model is promoted once every task's marker (chief, ps, workers) is in
   its place;
5. evaluate the result, and the published model (if any) on this run's held-out
   split; analysis.py analyses every model evaluated (per class, calibration, slices)
   from the predictions already made; the quality gate (gate.py) decides whether the
   result may replace the published model, and whether it is better than the trivial
   predictor (trivial.py: the training split's majority class, the training mean, chance);
6. export (exports.py, --exports): a TensorFlow SavedModel for TF Serving and KServe
   (final/saved_model/<version>/) and a TFLite model (final/model.tflite), built and
   checked against the Keras model on the held-out split in a staging directory; a
   failed export is an error and publishes nothing;
7. publish the exports, final/model.keras (atomically), report.json (built by report_builder.py:
   a contract report.Report), report.png,
   analysis.png, _SUCCESS -- only after every check passed, so bad input publishes
   nothing. A model the gate refuses goes to rejected/<time>/ beside final/ with its
   report (without exports), and the aggregator exits 4 (--force publishes it anyway,
   recorded in the report).
"""

import argparse
import dataclasses
import gc
import json
import os
import time

from disttrain_aggregator import analysis, checks, combine, exports, feeds, gate, publish, report_builder, trivial
from disttrain_aggregator.published_model import evaluate_published
from disttrain_aggregator.tensorboard_events import write_event_files
from disttrain_contract import (
    ContractError,
    Workdir,
    atomic_path,
    default_workdir,
    run_cli,
    wait_for_marker,
    write_marker,
)
from disttrain_contract.artifact import compile_as_saved
from disttrain_contract.evaluation import as_model_input, compiled_metric_values, evaluate
from disttrain_contract.metrics import primary_metric
from disttrain_contract.layout import REPORT_FILE, marker_path
from disttrain_contract.manifest import Manifest, read_split
from disttrain_contract.strategies import strategy_of
from disttrain_contract.tensorflow_import import import_tensorflow
from disttrain_contract.user_model import import_model_module


def parse_args(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    check_args(p, args)
    return args


def build_parser():
    p = argparse.ArgumentParser(
        prog="disttrain-aggregator",
        description="Check, combine (average or promote) and evaluate the worker models; publish the final model "
        "and report.json (stage 3 of disttrain) if it passes the quality gate.",
        epilog="exit status: 0 published; 2 bad input, a broken stage contract, an export or --publish-to upload that "
        "failed (nothing published); 3 timed out waiting for a stage; "
        f"{gate.EXIT_REFUSED} the quality gate refused the final model (kept with its report in rejected/<time>/ "
        "beside the final directory; the published model is left as it was).",
    )
    p.add_argument(
        "--workdir",
        default=default_workdir(),
        help="shared working directory (default $DISTTRAIN_WORKDIR or ./workdir)",
    )
    p.add_argument("--dir", help="the trainers' output directory (default WORKDIR/train)")
    p.add_argument("--data", help="the copier's output, for the held-out split (default WORKDIR/data)")
    p.add_argument(
        "--savefile",
        help="where the final model goes (default WORKDIR/final/model.keras); report.json is written next to it",
    )
    p.add_argument(
        "--expect", type=int, help="number of worker models to wait for (default: the dataset's shard count)"
    )
    p.add_argument("--timeout", type=float, default=3600, help="seconds to wait for all workers (default 3600)")
    p.add_argument(
        "--min-workers",
        type=int,
        help="average: publish with at least this many workers (default: all of them); the others' shards "
        "are left out and the report names them",
    )
    p.add_argument(
        "--straggler-wait",
        type=float,
        default=600,
        help="once --min-workers have finished, seconds to wait for the rest (default 600; never past --timeout)",
    )
    p.add_argument(
        "--combine",
        choices=combine.MODES,
        default="average",
        help="--strategy average: publish the weight average (default), an ensemble (one Keras model: the "
        "mean of the worker models' probabilities, or of their predictions for regression; N forward "
        "passes), or the best worker by its validation value of the primary metric (accuracy; regression: "
        "the lowest RMSE) from trainer --validation-fraction, never the held-out split. The report "
        "evaluates all three either way. Refused for the other strategies: their workers end with one "
        "shared model",
    )
    p.add_argument(
        "--model-module",
        metavar="MODULE[:FUNCTION]",
        help="the Python module the workers' models were built with (trainer --model-module): imported "
        "before any model is loaded, so that its registered custom layers load in Keras safe mode; a "
        "model whose disttrain.json records a module (model_code) is refused without it. The module must "
        "be importable here (PYTHONPATH, or a derived image); FUNCTION is not called",
    )
    p.add_argument(
        "--exports",
        type=exports.parse_kinds,
        default=exports.KINDS,
        metavar="LIST",
        help="what to export next to the final model, comma-separated: saved_model (SAVEFILE's directory"
        "/saved_model/<version>/, for TensorFlow Serving and KServe; an own model's signature takes its "
        "own input names), tflite (model.tflite; skipped with the reason in the report when the model "
        "cannot be one, e.g. string inputs or ops without a TFLite builtin); or none "
        "(default: saved_model,tflite). Each is checked against the Keras model on the held-out split, "
        "and the report has their numbers",
    )
    p.add_argument(
        "--publish-to",
        type=publish.parse_url,
        metavar="s3://BUCKET/PREFIX",
        help="also publish to object storage, once the gate passed and before the final directory: a new "
        "release PREFIX/releases/<version>/ (the SavedModel, model.keras, model.tflite, report.json), the "
        "SavedModel in PREFIX/saved_model/<version>/ for TF Serving, and PREFIX/latest.json; no reader "
        "ever sees a partial version, and report.json's `published` says where it went. Credentials and "
        "endpoint: the standard AWS variables; a small write checks them when the aggregator starts",
    )
    p.add_argument(
        "--baseline",
        metavar="REPORT_JSON",
        help="a 1-worker run's report.json on the same data, for the analysis' comparison (final vs best "
        "worker vs this baseline); without it the report says there is none",
    )
    add_gate_arguments(p)
    return p


def add_gate_arguments(p):
    gating = p.add_argument_group(
        "quality gate",
        "the final model is published only if its held-out value of the primary metric passes three checks: "
        "against the best single worker, the published model, and the trivial predictor that ignores its input "
        "(the training split's majority class; regression: the training targets' mean; faces: chance, 1 / the "
        "held-out people). Classification (accuracy; faces: top-1 retrieval) in accuracy points with "
        "--max-drop-vs-best-worker, --max-regression and --min-gain-vs-trivial, regression (RMSE, lower is "
        "better) in percent of the reference's RMSE with the --max-relative-* ones and --min-relative-gain-vs-trivial",
    )
    gating.add_argument(
        "--max-drop-vs-best-worker",
        type=float,
        default=1.0,
        metavar="POINTS",
        help="classification: at most this many accuracy points below the best single worker model "
        "(default 1.0); not used for regression",
    )
    gating.add_argument(
        "--max-regression",
        type=float,
        default=1.0,
        metavar="POINTS",
        help="classification: at most this many accuracy points below the published model, evaluated "
        "on this run's held-out split (default 1.0; 0: no regression at all); not used for regression",
    )
    gating.add_argument(
        "--max-relative-drop-vs-best-worker",
        type=float,
        default=5.0,
        metavar="PERCENT",
        help="regression: the final model's held-out RMSE at most this many percent above the best "
        "single worker model's (default 5: RMSE 1.05 against 1.00 passes); not used for classification",
    )
    gating.add_argument(
        "--max-relative-regression",
        type=float,
        default=5.0,
        metavar="PERCENT",
        help="regression: the final model's held-out RMSE at most this many percent above the "
        "published model's, evaluated on this run's held-out split (default 5; 0: no worse at all); "
        "not used for classification",
    )
    gating.add_argument(
        "--min-gain-vs-trivial",
        type=float,
        default=1.0,
        metavar="POINTS",
        help="classification: at least this many accuracy points above the trivial predictor on the "
        "held-out split: always the training split's majority class (faces: chance, 1 / the held-out "
        "people) (default 1.0, about one standard error of an accuracy over 2,000 held-out examples; "
        "more than 0: a model only as good as the trivial predictor is never published); not used "
        "for regression",
    )
    gating.add_argument(
        "--min-relative-gain-vs-trivial",
        type=float,
        default=1.0,
        metavar="PERCENT",
        help="regression: the final model's held-out RMSE at least this many percent below the "
        "trivial predictor's, which always predicts the training targets' mean (default 1: about "
        "R² 0.02; more than 0); not used for classification",
    )
    gating.add_argument(
        "--published",
        metavar="PATH_OR_GLOB",
        help="the published model to compare with: a path, or a glob of which the newest match with "
        "its _SUCCESS marker counts (default: --savefile)",
    )
    gating.add_argument("--force", action="store_true", help="publish even if the gate fails (recorded in report.json)")


def check_args(p, args):
    """What argparse cannot check alone: p.error (exit 2) naming the flag."""
    if args.expect is not None and args.expect < 1:
        p.error("--expect must be >= 1")
    if args.min_workers is not None and not 1 <= args.min_workers <= (args.expect or args.min_workers):
        p.error(f"--min-workers must be in 1..--expect ({args.expect}), got {args.min_workers}")
    if args.straggler_wait < 0:
        p.error("--straggler-wait must be >= 0")
    if args.timeout < 0:
        p.error("--timeout must be >= 0")
    for flag in ("max_drop_vs_best_worker", "max_regression"):
        if not 0 <= getattr(args, flag) <= 100:  # also refuses nan
            p.error(f"--{flag.replace('_', '-')} must be between 0 and 100 (accuracy points)")
    for flag in ("max_relative_drop_vs_best_worker", "max_relative_regression"):
        if not 0 <= getattr(args, flag) <= 1000:  # also refuses nan
            p.error(f"--{flag.replace('_', '-')} must be between 0 and 1000 (percent)")
    for flag, unit in (("min_gain_vs_trivial", "accuracy points"), ("min_relative_gain_vs_trivial", "percent")):
        if not 0 < getattr(args, flag) <= 100:  # also refuses nan
            p.error(
                f"--{flag.replace('_', '-')} must be more than 0 and at most 100 ({unit}): a model only as good "
                "as the trivial predictor is never published"
            )


@dataclasses.dataclass(frozen=True)
class Places:
    """Where this aggregation reads and writes: the flags, else the working directory's places."""

    workdir: Workdir
    train_dir: str
    data_dir: str
    savefile: str
    final_dir: str  # the savefile's directory: report.json, the exports and the marker beside the model

    @classmethod
    def of(cls, args):
        workdir = Workdir(args.workdir)
        savefile = args.savefile or workdir.final_model
        return cls(
            workdir,
            args.dir or workdir.train,
            args.data or workdir.data,
            savefile,
            os.path.dirname(os.path.abspath(savefile)),
        )


@dataclasses.dataclass(frozen=True)
class Workers:
    """The finished workers, checked to belong together (checks.wait_for_workers)."""

    dirs: list
    markers: list  # their TrainerMarkers, in the order of dirs
    left_out: list  # the workers --min-workers went without (report_builder.missing_workers)
    expect: int

    @property
    def strategy(self):
        return self.markers[0].strategy

    @property
    def per_worker(self):
        """One model per worker to combine, or the group's one model (the chief's)."""
        return strategy_of(self.strategy).model_per_worker


@dataclasses.dataclass(frozen=True)
class Combined:
    """The final model and what it is: its held-out metrics, its metadata's --combine keys, the report's
    combine section (average runs), and the examples behind it."""

    model: object
    meta: dict  # the first worker model's disttrain.json, which the final model's is made of (publish_final)
    metrics: dict
    combine_meta: dict
    section: dict | None
    trained_on: int


class HeldOut:
    """The held-out split, and models measured on it: held_out(model, meta, name) is the model's
    {"test_<metric>": value}, its predictions kept in `outputs[name]` for analysis.py (no second pass
    over the split). A model is fed the split as its own inputs take it (feeds.feed), built once per
    kind of input (a faces model is fed crops preprocessed its own way: faces.preprocessing_of)."""

    def __init__(self, manifest, data_dir):
        self.manifest = manifest
        x_test, self.y = read_split(data_dir, manifest, manifest.test)
        self.x = as_model_input(manifest.task, x_test)
        self.outputs = {}  # model name -> its held-out predictions
        self.fed = {}  # a model's input specs -> the held-out inputs as such a model takes them

    def feed_for(self, meta):
        key = json.dumps(feeds.input_specs(meta), sort_keys=True, default=str)
        if key not in self.fed:
            self.fed[key] = feeds.feed(self.manifest.task, self.manifest.input, meta, self.x)
        return self.fed[key]

    def __call__(self, model, meta, name=None):
        kept = self.outputs.setdefault(name, {}) if name else {}
        measured = evaluate(model, self.manifest.task, self.feed_for(meta), self.y, self.manifest.seed, meta, kept)
        # a user's model's compiled metrics (its disttrain.json names them), on the same predictions
        measured.update(compiled_metric_values(meta.get("compiled_metrics"), self.y, kept.get("raw"), skip=measured))
        return {f"test_{key}": value for key, value in measured.items()}


def main(argv=None):
    args = parse_args(argv)
    places = Places.of(args)
    if args.publish_to:  # a wrong key, bucket or endpoint: refused now, not after the training is evaluated
        publish.probe(args.publish_to)
    if args.model_module:  # before any model is loaded: its registered layers load in safe mode
        import_tensorflow()  # quietly, before the user's module imports keras
        import_model_module(args.model_module)
    manifest, metric, workers = wait_for_inputs(args, places)
    if args.baseline:  # refused now, not after every model was evaluated
        analysis.read_baseline(
            args.baseline,
            {
                "task": manifest.task,
                "source": manifest.source,
                "split_seed": manifest.seed,
                "test_examples": manifest.test.examples,
                "labels": manifest.labels,
                "problem": manifest.problem,
                "target": manifest.target,
            },
        )
    held_out = HeldOut(manifest, places.data_dir)
    rows, result = evaluate_and_combine(args, manifest, workers, held_out, metric)
    histories = [report_builder.load_metrics(d) for d in workers.dirs]
    report = report_builder.build_report(
        manifest,
        metric,
        workers.strategy,
        workers.markers,
        rows,
        workers.left_out,
        result.metrics,
        result.trained_on,
        result.section,
        result.meta,
        histories,
        places.data_dir,
    )
    report.analysis = analysis.analyse(report.to_json(), held_out.outputs, held_out.x, held_out.y, args.baseline)
    held_out.outputs.clear()  # the predictions are summarised; free them before publishing
    verdict = judge(args, places, manifest, metric, workers, rows, result, held_out, report)
    print_outcome(report, result.section, metric)
    publish_final(args, places, manifest, metric, workers, result, report, histories, verdict, held_out)
    return 0


def wait_for_inputs(args, places):
    """The copier's manifest, its primary metric and the finished workers (at least --min-workers of --expect),
    announced once --combine is known to suit them."""
    wait_for_marker(places.data_dir, args.timeout, "the copier's dataset")
    manifest = Manifest.read(places.data_dir)
    metric = primary_metric(manifest.task, manifest.problem)  # what ranks and gates the models, in its direction
    expect = args.expect or manifest.n_shards
    min_workers = args.min_workers or expect
    if min_workers > expect:
        raise ContractError(f"--min-workers {min_workers} is more than the {expect} workers expected")
    dirs, markers, missing = checks.wait_for_workers(
        places.workdir, places.train_dir, expect, min_workers, args.timeout, args.straggler_wait
    )
    workers = Workers(dirs, markers, report_builder.missing_workers(manifest, missing), expect)
    combine.check_mode(args.combine, workers.strategy, markers, metric)
    if workers.left_out:
        print(
            f"aggregator: {len(markers)} of {expect} workers finished ({workers.strategy}); averaging without "
            + ", ".join(
                f"worker {w['worker_index']} ({w['share_of_training_data']:.1%} of the training data)"
                for w in workers.left_out
            ),
            flush=True,
        )
    else:
        print(f"aggregator: {expect} workers finished ({workers.strategy}); loading models ...", flush=True)
    return manifest, metric, workers


def evaluate_and_combine(args, manifest, workers, held_out, metric):
    """(the workers' rows of held-out metrics, the final model: Combined). Each worker model is checked
    against its marker and the first, evaluated and added to a running weighted sum, one at a time; then
    average: the weighted mean, and combine.py's candidates; the other strategies: the chief's model."""
    # Holding every worker model at once costs memory in proportion to the worker count;
    # streaming holds one worker model, plus the first (it carries the result: same
    # architecture) and the float64 running sum. Nothing is published until the loop is
    # through, so a bad model anywhere still leaves no partial output.
    import_tensorflow()  # quietly, before load_model imports keras (see tensorflow_import)
    per_worker = workers.per_worker
    # the group's one model is the chief's (the same on every worker of an all-reduce group)
    streamed = workers.markers if per_worker else workers.markers[:1]
    rows, weighted_sum = [], combine.WeightedSum()
    final = final_meta = first_signature = None
    for d, marker in zip(workers.dirs, streamed):
        if not marker.model:
            raise ContractError(f"{marker_path(d)} names no model; the worker did not save one")
        model, meta = checks.load_checked(os.path.join(d, marker.model), args.model_module, manifest)
        signature = checks.model_signature(model, meta)
        checks.check_model(marker, signature, first_signature)
        name = f"worker {marker.worker_index}" if per_worker else strategy_of(workers.strategy).promoted_as
        rows.append(
            {
                "name": name,
                "worker_index": marker.worker_index,
                "examples": marker.examples if per_worker else manifest.train_examples,
                **held_out(model, meta, name),
            }
        )
        if per_worker:
            weighted_sum.add(model.get_weights(), marker.examples)
        if final is None:  # the group's one model: the chief's as is
            final, final_meta, first_signature = model, meta, signature
        del model, meta  # before the next load_model, not after it
        # Keras layers reference each other, so the dropped model waits for the cycle
        # collector; the young generations hold it (a full collection would also walk
        # TensorFlow's long-lived objects, ~0.2 s per model for the same memory)
        gc.collect(1)

    first_file = os.path.join(workers.dirs[0], workers.markers[0].model)
    if not per_worker:
        del weighted_sum
        compile_published(final, first_file, "chief")
        final_metrics = held_out(final, final_meta, "final")
        return rows, Combined(final, final_meta, final_metrics, {}, None, manifest.train_examples)
    final.set_weights(weighted_sum.mean())  # same architecture, so worker 0's model can carry the average
    del weighted_sum  # float64: twice a model's weights, not needed while publishing
    # average, ensemble and best, all evaluated; --combine says which is published
    final, final_metrics, combine_meta, section = combine.candidates(
        args.combine,
        manifest.task,
        combine.worker_model_paths(workers.dirs, workers.markers),
        workers.markers,
        rows,
        final,
        final_meta,
        held_out,
        held_out.feed_for(final_meta),
        metric=metric,
    )
    compile_published(final, first_file, section["published"])
    # the examples behind the final model: fewer than the data set's when workers were left out
    trained_on = sum(m.examples for m in workers.markers)
    return rows, Combined(final, final_meta, final_metrics, combine_meta, section, trained_on)


def judge(args, places, manifest, metric, workers, rows, result, held_out, report):
    """The quality gate's verdict (gate.decide) on the final model, against the best worker, the published
    model (evaluated on this run's held-out split) and the trivial predictor; into report.gate."""
    published = evaluate_published(args.published or places.savefile, manifest, held_out, metric, args.model_module)
    thresholds = (
        (args.max_drop_vs_best_worker, args.max_regression)
        if metric.unit == "fraction"
        else (args.max_relative_drop_vs_best_worker, args.max_relative_regression)
    )
    verdict = gate.decide(
        result.metrics[metric.key],
        [(r["name"], r[metric.key]) for r in rows],
        published,
        *thresholds,
        promoted=not workers.per_worker,
        metric=metric,
        trivial=trivial.trivial_predictor(places.data_dir, manifest, held_out.y),
        min_gain_vs_trivial=(
            args.min_gain_vs_trivial if metric.unit == "fraction" else args.min_relative_gain_vs_trivial
        ),
    )
    # forced: published only because of --force
    report.gate = dict(verdict, forced=args.force and not verdict["passed"], published=published)
    return verdict


def print_outcome(report, combined, metric):
    """The report's table, the --combine candidates, the analysis, the training parameters and the gate's verdict."""
    report_builder.print_table(report)
    if combined:
        combine.print_candidates(combined, metric)
    analysis.print_summary(report.analysis)
    if report.training_parameters:
        origin = report.parameters_origin or {}
        # (numbers, and a few words: localsgd's outer_optimizer and allreduce_dtype)
        # (learning_rate None: the model's compiled optimizer, which `optimizer` describes)
        print(
            "aggregator: trained with "
            + ", ".join(
                f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}"
                for k, v in sorted(report.training_parameters.items())
                if v is not None
            )
            + (
                f" from the sweep ({origin.get('file')}, trial {origin.get('trial')})"
                if origin.get("source") == "sweep"
                else " from the trainer's flags"
            ),
            flush=True,
        )
    print(f"aggregator: {gate.summary(report.gate)}", flush=True)


def publish_final(args, places, manifest, metric, workers, result, report, histories, verdict, held_out):
    """A model the gate refused (without --force) into rejected/<time>/ with its report (gate.GateRefused);
    else its exports, --publish-to, the TensorBoard events, the model and its report, then the marker."""
    meta = dict(
        result.meta,
        strategy=workers.strategy,
        workers=workers.expect,
        examples=result.trained_on,
        aggregated_from=[m.worker_index for m in workers.markers] if workers.per_worker else [0],
        **result.combine_meta,
    )
    meta.pop("worker_index", None)
    if not verdict["passed"] and not args.force:
        reject(places, result.model, meta, report, histories, verdict)
    staged = None
    if args.exports:  # built and checked before anything is published; a failure publishes nothing
        print(f"aggregator: exporting {', '.join(args.exports)} ...", flush=True)
        staged = exports.stage(
            places.final_dir,
            args.exports,
            result.model,
            manifest.task,
            meta,
            held_out.feed_for(meta),
            held_out.y,
            manifest.seed,
            result.metrics[metric.key],
            metric,
        )
        report.exports = staged.report
    else:
        report.exports = {"requested": []}
    left = exports.stale(places.final_dir, args.exports)
    if left:
        report.exports["stale"] = left
        print(
            f"aggregator: warning: {', '.join(left)} in {places.final_dir} are an earlier model's exports (not in "
            f"--exports {','.join(args.exports) or 'none'}); left as they are",
            flush=True,
        )
    try:
        if args.publish_to:  # uploaded first: a failed upload publishes nothing in final_dir either
            report.published.append(
                publish.publish_model(args.publish_to, result.model, meta, report, staged, places.final_dir)
            )
        # WORKDIR/tensorboard: the held-out metrics for TensorBoard
        write_event_files(os.path.dirname(places.final_dir), report)
        report_builder.write_model_and_report(
            places.final_dir, places.savefile, result.model, meta, report, histories, staged
        )
    finally:
        if staged:
            staged.discard()  # (already gone once published)
    if staged:
        report_builder.print_exports(report.exports, places.final_dir)
    write_marker(
        places.final_dir,
        "aggregator",
        model=os.path.basename(places.savefile),
        strategy=workers.strategy,
        test_accuracy=result.metrics.get("test_accuracy"),
        problem=manifest.problem,
        final_test_metric={"name": metric.name, "value": result.metrics[metric.key], "direction": metric.direction},
    )
    print(f"aggregator: published {places.savefile} (report: {os.path.join(places.final_dir, REPORT_FILE)})")


def compile_published(model, worker_file, published):
    """The published model compiled as the workers' files were (artifact.compile_as_saved: the user's loss,
    metrics and optimizer config, its state fresh), unless it is the ensemble: a new model around the workers'
    whose averaged output the file's loss may not fit (probabilities where the loss takes logits)."""
    if published == "ensemble":
        return
    reason = compile_as_saved(model, worker_file)
    if reason:
        print(f"aggregator: the published model is saved uncompiled: {worker_file}: {reason}", flush=True)


def reject(places, model, meta, report, histories, verdict):
    """The refused model and its report into rejected/<time>/ beside the final directory; raise gate.GateRefused.
    final/ is not touched, so a server watching it keeps serving the published model."""
    rejected = os.path.join(
        os.path.dirname(places.final_dir),
        "rejected",
        time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f".{time.time_ns() % 10**9:09d}Z",
    )
    with atomic_path(rejected) as tmp:  # the whole directory appears at once, or nothing
        os.makedirs(tmp)
        report_builder.write_model_and_report(
            tmp, os.path.join(tmp, os.path.basename(places.savefile)), model, meta, report, histories
        )
    raise gate.GateRefused(
        f"refused to publish the final model: {'; '.join(verdict['reasons'])}. "
        f"It is kept with its report in {rejected}; the published model is unchanged "
        "(--force publishes it anyway)"
    )


def cli():
    run_cli(main)


if __name__ == "__main__":
    cli()
