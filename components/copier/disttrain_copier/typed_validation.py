"""A typed table's statistics and checks (validation.py runs them beside the others), and the row hashes
of every table batch (the leakage check's).

Per split and column, as batches stream by: rows and missing cells; a number, integer or boolean column's
count, mean, population variance, min and max over its present values (moments.FeatureMoments, booleans
as 0/1); a text column's value counts, in the training rows (all shards together: the vocabulary) and in the
held-out rows. Counting is bounded: a text column with more than --max-categories distinct training values
is an ID or free-text column, not a category, and is refused at once (`IdColumn`); the held-out counts keep
at most HELD_OUT_VALUES distinct values a column.

The column statistics a model gets (the manifest's input, typed_table.TableSpec) are the training shards'
only: mean/variance/min/max, the missing count, the vocabulary (values seen in at least
--min-category-count training rows, most frequent first, ties alphabetically). A column's model dtype
(typed_table.model_dtype) asks whether the column has a missing value anywhere in the dataset, held-out
rows included: an integer column whose only missing values are held out is read as float32 with NaN, so
that the held-out split fits the dtype too.

The checks (validation.Validator.finish):
  unseen_category  held-out values of a text column never seen in training (they map to the model's
                   out-of-vocabulary bucket): a warning with their counts;
  missing_skew     a split (a shard or the held-out one) whose share of missing values in a column is
                   further from the training rows' share p than --max-missing-skew (absolute) and than
                   MISSING_SKEW_SIGMAS standard errors of sampling, sqrt(p (1 - p) / n) for a split of n
                   rows (so that small splits do not fail by chance): an error; a warning with
                   --allow-missing-skew;
  type_change      a column whose values were numbers (or booleans) and then text, from some data row on:
                   read as text (a warning naming the row and the value; --column-types makes such
                   values errors).
"""

import collections
import hashlib
import math

import numpy as np

from disttrain_contract import ContractError
from disttrain_contract.typed_table import Column, TableSpec, model_dtype
from disttrain_copier.moments import FeatureMoments

DEFAULT_MAX_MISSING_SKEW = 0.1
MISSING_SKEW_SIGMAS = 4.0
HELD_OUT_VALUES = 10_000
TYPED_CHECKS = ("unseen_category", "missing_skew", "type_change")

_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_NULL = np.uint64(0x6A09E667F3BCC909)  # a missing text value's hash


def _mix(h):
    """splitmix64's finaliser on uint64 arrays (wrapping arithmetic): every input bit reaches every output bit."""
    h = (h ^ (h >> np.uint64(30))) * _M1
    h = (h ^ (h >> np.uint64(27))) * _M2
    return h ^ (h >> np.uint64(31))


def _text_hashes(values):
    """A text column's per-row hash: BLAKE2b (8 bytes) of each distinct value of the batch (one per distinct
    value, not per row), _NULL for a missing one."""
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(values)
    digests = np.asarray(
        [
            int.from_bytes(hashlib.blake2b(v.encode("utf-8"), digest_size=8).digest(), "little")
            for v in encoded.dictionary.to_pylist()
        ]
        + [int(_NULL)],
        dtype=np.uint64,
    )
    indices = encoded.indices.fill_null(len(digests) - 1) if encoded.null_count else encoded.indices
    return digests[indices.to_numpy(zero_copy_only=False)]


def row_hashes(x):
    """8-byte hashes of a batch's rows, all columns together, in column order: x a numeric [m, d] array
    (task table: its float32 values' bits) or a pyarrow RecordBatch of typed columns (numbers by their
    float64 bits, a missing number as NaN's, text by its BLAKE2b). Two different rows collide with
    probability ~2^-64 each: for a million examples, about 3e-8 of any collision."""
    import pyarrow as pa

    numeric = isinstance(x, np.ndarray)
    rows = len(x) if numeric else x.num_rows
    h = np.full(rows, _GOLDEN, dtype=np.uint64)
    width = x.shape[1] if numeric else x.num_columns
    for j in range(width):
        if numeric:
            column = np.ascontiguousarray(x[:, j], dtype=np.float32).view(np.uint32).astype(np.uint64)
        else:
            values = x.column(j)
            if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
                column = _text_hashes(values)
            else:
                column = values.cast(pa.float64()).to_numpy(zero_copy_only=False).view(np.uint64)
        h = _mix(h ^ (column + np.uint64((int(_GOLDEN) * (j + 1)) & 0xFFFFFFFFFFFFFFFF)))
    return h


class IdColumn(ContractError):
    pass


class ColumnSplit:
    """One column in one split: rows, missing cells, and (numeric) the moments of the present values."""

    def __init__(self, numeric):
        self.rows, self.missing = 0, 0
        self.moments = FeatureMoments() if numeric else None


class TypedStats:
    """The typed columns' statistics of every split (see the module docstring)."""

    def __init__(self, info, shards, test):
        self.info, self.shards, self.test = info, list(shards), test
        self.types = dict(info.types)
        self.splits = {
            name: {c: ColumnSplit(t != "string") for c, t in self.types.items()} for name in [*self.shards, test]
        }
        text = [c for c, t in self.types.items() if t == "string"]
        self.train_values = {c: collections.Counter() for c in text}
        self.test_values = {c: collections.Counter() for c in text}
        self.test_overflow = {c: False for c in text}

    def add(self, name, batch):
        import pyarrow as pa
        import pyarrow.compute as pc

        for j, (column, kind) in enumerate(self.types.items()):
            values = batch.column(j)
            split = self.splits[name][column]
            split.rows += len(values)
            split.missing += values.null_count
            if kind != "string":
                present = values.cast(pa.float64()).to_numpy(zero_copy_only=False)
                present = present[~np.isnan(present)] if values.null_count else present
                if len(present):
                    split.moments.add(present[:, None])
                continue
            counts = pc.value_counts(values.drop_null() if values.null_count else values)
            pairs = zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist())
            if name == self.test:
                self._count_held_out(column, pairs)
                continue
            counter = self.train_values[column]
            for value, count in pairs:
                counter[value] += count
            if len(counter) > self.info.options.max_categories:
                raise IdColumn(self._id_column(column))

    def _id_column(self, column):
        change = next((c for c in self.info.changes if c["column"] == column), None)
        turned = (
            f" (it holds numbers before data row {change['row']}, which has {change['value']!r}: "
            f"--column-types {column}=float reports such cells instead)"
            if change and change["from"] != "boolean"
            else ""
        )
        return (
            f"{self.info.path}: column {column!r} has more than {self.info.options.max_categories} distinct values "
            "in the training rows: an ID or free-text column, not a category; leave it out with --drop-columns "
            f"{column}, or raise --max-categories if it is a category{turned}"
        )

    def _count_held_out(self, column, pairs):
        counter = self.test_values[column]
        for value, count in pairs:
            if value in counter or len(counter) < HELD_OUT_VALUES:
                counter[value] += count
            else:
                self.test_overflow[column] = True

    # ------------------------------------------------------------------ results

    def _train(self, column):
        return [self.splits[n][column] for n in self.shards]

    def spec(self):
        """The TableSpec: every column's type, model dtype and training statistics."""
        options, columns = self.info.options, []
        for name, kind in self.types.items():
            train = self._train(name)
            missing = sum(s.missing for s in train)
            anywhere = missing + self.splits[self.test][name].missing
            dtype = model_dtype(kind, anywhere > 0)
            if kind == "string":
                kept = sorted(
                    ((v, c) for v, c in self.train_values[name].items() if c >= options.min_category_count),
                    key=lambda vc: (-vc[1], vc[0]),
                )[: options.max_categories]
                columns.append(
                    Column(
                        name,
                        kind,
                        dtype,
                        missing,
                        vocabulary=tuple(v for v, _ in kept),
                        counts=tuple(c for _, c in kept),
                    )
                )
                continue
            moments = FeatureMoments.merge(s.moments.moments() for s in train)
            stats = {}
            if moments is not None:
                n, mean, m2, lo, hi = moments
                stats = {"mean": float(mean[0]), "variance": float(m2[0] / n), "min": float(lo[0]), "max": float(hi[0])}
            columns.append(Column(name, kind, dtype, missing, **stats))
        return TableSpec(columns=tuple(columns))

    def split_json(self, name):
        """stats.json's columns of one split: missing cells, and numbers' moments or text's distinct values."""
        out = {}
        for column, kind in self.types.items():
            split = self.splits[name][column]
            entry = {"missing": split.missing, "missing_share": round(split.missing / max(split.rows, 1), 6)}
            if kind != "string":
                moments = FeatureMoments.to_json(split.moments.moments()) or {}
                entry.update({k: (moments[k][0] if moments else None) for k in ("mean", "variance", "min", "max")})
            elif name == self.test:
                entry["distinct"] = len(self.test_values[column])
                entry["unseen"] = sum(1 for v in self.test_values[column] if v not in self.train_values[column])
            out[column] = entry
        return out

    # ------------------------------------------------------------------ checks

    def unseen_category(self):
        found = {}
        for column, counter in self.test_values.items():
            unseen = {v: c for v, c in counter.items() if v not in self.train_values[column]}
            if unseen:
                found[column] = unseen
        if not found:
            return {"status": "passed", "message": "ok: every held-out value of a text column occurs in training"}
        parts = []
        for column, unseen in found.items():
            top = sorted(unseen.items(), key=lambda vc: (-vc[1], vc[0]))
            shown = ", ".join(f"{v!r} ({c} row{'s' if c != 1 else ''})" for v, c in top[:5])
            more = f" and {len(top) - 5} more" if len(top) > 5 else ""
            at_least = "at least " if self.test_overflow[column] else ""
            parts.append(f"{column!r}: {at_least}{len(top)} value(s), {shown}{more}")
        return {
            "status": "warning",
            "message": f"{len(found)} text column(s) have held-out values never seen in training, which the model "
            "reads as out of vocabulary: " + "; ".join(parts),
            "columns": {c: {"values": len(u), "rows": sum(u.values())} for c, u in found.items()},
        }

    def missing_skew(self, max_skew):
        """(problem or None, details): the splits whose missing share is beyond `max_skew` (module docstring)."""
        worst, over = {}, []
        for column in self.types:
            train = self._train(column)
            rows, missing = sum(s.rows for s in train), sum(s.missing for s in train)
            p = missing / max(rows, 1)
            for name in [*self.shards, self.test]:
                split = self.splits[name][column]
                if not split.rows:
                    continue
                share = split.missing / split.rows
                diff = abs(share - p)
                error = math.sqrt(p * (1 - p) / split.rows)
                if diff > worst.get(column, (0.0,))[0]:
                    worst[column] = (round(diff, 6), name)
                if diff > max_skew and diff > MISSING_SKEW_SIGMAS * error:
                    over.append(f"{column!r} in {name}: {share:.3f} missing vs {p:.3f} in training")
        details = {
            "max_missing_skew": max_skew,
            "worst": {c: {"difference": d, "split": n} for c, (d, n) in worst.items()},
        }
        if not over:
            return None, details
        problem = (
            f"{len(over)} column split(s) are missing far more or less often than in the training rows "
            f"(a share further than --max-missing-skew {max_skew:g} and {MISSING_SKEW_SIGMAS:g} standard errors "
            "of sampling from the training share): "
            + "; ".join(over[:6])
            + (f"; ... {len(over) - 6} more" if len(over) > 6 else "")
        )
        return problem, details

    def type_change(self):
        changes = self.info.changes
        if not changes:
            return {"status": "passed", "message": "ok: no column changes type within the file"}
        parts = [
            f"{c['column']!r} holds {'booleans' if c['from'] == 'boolean' else 'numbers'} before data "
            f"row {c['row']}, which has {c['value']!r}"
            for c in changes
        ]
        return {
            "status": "warning",
            "message": f"{len(changes)} column(s) change type within the file, read as text: "
            + "; ".join(parts)
            + " (--column-types NAME=float makes such values errors; a missing-value spelling belongs in --na-values)",
            "changes": changes,
        }
