"""--combine: which model an `average` run publishes from its worker models.

    average   the example-weighted mean of the workers' weights (WeightedSum): one model,
              one forward pass per instance (the default, and the only mode before --combine);
    ensemble  one Keras model that calls every worker model and outputs the mean of their
              predicted probabilities (a logits head: each member's softmax first; a sigmoid
              logit: its sigmoid), or of their predicted values (regression); faces: the mean of
              their L2-normalised embeddings, normalised again. Built from Keras' own layers only
              (Average, Softmax, Activation, UnitNormalization), so the server loads it in safe
              mode like any other artifact. N forward passes;
    best      the worker model with the best value of the primary metric (metrics.primary_metric:
              accuracy, regression's RMSE, each in its own direction) on its validation split,
              which the trainer carved from its own shard (trainer --validation-fraction, the
              sweep's carve) and never trained on; the markers' `validation_metric` (or
              `validation_<metric>`). The held-out split never chooses: it stays the honest
              estimate of whichever model is published.

The report evaluates all three on the held-out split, with their serving latency per instance
(measured the same way for each), whatever mode publishes, so the choice is informed.
The other strategies end with one shared model: there is nothing to combine, and ensemble or
best is refused for them.
"""

import gc
import os
import statistics
import time

import numpy as np

from disttrain_contract import ContractError
from disttrain_contract.artifact import load_model
from disttrain_contract.evaluation import head_of
from disttrain_contract.metrics import ACCURACY, TOP1
from disttrain_contract.strategies import names_where, strategy_of
from disttrain_contract.tasks import TASKS

# (the mode "average" is the weight average, not the strategy of that name)
WEIGHT_AVERAGE, ENSEMBLE, BEST = MODES = ("average", "ensemble", "best")
LATENCY_REPEATS, LATENCY_WARMUP = 300, 20


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
            self.sums = [
                np.asarray(w, np.float64) * examples if np.issubdtype(w.dtype, np.floating) else np.array(w, copy=True)
                for w in weights
            ]
        else:
            if len(weights) != len(self.sums):
                raise ValueError(f"weight lists differ: {len(weights)} arrays, the first model has {len(self.sums)}")
            for i, (total, w) in enumerate(zip(self.sums, weights)):
                if w.shape != total.shape:
                    raise ValueError(
                        f"weight shapes differ: array {i} is {w.shape}, the first model's is {total.shape}"
                    )
                if np.issubdtype(total.dtype, np.floating):
                    # (assigned, not `total +=`: a 0-d weight, a scalar variable, sums to a numpy scalar, and
                    # `+=` on the loop's name would rebind the name, not add into the list)
                    self.sums[i] = total + np.asarray(w, np.float64) * examples
        self.examples += examples

    def mean(self):
        if self.sums is None:
            raise ValueError("no model was added")
        return [
            np.asarray(total / self.examples).astype(dtype) if np.issubdtype(dtype, np.floating) else np.array(total)
            for total, dtype in zip(self.sums, self.dtypes)
        ]


def check_mode(mode, strategy, markers, metric=ACCURACY):
    """Refuse, before any model is loaded, a mode this run cannot give (exit 2, one line)."""
    if mode not in MODES:
        raise ContractError(f"--combine must be one of {', '.join(MODES)}, not {mode!r}")
    if mode != WEIGHT_AVERAGE and not strategy_of(strategy).model_per_worker:
        per_worker = " or ".join(names_where(lambda s: s.model_per_worker))
        raise ContractError(
            f"--combine {mode} needs one model per worker (--strategy {per_worker}); a {strategy} run's "
            "workers end with one shared model, which is promoted as it is"
        )
    if mode == BEST and validation_scores(markers, metric) is None:
        raise ContractError(
            f"--combine best ranks the workers by their validation {metric.label}, and these workers "
            "kept no validation split: train them with disttrain-trainer --validation-fraction (e.g. 0.1)"
        )


def validation_score(marker, metric=ACCURACY):
    """A trainer marker's (TrainerMarker's) validation value of `metric`: its `validation_metric` when it
    names this metric, else its flat `validation_<name>` (markers before validation_metric:
    validation_accuracy; another metric's flat key is one this version keeps in `extra`). None when it has
    none. A marker whose validation_metric is another metric, or the same one in the other direction, is
    refused: ranking by it would be wrong."""
    recorded = marker.validation_metric
    if recorded is not None and recorded.value is not None:
        if recorded.name != metric.name or (recorded.direction or metric.direction) != metric.direction:
            raise ContractError(
                f"worker {marker.worker_index}'s marker ranks by validation "
                f"{recorded.name!r} ({recorded.direction}), this run's primary metric is "
                f"{metric.name!r} ({metric.direction}): was it trained on other data?"
            )
        value = recorded.value
    elif metric.name == "accuracy":
        value = marker.validation_accuracy
    else:
        value = marker.extra.get(f"validation_{metric.name}")
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def validation_scores(markers, metric=ACCURACY):
    """{worker index: validation value of `metric`} from the trainers' markers; None if any worker has none."""
    scores = {m.worker_index: validation_score(m, metric) for m in markers}
    return scores if all(v is not None for v in scores.values()) else None


def pick_best(scores, metric=ACCURACY):
    """The worker index of the best validation value in the metric's direction (highest accuracy,
    lowest RMSE); a tie goes to the lowest index (deterministic, and the worker that needs no other)."""
    if not scores:
        raise ValueError("no worker scores to choose from")
    best = None
    for index in sorted(scores):
        if best is None or metric.better(scores[index], scores[best]):
            best = index
    return best


# what an ensemble averages, per member head: probabilities (a logits head through a softmax, a
# sigmoid logit through a sigmoid first: the mean of logits is not the mean model), or values
ENSEMBLE_HEADS = {
    "softmax": "softmax",
    "logits": "softmax",
    "sigmoid": "sigmoid",
    "sigmoid_logits": "sigmoid",
    "value": "value",
}


def ensemble_head(head):
    """The head of an ensemble of members with `head` (what its disttrain.json records)."""
    return ENSEMBLE_HEADS[head or "softmax"]


def mirror_inputs(model):
    """Fresh keras.Inputs like the model's own (names, shapes, dtypes), in the structure it takes
    them (one tensor, a list, or a dict of named inputs)."""
    import keras

    def fresh(tensor):
        return keras.Input(shape=tensor.shape[1:], dtype=tensor.dtype, name=tensor.name)

    structure = model.input
    if isinstance(structure, dict):
        return {key: fresh(tensor) for key, tensor in structure.items()}
    if isinstance(structure, (list, tuple)):
        return [fresh(tensor) for tensor in structure]
    return fresh(structure)


def build_ensemble(members, task, head=None, output_name=None):
    """One Keras model: the members side by side on the same input(s), their outputs averaged.

    The ensemble takes the members' own inputs (names, shapes, dtypes; a multi-input model's dict
    of named inputs), so a client feeds it as it fed one member. Each member is wrapped in a
    functional model of its own name, so the members' layers (all called "embedding",
    "probabilities", ...) do not clash. `head`: the members' (their disttrain.json's); a logits head
    is put through a softmax and a sigmoid logit through a sigmoid before the mean (then the
    ensemble's head is ensemble_head(head)). Faces: each member's embedding is L2-normalised (the
    trainer's models already end so; this does not rely on it), averaged, and normalised again, so
    distances compare like a single model's. `output_name`: the name of the averaging layer (the
    members' recorded output name, so the ensemble's output is called like theirs)."""
    import keras

    inputs = mirror_inputs(members[0])
    outputs = [keras.Model(m.input, m.output, name=f"member_{i}")(inputs) for i, m in enumerate(members)]
    if head == "logits":
        outputs = [keras.layers.Softmax(name=f"member_{i}_softmax")(o) for i, o in enumerate(outputs)]
    elif head == "sigmoid_logits":
        outputs = [keras.layers.Activation("sigmoid", name=f"member_{i}_sigmoid")(o) for i, o in enumerate(outputs)]
    normalise = TASKS[task].retrieval  # embeddings compared by distance
    if normalise:
        outputs = [keras.layers.UnitNormalization(name=f"member_{i}_l2")(o) for i, o in enumerate(outputs)]
    # the last layer carries the output's name: the mean's, or (faces) the normalisation after it
    mean_name = "mean" if normalise else (output_name or "mean")
    mean = keras.layers.Average(name=mean_name)(outputs) if len(outputs) > 1 else outputs[0]
    if normalise:
        mean = keras.layers.UnitNormalization(name=output_name or "l2_normalise")(mean)
    return keras.Model(inputs, mean, name=f"ensemble_of_{len(members)}")


def ensemble_meta(meta):
    """The artifact metadata an ensemble of members with `meta` changes: its head and output name
    when the members' logits became probabilities."""
    head = head_of(meta)
    merged = ensemble_head(head)
    if merged == head or "head" not in (meta or {}):
        return {}
    outputs = [dict(o, name="probabilities") for o in (meta.get("outputs") or [])][:1]
    return {"head": merged, **({"outputs": outputs} if outputs else {})}


def latencies_per_instance(models, instance, repeats=LATENCY_REPEATS):
    """Median seconds of one single-instance call of each model compiled as one graph (as the
    server serves it: model_store.compiled_call), after a warm-up; the same method for every
    candidate. The calls are interleaved (one of each model per round), so a burst of load from
    other processes on a shared machine hits every candidate alike. A single instance is the
    server's worst case: no batch shares the forward passes. `instance`: an array, or a dict of
    arrays (a model with several named inputs)."""
    import tensorflow as tf

    x = tf.nest.map_structure(tf.constant, instance)
    signature = [tf.nest.map_structure(lambda t: tf.TensorSpec([None, *t.shape[1:]], t.dtype), x)]
    graphs = []
    for model in models:
        graph = tf.function(lambda x, model=model: model(x, training=False), input_signature=signature, autograph=False)
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


def first_rows(x, n=1):
    """The first n instances of x: an array, or a dict of arrays (a model with several named inputs)."""
    return {name: value[:n] for name, value in x.items()} if isinstance(x, dict) else x[:n]


def latency_input(task, x_test, meta):
    """One held-out instance as the model is fed it (faces: preprocessed the model's way)."""
    return TASKS[task].preprocess(first_rows(x_test), meta)


def candidates(mode, task, worker_paths, markers, rows, averaged, meta, held_out, x_test, log=print, metric=ACCURACY):
    """Evaluate average, ensemble and best on the held-out split; return (the model `mode`
    publishes, its held-out metrics, extra metadata for its artifact, the report's "combine" section).

    worker_paths: each worker's model file, in the order of markers and rows (rows: the workers'
    held-out metrics, already measured by main); averaged: the weight-averaged model; held_out(model, meta,
    name): its held-out metrics, its predictions kept under `name` for the analysis; x_test: the held-out
    inputs as the models take them; metric: the primary metric (the best worker's validation ranking)."""
    instance = latency_input(task, x_test, meta)
    members = []
    for path in worker_paths:
        model, _ = load_model(path)
        members.append(model)
    retrieval = TASKS[task].retrieval  # an embedding: no head, nothing for the ensemble's metadata to change
    head = head_of(meta) if not retrieval else None
    merged = ensemble_meta(meta) if not retrieval else {}
    recorded = ((merged.get("outputs") or (meta or {}).get("outputs") or [{}])[0]).get("name")
    input_names = {t.name for t in members[0].inputs}
    ensemble = build_ensemble(members, task, head, recorded if recorded and recorded not in input_names else None)
    ensemble_model_meta = dict(meta, **merged)
    scores = validation_scores(markers, metric)
    best_index = pick_best(scores, metric) if scores else None
    by_index = {m.worker_index: i for i, m in enumerate(markers)}

    log(
        f"aggregator: evaluating the three candidates (average, ensemble of {len(members)}, best by validation "
        f"{metric.label}) and their latency ({LATENCY_REPEATS} single-instance calls each, interleaved) ..."
    )
    best_model = members[by_index[best_index]] if best_index is not None else None
    timed = [averaged, ensemble] + ([best_model] if best_model is not None else [])
    latency_ms = [1000 * t for t in latencies_per_instance(timed, instance)]
    section = {
        "published": mode,
        "latency_method": f"median of {LATENCY_REPEATS} single-instance calls of each model "
        "compiled as one graph (as the server calls it), interleaved, after a warm-up; the machine may be shared",
        "candidates": {},
    }
    average_metrics = held_out(averaged, meta, "average")
    section["candidates"]["average"] = {
        "forward_passes": 1,
        **average_metrics,
        "latency_ms_per_instance": latency_ms[0],
    }
    ensemble_metrics = held_out(ensemble, ensemble_model_meta, "ensemble")
    section["candidates"]["ensemble"] = {
        "forward_passes": len(members),
        "members": [m.worker_index for m in markers],
        **({"head": merged["head"]} if merged else {}),
        **ensemble_metrics,
        "latency_ms_per_instance": latency_ms[1],
    }
    if best_index is None:
        section["candidates"]["best"] = {
            "available": False,
            "why": "the workers kept no validation split (disttrain-trainer --validation-fraction)",
        }
    else:
        section["candidates"]["best"] = {
            "forward_passes": 1,
            "worker_index": best_index,
            "validation_metric": {"name": metric.name, "direction": metric.direction, "value": scores[best_index]},
            "validation_scores": {str(k): v for k, v in sorted(scores.items())},
            # the names of before this round, for a classifier's readers
            **(
                {
                    "validation_accuracy": scores[best_index],
                    "validation_accuracies": {str(k): v for k, v in sorted(scores.items())},
                }
                if metric.name == "accuracy"
                else {}
            ),
            "validation_examples": markers[by_index[best_index]].validation_examples,
            **{k: v for k, v in rows[by_index[best_index]].items() if k.startswith("test_")},
            "latency_ms_per_instance": latency_ms[2],
        }

    if mode == WEIGHT_AVERAGE:
        published, metrics, extra = averaged, average_metrics, {}
    elif mode == ENSEMBLE:
        published, metrics = ensemble, ensemble_metrics
        extra = {"ensemble_members": [m.worker_index for m in markers], **merged}
    else:
        published = best_model
        metrics = {k: v for k, v in rows[by_index[best_index]].items() if k.startswith("test_")}
        extra = {
            "promoted_worker": best_index,
            "validation_metric": {"name": metric.name, "direction": metric.direction, "value": scores[best_index]},
            **({"validation_accuracy": scores[best_index]} if metric.name == "accuracy" else {}),
        }
    del members
    gc.collect(1)
    return published, metrics, {"combine": mode, **extra}, section


def print_candidates(section, metric=ACCURACY):
    title = "top-1" if metric == TOP1 else "test acc" if metric.name == "accuracy" else f"test {metric.label}"
    print(f"{'candidate':<24}{title:>10}{'passes':>8}{'ms/inst':>10}")
    print("-" * 52)
    for name, c in section["candidates"].items():
        if c.get("available") is False:
            print(f"{name:<24}{'-':>10}  ({c['why']})")
            continue
        label = f"best (worker {c['worker_index']})" if name == "best" else name
        print(
            f"{label:<24}{c[metric.key]:>10.4f}{c['forward_passes']:>8}{c['latency_ms_per_instance']:>10.3f}"
            + ("  <- published" if name == section["published"] else "")
        )
    print()


def worker_model_paths(worker_dirs, markers):
    return [os.path.join(d, m.model) for d, m in zip(worker_dirs, markers)]
