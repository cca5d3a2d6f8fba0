"""The validation split: carved from the copier's training shards, never from its held-out test split.

The trials are scored on it, so the held-out split stays unseen until the aggregator's final
report, which remains an honest estimate. The carve (disttrain_contract.validation.carve) is a seeded permutation of the
shards' examples (in shard order), so every sweep process and pod derives the same split, and a rerun
with the same seed the same one.

WORKDIR/sweep/data/ is a dataset of the copier's format (manifest.json, the rest of the training
examples as one shard per trial worker, and the validation examples as its "test" split), so a
trial is a plain `disttrain-trainer --data WORKDIR/sweep/data`: its per-epoch "test_accuracy" is
the validation accuracy. With several trial workers (localsgd trials) the remaining examples are
cut, in the copier's shard order, into that many contiguous shards: each trial worker trains on
about what a copier shard held, as the distributed run's workers do.
"""

import json
import os
import shutil

import numpy as np

from disttrain_contract import ContractError, atomic_path, read_json, read_marker, write_marker
from disttrain_contract.manifest import Manifest, SplitInfo, read_split, split_files
from disttrain_contract.atomic import sha256_file
from disttrain_contract.validation import carve  # the one carve (the trainer's --validation-fraction uses it too)

VALIDATION_SPLIT = "validation"


def identity(manifest, fraction, seed, n_shards=1):
    """What the split is made from: a split of other shards, fraction, seed or shard count is not reused."""
    wanted = {"shards": [s.sha256 for s in manifest.shards], "validation_fraction": fraction, "seed": seed}
    if n_shards != 1:  # (a one-shard split.json keeps its earlier form)
        wanted["trial_shards"] = n_shards
    return wanted


def prepare(data_dir, out_dir, fraction, seed, log=print, n_shards=1):
    """Write out_dir (once; an existing one of the same identity is reused), the training examples
    left after the carve in `n_shards` shards. Returns its Manifest."""
    source = Manifest.read(data_dir)
    wanted = identity(source, fraction, seed, n_shards)
    if read_marker(out_dir) is not None:
        if read_json(os.path.join(out_dir, "split.json"), None) == wanted:
            return Manifest.read(out_dir)
        raise ContractError(
            f"{out_dir} holds a validation split of other shards, fraction, seed or trial workers; "
            "delete WORKDIR/sweep to start a new sweep"
        )
    parts = [read_split(data_dir, source, s) for s in source.shards]
    if source.storage == "jsonl":
        x = [text for part in parts for text in part[0]]
    else:
        x = np.concatenate([part[0] for part in parts])
    y = np.concatenate([part[1] for part in parts])
    train, validation = carve(len(y), fraction, seed)
    if len(train) < n_shards:
        raise ContractError(f"{len(train)} training examples cannot make {n_shards} trial shards")
    with atomic_path(out_dir) as tmp:  # the directory appears whole, or not at all
        os.makedirs(tmp)
        shards = [
            write_split(tmp, f"shard-{i:05d}", source.storage, x, y, rows)
            for i, rows in enumerate(np.array_split(train, n_shards))
        ]
        test = write_split(tmp, VALIDATION_SPLIT, source.storage, x, y, validation)
        vocab = None
        if source.vocab:
            shutil.copyfile(os.path.join(data_dir, source.vocab["file"]), os.path.join(tmp, source.vocab["file"]))
            vocab = source.vocab
        Manifest(
            task=source.task,
            source=f"{source.source} (training shards, validation {fraction:g}, seed {seed})",
            seed=source.seed,
            test_fraction=fraction,
            labels=source.labels,
            input=source.input,
            storage=source.storage,
            shards=shards,
            test=test,
            vocab=vocab,
            problem=source.problem,
            target=source.target,
            target_statistics=source.target_statistics,
        ).write(tmp)
        with open(os.path.join(tmp, "split.json"), "w") as fh:
            json.dump(wanted, fh, indent=2, sort_keys=True)
        write_marker(tmp, "sweep-split", train_examples=len(train), validation_examples=len(validation))
    log(
        f"sweep: validation split of the training shards: {len(validation)} examples ({fraction:g}, seed {seed}), "
        f"{len(train)} left to train on"
        + (f" in {n_shards} shards" if n_shards > 1 else "")
        + f"; the {source.test.examples} held-out examples are not used"
    )
    return Manifest.read(out_dir)


def write_split(directory, name, storage, x, y, rows):
    if storage == "jsonl":
        with open(os.path.join(directory, f"{name}.jsonl"), "w", encoding="utf-8") as fh:
            for i in rows:
                fh.write(json.dumps({"text": x[i], "label": int(y[i])}, ensure_ascii=False) + "\n")
    else:
        np.save(os.path.join(directory, f"{name}.x.npy"), x[rows], allow_pickle=False)
        np.save(
            os.path.join(directory, f"{name}.y.npy"), y[rows], allow_pickle=False
        )  # int64 labels or float32 targets
    return SplitInfo(
        name, int(len(rows)), {f: sha256_file(os.path.join(directory, f)) for f in split_files(name, storage)}
    )
