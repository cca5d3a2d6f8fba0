"""disttrain-aggregator: check the worker models, combine them, evaluate, publish.

    disttrain-aggregator --expect 2 --workdir workdir

1. wait for every worker's marker (one overall --timeout);
2. check the markers belong together: same strategy, same worker count, same
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
   result may replace the published model;
6. export (exports.py, --exports): a TensorFlow SavedModel for TF Serving and KServe
   (final/saved_model/<version>/) and a TFLite model (final/model.tflite), built and
   checked against the Keras model on the held-out split in a staging directory; a
   failed export is an error and publishes nothing;
7. publish the exports, final/model.keras (atomically), report.json, report.png,
   analysis.png, _SUCCESS -- only after every check passed, so bad input publishes
   nothing. A model the gate refuses goes to rejected/<time>/ beside final/ with its
   report (without exports), and the aggregator exits 4 (--force publishes it anyway,
   recorded in the report).
"""

import argparse
import contextlib
import gc
import glob
import json
import os
import time

import numpy as np

from disttrain_aggregator import analysis, combine, exports, feeds, gate
from disttrain_aggregator.data_summary import data_summary
from disttrain_aggregator.tensorboard_events import write_event_files
from disttrain_contract import ContractError, Workdir, atomic_path, default_workdir, read_marker, run_cli, wait_for_marker, wait_for_markers, wait_for_quorum, write_marker
from disttrain_contract.artifact import load_model, read_meta, save_model
from disttrain_contract.evaluation import HEADS, as_model_input, evaluate, head_of
from disttrain_contract.metrics import metrics_of, primary_metric
from disttrain_contract.layout import REPORT_FILE, marker_path
from disttrain_contract.report import MetricSummary, ModelRow, Report, write_report
from disttrain_contract.manifest import Manifest, read_split
from disttrain_contract.tasks import task_of
from disttrain_contract.tensorflow_import import import_tensorflow
from disttrain_contract.user_model import import_model_module


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="disttrain-aggregator",
        description="Check, combine (average or promote) and evaluate the worker models; publish the final model "
        "and report.json (stage 3 of disttrain) if it passes the quality gate.",
        epilog="exit status: 0 published; 2 bad input, a broken stage contract, or an export that failed (nothing "
        "published); 3 timed out waiting for a stage; "
        f"{gate.EXIT_REFUSED} the quality gate refused the final model (kept with its report in rejected/<time>/ "
        "beside the final directory; the published model is left as it was).",
    )
    p.add_argument("--workdir", default=default_workdir(), help="shared working directory (default $DISTTRAIN_WORKDIR or ./workdir)")
    p.add_argument("--dir", help="the trainers' output directory (default WORKDIR/train)")
    p.add_argument("--data", help="the copier's output, for the held-out split (default WORKDIR/data)")
    p.add_argument("--savefile", help="where the final model goes (default WORKDIR/final/model.keras); report.json is written next to it")
    p.add_argument("--expect", type=int, help="number of worker models to wait for (default: the dataset's shard count)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds to wait for all workers (default 3600)")
    p.add_argument("--min-workers", type=int,
                   help="average: publish with at least this many workers (default: all of them); the others' shards "
                   "are left out and the report names them")
    p.add_argument("--straggler-wait", type=float, default=600,
                   help="once --min-workers have finished, seconds to wait for the rest (default 600; never past --timeout)")
    p.add_argument("--combine", choices=combine.MODES, default="average",
                   help="--strategy average: publish the weight average (default), an ensemble (one Keras model: the "
                   "mean of the worker models' probabilities, or of their predictions for regression; N forward "
                   "passes), or the best worker by its validation value of the primary metric (accuracy; regression: "
                   "the lowest RMSE) from trainer --validation-fraction, never the held-out split. The report "
                   "evaluates all three either way. Refused for the other strategies: their workers end with one "
                   "shared model")
    p.add_argument("--model-module", metavar="MODULE[:FUNCTION]",
                   help="the Python module the workers' models were built with (trainer --model-module): imported "
                   "before any model is loaded, so that its registered custom layers load in Keras safe mode; a "
                   "model whose disttrain.json records a module (model_code) is refused without it. The module must "
                   "be importable here (PYTHONPATH, or a derived image); FUNCTION is not called")
    p.add_argument("--exports", type=exports.parse_kinds, default=exports.KINDS, metavar="LIST",
                   help="what to export next to the final model, comma-separated: saved_model (SAVEFILE's directory"
                   "/saved_model/<version>/, for TensorFlow Serving and KServe; an own model's signature takes its "
                   "own input names), tflite (model.tflite; skipped with the reason in the report when the model "
                   "cannot be one, e.g. string inputs or ops without a TFLite builtin); or none "
                   "(default: saved_model,tflite). Each is checked against the Keras model on the held-out split, "
                   "and the report has their numbers")
    p.add_argument("--baseline", metavar="REPORT_JSON",
                   help="a 1-worker run's report.json on the same data, for the analysis' comparison (final vs best "
                   "worker vs this baseline); without it the report says there is none")
    gating = p.add_argument_group(
        "quality gate",
        "the final model is published only if its held-out value of the primary metric passes both checks: "
        "classification (accuracy; faces: top-1 retrieval) in accuracy points with the first two thresholds, "
        "regression (RMSE, lower is better) in percent of the reference's RMSE with the --max-relative-* ones")
    gating.add_argument("--max-drop-vs-best-worker", type=float, default=1.0, metavar="POINTS",
                        help="classification: at most this many accuracy points below the best single worker model "
                        "(default 1.0); not used for regression")
    gating.add_argument("--max-regression", type=float, default=1.0, metavar="POINTS",
                        help="classification: at most this many accuracy points below the published model, evaluated "
                        "on this run's held-out split (default 1.0; 0: no regression at all); not used for regression")
    gating.add_argument("--max-relative-drop-vs-best-worker", type=float, default=5.0, metavar="PERCENT",
                        help="regression: the final model's held-out RMSE at most this many percent above the best "
                        "single worker model's (default 5: RMSE 1.05 against 1.00 passes); not used for classification")
    gating.add_argument("--max-relative-regression", type=float, default=5.0, metavar="PERCENT",
                        help="regression: the final model's held-out RMSE at most this many percent above the "
                        "published model's, evaluated on this run's held-out split (default 5; 0: no worse at all); "
                        "not used for classification")
    gating.add_argument("--published", metavar="PATH_OR_GLOB",
                        help="the published model to compare with: a path, or a glob of which the newest match with "
                        "its _SUCCESS marker counts (default: --savefile)")
    gating.add_argument("--force", action="store_true", help="publish even if the gate fails (recorded in report.json)")
    args = p.parse_args(argv)
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
    return args


class WeightedSum:
    """The example-weighted mean of several models' weights, one model at a time:
    add(weights, examples) per model, then mean().

    Float arrays are summed in float64 (examples * a float32 weight is exact there)
    and the mean is cast back to their dtype; integer arrays (such as a dropout
    layer's random-generator state) are not parameters and are taken from the
    first model."""

    def __init__(self):
        self.sums, self.dtypes, self.examples = None, None, 0

    def add(self, weights, examples):
        if not examples > 0:
            raise ValueError(f"example counts must be positive, got {examples}")
        if self.sums is None:
            self.dtypes = [w.dtype for w in weights]
            self.sums = [w.astype(np.float64) * examples if np.issubdtype(w.dtype, np.floating) else w.copy() for w in weights]
        else:
            if len(weights) != len(self.sums):
                raise ValueError(f"weight lists differ: {len(weights)} arrays, the first model has {len(self.sums)}")
            for i, (total, w) in enumerate(zip(self.sums, weights)):
                if w.shape != total.shape:
                    raise ValueError(f"weight shapes differ: array {i} is {w.shape}, the first model's is {total.shape}")
                if np.issubdtype(total.dtype, np.floating):
                    total += w.astype(np.float64) * examples
        self.examples += examples

    def mean(self):
        if self.sums is None:
            raise ValueError("no model was added")
        return [(total / self.examples).astype(dtype) if np.issubdtype(dtype, np.floating) else total.copy()
                for total, dtype in zip(self.sums, self.dtypes)]


# what the promoted model of a strategy whose workers end with the same model is called
PROMOTED = {"multiworker": "chief (synchronised)", "localsgd": "chief (local SGD)",
            "parameterserver": "chief (parameter servers)"}

# what every trainer's marker records (disttrain_trainer.main writes them)
TRAINER_MARKER_FIELDS = ("worker_index", "workers", "strategy", "epochs", "init_weights_sha256", "examples")


def check_markers(markers, dirs):
    """A marker that parses but is not a whole trainer's marker is refused, not a KeyError later."""
    for d, marker in zip(dirs, markers):
        missing = [k for k in TRAINER_MARKER_FIELDS if k not in marker] if isinstance(marker, dict) else ["everything"]
        if missing:
            raise ContractError(f"{marker_path(d)} is not a trainer's marker (missing {', '.join(missing)}); "
                                "was that worker trained by another version of disttrain-trainer?")


def check_compatible(markers, expect):
    """Every reason the workers cannot be combined that their markers show, as one clear
    error, before any model is loaded."""
    strategies = {m["strategy"] for m in markers}
    if len(strategies) != 1:
        raise ContractError(f"workers used different strategies: {sorted(strategies)}")
    sizes = {m["workers"] for m in markers}
    if sizes != {expect}:
        raise ContractError(f"workers were started for {sorted(sizes)} workers, expected {expect}")
    if markers[0]["strategy"] == "localsgd" and len({m.get("final_weights_sha256") for m in markers}) != 1:
        # the last average gives every worker the same weights; if it did not, the
        # chief's model is not the group's
        raise ContractError("the localsgd workers did not end with the same weights: "
                            + ", ".join(f"worker {m['worker_index']}: {str(m.get('final_weights_sha256'))[:12]}" for m in markers))
    if len({m["init_weights_sha256"] for m in markers}) != 1:
        raise different_initial_weights(", ".join(f"worker {m['worker_index']}: {m['init_weights_sha256'][:12]}" for m in markers))


def ps_tasks(chief, expect):
    """How many tasks a parameter-server group has, from its chief's marker."""
    if chief.get("role") != "chief" or not isinstance(chief.get("ps"), int) or chief["ps"] < 1 \
            or chief.get("tasks") != 1 + chief["ps"] + expect:
        raise ContractError(f"worker-00000's marker is not a parameter-server chief's for {expect} workers "
                            f"(role {chief.get('role')!r}, ps {chief.get('ps')!r}, tasks {chief.get('tasks')!r})")
    return chief["tasks"]


def check_ps_roles(markers):
    """Task 0 the chief, 1..ps the parameter servers, then the workers, each worker with the
    examples the chief says it drew from."""
    ps, by_worker = markers[0]["ps"], markers[0].get("examples_by_worker") or []
    for i, marker in enumerate(markers):
        role = "chief" if i == 0 else "ps" if i <= ps else "worker"
        if marker.get("role") != role or marker["worker_index"] != i:
            raise ContractError(f"task {i} of the parameter-server group should be the {role}; "
                                f"its marker says {marker.get('role')!r} (index {marker['worker_index']})")
        if role == "worker" and (i - 1 - ps >= len(by_worker) or marker["examples"] != by_worker[i - 1 - ps]):
            raise ContractError(f"worker task {i} reports {marker['examples']} examples; the chief trained it on "
                                f"{by_worker[i - 1 - ps] if i - 1 - ps < len(by_worker) else 'no examples'}")


def different_initial_weights(detail):
    return ContractError(
        f"the workers did not start from the same initial weights ({detail}); averaging models from different "
        "initialisations gives a useless model -- start every worker with the same --seed"
    )


# what every worker model's disttrain.json must agree on (when recorded) for them to be combined:
# an average of models that read their output differently, take other inputs or were built
# from other code is no model at all
SHARED_META = ("task", "problem", "target", "labels", "head", "inputs", "outputs", "model_source", "model_code")


def layer_summary(model):
    """Each layer as "name (Class) weight shapes", for saying where two architectures differ."""
    return [f"{layer.name} ({type(layer).__name__}) {[tuple(w.shape) for w in layer.weights]}" for layer in getattr(model, "layers", [])]


def model_signature(model, meta):
    """What must be the same in every worker's model for them to be combined."""
    return {"init_weights_sha256": meta.get("init_weights_sha256"),
            "architecture": json.dumps(model.get_config(), sort_keys=True, default=str),
            "layers": layer_summary(model),
            "vocab_sha256": meta.get("vocab_sha256"),
            "meta": {key: meta.get(key) for key in SHARED_META}}


def architecture_difference(signature, first):
    """Where two architectures differ, in a few words."""
    mine, theirs = signature["layers"], first["layers"]
    for i, (a, b) in enumerate(zip(mine, theirs)):
        if a != b:
            return f"layer {i}: {a} vs {b}"
    if len(mine) != len(theirs):
        return f"{len(mine)} layers vs {len(theirs)}"
    return "the same layers, configured differently"


def check_model(marker, signature, first):
    """One worker model's signature against its marker (which check_compatible found equal
    to every other marker) and against the first model's (`first`; None for the first)."""
    if signature["init_weights_sha256"] != marker["init_weights_sha256"]:
        raise different_initial_weights(f"worker {marker['worker_index']}: marker {marker['init_weights_sha256'][:12]}, "
                                        f"model {str(signature['init_weights_sha256'])[:12]}")
    if first is None:
        return
    if signature["architecture"] != first["architecture"]:
        raise ContractError(f"the worker models have different architectures (worker {marker['worker_index']} vs the "
                            f"first: {architecture_difference(signature, first)}); averaging needs the same network on "
                            "every worker: train them all from the same --model-file/--model-module and flags")
    if signature["vocab_sha256"] != first["vocab_sha256"]:
        raise ContractError("the worker models were trained with different vocabularies")
    for key in SHARED_META:
        if signature["meta"][key] != first["meta"][key]:
            raise ContractError(f"the worker models differ in their {key}: worker {marker['worker_index']}'s is "
                                f"{json.dumps(signature['meta'][key], default=str)[:200]}, the first's "
                                f"{json.dumps(first['meta'][key], default=str)[:200]}")


def check_meta(meta, manifest, where):
    """A model's disttrain.json against this run's dataset: the same task, problem and labels, and a
    head that reads its output as the problem needs (evaluation.HEADS). Keys a model does not record
    (older trainers) are not checked; a missing head is the built-in classifiers' softmax."""
    if meta.get("task") is not None and meta["task"] != manifest.task:
        raise ContractError(f"{where} is a {meta['task']!r} model, the dataset's task is {manifest.task!r}")
    problem = meta.get("problem", "classification")
    if problem != manifest.problem:
        raise ContractError(f"{where} is a {problem} model, the dataset is a {manifest.problem} problem")
    if "labels" in meta and list(meta["labels"] or []) != list(manifest.labels or []):
        raise ContractError(f"{where} was trained with other labels ({meta['labels']}) than the dataset's "
                            f"({manifest.labels})")
    head = head_of(meta)
    if head not in HEADS:
        raise ContractError(f"{where} has the head {head!r}, not one of {', '.join(HEADS)} (evaluation.HEADS)")
    if "head" in meta and (head == "embedding") != (manifest.task == "faces"):
        raise ContractError(f"{where} has the head {head!r}; an embedding head is the faces task's, and the faces "
                            f"task's model is an embedding (this dataset's task is {manifest.task})")
    if manifest.problem == "regression" and head != "value":
        raise ContractError(f"{where} is for a regression dataset but its head is {head!r} (a regression model's "
                            "disttrain.json says head \"value\")")
    if manifest.problem == "classification" and head == "value":
        raise ContractError(f"{where} has a regression head (\"value\") but the dataset is a classification problem")
    if head in ("sigmoid", "sigmoid_logits") and len(manifest.labels) != 2:
        raise ContractError(f"{where} has a one-unit {head} head, which reads two labels; the dataset has "
                            f"{len(manifest.labels)}")


def load_checked(path, model_module, manifest=None):
    """(model, meta) of a model artifact, with one-line errors for what loading it needs: the module
    its disttrain.json records (--model-module), and every custom class registered (Keras' own
    message for an unregistered class is a long dump of the config)."""
    from disttrain_contract.user_model import archive_config, check_archive_classes, check_code_matches

    where = f"the model {path}"
    check_code_matches(read_meta(path), model_module, where)
    try:
        config = archive_config(path)
    except ContractError:
        config = None  # load_model says what is wrong with the file
    if config is not None:
        try:
            check_archive_classes(path, config)
        except ContractError as err:
            raise ContractError(str(err).replace(f"--model-file {path}", where, 1)) from None
    model, meta = load_model(path)
    if manifest is not None:
        check_meta(meta, manifest, where)
    return model, meta


def main(argv=None):
    args = parse_args(argv)
    workdir = Workdir(args.workdir)
    train_dir = args.dir or workdir.train
    data_dir = args.data or workdir.data
    savefile = args.savefile or workdir.final_model
    final_dir = os.path.dirname(os.path.abspath(savefile))
    if args.model_module:  # before any model is loaded: its registered layers load in safe mode
        import_tensorflow()  # quietly, before the user's module imports keras
        import_model_module(args.model_module)

    wait_for_marker(data_dir, args.timeout, "the copier's dataset")
    manifest = Manifest.read(data_dir)
    metric = primary_metric(manifest.task, manifest.problem)  # what ranks and gates the models, in its direction
    expect = args.expect or manifest.n_shards
    min_workers = args.min_workers or expect
    if min_workers > expect:
        raise ContractError(f"--min-workers {min_workers} is more than the {expect} workers expected")
    worker_dirs = [workdir.worker(i, train_dir) for i in range(expect)]
    markers = wait_for_quorum(worker_dirs, args.timeout, min_workers, args.straggler_wait, "workers")
    missing = [i for i, m in enumerate(markers) if m is None]
    worker_dirs, markers = [d for d, m in zip(worker_dirs, markers) if m], [m for m in markers if m]
    check_markers(markers, worker_dirs)
    if missing and markers[0]["strategy"] != "average":
        raise ContractError(
            f"worker(s) {', '.join(map(str, missing))} did not finish, and a {markers[0]['strategy']} run has no result "
            "without every worker (all-reduce and parameter-server groups end together); --min-workers below the "
            "worker count is for --strategy average")
    if markers[0]["strategy"] == "parameterserver":  # every task of the group: chief, ps, workers
        worker_dirs = [workdir.worker(i, train_dir) for i in range(ps_tasks(markers[0], expect))]
        markers = wait_for_markers(worker_dirs, args.timeout, "parameter-server tasks")
        check_markers(markers, worker_dirs)
        check_ps_roles(markers)
    check_compatible(markers, expect)
    strategy = markers[0]["strategy"]
    combine.check_mode(args.combine, strategy, markers, metric)
    left_out = missing_workers(manifest, missing)
    if left_out:
        print(f"aggregator: {len(markers)} of {expect} workers finished ({strategy}); averaging without "
              + ", ".join(f"worker {w['worker_index']} ({w['share_of_training_data']:.1%} of the training data)" for w in left_out),
              flush=True)
    else:
        print(f"aggregator: {expect} workers finished ({strategy}); loading models ...", flush=True)

    if args.baseline:  # refused now, not after every model was evaluated
        analysis.read_baseline(args.baseline, {"task": manifest.task, "source": manifest.source, "split_seed": manifest.seed,
                                               "test_examples": manifest.test.examples, "labels": manifest.labels})
    x_test, y_test = read_split(data_dir, manifest, manifest.test)
    x_test = as_model_input(manifest.task, x_test)
    outputs = {}  # model name -> its held-out predictions, kept for analysis.py (no second pass over the split)
    fed = {}  # a model's input specs -> the held-out inputs as such a model takes them (feeds.feed)

    def feed_for(meta):
        key = json.dumps(feeds.input_specs(meta), sort_keys=True, default=str)
        if key not in fed:
            fed[key] = feeds.feed(manifest.task, manifest.input, meta, x_test)
        return fed[key]

    def held_out(model, meta, name=None):  # meta: a faces model is fed crops preprocessed its own way (faces.preprocessing_of)
        kept = outputs.setdefault(name, {}) if name else None
        return {f"test_{key}": value
                for key, value in evaluate(model, manifest.task, feed_for(meta), y_test, manifest.seed, meta, kept).items()}

    # ------------------------------- check, evaluate, sum: one model at a time
    # Holding every worker model at once costs memory in proportion to the worker count;
    # streaming holds one worker model, plus the first (it carries the result: same
    # architecture) and the float64 running sum. Nothing is published until the loop is
    # through, so a bad model anywhere still leaves no partial output.
    import_tensorflow()  # quietly, before load_model imports keras (see tensorflow_import)
    # multiworker, localsgd: one model, the same on every worker, written by the chief;
    # average: one per worker
    streamed = markers if strategy == "average" else markers[:1]
    rows, weighted_sum = [], WeightedSum()
    final = final_meta = first_signature = None
    for d, marker in zip(worker_dirs, streamed):
        if not marker.get("model"):
            raise ContractError(f"{marker_path(d)} names no model; the worker did not save one")
        model, meta = load_checked(os.path.join(d, marker["model"]), args.model_module, manifest)
        signature = model_signature(model, meta)
        check_model(marker, signature, first_signature)
        name = f"worker {marker['worker_index']}" if strategy == "average" else PROMOTED[strategy]
        rows.append({"name": name, "worker_index": marker["worker_index"],
                     "examples": marker["examples"] if strategy == "average" else manifest.train_examples,
                     **held_out(model, meta, name)})
        if strategy == "average":
            weighted_sum.add(model.get_weights(), marker["examples"])
        if final is None:  # multiworker, localsgd: the chief's model as is
            final, final_meta, first_signature = model, meta, signature
        del model, meta  # before the next load_model, not after it
        # Keras layers reference each other, so the dropped model waits for the cycle
        # collector; the young generations hold it (a full collection would also walk
        # TensorFlow's long-lived objects, ~0.2 s per model for the same memory)
        gc.collect(1)

    # ----------------------------------------------------------------- combine
    if strategy == "average":  # same architecture, so worker 0's model can carry the average
        final.set_weights(weighted_sum.mean())
    del weighted_sum  # float64: twice a model's weights, not needed while publishing
    combined = None
    if strategy == "average":  # average, ensemble and best, all evaluated; --combine says which is published
        final, final_metrics, combine_meta, combined = combine.candidates(
            args.combine, manifest.task, combine.worker_model_paths(worker_dirs, markers), markers, rows, final,
            final_meta, held_out, feed_for(final_meta), metric=metric)
    else:
        final_metrics, combine_meta = held_out(final, final_meta, "final"), {}
    # the examples behind the final model: fewer than the data set's when workers were left out
    trained_on = sum(m["examples"] for m in markers) if strategy == "average" else manifest.train_examples
    histories = [load_metrics(d) for d in worker_dirs]
    report = Report(
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
        init_weights_sha256=markers[0]["init_weights_sha256"],
        workers=[ModelRow.from_json(row, manifest.task, manifest.problem, named=True) for row in rows],
        missing_workers=left_out or None,
        final=ModelRow(examples=trained_on, metrics=dict(final_metrics)),
        combine=combined or None,
        test_examples=manifest.test.examples,
        epochs=markers[0]["epochs"],
        # learning rate, batch, epochs, width, dropout, and whether they came from the trainer's flags
        # or the sweep's best.json (trainer --params-from); absent for models of older trainers
        training_parameters=final_meta.get("training_parameters"),
        parameters_origin=final_meta.get("parameters_origin"),
        training_wall_time_sec=max((sum(e["wall_time_sec"] for e in h) for h in histories), default=None),
        ps_facts=ps_facts(markers) if strategy == "parameterserver" else None,
        data=data_summary(data_dir, manifest),  # the copier's statistics and validation result
        created_at=time.time(),
    )
    report.analysis = analysis.analyse(report.to_json(), outputs, x_test, y_test, args.baseline)
    outputs.clear()  # the predictions are summarised; free them before publishing

    # -------------------------------------------------------------------- gate
    published = evaluate_published(args.published or savefile, manifest, held_out, metric, args.model_module)
    thresholds = ((args.max_drop_vs_best_worker, args.max_regression) if metric.unit == "fraction"
                  else (args.max_relative_drop_vs_best_worker, args.max_relative_regression))
    verdict = gate.decide(final_metrics[metric.key], [(r["name"], r[metric.key]) for r in rows], published,
                          *thresholds, promoted=strategy != "average", metric=metric)
    # forced: published only because of --force
    report.gate = dict(verdict, forced=args.force and not verdict["passed"], published=published)
    print_table(report)
    if combined:
        combine.print_candidates(combined, metric)
    analysis.print_summary(report.analysis)
    if report.training_parameters:
        origin = report.parameters_origin or {}
        print("aggregator: trained with " + ", ".join(f"{k}={v:g}" for k, v in sorted(report.training_parameters.items()))
              + (f" from the sweep ({origin.get('file')}, trial {origin.get('trial')})" if origin.get("source") == "sweep"
                 else " from the trainer's flags"), flush=True)
    print(f"aggregator: {gate.summary(report.gate)}", flush=True)

    # ----------------------------------------------------------------- publish
    meta = dict(final_meta, strategy=strategy, workers=expect, examples=trained_on,
                aggregated_from=[r["worker_index"] for r in rows] if strategy == "average" else [0], **combine_meta)
    meta.pop("worker_index", None)
    if not verdict["passed"] and not args.force:
        # final/ is not touched, so a server watching it keeps serving the published model
        rejected = os.path.join(os.path.dirname(final_dir), "rejected",
                                time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f".{time.time_ns() % 10**9:09d}Z")
        with atomic_path(rejected) as tmp:  # the whole directory appears at once, or nothing
            os.makedirs(tmp)
            write_model_and_report(tmp, os.path.join(tmp, os.path.basename(savefile)), final, meta, report, histories)
        raise gate.GateRefused(f"refused to publish the final model: {'; '.join(verdict['reasons'])}. "
                               f"It is kept with its report in {rejected}; the published model is unchanged "
                               "(--force publishes it anyway)")
    staged = None
    if args.exports:  # built and checked before anything is published; a failure publishes nothing
        print(f"aggregator: exporting {', '.join(args.exports)} ...", flush=True)
        staged = exports.stage(final_dir, args.exports, final, manifest.task, meta, feed_for(meta), y_test,
                               manifest.seed, final_metrics[metric.key], metric)
        report.exports = staged.report
    else:
        report.exports = {"requested": []}
    left = exports.stale(final_dir, args.exports)
    if left:
        report.exports["stale"] = left
        print(f"aggregator: warning: {', '.join(left)} in {final_dir} are an earlier model's exports (not in --exports "
              f"{','.join(args.exports) or 'none'}); left as they are", flush=True)
    try:
        write_event_files(os.path.dirname(final_dir), report)  # WORKDIR/tensorboard: the held-out metrics for TensorBoard
        write_model_and_report(final_dir, savefile, final, meta, report, histories, staged)
    finally:
        if staged:
            staged.discard()  # (already gone once published)
    if staged:
        print_exports(report.exports, final_dir)
    write_marker(final_dir, "aggregator", model=os.path.basename(savefile), strategy=strategy,
                 test_accuracy=final_metrics.get("test_accuracy"), problem=manifest.problem,
                 final_test_metric={"name": metric.name, "value": final_metrics[metric.key], "direction": metric.direction})
    print(f"aggregator: published {savefile} (report: {os.path.join(final_dir, REPORT_FILE)})")
    return 0


def write_model_and_report(directory, savefile, final, meta, report, histories, staged=None):
    """The model, report.json (`report`, a contract report.Report) and report.png into `directory`, each
    atomically; `staged`: the exports (exports.Staged), renamed into place first."""
    os.makedirs(directory, exist_ok=True)
    # The report is renamed into place only after the model is (both atomically): a full
    # disk while writing the model leaves no new report next to the old model, and no
    # temporary behind.
    with contextlib.ExitStack() as publish:
        report_tmp, png_tmp, analysis_tmp = (publish.enter_context(atomic_path(os.path.join(directory, name)))
                                             for name in (REPORT_FILE, "report.png", "analysis.png"))
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
        print(f"aggregator: SavedModel {os.path.join(final_dir, saved['path'])} (TF Serving --model_base_path="
              f"{os.path.join(final_dir, saved['base_path'])}): {signatures}; outputs within "
              f"{saved['max_abs_diff_vs_keras']:.2g} of the Keras model's", flush=True)
    lite = section.get("tflite")
    if lite and "skipped" in lite:
        print(f"aggregator: no TFLite model: {lite['skipped']}", flush=True)
    elif lite:
        name = lite.get("metric", "accuracy")
        title = "accuracy" if name == "accuracy" else name.upper() if name in ("rmse", "mae") else name
        print(f"aggregator: TFLite {os.path.join(final_dir, lite['path'])} "
              f"({', '.join(i['name'] for i in lite['inputs'])} in): "
              f"{lite['size_bytes']:,} bytes, builtin ops only; held-out {title} {lite[f'test_{name}']:.4f} "
              f"(Keras {lite[f'keras_test_{name}']:.4f}); one instance {lite['latency_ms']['tflite_median']:.2f} ms "
              f"(Keras {lite['latency_ms']['keras_median']:.2f} ms)", flush=True)


def newest_published(path_or_glob):
    """The published model `path_or_glob` names: the path itself, or of a glob's matches the one
    whose _SUCCESS marker is the newest (the chart's runs: the last one that published is the one
    served). None when there is none; a match without a readable marker was never published."""
    candidates = glob.glob(path_or_glob) if glob.has_magic(path_or_glob) else [path_or_glob]
    published = []
    for path in candidates:
        try:
            marker = read_marker(os.path.dirname(os.path.abspath(path)))
        except ContractError:
            continue
        if isinstance(marker, dict) and marker.get("model") == os.path.basename(path) and os.path.isfile(path):
            published.append((marker.get("finished_at") or 0, path))
    return max(published)[1] if published else None


def evaluate_published(path_or_glob, manifest, held_out, metric=None, model_module=None):
    """What the gate compares with: the published model's primary metric on this run's held-out split
    (an old report's number may be of other data). None: nothing published;
    comparable False: it cannot be measured on this split, or not loaded at all (then it
    protects nothing: the server cannot load it either)."""
    key = (metric or primary_metric(manifest.task, manifest.problem)).key
    path = newest_published(path_or_glob)
    if path is None:
        return None
    try:
        why = gate.comparable(read_meta(path), manifest)
        if why is None:
            model, meta = load_checked(path, model_module, manifest)
            value = held_out(model, meta)[key]
            del model
            gc.collect(1)
    except ContractError as err:
        why = f"cannot read it: {err}"
    if why:
        return {"path": path, "comparable": False, "why": why}
    return {"path": path, "comparable": True, key: value}


def missing_workers(manifest, missing):
    """What the report says of each worker left out by --min-workers: its shard's share of the data."""
    return [{"worker_index": i, "shard_examples": manifest.shard(i).examples,
             "share_of_training_data": manifest.shard(i).examples / manifest.train_examples} for i in missing]


def ps_facts(markers):
    """Parameter-server training, per role: who was what, and how many steps each worker started."""
    chief = markers[0]
    return {
        "tasks": [{"index": m["worker_index"], "role": m["role"], "examples": m["examples"]} for m in markers],
        "steps_scheduled": chief.get("steps_scheduled"),
        "steps_started_by_worker": chief.get("steps_started_by_worker"),
        "steps_retried": chief.get("steps_retried"),
    }


def load_metrics(worker_dir):
    try:
        with open(os.path.join(worker_dir, "metrics.json")) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return []


def print_table(report):
    """The report (a contract report.Report) as a table of its metric columns (report.metric_columns):
    accuracy and loss for classifiers; RMSE, MAE, R², MSE for regression; retrieval distances for faces."""
    columns = report.columns
    final_label = ("final (promoted)" if report.strategy != "average"
                   else f"final ({(report.combine or {}).get('published', 'average')})")
    rows = [(r.name, r) for r in report.workers] + [(final_label, report.final)]
    print(f"\n{'model':<24}{'examples':>10}" + "".join(f"{c.short:>12}" for c in columns))
    print("-" * (34 + 12 * len(columns)))
    for name, row in rows:
        print(f"{name:<24}{row.examples:>10}" + "".join(f"{row[c.key]:>12.4f}" for c in columns))
    held_out = f"{report.test_examples} held-out examples"
    if report.retrieval:
        held_out += f" of {report.final['test_people']} people never seen in training"
    if report.problem == "regression":
        held_out += (f"; target {report.target!r}, RMSE and MAE in its unit (lower is better), R² of 1 is a "
                     "perfect fit")
    print(held_out + "\n")
    if report.retrieval and "test_darker_margin" in report.final.metrics:
        print_hard_queries(report.final.metrics)


def print_hard_queries(final):
    """The harder retrieval (evaluation.evaluate_retrieval): each held-out person's gallery photo, altered."""
    print(f"{'final model, query':<24}{'top-1':>10}{'right dist':>12}{'wrong dist':>12}{'margin':>10}")
    print("-" * 68)
    for kind, title in (("darker", "0.7x darker"), ("rotated", "rotated 6 degrees"), ("smaller", "1/3 resolution")):
        print(f"{title:<24}{final[f'test_{kind}_top1_accuracy']:>10.4f}{final[f'test_{kind}_right_distance']:>12.4f}"
              f"{final[f'test_{kind}_nearest_wrong_distance']:>12.4f}{final[f'test_{kind}_margin']:>9.2f}x")
    print("margin: mean distance to the nearest wrong person / to the right one\n")


def plot_report(report, histories, path):
    """Bars: the held-out primary metric (accuracy; regression: RMSE) per worker, per combine
    candidate (average runs) and final. Curves: its per-epoch held-out value for each worker (the
    trainers' test_<metric>), with the final model as a line. Under them, one
    line of the copier's data validation (when the dataset has it)."""
    os.environ.setdefault("MPLCONFIGDIR", os.path.join(os.path.dirname(path), ".matplotlib"))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    from disttrain_contract import atomic_path

    hard = task_of(report).retrieval and "test_darker_margin" in report["final"]  # the faces' harder queries
    primary = report.get("primary_metric") or {"name": "accuracy", "label": "accuracy", "direction": "max"}
    key, fraction = f"test_{primary['name']}", primary["name"] == "accuracy"
    ylabel = ("held-out top-1 retrieval" if task_of(report).retrieval
              else f"held-out {primary['label']}" + ("" if fraction else f" ({'lower' if primary['direction'] == 'min' else 'higher'} is better)"))
    fig, axes = plt.subplots(1, 3 if hard else 2, figsize=(16 if hard else 11, 4))
    bars, curves = axes[0], axes[1]
    candidates = [(name, c) for name, c in (report.get("combine") or {}).get("candidates", {}).items()
                  if c.get("available") is not False]
    names = ([r["name"] for r in report["workers"]]
             + [f"best (w{c['worker_index']})" if name == "best" else name for name, c in candidates] + ["final"])
    values = [r[key] for r in report["workers"]] + [c[key] for _, c in candidates] + [report["final"][key]]
    colors = ["#8da0cb"] * len(report["workers"]) + ["#66c2a5"] * len(candidates) + ["#fc8d62"]
    bars.bar(names, values, color=colors)
    for x, v in enumerate(values):
        bars.text(x, v, f"{v:.3f}" if fraction else f"{v:.4g}", ha="center", va="bottom", fontsize=8 if len(values) > 5 else 10)
    if len(values) > 5:
        bars.tick_params(axis="x", labelrotation=30, labelsize=8)
    finite = [v for v in values if np.isfinite(v)]
    bars.set_ylim(0, 1.05 if fraction else 1.15 * max(finite + [1e-9]))
    bars.set_ylabel(ylabel)
    bars.set_title(f"{report['task']} / {report['strategy']}"
                   + (f": {report['combine']['published']} published" if report.get("combine") else ""))
    for i, history in enumerate(histories):
        evaluated = [e for e in history if key in e]  # multiworker, localsgd: the chief evaluates
        if evaluated:
            curves.plot([e["epoch"] for e in evaluated], [e[key] for e in evaluated], marker="o", label=f"worker {i}")
    curves.axhline(report["final"][key], color="#fc8d62", linestyle="--", label="final model")
    curves.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    curves.set_xlabel("epoch")
    curves.set_ylabel("held-out accuracy" if task_of(report).retrieval else ylabel)
    curves.set_title("training curves")
    curves.legend()
    if hard:
        plot_hard_queries(axes[2], report["final"])
    data = report.get("data")
    if data:
        skew = [v for v in (data.get("label_skew") or {}).values() if isinstance(v, (int, float))]
        fig.text(0.01, 0.01, f"data: validation {'passed' if data['passed'] else 'FAILED'}, {len(data['warnings'])} warning(s), "
                 f"{data['leaked_duplicates']} held-out input(s) also in training"
                 + (f", largest label skew {max(skew):.3f} (total-variation distance)" if skew else "")
                 + f"; {report['final']['examples']:,} training / {report['test_examples']:,} held-out examples",
                 fontsize=8, color="#555555")
        fig.tight_layout(rect=(0, 0.04, 1, 1))
    else:
        fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def plot_hard_queries(axis, final):
    """The final model's distances to the right person and to the nearest wrong one, per altered query."""
    kinds = [("darker", "0.7x darker"), ("rotated", "rotated 6°"), ("smaller", "1/3 resolution")]
    x = np.arange(len(kinds))
    right = [final[f"test_{k}_right_distance"] for k, _ in kinds]
    wrong = [final[f"test_{k}_nearest_wrong_distance"] for k, _ in kinds]
    axis.bar(x - 0.2, right, 0.4, label="right person", color="#66c2a5")
    axis.bar(x + 0.2, wrong, 0.4, label="nearest wrong person", color="#e78ac3")
    for i, (k, _) in enumerate(kinds):
        axis.text(i, max(right[i], wrong[i]), f"top-1 {final[f'test_{k}_top1_accuracy']:.2f}\n{final[f'test_{k}_margin']:.1f}x",
                  ha="center", va="bottom", fontsize=8)
    axis.set_xticks(x, [title for _, title in kinds])
    axis.set_ylabel("mean embedding distance")
    axis.set_ylim(0, max(wrong + right) * 1.35)
    axis.set_title("final model: altered gallery photos as queries")
    axis.legend(fontsize=8, loc="upper left")


def cli():
    run_cli(main)


if __name__ == "__main__":
    cli()
