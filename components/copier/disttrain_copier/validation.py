"""Data validation: statistics of every split and the checks run before the copier publishes.

The copier feeds each example to `Validator.add` as it streams by (one pass, memory: a label
histogram per split, and per example one 8-byte content hash and one number, its length in
tokens or its mean pixel). `Validator.finish` then

  * computes the statistics of each shard and of the held-out split: examples, label histogram,
    text length quantiles (tokens, as the model sees them) or pixel mean and std, empty or
    constant inputs, inputs repeated within the split;
  * runs the checks:
      leakage        exact duplicate inputs between the held-out split and the shards (by a
                     content hash): an error; a warning with --allow-duplicates;
      label_skew     a shard whose label distribution is further than --max-label-skew from the
                     training distribution (total-variation distance, see `tv_distance`): an
                     error; a warning with --allow-label-skew;
      missing_class  a label with no example in a shard or in the held-out split: an error; a
                     warning with --allow-missing-classes;
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
import os

import numpy as np

from disttrain_contract import ContractError
from disttrain_contract.atomic import atomic_write_json, read_json
from disttrain_contract.manifest import iter_split_text

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
QUANTILES = {"min": 0.0, "p05": 0.05, "p25": 0.25, "p50": 0.5, "p75": 0.75, "p95": 0.95, "max": 1.0}

SCHEMA_HELP = """\
--schema FILE is a JSON object with any of these keys (others are refused):
  "labels": ["neg", "pos"]                     exactly these label names, no more, no fewer
  "input": {"kind": "text"}                    or {"kind": "image", "shape": [H, W, C], "dtype": "uint8"}
                                               (dtype: the source's, e.g. float32 for an npz:PATH of floats;
                                               "str" for text)
  "text_length": {"min": 1, "max": 400}        text: every input's length in tokens (words after
                                               lower-casing and stripping punctuation), both ends optional
"""


# ------------------------------------------------------------------- options and schema


def read_schema(path):
    """The --schema file, checked for shape before any data is read (a typo fails at once)."""
    schema = read_json(path, what=f"--schema {path}")
    if schema is None:
        raise ContractError(f"--schema {path} does not exist")
    if not isinstance(schema, dict):
        raise ContractError(f"--schema {path} must be a JSON object\n{SCHEMA_HELP}")
    unknown = sorted(set(schema) - {"labels", "input", "text_length"})
    if unknown:
        raise ContractError(f"--schema {path}: unknown key(s) {unknown}\n{SCHEMA_HELP}")
    labels = schema.get("labels")
    if labels is not None and (not isinstance(labels, list) or not all(isinstance(v, str) for v in labels)):
        raise ContractError(f"--schema {path}: \"labels\" must be a list of strings")
    spec = schema.get("input")
    if spec is not None:
        if not isinstance(spec, dict) or spec.get("kind") not in ("text", "image") or set(spec) - {"kind", "shape", "dtype"}:
            raise ContractError(f"--schema {path}: \"input\" must be {{\"kind\": \"text\"|\"image\", \"shape\": [H, W, C], \"dtype\": ...}}")
        shape = spec.get("shape")
        if shape is not None and (not isinstance(shape, list) or len(shape) != 3 or not all(isinstance(v, int) and v > 0 for v in shape)):
            raise ContractError(f"--schema {path}: \"input\".\"shape\" must be [H, W, C] positive integers, got {shape!r}")
    bounds = schema.get("text_length")
    if bounds is not None:
        if not isinstance(bounds, dict) or set(bounds) - {"min", "max"} or not all(
                isinstance(v, int) and v >= 0 for v in bounds.values()):
            raise ContractError(f"--schema {path}: \"text_length\" must be {{\"min\": N, \"max\": N}} with integers >= 0")
        if bounds.get("min", 0) > bounds.get("max", float("inf")):
            raise ContractError(f"--schema {path}: \"text_length\" min {bounds['min']} is above max {bounds['max']}")
    return schema


# ----------------------------------------------------------------------- statistics


def content_hash(x):
    """8 bytes of BLAKE2b of an input as stored (text: UTF-8; image: the uint8 pixels). Two different
    inputs collide with probability ~n^2 / 2^65: for a million examples, about 3e-8."""
    data = x.encode("utf-8") if isinstance(x, str) else np.ascontiguousarray(x, dtype=np.uint8).tobytes()
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
    """Running statistics of one split."""

    def __init__(self, n_labels, kind):
        self.kind = kind
        self.label_counts = np.zeros(n_labels, dtype=np.int64)
        # per example: content hash; length in tokens or mean pixel. Typed arrays, 16 bytes an example
        # (Python lists of ints and floats would take ~70)
        self.hashes, self.values = array.array("Q"), array.array("d")
        self.empty, self.constant = [], []  # indexes of empty (text) or constant (image) inputs
        # images: how many pixels (channel values) of each level 0..255 the split has; mean and std come
        # from it exactly, and a bincount per image is ~4x cheaper than float arithmetic on its pixels
        self.pixel_levels = np.zeros(256, dtype=np.int64)

    def add(self, x, y, tokens=None):
        index = len(self.hashes)
        self.label_counts[y] += 1
        self.hashes.append(content_hash(x))
        if self.kind == "text":
            self.values.append(len(tokens))
            if not tokens:
                self.empty.append(index)
        else:
            levels = np.bincount(np.asarray(x, dtype=np.uint8).ravel(), minlength=256)
            self.pixel_levels += levels
            size = int(levels.sum())
            self.values.append(float(levels @ LEVELS) / max(size, 1))
            if size and levels.max() == size:  # every pixel the same
                self.constant.append(index)

    def to_json(self, labels):
        values = np.asarray(self.values, dtype=np.float64)
        hashes = np.asarray(self.hashes, dtype=np.uint64)
        out = {
            "examples": len(hashes),
            "label_counts": dict(zip(labels, self.label_counts.tolist())),
            # inputs equal to an earlier one of the same split (not leakage, but worth knowing)
            "repeated_inputs": int(len(hashes) - len(np.unique(hashes))),
        }
        if self.kind == "text":
            out["text_length_tokens"] = ({k: float(np.quantile(values, q)) for k, q in QUANTILES.items()}
                                         | {"mean": float(values.mean())}) if len(values) else None
            out["empty_inputs"] = len(self.empty)
        else:
            total = int(self.pixel_levels.sum())
            mean = float(self.pixel_levels @ LEVELS) / total if total else 0.0
            variance = float(self.pixel_levels @ np.square(LEVELS - mean)) / total if total else 0.0
            out["pixel_mean"], out["pixel_std"] = mean, float(np.sqrt(variance))
            out["constant_inputs"] = len(self.constant)
        return out


class Validator:
    def __init__(self, task, labels, input_spec, names, source_dtype=None, allow_duplicates=False,
                 max_label_skew=DEFAULT_MAX_LABEL_SKEW, allow_label_skew=False, allow_missing_classes=False, schema=None,
                 known_duplicates=None):
        self.task, self.labels, self.input_spec = task, list(labels), dict(input_spec)
        self.kind = "text" if task == "text" else "image"
        self.source_dtype = source_dtype or ("str" if self.kind == "text" else "uint8")
        self.names = list(names)  # the shards, in order
        self.splits = {name: SplitStats(len(self.labels), self.kind) for name in self.names + [TEST]}
        self.allow_duplicates, self.max_label_skew = allow_duplicates, max_label_skew
        self.allow_label_skew, self.allow_missing_classes = allow_label_skew, allow_missing_classes
        self.schema = schema
        # a built-in sample whose duplicates are a known property of the corpus: accepted with a warning
        # saying why (sources.Dataset.known_duplicates); user data never has this
        self.known_duplicates = known_duplicates

    def add(self, name, x, y, tokens=None):
        self.splits[name].add(x, y, tokens)

    def values(self):
        """Per split, every example's length in tokens (text) or mean pixel (images): for the plot."""
        return {name: s.values for name, s in self.splits.items()}

    # ---------------------------------------------------------------------- checks

    def finish(self, data_dir, storage):
        """Statistics and check results; raises ContractError if a check fails without its allow flag.
        `data_dir` holds the splits as written (to quote an offending example)."""
        self.data_dir, self.storage = data_dir, storage
        splits = {name: s.to_json(self.labels) for name, s in self.splits.items()}
        train_counts = sum((self.splits[n].label_counts for n in self.names), np.zeros(len(self.labels), dtype=np.int64))
        faces = self.task == "faces"
        skew = {name: round(tv_distance(self.splits[name].label_counts, train_counts), 6) for name in self.names + [TEST]}
        results = {
            "leakage": self._leakage(),
            "label_skew": self._skip("faces are split by person: labels differ between splits by design") if faces
            else self._label_skew(skew),
            "missing_class": self._skip("faces are split by person: labels differ between splits by design") if faces
            else self._missing_class(),
            "schema": self._schema() if self.schema is not None else self._skip("no --schema given"),
        }
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
            "labels": self.labels,
            "kind": self.kind,
            "splits": splits,
            TRAIN: {"examples": int(train_counts.sum()), "label_counts": dict(zip(self.labels, train_counts.tolist()))},
            "label_skew": {"measure": "total-variation distance of the split's label distribution from the training "
                                      "distribution (all shards)", "distance": skew},
            "validation": validation,
        }
        if failed:
            raise ContractError("data validation failed, nothing published:\n  " + "\n  ".join(failed)
                                + ("\n  warnings: " + "; ".join(warnings) if warnings else ""))
        return stats

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
        count, example, per_shard = 0, None, {}
        for name in self.names:
            hashes = np.asarray(self.splits[name].hashes, dtype=np.uint64)
            leaked = np.flatnonzero(np.isin(hashes, test_hashes))
            per_shard[name] = int(len(leaked))
            count += len(leaked)
            if example is None and len(leaked):
                index = int(leaked[0])
                test_index = int(np.flatnonzero(test_hashes == hashes[index])[0])
                example = f"{name} example {index} = test example {test_index}: {self._quote(name, index)}"
        problem = None
        if count:
            train = sum(len(self.splits[n].hashes) for n in self.names)
            problem = (f"{count} training example(s) ({100 * count / train:.2f}% of {train}) are exact copies of "
                       f"held-out inputs, e.g. {example}")
        if problem and self.known_duplicates and not self.allow_duplicates:
            return {"status": "warning", "message": f"{problem} (accepted: {self.known_duplicates})",
                    "duplicates": count, "per_shard": per_shard, "example": example}
        return self._result(problem, self.allow_duplicates, "--allow-duplicates",
                            {"duplicates": count, "per_shard": per_shard, "example": example})

    def _label_skew(self, skew):
        shards = {name: skew[name] for name in self.names}
        worst = max(shards, key=shards.get)
        problem = None
        if shards[worst] > self.max_label_skew:
            over = [n for n in self.names if shards[n] > self.max_label_skew]
            problem = (f"{len(over)} shard(s) have a label distribution further than --max-label-skew "
                       f"{self.max_label_skew:g} from the training one (total-variation distance); worst {worst}: "
                       f"{shards[worst]:.3f} ({self._histogram(worst)} vs training {self._histogram(None)})")
        return self._result(problem, self.allow_label_skew, "--allow-label-skew",
                            {"max_distance": shards[worst], "worst_shard": worst})

    def _missing_class(self):
        missing = {name: [self.labels[i] for i in np.flatnonzero(s.label_counts == 0)] for name, s in self.splits.items()}
        missing = {name: labels for name, labels in missing.items() if labels}
        problem = None
        if missing:
            parts = [f"{name} has no {_listing(labels)}" for name, labels in missing.items()]
            problem = f"{len(missing)} split(s) lack a class: " + "; ".join(parts)
        return self._result(problem, self.allow_missing_classes, "--allow-missing-classes", {"missing": missing})

    def _schema(self):
        violations = []
        expected = self.schema.get("labels")
        if expected is not None and list(expected) != self.labels:
            extra = [v for v in self.labels if v not in expected]
            absent = [v for v in expected if v not in self.labels]
            violations.append(f"labels {self.labels} are not the schema's {list(expected)}"
                              + (f" (not in the schema: {extra})" if extra else "")
                              + (f" (not in the data: {absent})" if absent else ""))
        spec = self.schema.get("input") or {}
        if spec.get("kind") and spec["kind"] != self.kind:
            violations.append(f"the inputs are {self.kind}, the schema expects {spec['kind']}")
        elif self.kind == "image" and spec.get("shape"):
            shape = [self.input_spec["height"], self.input_spec["width"], self.input_spec["channels"]]
            if shape != spec["shape"]:
                violations.append(f"input shape {shape} is not the schema's {spec['shape']}")
        if spec.get("dtype") and spec["dtype"] != self.source_dtype:
            violations.append(f"input dtype {self.source_dtype} is not the schema's {spec['dtype']}")
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
                violations.append(f"{out} input(s) outside the schema's text length {low}..{bounds.get('max', 'any')} tokens, e.g. {example}")
        elif bounds:
            violations.append("the schema gives text_length but the inputs are images")
        if not violations:
            return {"status": "passed", "message": "ok"}
        return {"status": "failed", "message": "the data violates --schema: " + "; ".join(violations), "violations": violations}

    # ------------------------------------------------------------------ quoting data

    def _quote(self, name, index):
        """One example as a person can find it again: the text (shortened), or the row of the .npy file."""
        if self.storage == "jsonl":
            for i, (text, _) in enumerate(iter_split_text(os.path.join(self.data_dir, f"{name}.jsonl"))):
                if i == index:
                    return json.dumps(text if len(text) <= 80 else text[:77] + "...", ensure_ascii=False)
        return f"row {index} of {name}.x.npy"

    def _histogram(self, name):
        counts = (self.splits[name].label_counts if name else
                  sum(self.splits[n].label_counts for n in self.names))
        shares = counts / max(counts.sum(), 1)
        return "{" + ", ".join(f"{label}: {share:.2f}" for label, share in list(zip(self.labels, shares))[:10]) + \
            (", ..." if len(self.labels) > 10 else "") + "}"


def _listing(labels, limit=5):
    shown = ", ".join(repr(v) for v in labels[:limit])
    return f"example of class {shown}" if len(labels) == 1 else f"example of classes {shown}" + (
        f" and {len(labels) - limit} more" if len(labels) > limit else "")


# -------------------------------------------------------------------- writing out


def write_stats(out_dir, stats, values):
    """stats.json, and stats.png unless `values` is None, into `out_dir` (the copier's temporary
    directory: published with the data)."""
    atomic_write_json(os.path.join(out_dir, STATS), stats)
    if values is not None:
        plot_stats(stats, values, os.path.join(out_dir, STATS_PLOT))


def plot_stats(stats, values, path):
    """Left: each split's label distribution (share of its examples); right: the distribution of input
    lengths (text) or of per-image mean pixel values, one line per split."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(stats["splits"])
    labels = stats["labels"]
    fig, (bars, dist) = plt.subplots(1, 2, figsize=(12, 4.2))
    width = 0.8 / len(names)
    positions = np.arange(len(labels))
    for i, name in enumerate(names):
        counts = np.asarray([stats["splits"][name]["label_counts"][label] for label in labels], dtype=np.float64)
        bars.bar(positions + i * width, counts / max(counts.sum(), 1), width, label=name)
    if len(labels) <= 20:
        bars.set_xticks(positions + 0.4 - width / 2, labels, rotation=45 if len(labels) > 6 else 0, ha="right" if len(labels) > 6 else "center")
    else:
        bars.set_xlabel(f"{len(labels)} labels")
    bars.set_ylabel("share of the split's examples")
    skew = stats["label_skew"]["distance"]
    bars.set_title(f"labels per split (max shard skew {max(skew[n] for n in names if n != TEST):.3f})")
    bars.legend(fontsize="small")
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
    validation = stats["validation"]
    verdict = "passed" if validation["passed"] and not validation["warnings"] else (
        f"{len(validation['warnings'])} warning(s)" if validation["passed"] else "failed")
    fig.suptitle(f"data validation {verdict}: {stats['task']}, {stats[TRAIN]['examples']} training examples, "
                 f"{stats['splits'][TEST]['examples']} held out")
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=90)
    plt.close(fig)
