"""The trivial predictor: what a model that ignores its input scores on the held-out split, the
quality gate's floor (gate.py's "trivial" check).

* classification: always the training split's majority class (its label counts over every shard,
  from the copier's stats.json; ties go to the first of the manifest's labels), scored on the
  held-out labels. The training split's majority, not the held-out split's own: a predictor may not
  look at the held-out labels, and the held-out split's own majority would flatter it;
* regression: always the training targets' mean (the manifest's target_statistics), its RMSE on
  the held-out targets;
* faces (top-1 retrieval of held-out people, one gallery photo each): chance, 1 / the number of
  held-out people -- exactly what an embedding that ignores the photo scores (every distance
  equal, the first gallery entry always nearest).

A dataset written without the copier's statistics (an older manifest, or one written by hand) is
measured from its shards' labels instead: the same numbers.
"""

import json
import os

import numpy as np

from disttrain_contract import ContractError, read_json
from disttrain_contract.manifest import split_files
from disttrain_contract.tasks import TASKS


def trivial_predictor(data_dir, manifest, y_test):
    """{"name", "description", "value"}: the trivial predictor of `manifest`'s problem and its held-out
    value of the primary metric (accuracy, top-1 retrieval or RMSE), from the held-out labels `y_test`."""
    y_test = np.asarray(y_test)
    if TASKS[manifest.task].retrieval:
        people = len(set(int(v) for v in y_test))
        return {
            "name": "chance",
            "value": 1.0 / people,
            "description": f"chance: 1 of the {people} held-out people's gallery photos, picked blindly",
        }
    if manifest.problem == "regression":
        mean = _training_target_mean(data_dir, manifest)
        rmse = float(np.sqrt(np.mean((y_test.astype(np.float64) - mean) ** 2)))
        return {
            "name": "training mean",
            "value": rmse,
            "training_mean": mean,
            "description": f"always the training targets' mean {mean:.4g}",
        }
    counts = _training_label_counts(data_dir, manifest)
    majority = int(np.argmax(counts))  # (ties: the first label)
    label = manifest.labels[majority]
    return {
        "name": "majority class",
        "value": float(np.mean(y_test == majority)),
        "label": label,
        "training_share": float(counts[majority] / counts.sum()),
        "description": f"always the training split's majority class {label!r} "
        f"({counts[majority] / counts.sum():.1%} of the training examples)",
    }


def _training_label_counts(data_dir, manifest):
    """Examples of each label over every training shard, in the manifest's label order."""
    stats = _stats(data_dir, manifest)
    if stats and "label_counts" in stats.get("train", {}):
        counts = stats["train"]["label_counts"]
        return np.asarray([counts.get(label, 0) for label in manifest.labels], dtype=np.int64)
    labels = np.concatenate([_shard_labels(data_dir, manifest, shard) for shard in manifest.shards]).astype(np.int64)
    return np.bincount(labels, minlength=len(manifest.labels))


def _training_target_mean(data_dir, manifest):
    statistics = manifest.target_statistics or {}
    if isinstance(statistics.get("mean"), (int, float)):
        return float(statistics["mean"])
    return float(
        np.concatenate([_shard_labels(data_dir, manifest, s) for s in manifest.shards]).astype(np.float64).mean()
    )


def _stats(data_dir, manifest):
    """The copier's stats.json (None for a dataset without the copier's data validation)."""
    validation = manifest.validation or {}
    if not validation.get("stats"):
        return None
    return read_json(os.path.join(data_dir, validation["stats"]), what="the copier's data statistics")


def _shard_labels(data_dir, manifest, shard):
    """One training shard's labels (or targets) alone: its y file, or the label of each line of a text shard."""
    path = os.path.join(data_dir, split_files(shard.name, manifest.storage)[-1])
    try:
        if manifest.storage == "jsonl":
            with open(path, encoding="utf-8") as fh:
                return np.asarray([json.loads(line)["label"] for line in fh], dtype=np.int64)
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, KeyError) as err:
        raise ContractError(f"cannot read the labels of training shard {shard.name!r} in {data_dir}: {err}") from None
