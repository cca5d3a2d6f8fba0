"""Held-out evaluation, computed the same way by the trainer (per epoch) and the
aggregator (per worker model and the final one), so their numbers compare.

Classification (text, image, table, array): cross-entropy and accuracy of the class probabilities
(the model's head says how its output becomes them: a softmax, logits, or one sigmoid unit for two
labels; see `probabilities`). Regression: mean squared error (the loss), RMSE, MAE and R².
Faces: retrieval on held-out people. The gallery holds each person's first
photo; the query is an augmented view of another photo of that person (of the
same photo when there is only one). Top-1 accuracy = the nearest gallery entry
is the right person; plus the mean distance to the same person and to others.
The harder part (darker, rotated, smaller): the gallery photo itself, 0.7x darker, rotated 6
degrees, or at 1/3 resolution (faces.hard_query), as the query: top-1 for each,
and the margin, the mean distance to the nearest wrong person over the mean
distance to the right one (1.5 means the nearest stranger is 1.5x farther).
Every crop goes through the model's own preprocessing version (faces.preprocess).
"""

import numpy as np

from disttrain_contract.tasks import TASKS
from disttrain_contract.errors import ContractError


def as_model_input(task, x):
    """Text models take a [n, 1] column of strings; arrays pass as they are (tasks.Task.model_input)."""
    return TASKS[task].model_input(x)


# How a model's output becomes what evaluation needs (recorded as "head" in the model's disttrain.json;
# absent = "softmax", the built-in classifiers):
#   softmax         [n, classes] probabilities
#   logits          [n, classes] unnormalised scores (a model compiled with from_logits=True)
#   sigmoid         [n, 1] the probability of the second of two labels
#   sigmoid_logits  [n, 1] its logit
#   value           [n] or [n, 1] a regression's prediction
#   embedding       [n, d] an L2-normalised embedding (faces: evaluated by retrieval, not read as classes)
HEADS = ("softmax", "logits", "sigmoid", "sigmoid_logits", "value", "embedding")


def head_of(meta):
    """The output kind of a model from its disttrain.json (None: the trainer's current built-in)."""
    return (meta or {}).get("head", "softmax")


def probabilities(outputs, head):
    """[n, classes] class probabilities from a classifier's raw outputs."""
    outputs = np.asarray(outputs, dtype=np.float64)
    if head == "softmax":
        return outputs
    if head == "logits":
        shifted = outputs - outputs.max(axis=-1, keepdims=True)
        exp = np.exp(shifted)
        return exp / exp.sum(axis=-1, keepdims=True)
    if head in ("sigmoid", "sigmoid_logits"):
        p = outputs.reshape(len(outputs), -1)[:, 0]
        if head == "sigmoid_logits":
            p = 1.0 / (1.0 + np.exp(-p))
        return np.stack([1.0 - p, p], axis=1)
    raise ValueError(f"head {head!r} is not a classifier's")


def regression_metrics(predictions, targets):
    """{"loss": mean squared error, "rmse", "mae", "r2"} of predictions [n] or [n, 1] against targets [n]."""
    predicted = np.asarray(predictions, dtype=np.float64).reshape(len(predictions), -1)[:, 0]
    target = np.asarray(targets, dtype=np.float64)
    error = predicted - target
    mse = float(np.mean(error**2))
    variance = float(np.var(target))
    return {
        "loss": mse,
        "rmse": float(np.sqrt(mse)),
        "mae": float(np.mean(np.abs(error))),
        "r2": float(1.0 - mse / variance) if variance > 0 else float("nan"),
    }


def compiled(model):
    """The model's inference as one tf.function, for a model evaluated again and again (the
    trainer, every epoch). Called eagerly, the text model took 65-85 ms of CPU per held-out
    evaluation here; compiled, about 20 ms after its first call. The same layers, so the
    same numbers. `reduce_retracing`: the last, shorter chunk does not trace it again each time."""
    import tensorflow as tf

    return tf.function(lambda x, training=False: model(x, training=training), reduce_retracing=True)


def predict(model, x, batch=512):
    return call_in_chunks(lambda chunk: model(chunk, training=False), x, batch)


def call_in_chunks(fn, x, batch=512):
    """fn (a Keras model's call, or a tf.function) over x, `batch` rows at a time, as float64:
    memory stays bounded however many rows x has. x: an array, or a dict of arrays (a model with
    several named inputs), whose rows are taken together."""
    import tensorflow as tf

    if isinstance(x, dict):
        n = len(next(iter(x.values())))
        chunks = ({name: tf.constant(v[i : i + batch]) for name, v in x.items()} for i in range(0, n, batch))
    else:
        chunks = (tf.constant(x[i : i + batch]) for i in range(0, len(x), batch))
    outputs = [np.asarray(fn(chunk)) for chunk in chunks]
    return np.concatenate(outputs).astype(np.float64)


def evaluate(model, task, x, y, seed=0, meta=None, outputs=None, head=None):
    """A dict of held-out metrics (metrics.metrics_of: "accuracy" and "loss" for classification;
    "loss", "rmse", "mae", "r2" for regression; faces: retrieval). `meta`: the model's
    disttrain.json, for a faces model's preprocessing version (None: the trainer's current one) and
    the model's head (how its output is read; `head` overrides it, for the trainer's own model).
    `outputs`: a dict to receive what the figures were computed from, for the aggregator's
    analysis (so it does not run the model over the split again): "raw" (the model's output as it
    answers), "probabilities" [n, classes];
    faces: "people" (the label of each gallery column), "distances" [queries, gallery] and
    "<kind>_distances" for each hard query."""
    if TASKS[task].retrieval:
        from disttrain_contract.faces import FACE_PREPROCESSING, preprocessing_of

        return evaluate_retrieval(
            model, x, y, seed, FACE_PREPROCESSING if meta is None else preprocessing_of(meta), outputs
        )
    head = head or head_of(meta)
    raw = predict(model, x)
    if outputs is not None:
        outputs["raw"] = raw
    if head == "value":
        if outputs is not None:
            outputs["predictions"] = raw.reshape(len(raw), -1)[:, 0]
        return regression_metrics(raw, y)
    probs = probabilities(raw, head)
    if outputs is not None:
        outputs["probabilities"] = probs
    labels = np.asarray(y)
    picked = np.clip(probs[np.arange(len(labels)), labels], 1e-7, 1.0)
    return {"loss": float(-np.log(picked).mean()), "accuracy": float((probs.argmax(axis=-1) == labels).mean())}


def pairwise_distances(a, b):
    """Euclidean distances between the rows of a and b."""
    squared = (a * a).sum(1)[:, None] - 2 * a @ b.T + (b * b).sum(1)[None, :]
    return np.sqrt(np.maximum(squared, 0.0))


def evaluate_retrieval(model, x, y, seed=0, preprocessing=1, outputs=None):
    from disttrain_contract.faces import HARD_QUERIES, augment, hard_query, preprocess

    def embed(crops):
        return predict(model, preprocess(np.stack(crops), preprocessing))

    rng = np.random.default_rng(seed)
    people = sorted(set(int(v) for v in y))
    gallery, queries = [], []
    for person in people:
        photos = np.flatnonzero(np.asarray(y) == person)
        gallery.append(x[photos[0]])
        queries.append(augment(x[photos[1] if len(photos) > 1 else photos[0]], rng))
    gallery_vectors = embed(gallery)
    distances = pairwise_distances(embed(queries), gallery_vectors)
    n = len(people)
    same = distances[np.arange(n), np.arange(n)]
    others = distances[~np.eye(n, dtype=bool)]
    top1 = float((distances.argmin(axis=1) == np.arange(n)).mean())
    result = {
        "accuracy": top1,
        "top1_accuracy": top1,
        "same_person_distance": float(same.mean()),
        "different_person_distance": float(others.mean()),
        "people": n,
    }
    if outputs is not None:
        outputs.update(people=people, distances=distances)
    for kind in HARD_QUERIES:
        hard = pairwise_distances(embed([hard_query(face, kind) for face in gallery]), gallery_vectors)
        result.update({f"{kind}_{key}": value for key, value in retrieval_margin(hard).items()})
        if outputs is not None:
            outputs[f"{kind}_distances"] = hard
    return result


def retrieval_margin(distances):
    """Queries (rows) against a gallery (columns) where query i is person i: top-1, the mean
    distance to the right person, to the nearest wrong one, and their ratio (the margin)."""
    n = len(distances)
    right = distances[np.arange(n), np.arange(n)]
    wrong = np.where(np.eye(n, dtype=bool), np.inf, distances).min(axis=1)
    return {
        "top1_accuracy": float((distances.argmin(axis=1) == np.arange(n)).mean()),
        "right_distance": float(right.mean()),
        "nearest_wrong_distance": float(wrong.mean()),
        "margin": float(wrong.mean() / max(right.mean(), 1e-9)),
    }


def compiled_metrics(configs):
    """Fresh keras.metrics objects of a model's compiled `metrics` (its compile config's list: names or serialized
    metrics), None or [] for none. "accuracy" and "acc" are left out: the task reports its accuracy itself (Keras
    resolves those names against the loss, which a fresh metric cannot)."""
    if isinstance(configs, dict):  # {output name: metrics}: the one output's
        configs = list(configs.values())
    flat = [m for c in configs or () for m in (c if isinstance(c, (list, tuple)) else [c])]
    import keras

    metrics = []
    for config in flat:
        if config in ("accuracy", "acc"):
            continue
        try:
            metric = keras.metrics.deserialize(config) if isinstance(config, dict) else keras.metrics.get(config)
        except (ValueError, TypeError) as err:
            raise ContractError(
                f"the model's compiled metric {config!r} cannot be rebuilt ({err}); compile it with "
                "keras.metrics objects or their names"
            ) from None
        if not isinstance(metric, keras.metrics.Metric):  # a function ("mae"): its mean over the split
            metric = keras.metrics.MeanMetricWrapper(metric, name=config if isinstance(config, str) else None)
        metrics.append(metric)
    return metrics


def compiled_metric_values(configs, y, raw, skip=()):
    """{name: value} of a model's compiled metrics (compiled_metrics) on a split: the labels `y` as the data has
    them, `raw` the model's output as it answers (evaluate's outputs["raw"]), as `fit` feeds them. A name in
    `skip` (the task's own metrics) is left out."""
    import keras

    values = {}
    for metric in compiled_metrics(configs):
        if metric.name not in skip:
            metric.update_state(np.asarray(y), raw)
            values[metric.name] = float(keras.ops.convert_to_numpy(metric.result()))
    return values
