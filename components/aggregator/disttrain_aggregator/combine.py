"""--combine: which model an `average` run publishes from its worker models.

    average   the example-weighted mean of the workers' weights (main.WeightedSum): one model,
              one forward pass per instance (the default, and the only mode before --combine);
    ensemble  one Keras model that calls every worker model and outputs the mean of their
              predicted probabilities (faces: the mean of their L2-normalised embeddings,
              normalised again). Built from Keras' own layers only (Average, UnitNormalization),
              so the server loads it in safe mode like any other artifact. N forward passes;
    best      the worker model with the highest accuracy on its validation split, which the
              trainer carved from its own shard (trainer --validation-fraction, the sweep's
              carve) and never trained on. The held-out split never chooses: it stays the
              honest estimate of whichever model is published.

The report evaluates all three on the held-out split, with their serving latency per instance
(measured the same way for each), whatever mode publishes, so the choice is informed.
The other strategies end with one shared model: there is nothing to combine, and ensemble or
best is refused for them.
"""

import gc
import os
import statistics
import time

from disttrain_contract import ContractError
from disttrain_contract.artifact import load_model

MODES = ("average", "ensemble", "best")
LATENCY_REPEATS, LATENCY_WARMUP = 300, 20


def check_mode(mode, strategy, markers):
    """Refuse, before any model is loaded, a mode this run cannot give (exit 2, one line)."""
    if mode not in MODES:
        raise ContractError(f"--combine must be one of {', '.join(MODES)}, not {mode!r}")
    if mode != "average" and strategy != "average":
        raise ContractError(f"--combine {mode} needs one model per worker (--strategy average); a {strategy} run's "
                            "workers end with one shared model, which is promoted as it is")
    if mode == "best" and validation_scores(markers) is None:
        raise ContractError("--combine best ranks the workers by their validation accuracy, and these workers kept no "
                            "validation split: train them with disttrain-trainer --validation-fraction (e.g. 0.1)")


def validation_scores(markers):
    """{worker index: validation accuracy} from the trainers' markers; None if any worker has none."""
    scores = {m["worker_index"]: m.get("validation_accuracy") for m in markers}
    return scores if all(isinstance(v, (int, float)) for v in scores.values()) else None


def pick_best(scores):
    """The worker index of the highest validation accuracy; a tie goes to the lowest index
    (deterministic, and the worker that needs no other)."""
    if not scores:
        raise ValueError("no worker scores to choose from")
    return max(sorted(scores), key=lambda index: scores[index])


def build_ensemble(members, task):
    """One Keras model: the members side by side on the same input, their outputs averaged.

    Each member is wrapped in a functional model of its own name, so the members' layers (all
    called "embedding", "probabilities", ...) do not clash. Faces: each member's embedding is
    L2-normalised (the trainer's models already end so; this does not rely on it), averaged,
    and normalised again, so distances compare like a single model's."""
    import keras

    first = members[0].inputs[0]
    inputs = keras.Input(shape=first.shape[1:], dtype=first.dtype, name="ensemble_input")
    outputs = [keras.Model(m.input, m.output, name=f"member_{i}")(inputs) for i, m in enumerate(members)]
    if task == "faces":
        outputs = [keras.layers.UnitNormalization(name=f"member_{i}_l2")(o) for i, o in enumerate(outputs)]
    mean = keras.layers.Average(name="mean")(outputs) if len(outputs) > 1 else outputs[0]
    if task == "faces":
        mean = keras.layers.UnitNormalization(name="l2_normalise")(mean)
    return keras.Model(inputs, mean, name=f"ensemble_of_{len(members)}")


def latencies_per_instance(models, instance, repeats=LATENCY_REPEATS):
    """Median seconds of one single-instance call of each model compiled as one graph (as the
    server serves it: model_store.compiled_call), after a warm-up; the same method for every
    candidate. The calls are interleaved (one of each model per round), so a burst of load from
    other processes on a shared machine hits every candidate alike. A single instance is the
    server's worst case: no batch shares the forward passes."""
    import tensorflow as tf

    x = tf.constant(instance)
    graphs = []
    for model in models:
        spec = model.inputs[0]
        graph = tf.function(lambda x, model=model: model(x, training=False),
                            input_signature=[tf.TensorSpec(spec.shape, spec.dtype)], autograph=False)
        for _ in range(LATENCY_WARMUP):
            graph(x).numpy()
        graphs.append(graph)
    times = [[] for _ in graphs]
    for _ in range(repeats):
        for graph, samples in zip(graphs, times):
            started = time.perf_counter()
            graph(x).numpy()
            samples.append(time.perf_counter() - started)
    return [statistics.median(samples) for samples in times]


def latency_input(task, x_test, meta):
    """One held-out instance as the model is fed it (faces: preprocessed the model's way)."""
    instance = x_test[:1]
    if task == "faces":
        from disttrain_contract.faces import preprocess, preprocessing_of

        instance = preprocess(instance, preprocessing_of(meta))
    return instance


def candidates(mode, task, worker_paths, markers, rows, averaged, meta, held_out, x_test, log=print):
    """Evaluate average, ensemble and best on the held-out split; return (the model `mode`
    publishes, its held-out metrics, extra metadata for its artifact, the report's "combine" section).

    worker_paths: each worker's model file, in the order of markers and rows (rows: the workers'
    held-out metrics, already measured by main); averaged: the weight-averaged model; held_out(model, meta,
    name): its held-out metrics, its predictions kept under `name` for the analysis."""
    instance = latency_input(task, x_test, meta)
    members = []
    for path in worker_paths:
        model, _ = load_model(path)
        members.append(model)
    ensemble = build_ensemble(members, task)
    scores = validation_scores(markers)
    best_index = pick_best(scores) if scores else None
    by_index = {m["worker_index"]: i for i, m in enumerate(markers)}

    log(f"aggregator: evaluating the three candidates (average, ensemble of {len(members)}, best by validation) and "
        f"their latency ({LATENCY_REPEATS} single-instance calls each, interleaved) ...")
    best_model = members[by_index[best_index]] if best_index is not None else None
    timed = [averaged, ensemble] + ([best_model] if best_model is not None else [])
    latency_ms = [1000 * t for t in latencies_per_instance(timed, instance)]
    section = {"published": mode, "latency_method": f"median of {LATENCY_REPEATS} single-instance calls of each model "
               "compiled as one graph (as the server calls it), interleaved, after a warm-up; the machine may be shared",
               "candidates": {}}
    average_metrics = held_out(averaged, meta, "average")
    section["candidates"]["average"] = {"forward_passes": 1, **average_metrics, "latency_ms_per_instance": latency_ms[0]}
    ensemble_metrics = held_out(ensemble, meta, "ensemble")
    section["candidates"]["ensemble"] = {"forward_passes": len(members), "members": [m["worker_index"] for m in markers],
                                         **ensemble_metrics, "latency_ms_per_instance": latency_ms[1]}
    if best_index is None:
        section["candidates"]["best"] = {"available": False, "why": "the workers kept no validation split "
                                         "(disttrain-trainer --validation-fraction)"}
    else:
        section["candidates"]["best"] = {
            "forward_passes": 1, "worker_index": best_index, "validation_accuracy": scores[best_index],
            "validation_accuracies": {str(k): v for k, v in sorted(scores.items())},
            "validation_examples": markers[by_index[best_index]].get("validation_examples"),
            **{k: v for k, v in rows[by_index[best_index]].items() if k.startswith("test_")},
            "latency_ms_per_instance": latency_ms[2]}

    if mode == "average":
        published, metrics, extra = averaged, average_metrics, {}
    elif mode == "ensemble":
        published, metrics = ensemble, ensemble_metrics
        extra = {"ensemble_members": [m["worker_index"] for m in markers]}
    else:
        published = best_model
        metrics = {k: v for k, v in rows[by_index[best_index]].items() if k.startswith("test_")}
        extra = {"promoted_worker": best_index, "validation_accuracy": scores[best_index]}
    del members
    gc.collect(1)
    return published, metrics, {"combine": mode, **extra}, section


def print_candidates(section, task):
    metric = "top-1" if task == "faces" else "test acc"
    print(f"{'candidate':<24}{metric:>10}{'passes':>8}{'ms/inst':>10}")
    print("-" * 52)
    for name, c in section["candidates"].items():
        if c.get("available") is False:
            print(f"{name:<24}{'-':>10}  ({c['why']})")
            continue
        label = f"best (worker {c['worker_index']})" if name == "best" else name
        print(f"{label:<24}{c['test_accuracy']:>10.4f}{c['forward_passes']:>8}{c['latency_ms_per_instance']:>10.3f}"
              + ("  <- published" if name == section["published"] else ""))
    print()


def worker_model_paths(worker_dirs, markers):
    return [os.path.join(d, m["model"]) for d, m in zip(worker_dirs, markers)]
