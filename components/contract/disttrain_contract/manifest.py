"""The dataset the copier hands to the trainers: manifest.json plus shard files.

Three storage formats, chosen by the task:
  * "jsonl" (text): one {"text": str, "label": int} object per line;
  * "npy" (every other task): NAME.x.npy and NAME.y.npy. x: images uint8 [n, h, w, c]; a table's
    numeric feature columns float32 [n, features]; an array source's own shape and dtype. y: int64
    label indices [n] (classification), or float32 targets [n] (regression).
  * "parquet" (typed_table): NAME.parquet, the raw typed columns with nulls (typed_table.py), and NAME.y.npy.
All are read without pickle (np.load(allow_pickle=False), json).

The tasks (the kinds of input, and so which built-in model and evaluation apply):
  text   strings; input {"kind": "text"}
  image  pixels; input {"kind": "image", "height", "width", "channels"}
  faces  face crops, labels are people; input as image
  table  numeric feature columns (copier source table:PATH); input {"kind": "table", "name": "features",
         "shape": [n_features], "dtype": "float32", "features": [column names], "statistics": {...}}
  array  numeric arrays of any shape (npz:PATH that is not images); input {"kind": "array", "name": "x",
         "shape": [...], "dtype": ..., "statistics": {...}}
"statistics" (table, array): per element of the last axis, over the training shards: "mean", "variance",
"min", "max" lists (what a model needs for keras.layers.Normalization(mean=..., variance=...)).

The problem is "classification" (`labels` names the classes; y indexes them) or "regression"
(`labels` is empty, `target` names the predicted quantity; y holds its values).
"""

import dataclasses
import json
import os
import re

import numpy as np

from disttrain_contract.atomic import atomic_write_json, sha256_file
from disttrain_contract.errors import ContractError
from disttrain_contract.tasks import PROBLEMS, TASKS as REGISTRY

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
VOCAB = "vocab.txt"
TASKS = tuple(REGISTRY)  # the names; their facts: tasks.TASKS
# the tasks whose x is stored as given (any numeric dtype and shape) rather than as uint8 pixels
NUMERIC_TASKS = tuple(name for name, task in REGISTRY.items() if task.numeric)


def shard_name(index):
    return f"shard-{int(index):05d}"


def split_files(name, storage):
    """File names that make up one split (a shard or the test split)."""
    if storage == "jsonl":
        return [f"{name}.jsonl"]
    if storage == "parquet":
        return [f"{name}.parquet", f"{name}.y.npy"]
    return [f"{name}.x.npy", f"{name}.y.npy"]


@dataclasses.dataclass
class SplitInfo:
    name: str
    examples: int
    sha256: dict  # file name -> hex digest

    def to_json(self):
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Manifest:
    task: str
    source: str
    seed: int
    test_fraction: float
    labels: list  # class names (classification); [] for regression
    input: dict  # {"kind": "text"}, {"kind": "image", "height": h, "width": w, "channels": c}, table/array: see above
    storage: str
    shards: list  # [SplitInfo]
    test: SplitInfo
    # text: {"file": "vocab.txt", "sha256": ..., "size": n}, and "private" (optional: absent in older manifests and for
    # the ordinary vocabulary) when the copier built it with differential privacy: {"mechanism", "epsilon", "delta",
    # "max_tokens_per_example", "noise_stddev", "threshold", "released", ...} (disttrain_copier.private_vocab)
    vocab: dict = None
    skipped: list = dataclasses.field(default_factory=list)  # inputs left out: [{"input", "reason"}]
    # the copier's data validation: {"passed", "checks": {name: {"status", "message", ...}}, "warnings",
    # "max_label_skew", "stats": "stats.json", "plot": "stats.png", "stats_sha256"}; None before data validation
    validation: dict = None
    format_version: int = FORMAT_VERSION
    problem: str = "classification"  # or "regression" (PROBLEMS)
    target: str = None  # regression: the name of the predicted quantity (a table's label column)
    # regression: {"mean", "variance", "min", "max"} of the target over the training shards (numbers)
    target_statistics: dict = None

    @property
    def n_shards(self):
        return len(self.shards)

    @property
    def train_examples(self):
        return sum(s.examples for s in self.shards)

    def to_json(self):
        out = dataclasses.asdict(self)
        out["n_shards"] = self.n_shards
        out["train_examples"] = self.train_examples
        return out

    def write(self, data_dir):
        atomic_write_json(os.path.join(data_dir, MANIFEST), self.to_json())

    @classmethod
    def read(cls, data_dir):
        path = os.path.join(data_dir, MANIFEST)
        try:
            with open(path) as fh:
                raw = json.load(fh)
        except FileNotFoundError:
            raise ContractError(f"no dataset manifest at {path}; run the copier first") from None
        except (OSError, ValueError) as err:
            raise ContractError(f"dataset manifest {path} is unreadable: {err}") from None
        try:
            if raw.get("format_version") != FORMAT_VERSION:
                raise ValueError(f"format_version {raw.get('format_version')!r}, expected {FORMAT_VERSION}")
            fields = {f.name for f in dataclasses.fields(cls)}
            kwargs = {k: v for k, v in raw.items() if k in fields}
            kwargs["shards"] = [SplitInfo(**s) for s in raw["shards"]]
            kwargs["test"] = SplitInfo(**raw["test"])
            manifest = cls(**kwargs)
            task = REGISTRY.get(manifest.task)
            if task is None:
                raise ValueError(f"unknown task {manifest.task!r}")
            if manifest.problem not in PROBLEMS:
                raise ValueError(f"unknown problem {manifest.problem!r}")
            if manifest.problem not in task.problems:
                raise ValueError(f"a {task.name} dataset is not a {manifest.problem} problem")
            if not manifest.shards:
                raise ValueError("no shards")
        except (KeyError, TypeError, ValueError) as err:
            raise ContractError(f"dataset manifest {path} is malformed: {err}") from None
        return manifest

    @property
    def is_regression(self):
        return self.problem == "regression"

    def shard(self, index):
        if not 0 <= index < self.n_shards:
            raise ContractError(
                f"worker index {index} has no shard: the dataset has {self.n_shards} shards (0..{self.n_shards - 1})"
            )
        return self.shards[index]


def verify_split(data_dir, split):
    """Check every file of a split against the manifest's sha256."""
    for fname, expected in split.sha256.items():
        path = os.path.join(data_dir, fname)
        if not os.path.exists(path):
            raise ContractError(f"{path} is missing (listed in the manifest)")
        actual = sha256_file(path)
        if actual != expected:
            raise ContractError(
                f"{path} is corrupt: sha256 {actual[:12]}... does not match the manifest's {expected[:12]}..."
            )


def read_split(data_dir, manifest, split, verify=True):
    """Load one split into memory: (x, y). Text x is a list of str; a typed table's a dict of columns
    (typed_table.read_columns)."""
    if verify:
        verify_split(data_dir, split)
    try:
        if manifest.storage == "jsonl":
            texts, labels = [], []
            for text, label in iter_split_text(os.path.join(data_dir, f"{split.name}.jsonl")):
                texts.append(text)
                labels.append(label)
            x, y = texts, np.asarray(labels, dtype=np.int64)
        elif manifest.storage == "parquet":
            from disttrain_contract.typed_table import TableSpec, read_columns

            x = read_columns(os.path.join(data_dir, f"{split.name}.parquet"), TableSpec.from_json(manifest.input))
            y = np.load(os.path.join(data_dir, f"{split.name}.y.npy"), allow_pickle=False)
        else:
            x = np.load(os.path.join(data_dir, f"{split.name}.x.npy"), allow_pickle=False)
            y = np.load(os.path.join(data_dir, f"{split.name}.y.npy"), allow_pickle=False)
    except (OSError, ValueError, KeyError) as err:
        raise ContractError(f"cannot read split {split.name!r} in {data_dir}: {err}") from None
    rows = len(next(iter(x.values()))) if isinstance(x, dict) else len(x)
    if rows != split.examples or len(y) != split.examples:
        raise ContractError(f"split {split.name!r} has {len(y)} examples, the manifest says {split.examples}")
    return x, y


def iter_split_text(path):
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            yield record["text"], int(record["label"])


def read_vocab(data_dir, manifest):
    if not manifest.vocab:
        raise ContractError("this dataset has no vocabulary (not a text task)")
    path = os.path.join(data_dir, manifest.vocab["file"])
    if sha256_file(path) != manifest.vocab["sha256"]:
        raise ContractError(f"{path} does not match the manifest's sha256")
    with open(path, encoding="utf-8") as fh:
        return [line.rstrip("\n") for line in fh]


# Text standardisation, identical to Keras TextVectorization's default
# ("lower_and_strip_punctuation" then split on whitespace), so that the vocabulary
# the copier counts is exactly the tokens the model will see.
_PUNCTUATION = re.compile(r'[!"#$%&()\*\+,\-\./:;<=>?@\[\\\]^_`{|}~\']')


def tokenize(text):
    return _PUNCTUATION.sub("", text.lower()).split()
