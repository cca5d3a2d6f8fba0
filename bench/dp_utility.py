#!/usr/bin/env python3
"""dp_utility: what differential privacy (DP-SGD, the trainer's --dp-* flags) costs in accuracy and in step time.

Two measurements:
  utility    held-out accuracy against the privacy budget ε: digits and movie reviews, 2 workers (--strategy,
             default multiworker), the same epochs and batch, without DP and at ε ≈ 1, 3 and 8 (δ = 1e-5, clip
             norm 1.0). The noise multiplier of each target is found by bisection on the trainer's own ε
             (disttrain_trainer.privacy.epsilon: dp-accounting's RDP accountant, Poisson sampling at
             q = batch / largest shard, every step of the run), so the run's reported ε is the target's
             within 1 %. The accuracy is the final model's on the held-out split (the aggregator's report).
             Movie reviews once more with the copier's private vocabulary (ε 1, δ 1e-6): a target ε is then
             the total of both (basic composition), and DP-SGD gets the target less 1.
  step time  one process, batch 64, milliseconds per training step (steps run in one compiled call, as the
             trainer runs them): the ordinary step, the DP step (per-example gradients with tf.vectorized_map,
             clipping, noise) and, for comparison, per-example gradients from the Jacobian of the per-example
             losses; on the digits CNN and on the text embedding bag (vocabulary 20,000 x 64: the ordinary
             step's gradient is sparse, the DP step's is dense, as the noise covers every row).
             The DP code costs nothing when DP is off: the ordinary step is the same code as before, and
             tests/integration/test_privacy_pipeline.py checks its final weights are bit-identical.

    .venv/bin/python bench/dp_utility.py [--repeats 3] [--utility-only]
                                              (BENCH_QUICK=1: 1 epoch, ε ≈ 3 only, fewer timed steps)
Results: results/dp_utility.json, the table on stdout, plots/dp_utility.png.
"""

import json
import os
import sys
import time

from common import BENCH, QUICK, RESULTS, Bench, command_line, tmpdir

TASKS = [
    {"source": "sample:digits", "epochs": 20, "batch": 32, "name": "digits"},
    # private text needs larger batches and more epochs (docs/privacy.md): every row takes the same
    {"source": "sample:movie-reviews", "epochs": 20, "batch": 256, "name": "movie reviews"},
    # the copier's private vocabulary (ε 1) as well: a target ε is the total, the training gets the rest
    {
        "source": "sample:movie-reviews",
        "epochs": 20,
        "batch": 256,
        "name": "movie reviews, private vocabulary",
        "vocabulary": {"epsilon": 1.0, "delta": 1e-6},
    },
]
TARGETS = (3.0,) if QUICK else (1.0, 3.0, 8.0)
DELTA, CLIP = 1e-5, 1.0
STEP_BATCH = 64
TIMED_STEPS = 8 if QUICK else 64


def configure(parser):
    parser.add_argument(
        "--strategy",
        choices=("average", "multiworker", "localsgd"),
        default="multiworker",
        help="the strategy of the utility runs (default multiworker)",
    )
    parser.add_argument(
        "--learning-rate",
        type=float,
        default=None,
        help="the trainer's --learning-rate in every run (default: the task's)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs of each private setting (its noise and batches differ every run: the table gives "
        "the mean and the range; default 1)",
    )
    parser.add_argument(
        "--utility-only",
        action="store_true",
        help="skip the step times and keep the stored ones (accuracy does not need an idle machine)",
    )


def noise_for(target, q, steps):
    """The noise multiplier whose ε after `steps` steps at rate q is `target` (bisection; ε falls as noise grows)."""
    from disttrain_trainer.privacy import epsilon

    low, high = 0.3, 50.0
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if epsilon(mid, q, steps, DELTA) > target else (low, mid)
    return high


def utility(base, strategy, learning_rate=None, repeats=1):
    from stages import run_pipeline, stage

    rows = []
    for task in TASKS:
        source, vocabulary = task["source"], task.get("vocabulary")
        copier_args = (
            ["--dp-vocab-epsilon", vocabulary["epsilon"], "--dp-vocab-delta", vocabulary["delta"]] if vocabulary else []
        )
        epochs = 1 if QUICK else task["epochs"]
        slug = task["name"].replace(" ", "-").replace(",", "")
        # the shards the runs will have (the copier is seeded): q and the steps that ε depends on
        stage("copier", "--source", source, "--n-shards", 2, "--workdir", os.path.join(base, f"{slug}-shards"))
        with open(os.path.join(base, f"{slug}-shards", "data", "manifest.json")) as fh:
            shard_examples = [s["examples"] for s in json.load(fh)["shards"]]
        # (average: each worker its own shard, the smaller one's ε is the run's; connected: the largest shard's q)
        examples = min(shard_examples) if strategy == "average" else max(shard_examples)
        q, steps = task["batch"] / examples, epochs * -(-examples // task["batch"])
        for target in (None, *TARGETS):
            spent = vocabulary["epsilon"] if vocabulary else 0.0  # by the vocabulary, before training
            if target is not None and target <= spent:
                continue
            extra = ["--progress-interval", 0, *(["--learning-rate", learning_rate] if learning_rate else [])]
            noise = None if target is None else noise_for(target - spent, q, steps)
            if noise is not None:
                extra += ["--dp-l2-clip", CLIP, "--dp-noise-multiplier", f"{noise:.6f}", "--dp-delta", DELTA]
            accuracies, started = [], time.monotonic()
            # without DP a run is deterministic (seeded): once is enough
            for run in range(1 if target is None else repeats):
                print(
                    f"  {task['name']}: {'no DP' if target is None else f'ε ≈ {target:g} (noise {noise:.3f})'}"
                    f"{f', run {run + 1} of {repeats}' if target is not None and repeats > 1 else ''} ...",
                    file=sys.stderr,
                    flush=True,
                )
                report = run_pipeline(
                    os.path.join(base, f"{slug}-{target or 'nodp'}-{run}"),
                    source,
                    2,
                    strategy,
                    epochs,
                    task["batch"],
                    extra_trainer_args=extra,
                    copier_args=copier_args,
                    aggregator_args=("--force", "--exports", "none"),
                )
                privacy = report.get("privacy") or {}
                accuracies.append(report["final"]["test_accuracy"])
                print(
                    f"   accuracy {accuracies[-1]:.4f}" + (f", ε {privacy['epsilon']:.3f}" if privacy else ""),
                    file=sys.stderr,
                    flush=True,
                )
            rows.append(
                {
                    "task": task["name"],
                    "strategy": strategy,
                    "workers": 2,
                    "epochs": epochs,
                    "batch": task["batch"],
                    "target_epsilon": target,
                    "noise_multiplier": noise,
                    "epsilon": privacy.get("epsilon"),
                    "delta": privacy.get("delta"),
                    "l2_clip": privacy.get("l2_clip"),
                    "vocabulary_epsilon": vocabulary["epsilon"] if vocabulary else None,
                    "test_accuracy": sum(accuracies) / len(accuracies),
                    "test_accuracy_runs": accuracies,
                    "wall_sec": time.monotonic() - started,
                }
            )
    return rows


def step_times():
    """ms per step: ordinary, DP (vectorized_map), per-example gradients by Jacobian; digits CNN and text."""
    import keras
    import numpy as np
    import tensorflow as tf

    from disttrain_trainer.dp_step import DpGradient, clipped_sum
    from disttrain_trainer.models import build_image_model, build_text_core
    from disttrain_trainer.step import make_train_call

    class JacobianDp(DpGradient):
        def step(self, model, loss_and_hits, x, y, variables, step):
            with tf.GradientTape() as tape:
                losses, hits = loss_and_hits(y, model(x, training=True))
            per_example = tape.jacobian(losses, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
            return (
                self.noisy_average(clipped_sum(per_example, self.l2_clip), step),
                tf.reduce_sum(losses),
                tf.reduce_sum(hits),
            )

    def loss_and_hits(y, outputs):
        return (
            keras.losses.sparse_categorical_crossentropy(y, outputs),
            tf.cast(tf.equal(tf.argmax(outputs, axis=-1), y), tf.float32),
        )

    rng = np.random.default_rng(0)
    models = {
        "digits CNN": (
            lambda: build_image_model(8, 8, 1, 10),
            tf.data.Dataset.from_tensors(
                (rng.integers(0, 255, (STEP_BATCH, 8, 8, 1), dtype=np.uint8), rng.integers(0, 10, STEP_BATCH))
            ),
        ),
        "text embedding bag (20,000 x 64)": (
            lambda: build_text_core(20000, 2, 64),
            tf.data.Dataset.from_tensors((rng.integers(1, 20000, (STEP_BATCH, 230)), rng.integers(0, 2, STEP_BATCH))),
        ),
    }
    rows = []
    for name, (build, data) in models.items():
        for variant, private in (
            ("ordinary step", None),
            ("DP step, vectorized_map", DpGradient(CLIP, 1.0, 1, STEP_BATCH, 1)),
            ("DP step, Jacobian", JacobianDp(CLIP, 1.0, 1, STEP_BATCH, 1)),
        ):
            keras.utils.set_random_seed(0)
            model = build()
            optimizer = keras.optimizers.Adam(1e-3)
            optimizer.build(model.trainable_variables)
            call = make_train_call(tf.distribute.get_strategy(), model, optimizer, loss_and_hits, private=private)
            iterator = iter(data.repeat())
            call(iterator, 2)  # tracing
            started = time.perf_counter()
            call(iterator, TIMED_STEPS)
            ms = (time.perf_counter() - started) / TIMED_STEPS * 1000
            rows.append({"model": name, "variant": variant, "batch": STEP_BATCH, "ms_per_step": ms})
            print(f"  {name}, {variant}: {ms:.1f} ms/step", file=sys.stderr, flush=True)
    return rows


def table(results):
    lines = [
        "| task | strategy | epochs | batch | target ε | noise multiplier | reported ε (δ) | held-out accuracy "
        "(mean, range of the runs) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results["utility"]:
        target = "no DP-SGD" if r["target_epsilon"] is None else f"{r['target_epsilon']:g}"
        noise = "" if r["noise_multiplier"] is None else f"{r['noise_multiplier']:.3f}"
        epsilon = "" if r["epsilon"] is None else f"{r['epsilon']:.2f} ({r['delta']:g})"
        runs = r.get("test_accuracy_runs") or [r["test_accuracy"]]
        spread = f" ({min(runs):.3f}-{max(runs):.3f}, {len(runs)} runs)" if len(runs) > 1 else ""
        lines.append(
            f"| {r['task']} | {r['strategy']}, 2 workers | {r['epochs']} | {r['batch']} | {target} | {noise} | "
            f"{epsilon} | {r['test_accuracy']:.4f}{spread} |"
        )
    lines += ["", "| model | step | ms per step (batch 64) | x ordinary |", "| --- | --- | ---: | ---: |"]
    for r in results["step_time"]:
        plain = next(
            p["ms_per_step"]
            for p in results["step_time"]
            if p["model"] == r["model"] and p["variant"] == "ordinary step"
        )
        lines.append(f"| {r['model']} | {r['variant']} | {r['ms_per_step']:.1f} | {r['ms_per_step'] / plain:.1f} |")
    return "\n".join(lines)


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6))
    for task in dict.fromkeys(r["task"] for r in results["utility"]):
        rows = [r for r in results["utility"] if r["task"] == task]
        private = sorted(
            (r["epsilon"], r["test_accuracy"], r.get("test_accuracy_runs") or [r["test_accuracy"]])
            for r in rows
            if r["epsilon"] is not None
        )
        line = left.errorbar(
            [e for e, _, _ in private],
            [a for _, a, _ in private],
            yerr=[[a - min(runs) for _, a, runs in private], [max(runs) - a for _, a, runs in private]],
            marker="o",
            capsize=3,
            label=f"{task}, DP (mean; bars: the runs' range)",
        )[0]
        for r in rows:
            if r["epsilon"] is None:
                left.axhline(r["test_accuracy"], color=line.get_color(), linestyle="--", label=f"{task}, no DP-SGD")
    left.set_xscale("log")
    left.set_xticks([1, 3, 8, 20], ["1", "3", "8", "20"])
    left.minorticks_off()
    left.set_xlabel(f"ε (δ = {DELTA:g}; smaller is more private)")
    left.set_ylabel("held-out accuracy")
    left.set_title("Accuracy against the privacy budget (2 workers)")
    left.legend(fontsize=8)
    left.grid(alpha=0.3)
    labels = [
        f"{r['model'].split(' ')[0]}\n{r['variant'].replace('DP step, ', 'DP ').replace('ordinary step', 'ordinary')}"
        for r in results["step_time"]
    ]
    right.bar(range(len(labels)), [r["ms_per_step"] for r in results["step_time"]], color="#4C72B0")
    right.set_xticks(range(len(labels)), labels, fontsize=7, rotation=30, ha="right")
    right.set_yscale("log")
    right.set_ylabel(f"ms per step (batch {STEP_BATCH}, log scale)")
    right.set_title("Step time: per-example gradients")
    right.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path + ".tmp.png", dpi=110)
    os.replace(path + ".tmp.png", path)


def main(args):
    base = tmpdir("dp_utility")
    config = {
        "tasks": TASKS,
        "targets": TARGETS,
        "delta": DELTA,
        "l2_clip": CLIP,
        "strategy": args.strategy,
        "learning_rate": args.learning_rate,
        "step_batch": STEP_BATCH,
        "timed_steps": TIMED_STEPS,
    }
    config["repeats"] = args.repeats
    with Bench("dp_utility", config) as bench:
        stored = None
        if args.utility_only:
            with open(os.path.join(RESULTS, "dp_utility.json")) as fh:
                stored = json.load(fh)["results"]["step_time"]
        bench.results = {
            "step_time": stored or step_times(),
            "utility": utility(base, args.strategy, args.learning_rate, args.repeats),
        }
        plot(bench.results, os.path.join(BENCH, "plots", "dp_utility.png"))
        print(table(bench.results))


if __name__ == "__main__":
    main(command_line(__doc__, configure))
