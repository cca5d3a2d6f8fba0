"""disttrain-aggregator: check the worker models, combine them, evaluate, publish.

    disttrain-aggregator --expect 2 --workdir workdir

1. wait for every worker's marker (one overall --timeout);
2. check the workers belong together: same strategy, same initial-weights
   hash (recorded by each trainer from the shared seed), same architecture;
   refuse otherwise -- averaging unrelated networks gives garbage;
3. average: weighted mean of every weight array, weights = shard sizes;
   multiworker: the workers are already in sync, the chief's model is promoted;
4. evaluate every worker model and the result on the held-out split;
5. publish final/model.keras (atomically), report.json, report.png, _SUCCESS.
"""

import argparse
import contextlib
import json
import os
import time

import numpy as np

from disttrain_contract import ContractError, Workdir, atomic_path, atomic_write_json, default_workdir, run_cli, wait_for_marker, wait_for_markers, write_marker
from disttrain_contract.artifact import load_model, save_model
from disttrain_contract.evaluation import as_model_input, evaluate
from disttrain_contract.layout import marker_path
from disttrain_contract.manifest import Manifest, read_split


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="disttrain-aggregator",
        description="Check, combine (average or promote) and evaluate the worker models; publish the final model "
        "and report.json (stage 3 of disttrain).",
    )
    p.add_argument("--workdir", default=default_workdir(), help="shared working directory (default $DISTTRAIN_WORKDIR or ./workdir)")
    p.add_argument("--dir", help="the trainers' output directory (default WORKDIR/train)")
    p.add_argument("--data", help="the copier's output, for the held-out split (default WORKDIR/data)")
    p.add_argument("--savefile", help="where the final model goes (default WORKDIR/final/model.keras); report.json is written next to it")
    p.add_argument("--expect", type=int, help="number of worker models to wait for (default: the dataset's shard count)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds to wait for all workers (default 3600)")
    args = p.parse_args(argv)
    if args.expect is not None and args.expect < 1:
        p.error("--expect must be >= 1")
    if args.timeout < 0:
        p.error("--timeout must be >= 0")
    return args


def average_weights(weight_lists, example_counts):
    """Layer-by-layer mean of several models' weights, weighted by example count.

    Float arrays are averaged in float64 and cast back; integer arrays (such as
    a dropout layer's random-generator state) are not parameters and are taken
    from the first model."""
    if len(weight_lists) != len(example_counts) or not weight_lists:
        raise ValueError("need one example count per model, and at least one model")
    counts = np.asarray(example_counts, dtype=np.float64)
    if np.any(counts <= 0):
        raise ValueError(f"example counts must be positive, got {example_counts}")
    shares = counts / counts.sum()
    averaged = []
    for arrays in zip(*weight_lists, strict=True):
        first = arrays[0]
        if any(a.shape != first.shape for a in arrays):
            raise ValueError(f"weight shapes differ: {[a.shape for a in arrays]}")
        if np.issubdtype(first.dtype, np.floating):
            mean = sum(share * a.astype(np.float64) for share, a in zip(shares, arrays))
            averaged.append(mean.astype(first.dtype))
        else:
            averaged.append(first.copy())
    return averaged


# what every trainer's marker records (disttrain_trainer.main writes them)
TRAINER_MARKER_FIELDS = ("worker_index", "workers", "strategy", "epochs", "init_weights_sha256", "examples")


def check_markers(markers, dirs):
    """A marker that parses but is not a whole trainer's marker is refused, not a KeyError later."""
    for d, marker in zip(dirs, markers):
        missing = [k for k in TRAINER_MARKER_FIELDS if k not in marker] if isinstance(marker, dict) else ["everything"]
        if missing:
            raise ContractError(f"{marker_path(d)} is not a trainer's marker (missing {', '.join(missing)}); "
                                "was that worker trained by another version of disttrain-trainer?")


def check_compatible(markers, metas, models, expect):
    """Every reason the workers' models cannot be combined, as one clear error."""
    strategies = {m["strategy"] for m in markers}
    if len(strategies) != 1:
        raise ContractError(f"workers used different strategies: {sorted(strategies)}")
    sizes = {m["workers"] for m in markers}
    if sizes != {expect}:
        raise ContractError(f"workers were started for {sorted(sizes)} workers, expected {expect}")
    hashes = {m["init_weights_sha256"] for m in markers} | {meta.get("init_weights_sha256") for meta in metas}
    if len(hashes) != 1:
        detail = ", ".join(f"worker {m['worker_index']}: {m['init_weights_sha256'][:12]}" for m in markers)
        raise ContractError(
            f"the workers did not start from the same initial weights ({detail}); averaging models from different "
            "initialisations gives a useless model -- start every worker with the same --seed"
        )
    architectures = {json.dumps(model.get_config(), sort_keys=True, default=str) for model in models}
    if len(architectures) != 1:
        raise ContractError("the worker models have different architectures")
    vocabs = {meta.get("vocab_sha256") for meta in metas}
    if len(vocabs) != 1:
        raise ContractError("the worker models were trained with different vocabularies")


def main(argv=None):
    args = parse_args(argv)
    workdir = Workdir(args.workdir)
    train_dir = args.dir or workdir.train
    data_dir = args.data or workdir.data
    savefile = args.savefile or workdir.final_model
    final_dir = os.path.dirname(os.path.abspath(savefile))

    wait_for_marker(data_dir, args.timeout, "the copier's dataset")
    manifest = Manifest.read(data_dir)
    expect = args.expect or manifest.n_shards
    worker_dirs = [workdir.worker(i, train_dir) for i in range(expect)]
    markers = wait_for_markers(worker_dirs, args.timeout, "workers")
    check_markers(markers, worker_dirs)
    strategy = markers[0]["strategy"]
    print(f"aggregator: {expect} workers finished ({strategy}); loading models ...", flush=True)

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # multiworker: one synchronised model, written by the chief; average: one per worker
    model_dirs = [worker_dirs[0]] if strategy == "multiworker" else worker_dirs
    loaded = []
    for d, marker in zip(worker_dirs, markers):
        if d in model_dirs:
            if not marker.get("model"):
                raise ContractError(f"{marker_path(d)} names no model; the worker did not save one")
            loaded.append(load_model(os.path.join(d, marker["model"])))
    models, metas = [m for m, _ in loaded], [meta for _, meta in loaded]
    check_compatible(markers, metas, models, expect)

    # ---------------------------------------------------------------- evaluate
    x_test, y_test = read_split(data_dir, manifest, manifest.test)
    x_test = as_model_input(manifest.task, x_test)
    def held_out(model):
        return {f"test_{key}": value for key, value in evaluate(model, manifest.task, x_test, y_test, manifest.seed).items()}

    rows = []
    for model, marker in zip(models, markers):
        rows.append({"name": f"worker {marker['worker_index']}" if strategy == "average" else "chief (synchronised)",
                     "worker_index": marker["worker_index"],
                     "examples": marker["examples"] if strategy == "average" else manifest.train_examples,
                     **held_out(model)})

    # ----------------------------------------------------------------- combine
    final = models[0]  # multiworker: the chief's model as is
    if strategy == "average":  # same architecture, so worker 0's model can carry the average
        final.set_weights(average_weights([m.get_weights() for m in models], [m["examples"] for m in markers]))
    final_metrics = held_out(final)
    histories = [load_metrics(d) for d in worker_dirs]
    report = {
        "strategy": strategy,
        "task": manifest.task,
        "labels": manifest.labels,
        "source": manifest.source,
        "seed": metas[0].get("seed"),
        "split_seed": manifest.seed,
        "init_weights_sha256": markers[0]["init_weights_sha256"],
        "workers": rows,
        "final": {"examples": manifest.train_examples, **final_metrics},
        "test_examples": manifest.test.examples,
        "epochs": markers[0]["epochs"],
        "training_wall_time_sec": max((sum(e["wall_time_sec"] for e in h) for h in histories), default=None),
        "created_at": time.time(),
    }

    # ----------------------------------------------------------------- publish
    meta = dict(metas[0], strategy=strategy, workers=expect, examples=manifest.train_examples,
                aggregated_from=[r["worker_index"] for r in rows] if strategy == "average" else [0])
    meta.pop("worker_index", None)
    os.makedirs(final_dir, exist_ok=True)
    # The report is renamed into place only after the model is (both atomically): a full
    # disk while writing the model leaves no new report next to the old model, and no
    # temporary behind.
    with contextlib.ExitStack() as publish:
        report_tmp, png_tmp = (publish.enter_context(atomic_path(os.path.join(final_dir, name)))
                               for name in ("report.json", "report.png"))
        atomic_write_json(report_tmp, report)
        plot_report(report, histories, png_tmp)
        save_model(final, savefile, meta)
    write_marker(final_dir, "aggregator", model=os.path.basename(savefile), strategy=strategy,
                 test_accuracy=final_metrics["test_accuracy"])
    print_table(report)
    print(f"aggregator: published {savefile} (report: {os.path.join(final_dir, 'report.json')})")
    return 0


def load_metrics(worker_dir):
    try:
        with open(os.path.join(worker_dir, "metrics.json")) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return []


def print_table(report):
    """The report as a table: loss for classifiers; retrieval distances for faces."""
    columns = [("test_accuracy", "test acc" if report["task"] != "faces" else "top-1")]
    if report["task"] == "faces":
        columns += [("test_same_person_distance", "same dist"), ("test_different_person_distance", "other dist")]
    else:
        columns += [("test_loss", "test loss")]
    final_label = "final (averaged)" if report["strategy"] == "average" else "final (promoted)"
    rows = [(r["name"], r) for r in report["workers"]] + [(final_label, report["final"])]
    print(f"\n{'model':<24}{'examples':>10}" + "".join(f"{title:>12}" for _, title in columns))
    print("-" * (34 + 12 * len(columns)))
    for name, row in rows:
        print(f"{name:<24}{row['examples']:>10}" + "".join(f"{row[key]:>12.4f}" for key, _ in columns))
    held_out = f"{report['test_examples']} held-out examples"
    if report["task"] == "faces":
        held_out += f" of {report['final']['test_people']} people never seen in training"
    print(held_out + "\n")


def plot_report(report, histories, path):
    """Bars: held-out accuracy per worker and final. Curves: per-epoch held-out
    accuracy of each worker, with the final model as a line."""
    os.environ.setdefault("MPLCONFIGDIR", os.path.join(os.path.dirname(path), ".matplotlib"))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    from disttrain_contract import atomic_path

    fig, (bars, curves) = plt.subplots(1, 2, figsize=(11, 4))
    names = [r["name"] for r in report["workers"]] + ["final"]
    values = [r["test_accuracy"] for r in report["workers"]] + [report["final"]["test_accuracy"]]
    colors = ["#8da0cb"] * len(report["workers"]) + ["#fc8d62"]
    bars.bar(names, values, color=colors)
    for x, v in enumerate(values):
        bars.text(x, v, f"{v:.3f}", ha="center", va="bottom")
    bars.set_ylim(0, 1.05)
    bars.set_ylabel("held-out top-1 retrieval" if report["task"] == "faces" else "held-out accuracy")
    bars.set_title(f"{report['task']} / {report['strategy']}")
    for i, history in enumerate(histories):
        if history:
            curves.plot([e["epoch"] for e in history], [e["test_accuracy"] for e in history], marker="o", label=f"worker {i}")
    curves.axhline(report["final"]["test_accuracy"], color="#fc8d62", linestyle="--", label="final model")
    curves.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    curves.set_xlabel("epoch")
    curves.set_ylabel("held-out accuracy")
    curves.set_title("training curves")
    curves.legend()
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def cli():
    run_cli(main)


if __name__ == "__main__":
    cli()
