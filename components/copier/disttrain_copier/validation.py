"""Data validation: statistics of every split and the checks run before the copier publishes.

The copier feeds each example to `Validator.add` as it streams by (one pass, memory: a label
histogram per split, and per example one 8-byte content hash and one number, its length in
tokens, its mean pixel or its regression target; tables and arrays add per split a few numbers
per feature). `Validator.finish` then

  * computes the statistics of each shard and of the held-out split: examples, label histogram
    (classification) or target quantiles (regression), text length quantiles (tokens, as the model
    sees them), pixel mean and std, or per feature (a table's column; an array's element of the last
    axis) mean, population variance, min and max; empty or constant inputs, inputs repeated within
    the split. The training shards' feature statistics together are the manifest's
    input["statistics"];
  * runs the checks:
      leakage        exact duplicate inputs between the held-out split and the shards (by a
                     content hash): an error; a warning with --allow-duplicates;
      label_skew     a shard whose label distribution is further than --max-label-skew from the
                     training distribution (total-variation distance, see `tv_distance`): an
                     error; a warning with --allow-label-skew. Regression: the same distance
                     between the shard's and the training targets' histograms over quantile bins
                     of the training targets (`target_bins`);
      missing_class  a label with no example in a shard or in the held-out split: an error; a
                     warning with --allow-missing-classes. Skipped for regression (no classes);
      schema         the data violates --schema FILE (see SCHEMA_HELP): always an error (the schema
                     is the user's own statement of what the data must be).
    Faces are split by person (the held-out people are never seen in training), so every label
    is missing from all splits but one by design: label_skew and missing_class are skipped.

An error is a ContractError naming every failed check (exit 2); the copier raises it inside its
temporary directory, so nothing is published and the previous dataset stays as it was.
"""

import array
import hashlib
import json
import math
import os

import numpy as np

from disttrain_contract import ContractError
from disttrain_contract.atomic import atomic_write_json, read_json
from disttrain_contract.manifest import iter_split_text, split_files
from disttrain_contract.tasks import TASKS
from disttrain_contract.typed_table import TYPES
from disttrain_copier.moments import FeatureMoments
from disttrain_copier.typed_validation import DEFAULT_MAX_MISSING_SKEW, TypedStats, row_hashes

STATS = "stats.json"
STATS_PLOT = "stats.png"
TEST = "test"
TRAIN = "train"  # all shards together
CHECKS = ("leakage", "label_skew", "missing_class", "schema")
# Total-variation distance of a shard's label distribution from the training one. The copier deals
# examples to shards in turn, so on real data a shard differs from the whole only by sampling noise,
# which grows as shards shrink: measured here (seed 0) at most 0.012 for movie reviews (2 to 8
# shards of 10,231 examples) and 0.026 / 0.045 / 0.078 / 0.121 for digits in 2 / 3 / 4 / 8 shards
# (1,437 examples; 0.098-0.121 over seeds 0-5 with 8 shards). 0.2 passes all of those and refuses
# what a sorted or filtered source gives: a two-class shard at 70/30 against 50/50 is 0.2, a shard
# of one class out of two 0.5.
DEFAULT_MAX_LABEL_SKEW = 0.2
LEVELS = np.arange(256, dtype=np.float64)
SCHEMA_KINDS = tuple(dict.fromkeys(task.kind for task in TASKS.values()))  # text, image, table, array
NUMERIC_KINDS = tuple(dict.fromkeys(task.kind for task in TASKS.values() if task.numeric))  # table, array
# Regression's label_skew: the training targets' quantiles cut the target axis into at most TARGET_BINS
# bins, and fewer for small shards (one bin per TARGET_BIN_EXAMPLES examples of the smallest shard, at
# least 2), so that sampling noise stays well under the default limit: a shard of n examples dealt at
# random from B equal bins is ~0.4 * sqrt(B / n) away (0.08 for 10 bins and 250 examples).
TARGET_BINS = 10
TARGET_BIN_EXAMPLES = 25
QUANTILES = {"min": 0.0, "p05": 0.05, "p25": 0.25, "p50": 0.5, "p75": 0.75, "p95": 0.95, "max": 1.0}

SCHEMA_HELP = """\
--schema FILE is a JSON object with any of these keys (others are refused):
  "labels": ["neg", "pos"]                     exactly these label names, no more, no fewer
                                               (classification; a regression dataset has none)
  "input": {"kind": "text"}                    or {"kind": "image", "shape": [H, W, C], "dtype": "uint8"}
                                               (dtype: the source's, e.g. float32 for an npz:PATH of floats;
                                               "str" for text), {"kind": "table", "shape": [N_FEATURES]}
                                               (dtype: float32, or "typed" for a typed table) or
                                               {"kind": "array", "shape": [...per example], "dtype": "float64"}
  "features": ["age", "bmi"]                   table: exactly these feature columns, in this order
                                               (the label column not included)
  "column_types": {"island": "string"}         table: these columns' types (float, integer, boolean,
                                               string), as --column-types sets them: every value must
                                               read as its column's type
  "text_length": {"min": 1, "max": 400}        text: every input's length in tokens (words after
                                               lower-casing and stripping punctuation), both ends optional
A schema cannot yet bound feature values or a regression target's range.
"""


# ------------------------------------------------------------------- options and schema


def read_schema(path):
    """The --schema file, checked for shape before any data is read (a typo fails at once)."""
    schema = read_json(path, what=f"--schema {path}")
    if schema is None:
        raise ContractError(f"--schema {path} does not exist")
    if not isinstance(schema, dict):
        raise ContractError(f"--schema {path} must be a JSON object\n{SCHEMA_HELP}")
    unknown = sorted(set(schema) - {"labels", "input", "features", "text_length", "column_types"})
    if unknown:
        raise ContractError(f"--schema {path}: unknown key(s) {unknown}\n{SCHEMA_HELP}")
    labels = schema.get("labels")
    if labels is not None and (not isinstance(labels, list) or not all(isinstance(v, str) for v in labels)):
        raise ContractError(f"--schema {path}: \"labels\" must be a list of strings")
    features = schema.get("features")
    if features is not None and (not isinstance(features, list) or not all(isinstance(v, str) for v in features)):
        raise ContractError(f"--schema {path}: \"features\" must be a list of column names (strings)")
    types = schema.get("column_types")
    if types is not None and (
        not isinstance(types, dict) or not all(isinstance(k, str) and v in TYPES for k, v in types.items())
    ):
        raise ContractError(f"--schema {path}: \"column_types\" must map column names to one of {', '.join(TYPES)}")
    spec = schema.get("input")
    if spec is not None:
        if not isinstance(spec, dict) or spec.get("kind") not in SCHEMA_KINDS or set(spec) - {"kind", "shape", "dtype"}:
            raise ContractError(
                f"--schema {path}: \"input\" must be {{\"kind\": \"text\"|\"image\"|\"table\"|\"array\", "
                f"\"shape\": [...], \"dtype\": ...}}"
            )
        shape = spec.get("shape")
        if spec["kind"] in ("table", "array"):
            if shape is not None and (
                not isinstance(shape, list)
                or not shape
                or not all(isinstance(v, int) and v > 0 for v in shape)
                or (spec["kind"] == "table" and len(shape) != 1)
            ):
                raise ContractError(
                    f"--schema {path}: \"input\".\"shape\" must be a list of positive integers "
                    f"({'[N_FEATURES]' if spec['kind'] == 'table' else 'the per-example shape'}), got {shape!r}"
                )
        elif shape is not None and (
            not isinstance(shape, list) or len(shape) != 3 or not all(isinstance(v, int) and v > 0 for v in shape)
        ):
            raise ContractError(
                f"--schema {path}: \"input\".\"shape\" must be [H, W, C] positive integers, got {shape!r}"
            )
    bounds = schema.get("text_length")
    if bounds is not None:
        if (
            not isinstance(bounds, dict)
            or set(bounds) - {"min", "max"}
            or not all(isinstance(v, int) and v >= 0 for v in bounds.values())
        ):
            raise ContractError(
                f"--schema {path}: \"text_length\" must be {{\"min\": N, \"max\": N}} with integers >= 0"
            )
        if bounds.get("min", 0) > bounds.get("max", float("inf")):
            raise ContractError(f"--schema {path}: \"text_length\" min {bounds['min']} is above max {bounds['max']}")
    return schema


# ----------------------------------------------------------------------- statistics


def content_hash(x, numeric=False):
    """8 bytes of BLAKE2b of an input as stored (text: UTF-8; image: the uint8 pixels; table, array: the
    values' bytes in their stored dtype). Two different inputs collide with probability ~n^2 / 2^65: for
    a million examples, about 3e-8."""
    if isinstance(x, str):
        data = x.encode("utf-8")
    else:
        data = np.ascontiguousarray(x).tobytes() if numeric else np.ascontiguousarray(x, dtype=np.uint8).tobytes()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def tv_distance(p, q):
    """Total-variation distance of two label histograms: half the L1 distance of their normalised
    forms; 0 = the same distribution, 1 = no label in common. The share of examples that would have
    to change label to turn one distribution into the other."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    if p.sum() == 0 or q.sum() == 0:
        return 1.0
    return float(0.5 * np.abs(p / p.sum() - q / q.sum()).sum())


class SplitStats:
    """Running statistics of one split. kind: "text", "image" or "numeric" (table, array)."""

    def __init__(self, n_labels, kind, regression=False):
        self.kind, self.regression = kind, regression
        self.label_counts = np.zeros(n_labels, dtype=np.int64)
        # per example: content hash; length in tokens, mean pixel or regression target (numeric
        # classification: nothing). Typed arrays, 16 bytes an example (Python lists of ints and floats
        # would take ~70)
        self.hashes, self.values = array.array("Q"), array.array("d")
        self.empty, self.constant = [], []  # indexes of empty (text) or constant (image) inputs
        # images: how many pixels (channel values) of each level 0..255 the split has; mean and std come
        # from it exactly, and a bincount per image is ~4x cheaper than float arithmetic on its pixels
        self.pixel_levels = np.zeros(256, dtype=np.int64)
        self.features = FeatureMoments() if kind == "numeric" else None

    def add(self, x, y, tokens=None):
        index = len(self.hashes)
        if self.regression:
            self.values.append(float(y))
        else:
            self.label_counts[y] += 1
        self.hashes.append(content_hash(x, numeric=self.kind == "numeric"))
        if self.kind == "text":
            self.values.append(len(tokens))
            if not tokens:
                self.empty.append(index)
        elif self.kind == "numeric":
            self.features.add(x)
        else:
            levels = np.bincount(np.asarray(x, dtype=np.uint8).ravel(), minlength=256)
            self.pixel_levels += levels
            size = int(levels.sum())
            self.values.append(float(levels @ LEVELS) / max(size, 1))
            if size and levels.max() == size:  # every pixel the same
                self.constant.append(index)

    def add_batch(self, x, y, hashes):
        """Rows at once (a table's batch path): x [m, features] (numeric) or a typed RecordBatch (its
        columns' statistics are the Validator's TypedStats), y [m], their row hashes [m]."""
        if self.regression:
            self.values.frombytes(np.ascontiguousarray(y, dtype=np.float64).tobytes())
        else:
            self.label_counts += np.bincount(np.asarray(y, dtype=np.int64), minlength=len(self.label_counts))
        self.hashes.frombytes(np.ascontiguousarray(hashes, dtype=np.uint64).tobytes())
        if self.kind == "numeric":
            self.features.add(x)

    def to_json(self, labels):
        values = np.asarray(self.values, dtype=np.float64)
        hashes = np.asarray(self.hashes, dtype=np.uint64)
        out = {"examples": len(hashes)}
        if self.regression:
            out["target"] = target_summary(values)
        else:
            out["label_counts"] = dict(zip(labels, self.label_counts.tolist()))
        # inputs equal to an earlier one of the same split (not leakage, but worth knowing)
        out["repeated_inputs"] = _repeated(hashes)
        if self.kind == "text":
            out["text_length_tokens"] = (
                ({k: float(np.quantile(values, q)) for k, q in QUANTILES.items()} | {"mean": float(values.mean())})
                if len(values)
                else None
            )
            out["empty_inputs"] = len(self.empty)
        elif self.kind == "numeric":
            out["feature_statistics"] = FeatureMoments.to_json(self.features.moments())
        elif self.kind == "typed":
            pass  # its columns: the Validator adds TypedStats.split_json
        else:
            total = int(self.pixel_levels.sum())
            mean = float(self.pixel_levels @ LEVELS) / total if total else 0.0
            variance = float(self.pixel_levels @ np.square(LEVELS - mean)) / total if total else 0.0
            out["pixel_mean"], out["pixel_std"] = mean, float(np.sqrt(variance))
            out["constant_inputs"] = len(self.constant)
        return out


def _repeated(hashes):
    """How many of `hashes` equal an earlier one: by a sorted copy (numpy's unique hashes them, ~10x slower
    on millions of uint64)."""
    ordered = np.sort(hashes)
    return int(np.count_nonzero(ordered[1:] == ordered[:-1])) if len(ordered) else 0


def target_summary(values):
    """A regression target's quantiles, mean and std (population), or None for no values."""
    values = np.asarray(values, dtype=np.float64)
    if not len(values):
        return None
    return {k: float(np.quantile(values, q)) for k, q in QUANTILES.items()} | {
        "mean": float(values.mean()),
        "std": float(values.std()),
    }


def target_bins(train_targets, smallest_shard):
    """The interior edges of the quantile bins regression's label_skew compares shards over: the
    training targets' quantiles at 1/B .. (B-1)/B, B = TARGET_BINS or fewer for small shards (see
    TARGET_BIN_EXAMPLES); repeated edges (tied targets) are merged. A value v falls in bin
    searchsorted(edges, v, side="right")."""
    bins = int(min(TARGET_BINS, max(2, smallest_shard // TARGET_BIN_EXAMPLES)))
    edges = (
        np.quantile(np.asarray(train_targets, dtype=np.float64), np.arange(1, bins) / bins)
        if len(train_targets)
        else []
    )
    return np.unique(edges)


def target_histogram(values, edges):
    return np.bincount(
        np.searchsorted(edges, np.asarray(values, dtype=np.float64), side="right"), minlength=len(edges) + 1
    )


class Validator:
    def __init__(
        self,
        task,
        labels,
        input_spec,
        names,
        source_dtype=None,
        allow_duplicates=False,
        max_label_skew=DEFAULT_MAX_LABEL_SKEW,
        allow_label_skew=False,
        allow_missing_classes=False,
        schema=None,
        known_duplicates=None,
        problem="classification",
        target=None,
        table=None,
        max_missing_skew=DEFAULT_MAX_MISSING_SKEW,
        allow_missing_skew=False,
    ):
        self.task, self.labels, self.input_spec = task, list(labels), dict(input_spec)
        self.problem, self.target = problem, target
        self.regression = problem == "regression"
        # what the schema's "input".kind names: text, image (faces too), table or array
        self.kind = TASKS[task].kind
        self.source_dtype = source_dtype or ("str" if self.kind == "text" else "uint8")
        self.names = list(names)  # the shards, in order
        # a typed table (tables.TableInfo with typed columns): its columns' statistics are TypedStats'
        self.typed = TypedStats(table, names, TEST) if table is not None and table.typed else None
        self.max_missing_skew, self.allow_missing_skew = max_missing_skew, allow_missing_skew
        split_kind = "typed" if self.typed else "numeric" if self.kind in NUMERIC_KINDS else self.kind
        self.splits = {name: SplitStats(len(self.labels), split_kind, self.regression) for name in self.names + [TEST]}
        self.allow_duplicates, self.max_label_skew = allow_duplicates, max_label_skew
        self.allow_label_skew, self.allow_missing_classes = allow_label_skew, allow_missing_classes
        self.schema = schema
        # a built-in sample whose duplicates are a known property of the corpus: accepted with a warning
        # saying why (sources.Dataset.known_duplicates); user data never has this
        self.known_duplicates = known_duplicates

    def add(self, name, x, y, tokens=None):
        self.splits[name].add(x, y, tokens)

    @staticmethod
    def hashes(x):
        """The row hashes of a table batch (typed_validation.row_hashes), for add_batch."""
        return row_hashes(x)

    def add_batch(self, name, x, y, hashes=None):
        """A table batch's rows of split `name` at once; `hashes`: theirs (row_hashes), computed here if None."""
        self.splits[name].add_batch(x, y, row_hashes(x) if hashes is None else hashes)
        if self.typed:
            self.typed.add(name, x)

    def table_spec(self):
        """A typed table's TableSpec: its columns' types and training statistics (the manifest's input)."""
        return self.typed.spec()

    def values(self):
        """Per split, every example's length in tokens (text), mean pixel (images) or regression target
        (empty for a numeric classification): for the plot."""
        return {name: s.values for name, s in self.splits.items()}

    def target_statistics(self):
        """A regression target's {"mean", "variance" (population), "min", "max"} over the training shards: what a
        model needs to predict in the target's unit from standardised layers (the manifest's target_statistics)."""
        values = np.concatenate([np.asarray(self.splits[n].values, dtype=np.float64) for n in self.names])
        return {
            "mean": float(values.mean()),
            "variance": float(values.var()),
            "min": float(values.min()),
            "max": float(values.max()),
        }

    def feature_statistics(self):
        """The training shards' per-feature statistics (the manifest's input["statistics"]); None for
        text, images and typed tables."""
        if self.kind not in NUMERIC_KINDS or self.typed:
            return None
        return FeatureMoments.to_json(FeatureMoments.merge(self.splits[n].features.moments() for n in self.names))

    # ---------------------------------------------------------------------- checks

    def finish(self, data_dir, storage):
        """Statistics and check results; raises ContractError if a check fails without its allow flag.
        `data_dir` holds the splits as written (to quote an offending example)."""
        self.data_dir, self.storage = data_dir, storage
        splits = {name: s.to_json(self.labels) for name, s in self.splits.items()}
        if self.regression:
            train_targets = np.concatenate([np.asarray(self.splits[n].values, dtype=np.float64) for n in self.names])
            self.edges = target_bins(train_targets, min(len(self.splits[n].hashes) for n in self.names))
            histograms = {name: target_histogram(self.splits[name].values, self.edges) for name in self.names + [TEST]}
            train_counts = target_histogram(train_targets, self.edges)
            train = {"examples": int(len(train_targets)), "target": target_summary(train_targets)}
            measure = (
                f"total-variation distance of the split's target histogram from the training targets' one, over "
                f"{len(self.edges) + 1} quantile bins of the training targets"
            )
        else:
            histograms = {name: self.splits[name].label_counts for name in self.names + [TEST]}
            train_counts = sum(
                (self.splits[n].label_counts for n in self.names), np.zeros(len(self.labels), dtype=np.int64)
            )
            train = {"examples": int(train_counts.sum()), "label_counts": dict(zip(self.labels, train_counts.tolist()))}
            measure = (
                "total-variation distance of the split's label distribution from the training distribution (all shards)"
            )
        if self.typed:
            train["columns"] = self.table_spec().to_json()["columns"]
            for name in splits:
                splits[name]["columns"] = self.typed.split_json(name)
        elif self.kind in NUMERIC_KINDS:
            train["feature_statistics"] = self.feature_statistics()
        faces = TASKS[self.task].split_by_person
        skew = {name: round(tv_distance(histograms[name], train_counts), 6) for name in self.names + [TEST]}
        self.histograms, self.train_histogram = histograms, train_counts
        by_person = "faces are split by person: labels differ between splits by design"
        results = {
            "leakage": self._leakage(),
            "label_skew": self._skip(by_person) if faces else self._label_skew(skew),
            "missing_class": self._skip(by_person)
            if faces
            else self._skip("regression target: no classes")
            if self.regression
            else self._missing_class(),
            "schema": self._schema() if self.schema is not None else self._skip("no --schema given"),
        }
        if self.typed:
            results.update(self._typed_checks())
        failed = [f"{name}: {r['message']}" for name, r in results.items() if r["status"] == "failed"]
        warnings = [f"{name}: {r['message']}" for name, r in results.items() if r["status"] == "warning"]
        validation = {
            "passed": not failed,
            "checks": results,
            "warnings": warnings,
            "max_label_skew": self.max_label_skew,
        }
        stats = {
            "task": self.task,
            "problem": self.problem,
            "labels": self.labels,
            "kind": self.kind,
            "splits": splits,
            TRAIN: train,
            "label_skew": {"measure": measure, "distance": skew},
            "validation": validation,
        }
        if self.typed:
            stats["typed"] = True
        if self.kind in NUMERIC_KINDS:
            # a table's column names; an array's features are the elements of its last axis
            stats["features"] = self.input_spec.get("features") or [
                f"x[..., {i}]" for i in range(int(self.input_spec["shape"][-1]))
            ]
        if self.regression:
            stats["target"] = {"name": self.target, "bin_edges": self.edges.tolist()}
        if failed:
            raise ContractError(
                "data validation failed, nothing published:\n  "
                + "\n  ".join(failed)
                + ("\n  warnings: " + "; ".join(warnings) if warnings else "")
            )
        return stats

    def _typed_checks(self):
        """A typed table's own checks (typed_validation.py): unseen categories, missing-value skew, type changes."""
        problem, details = self.typed.missing_skew(self.max_missing_skew)
        return {
            "unseen_category": self.typed.unseen_category(),
            "missing_skew": self._result(problem, self.allow_missing_skew, "--allow-missing-skew", details),
            "type_change": self.typed.type_change(),
        }

    @staticmethod
    def _skip(reason):
        return {"status": "skipped", "message": reason}

    def _result(self, problem, allowed, flag, details):
        if not problem:
            return {"status": "passed", "message": "ok", **details}
        if allowed:
            return {"status": "warning", "message": f"{problem} (accepted by {flag})", **details}
        return {"status": "failed", "message": f"{problem}; {flag} accepts it", **details}

    def _leakage(self):
        test_hashes = np.asarray(self.splits[TEST].hashes, dtype=np.uint64)
        # the held-out hashes sorted once, each shard looked up in chunks: memory one copy of the held-out
        # hashes and a chunk (np.isin would sort shard and held-out hashes together, ~3 copies of both)
        sorted_test = np.sort(test_hashes)
        count, example, per_shard = 0, None, {}
        for name in self.names:
            hashes = np.asarray(self.splits[name].hashes, dtype=np.uint64)
            leaked = np.flatnonzero(_found_in(hashes, sorted_test))
            per_shard[name] = int(len(leaked))
            count += len(leaked)
            if example is None and len(leaked):
                index = int(leaked[0])
                test_index = int(np.flatnonzero(test_hashes == hashes[index])[0])
                example = f"{name} example {index} = test example {test_index}: {self._quote(name, index)}"
        problem = None
        if count:
            train = sum(len(self.splits[n].hashes) for n in self.names)
            problem = (
                f"{count} training example(s) ({100 * count / train:.2f}% of {train}) are exact copies of "
                f"held-out inputs, e.g. {example}"
            )
        if problem and self.known_duplicates and not self.allow_duplicates:
            return {
                "status": "warning",
                "message": f"{problem} (accepted: {self.known_duplicates})",
                "duplicates": count,
                "per_shard": per_shard,
                "example": example,
            }
        return self._result(
            problem,
            self.allow_duplicates,
            "--allow-duplicates",
            {"duplicates": count, "per_shard": per_shard, "example": example},
        )

    def _label_skew(self, skew):
        shards = {name: skew[name] for name in self.names}
        worst = max(shards, key=shards.get)
        if self.regression:
            return self._target_skew(shards, worst)
        problem = None
        if shards[worst] > self.max_label_skew:
            over = [n for n in self.names if shards[n] > self.max_label_skew]
            problem = (
                f"{len(over)} shard(s) have a label distribution further than --max-label-skew "
                f"{self.max_label_skew:g} from the training one (total-variation distance); worst {worst}: "
                f"{shards[worst]:.3f} ({self._histogram(worst)} vs training {self._histogram(None)})"
            )
        return self._result(
            problem, self.allow_label_skew, "--allow-label-skew", {"max_distance": shards[worst], "worst_shard": worst}
        )

    def _target_skew(self, shards, worst):
        bins = len(self.edges) + 1
        what = (
            f"the distance of each shard's target distribution from the training targets' (total-variation "
            f"distance over {bins} quantile bins of the training targets: the share of a shard's targets that "
            f"would have to move to another bin)"
        )
        details = {"max_distance": shards[worst], "worst_shard": worst, "bins": bins}
        if shards[worst] <= self.max_label_skew:
            return {
                "status": "passed",
                "message": f"ok: {what} is at most {shards[worst]:.3f} (--max-label-skew {self.max_label_skew:g})",
                **details,
            }
        over = [n for n in self.names if shards[n] > self.max_label_skew]
        problem = (
            f"{len(over)} shard(s) have a target distribution further than --max-label-skew {self.max_label_skew:g} "
            f"from the training one ({what}); worst {worst}: {shards[worst]:.3f} (its bin shares "
            f"{self._shares(self.histograms[worst])} vs training {self._shares(self.train_histogram)}; target mean "
            f"{np.mean(self.splits[worst].values):.4g} vs training "
            f"{np.mean(np.concatenate([np.asarray(self.splits[n].values) for n in self.names])):.4g})"
        )
        return self._result(problem, self.allow_label_skew, "--allow-label-skew", details)

    @staticmethod
    def _shares(counts):
        shares = np.asarray(counts, dtype=np.float64) / max(np.sum(counts), 1)
        return "[" + ", ".join(f"{v:.2f}" for v in shares) + "]"

    def _missing_class(self):
        missing = {
            name: [self.labels[i] for i in np.flatnonzero(s.label_counts == 0)] for name, s in self.splits.items()
        }
        missing = {name: labels for name, labels in missing.items() if labels}
        problem = None
        if missing:
            parts = [f"{name} has no {_listing(labels)}" for name, labels in missing.items()]
            problem = f"{len(missing)} split(s) lack a class: " + "; ".join(parts)
        return self._result(problem, self.allow_missing_classes, "--allow-missing-classes", {"missing": missing})

    def _schema(self):
        violations = []
        expected = self.schema.get("labels")
        if expected is not None and self.regression:
            violations.append(
                f"the schema lists labels {list(expected)} but the data is a regression target "
                f"{self.target!r} (no labels)"
            )
        elif expected is not None and list(expected) != self.labels:
            extra = [v for v in self.labels if v not in expected]
            absent = [v for v in expected if v not in self.labels]
            violations.append(
                f"labels {self.labels} are not the schema's {list(expected)}"
                + (f" (not in the schema: {extra})" if extra else "")
                + (f" (not in the data: {absent})" if absent else "")
            )
        spec = self.schema.get("input") or {}
        if spec.get("kind") and spec["kind"] != self.kind:
            violations.append(f"the inputs are {self.kind}, the schema expects {spec['kind']}")
        elif self.kind in ("image", *NUMERIC_KINDS) and spec.get("shape"):
            shape = (
                list(self.input_spec.get("shape") or [len(self.input_spec["features"])])
                if self.kind in NUMERIC_KINDS
                else [self.input_spec["height"], self.input_spec["width"], self.input_spec["channels"]]
            )
            if shape != spec["shape"]:
                violations.append(f"input shape {shape} is not the schema's {spec['shape']}")
        if spec.get("dtype") and spec["dtype"] != self.source_dtype:
            violations.append(f"input dtype {self.source_dtype} is not the schema's {spec['dtype']}")
        features = self.schema.get("features")
        if features is not None and self.kind != "table":
            violations.append(f"the schema gives features but the inputs are {self.kind}, not a table")
        elif features is not None and list(features) != list(self.input_spec["features"]):
            found = list(self.input_spec["features"])
            extra = [v for v in found if v not in features]
            absent = [v for v in features if v not in found]
            violations.append(
                f"the {len(found)} feature columns {_brief(found)} are not the schema's {len(features)} "
                f"{_brief(features)}"
                + (f" (not in the schema: {_brief(extra)})" if extra else "")
                + (f" (not in the data: {_brief(absent)})" if absent else "")
                + (" (the same columns in another order)" if not extra and not absent else "")
            )
        bounds = self.schema.get("text_length")
        if bounds and self.kind == "text":
            low, high = bounds.get("min", 0), bounds.get("max", float("inf"))
            out, example = 0, None
            for name, split in self.splits.items():
                lengths = np.asarray(split.values, dtype=np.int64)
                bad = np.flatnonzero((lengths < low) | (lengths > high))
                out += len(bad)
                if example is None and len(bad):
                    example = f"{name} example {int(bad[0])} has {int(lengths[bad[0]])} tokens: {self._quote(name, int(bad[0]))}"
            if out:
                violations.append(
                    f"{out} input(s) outside the schema's text length {low}..{bounds.get('max', 'any')} tokens, e.g. {example}"
                )
        elif bounds:
            violations.append(
                f"the schema gives text_length but the inputs are {'images' if self.kind == 'image' else self.kind}"
            )
        if not violations:
            return {"status": "passed", "message": "ok"}
        return {
            "status": "failed",
            "message": "the data violates --schema: " + "; ".join(violations),
            "violations": violations,
        }

    # ------------------------------------------------------------------ quoting data

    def _quote(self, name, index):
        """One example as a person can find it again: the text (shortened), or the row of the .npy file."""
        if self.storage == "jsonl":
            for i, (text, _) in enumerate(iter_split_text(os.path.join(self.data_dir, f"{name}.jsonl"))):
                if i == index:
                    return json.dumps(text if len(text) <= 80 else text[:77] + "...", ensure_ascii=False)
        return f"row {index} of {split_files(name, self.storage)[0]}"

    def _histogram(self, name):
        counts = self.splits[name].label_counts if name else sum(self.splits[n].label_counts for n in self.names)
        shares = counts / max(counts.sum(), 1)
        return (
            "{"
            + ", ".join(f"{label}: {share:.2f}" for label, share in list(zip(self.labels, shares))[:10])
            + (", ..." if len(self.labels) > 10 else "")
            + "}"
        )


def _found_in(values, sorted_values, chunk=1 << 20):
    """Whether each of `values` (uint64 hashes) occurs in `sorted_values` (ascending), as a boolean array,
    `chunk` values at a time. A bitmap of the sorted values' top bits (~16 bits a value, at most 32 MB) rules
    out almost every value first (a false candidate 1 time in ~16): only the candidates are looked up by
    binary search, whose random reads into millions of values would cost ~5x the bitmap's."""
    out = np.zeros(len(values), dtype=bool)
    if not len(sorted_values):
        return out
    bits = int(min(28, max(16, math.ceil(math.log2(16 * len(sorted_values))))))
    shift = np.uint64(64 - bits)
    bitmap = np.zeros(1 << (bits - 3), dtype=np.uint8)
    top = sorted_values >> shift
    np.bitwise_or.at(bitmap, (top >> np.uint64(3)).astype(np.int64), (1 << (top & np.uint64(7))).astype(np.uint8))
    for start in range(0, len(values), chunk):
        part = values[start : start + chunk]
        top = part >> shift
        maybe = np.flatnonzero(
            (bitmap[(top >> np.uint64(3)).astype(np.int64)] >> (top & np.uint64(7)).astype(np.uint8)) & 1
        )
        if len(maybe):
            candidates = part[maybe]
            at = np.minimum(np.searchsorted(sorted_values, candidates), len(sorted_values) - 1)
            out[start + maybe] = sorted_values[at] == candidates
    return out


def _brief(names, limit=6):
    """A list of names for a one-line message: the first `limit`, then how many more."""
    shown = ", ".join(repr(v) for v in names[:limit])
    return f"[{shown}{f', ... {len(names) - limit} more' if len(names) > limit else ''}]"


def _listing(labels, limit=5):
    shown = ", ".join(repr(v) for v in labels[:limit])
    return (
        f"example of class {shown}"
        if len(labels) == 1
        else f"example of classes {shown}" + (f" and {len(labels) - limit} more" if len(labels) > limit else "")
    )


# -------------------------------------------------------------------- writing out


def write_stats(out_dir, stats, values):
    """stats.json, and stats.png unless `values` is None, into `out_dir` (the copier's temporary
    directory: published with the data)."""
    atomic_write_json(os.path.join(out_dir, STATS), stats)
    if values is not None:
        plot_stats(stats, values, os.path.join(out_dir, STATS_PLOT))


def plot_stats(stats, values, path):
    """Left: each split's label distribution (share of its examples); right: the distribution of input
    lengths (text) or of per-image mean pixel values, one line per split. Tables and arrays: see
    `plot_numeric`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if stats.get("typed"):
        return plot_typed(stats, values, path, plt)
    if stats["kind"] in NUMERIC_KINDS:
        return plot_numeric(stats, values, path, plt)
    names = list(stats["splits"])
    fig, (bars, dist) = plt.subplots(1, 2, figsize=(12, 4.2))
    _label_bars(bars, stats, names)
    text = stats["kind"] == "text"
    all_values = np.concatenate([np.asarray(v, dtype=np.float64) for v in values.values()]) if values else np.zeros(1)
    top = np.quantile(all_values, 0.99) if text and len(all_values) else 255.0
    edges = np.linspace(0, max(top, 1.0), 40)
    for name in names:
        v = np.asarray(values[name], dtype=np.float64)
        if len(v):
            dist.hist(np.clip(v, 0, edges[-1]), bins=edges, histtype="step", density=True, label=name)
    dist.set_xlabel("input length (tokens; the top 1% clipped)" if text else "mean pixel value of an image (0-255)")
    dist.set_ylabel("density")
    dist.set_title("input lengths" if text else "image brightness")
    dist.legend(fontsize="small")
    _finish(fig, stats, path, plt)


def _label_bars(bars, stats, names):
    labels = stats["labels"]
    width = 0.8 / len(names)
    positions = np.arange(len(labels))
    for i, name in enumerate(names):
        counts = np.asarray([stats["splits"][name]["label_counts"][label] for label in labels], dtype=np.float64)
        bars.bar(positions + i * width, counts / max(counts.sum(), 1), width, label=name)
    if len(labels) <= 20:
        bars.set_xticks(
            positions + 0.4 - width / 2,
            labels,
            rotation=45 if len(labels) > 6 else 0,
            ha="right" if len(labels) > 6 else "center",
        )
    else:
        bars.set_xlabel(f"{len(labels)} labels")
    bars.set_ylabel("share of the split's examples")
    skew = stats["label_skew"]["distance"]
    bars.set_title(f"labels per split (max shard skew {max(skew[n] for n in names if n != TEST):.3f})")
    bars.legend(fontsize="small")


def _finish(fig, stats, path, plt, tight=True):
    validation = stats["validation"]
    verdict = (
        "passed"
        if validation["passed"] and not validation["warnings"]
        else (f"{len(validation['warnings'])} warning(s)" if validation["passed"] else "failed")
    )
    what = stats["task"] + (
        f" regression of {stats['target']['name']!r}" if stats.get("problem") == "regression" else ""
    )
    fig.suptitle(
        f"data validation {verdict}: {what}, {stats[TRAIN]['examples']} training examples, "
        f"{stats['splits'][TEST]['examples']} held out"
    )
    if tight:
        fig.tight_layout()
    fig.savefig(path, format="png", dpi=90)
    plt.close(fig)


FEW_FEATURES = 12  # up to this many features, one histogram panel each; more: a two-panel summary


def plot_numeric(stats, values, path, plt):
    """Tables and arrays. First panel: the labels per split (classification) or the target's histogram
    per split (regression). Then, for up to FEW_FEATURES features, one panel per feature: its histogram
    in each split (read back from the split files written beside `path`, a chunk at a time), over the
    training range; for more, two summary panels with one point per feature and one line per split:
    the split's mean minus the training mean in training standard deviations, and the split's standard
    deviation over the training one (drift between splits shows as lines leaving 0 and 1)."""
    names = list(stats["splits"])
    features = stats["features"]
    few = len(features) <= FEW_FEATURES
    panels = 1 + (len(features) if few else 2)
    ncols = min(panels, 4)
    nrows = -(-panels // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.3 * nrows + 0.4), squeeze=False)
    axes = axes.ravel()
    for ax in axes[panels:]:
        ax.set_visible(False)
    if stats.get("problem") == "regression":
        _target_histograms(axes[0], stats, values, names)
    else:
        _label_bars(axes[0], stats, names)
    train = stats[TRAIN]["feature_statistics"]
    lo, hi = np.asarray(train["min"]), np.asarray(train["max"])
    if few:
        counts, edges = _feature_histograms(os.path.dirname(path), names, lo, hi)
        for j, feature in enumerate(features):
            ax = axes[1 + j]
            for name in names:
                total = counts[name][j].sum()
                if total:
                    ax.stairs(counts[name][j] / total, edges[j], label=name)
            ax.set_title(feature if len(feature) <= 32 else feature[:29] + "...", fontsize="medium")
            ax.tick_params(labelsize="small")
            ax.locator_params(nbins=4)
        axes[1].legend(fontsize="x-small")
        axes[1].set_xlabel("value (held-out values outside the training range are clipped)", fontsize="small")
        axes[1].set_ylabel("share of the split", fontsize="small")
        # a fixed layout: tight_layout's text measuring costs more than drawing a dozen panels
        fig.subplots_adjust(
            left=0.05,
            right=0.98,
            bottom=0.6 / fig.get_figheight(),
            top=1 - 0.6 / fig.get_figheight(),
            hspace=0.45,
            wspace=0.22,
        )
    else:
        mean, std = np.asarray(train["mean"]), np.sqrt(np.asarray(train["variance"]))
        scale = np.where(std > 0, std, 1.0)
        index = np.arange(len(features))
        for name in names:
            split = stats["splits"][name]["feature_statistics"]
            if split is None:
                continue
            axes[1].plot(index, (np.asarray(split["mean"]) - mean) / scale, ".-", lw=0.8, ms=3, label=name)
            axes[2].plot(index, np.sqrt(np.asarray(split["variance"])) / scale, ".-", lw=0.8, ms=3, label=name)
        axes[1].set_title(f"{len(features)} features: split mean - training mean", fontsize="medium")
        axes[1].set_ylabel("training standard deviations")
        axes[2].set_title("split std / training std", fontsize="medium")
        for ax in axes[1:3]:
            ax.set_xlabel("feature (table column or last-axis element), in order")
            ax.legend(fontsize="x-small")
    _finish(fig, stats, path, plt, tight=not few)


def plot_typed(stats, values, path, plt):
    """A typed table: the labels per split (or the target's histogram per split), and each column's share
    of missing values per split (the missing_skew check's numbers)."""
    names = list(stats["splits"])
    columns = stats["features"]
    fig, (first, missing) = plt.subplots(1, 2, figsize=(12, 4.2))
    if stats.get("problem") == "regression":
        _target_histograms(first, stats, values, names)
    else:
        _label_bars(first, stats, names)
    width = 0.8 / len(names)
    positions = np.arange(len(columns))
    for i, name in enumerate(names):
        shares = [stats["splits"][name]["columns"][c]["missing_share"] for c in columns]
        missing.bar(positions + i * width, shares, width, label=name)
    if len(columns) <= 20:
        missing.set_xticks(positions + 0.4 - width / 2, columns, rotation=45, ha="right", fontsize="small")
    else:
        missing.set_xlabel(f"{len(columns)} columns, in order")
    missing.set_ylabel("share of the split's rows missing")
    missing.set_title("missing values per column and split")
    missing.legend(fontsize="x-small")
    _finish(fig, stats, path, plt)


def _target_histograms(ax, stats, values, names):
    train = stats[TRAIN]["target"]
    low, high = train["min"], train["max"]
    edges = np.linspace(low, high if high > low else low + 1.0, 31)
    for name in names:
        v = np.asarray(values.get(name, ()), dtype=np.float64)
        if len(v):
            counts = np.histogram(np.clip(v, edges[0], edges[-1]), bins=edges)[0]
            ax.stairs(counts / len(v), edges, label=name)
    skew = stats["label_skew"]["distance"]
    ax.set_title(
        f"target {stats['target']['name']!r} per split (max shard skew {max(skew[n] for n in names if n != TEST):.3f})",
        fontsize="medium",
    )
    ax.set_ylabel("share of the split's examples")
    ax.set_xlabel("target (held-out values outside the training range are clipped)", fontsize="small")
    ax.legend(fontsize="x-small")


def _feature_histograms(data_dir, names, lo, hi, bins=30, chunk_values=1 << 20):
    """Per split, per feature: the histogram of its values in NAME.x.npy over 30 bins of the training
    range (clipped to it), read in chunks of about a million values."""
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.where(np.asarray(hi) > lo, np.asarray(hi, dtype=np.float64), lo + 1.0)
    edges = [np.linspace(a, b, bins + 1) for a, b in zip(lo, hi)]
    counts = {}
    for name in names:
        x = np.load(os.path.join(data_dir, f"{name}.x.npy"), mmap_mode="r", allow_pickle=False)
        out = np.zeros((len(lo), bins), dtype=np.int64)
        per_row = max(1, int(np.prod(x.shape[1:], dtype=np.int64)))
        step = max(1, chunk_values // per_row)
        for start in range(0, len(x), step):
            block = np.asarray(x[start : start + step], dtype=np.float64).reshape(-1, len(lo))
            for j in range(len(lo)):
                out[j] += np.histogram(np.clip(block[:, j], edges[j][0], edges[j][-1]), bins=edges[j])[0]
        counts[name] = out
        del x
    return counts, edges
