#!/usr/bin/env python3
"""Your own model through the pipeline against the same model trained by plain `model.fit` in one process.

For each table (scikit-learn's breast cancer: classification, accuracy; diabetes: regression, RMSE) and each of
--seeds seeds, a model is written by this benchmark as a user would (tests/own_models.py: Normalization from the
copier's statistics, one hidden layer; the seed draws the initial weights) and saved with model.save(). Then:
  fit          the file trained by Keras' model.fit on all the training rows (every shard), one process,
               the same epochs and batch: the reference;
  <strategy>   the same file through disttrain: 2 workers of each strategy (--model-file), the aggregator's
               published model (average: the weight average), with as many optimizer steps per model as fit
               takes: an average or localsgd worker sees half the rows per epoch, and a multiworker step
               takes both workers' batches at once, so these run twice fit's epochs; parameterserver's
               workers add their steps to one model, so it runs fit's epochs. The aggregator publishes with
               --force: the benchmark measures the model a run makes, whatever the quality gate would say.
Every run is scored on the same held-out split (the copier's, seed 0). Reported per table and run: the mean and
standard deviation over the seeds of the held-out metric, and the difference of each strategy's mean from fit's
(goals: within 1 accuracy point on breast cancer, within 5 % RMSE on diabetes). The tables are small (114 and
89 held-out rows: one example is almost a point), so the seeds' spread is reported beside every mean.
"""

import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys

from common import BIN, ROOT, Bench, command_line, tmpdir

sys.path.insert(0, os.path.join(ROOT, "tests"))
STRATEGIES = ("average", "multiworker", "localsgd", "parameterserver")
# epochs relative to fit's for the same optimizer steps per model with 2 workers (see the docstring)
EPOCH_FACTOR = {"average": 2, "multiworker": 2, "localsgd": 2, "parameterserver": 1}
TABLES = {
    # name -> (csv writer, copier flags, epochs, batch, metric, direction)
    "breast-cancer": ("breast_cancer_csv", (), 20, 32, "accuracy"),
    "diabetes": ("diabetes_csv", ("--label-column", "progression", "--problem", "regression"), 60, 32, "rmse"),
}


def fit_reference(data_dir, model_path, epochs, batch, metric):
    """model.fit on every training row of the copied data, in this process; the held-out metric."""
    import keras
    import numpy as np

    from disttrain_contract.evaluation import evaluate  # the same scoring as the stages
    from disttrain_contract.manifest import Manifest, read_split

    manifest = Manifest.read(data_dir)
    parts = [read_split(data_dir, manifest, s) for s in manifest.shards]
    x = np.concatenate([p[0] for p in parts]).astype("float32")
    y = np.concatenate([p[1] for p in parts])
    x_test, y_test = read_split(data_dir, manifest, manifest.test)
    model = keras.models.load_model(model_path)
    model.fit(x, y, epochs=epochs, batch_size=batch, verbose=0, shuffle=True)
    head = "value" if manifest.problem == "regression" else "softmax"
    return evaluate(model, manifest.task, x_test.astype("float32"), y_test, head=head)[metric]


def main():
    args = command_line(
        __doc__,
        lambda p: (
            p.add_argument("--seeds", type=int, default=5, help="models (initial weights) per table (default 5)"),
            p.add_argument("--tables", default=",".join(TABLES), help="comma-separated subset of " + ", ".join(TABLES)),
            p.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated subset"),
        ),
    )
    import own_models

    scratch = tmpdir("own-model")
    results = {}
    try:
        with Bench(
            "own_model",
            {
                "seeds": args.seeds,
                "tables": {t: TABLES[t] for t in args.tables.split(",")},
                "workers": 2,
                "epoch_factor": EPOCH_FACTOR,
            },
        ) as bench:
            for table in args.tables.split(","):
                writer, copier_flags, epochs, batch, metric = TABLES[table]
                root = os.path.join(scratch, table)
                os.makedirs(root)
                csv = getattr(own_models, writer)(os.path.join(root, f"{table}.csv"))
                data = os.path.join(root, "data")
                subprocess.run(
                    [
                        os.path.join(BIN, "disttrain-copier"),
                        "--source",
                        f"table:{csv}",
                        "--n-shards",
                        "2",
                        "--out",
                        data,
                        *copier_flags,
                    ],
                    check=True,
                    capture_output=True,
                )
                mean, variance = own_models.table_statistics(os.path.join(data, "manifest.json"))
                manifest = json.load(open(os.path.join(data, "manifest.json")))
                runs = {"fit": []}
                for seed in range(args.seeds):
                    if manifest["problem"] == "regression":
                        t = manifest["target_statistics"]
                        model = own_models.regressor(
                            len(mean), mean, variance, t["mean"], t["variance"] ** 0.5, seed=seed
                        )
                    else:
                        model = own_models.classifier(len(mean), mean, variance, head="softmax", seed=seed)
                    path = os.path.join(root, f"model-{seed}.keras")
                    model.save(path)
                    runs["fit"].append(fit_reference(data, path, epochs, batch, metric))
                    for strategy in args.strategies.split(","):
                        work = own_models.workdir_with(data, pathlib.Path(root) / f"{strategy}-{seed}")
                        report = own_models.run_own_pipeline(
                            work,
                            2,
                            strategy,
                            "--model-file",
                            path,
                            epochs=epochs * EPOCH_FACTOR[strategy],
                            aggregator_args=("--exports", "none", "--force"),
                        )
                        runs.setdefault(strategy, []).append(report["final"][f"test_{metric}"])
                        shutil.rmtree(str(work), ignore_errors=True)
                    print(f"{table} seed {seed}: " + ", ".join(f"{k} {v[-1]:.4f}" for k, v in runs.items()), flush=True)
                reference = statistics.fmean(runs["fit"])
                rows = {}
                for name, values in runs.items():
                    mean_value = statistics.fmean(values)
                    difference = (
                        100 * (mean_value - reference)
                        if metric == "accuracy"
                        else 100 * (mean_value - reference) / reference
                    )
                    rows[name] = {
                        "metric": metric,
                        "values": values,
                        "mean": mean_value,
                        "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
                        "difference_from_fit": difference,
                        "difference_unit": "points" if metric == "accuracy" else "% of fit's RMSE",
                    }
                results[table] = rows
                bench.results = results
                for name, row in rows.items():
                    print(
                        f"{table} {name:>16}: {metric} {row['mean']:.4f} +- {row['sd']:.4f}  "
                        f"({row['difference_from_fit']:+.2f} {row['difference_unit']})",
                        flush=True,
                    )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
