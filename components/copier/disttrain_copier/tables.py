"""table:PATH: feature columns and one label column, from a CSV, TSV or Parquet file.

The format is chosen by the file's extension: .csv (comma-separated) and .tsv (tab-separated) are read
with pyarrow's streaming CSV reader (pyarrow.csv.open_csv: UTF-8, a header row naming the columns, blank
lines ignored, BLOCK bytes at a time); .parquet and .pq with ParquetFile.iter_batches (PARQUET_BATCH rows at
a time). Every step works on whole columns of a batch (pyarrow.compute, numpy): there is no per-row Python
loop. The file is read twice:

  1. scan: every CSV column as text (so that a column's type is decided by all its values, never by the
     first block alone), Parquet columns as stored. Counts the rows, decides each feature column's type,
     finds the missing values, collects the class names (classification) or checks the targets
     (regression), and collects every cell that cannot be read as its column's type. Those are all
     reported at the end of the scan (the first BAD_PER_COLUMN of each column, one line each), exit 2,
     before anything is written.
  2. read: the CSV again with the decided types (pyarrow parses the numbers), or the Parquet batches
     converted to them; yields (x, y) batches to the copier.

Memory: the batches in flight (pyarrow's reader reads ~12 CSV blocks of BLOCK bytes ahead, as text in
the scan and as typed columns in the read; PARQUET_BATCH rows of a Parquet file), whatever the file's size;
the copier's data validation adds 8 bytes a row (validation.py).

Column types (float, integer, boolean, string). A CSV column is inferred from its present values: integer
if every one is a whole number, else float if every one is a number, else boolean if every one is true or
false (in any of the spellings TRUE_WORDS, FALSE_WORDS), else string. A Parquet column keeps its stored type
(integers, floats and decimals, booleans, strings; dictionary-encoded ones by their values); any other
Parquet type is refused. `--column-types name=type,...` and a `--schema` file's "column_types" set a type
instead: every present value must then read as that type (integer: a whole number; float: a number;
boolean: TRUE_WORDS, FALSE_WORDS, 1 or 0; string: anything).

Missing values: an empty cell, "NaN" (in the spellings ALWAYS_MISSING), a Parquet null or floating NaN, and
the spellings --na-values names (default NA; exact match). A real category spelled like one of those needs
--na-values without it. A float column's inf or -inf is not a number a model can take: a bad cell.

The task: a table whose every feature column is numbers (float or integer, or a boolean) with no missing
value, and no --column-types naming a string, is the task "table" as before (x float32 [n, features]).
Anything else is the task "typed_table" (disttrain_contract.typed_table): the shards keep the raw typed
values with nulls (NAME.parquet) and the manifest's input is the columns' TableSpec.

The label column (--label-column, default "label"): classification: its distinct values are the classes,
as strings; a number with an integer value is named by that integer ("1", "1.0" and a Parquet 1 are all
class "1"), and integer names sort numerically before other names, which sort alphabetically; y is the
class's index. A non-integer number (3.7) is refused: it is a regression target. Regression: every value
must be a finite number; y is float32. A missing label is refused (a row needs its label).

Rows are counted as "data rows" from 1, the header not counted and blank lines skipped (the first row
under the header is data row 1).
"""

import csv
import dataclasses
import math
import os

import numpy as np

from disttrain_contract import ContractError
from disttrain_contract.layout import whole_number
from disttrain_contract.typed_table import TYPES
from disttrain_copier.dataset import Dataset

CSV_DELIMITERS = {".csv": ",", ".tsv": "\t"}
PARQUET_EXTENSIONS = (".parquet", ".pq")
EXTENSIONS = (*CSV_DELIMITERS, *PARQUET_EXTENSIONS)
# A CSV block. pyarrow's streaming reader reads blocks ahead of the one being processed (~12 measured),
# so the block sets the copier's memory: reading a 300 MB mixed CSV as text held at most 398 MB of Arrow
# memory in 16 MB blocks, 176 MB in 4 MB ones, 44 MB in 1 MB ones; the copier took 8.4 s with 2 or 4 MB
# blocks (peak RSS 363 and 437 MB), 8.7 s with 1 MB ones.
BLOCK = 2 << 20
PARQUET_BATCH = 1 << 16
ALWAYS_MISSING = ("", "NaN", "nan", "NAN")
DEFAULT_NA_VALUES = ("NA",)
TRUE_WORDS, FALSE_WORDS = ("true", "True", "TRUE"), ("false", "False", "FALSE")
BAD_PER_COLUMN = 3
PROBE = 1000  # values of a batch a cast is tried on first (_casts)
# the widening order of inferred types: a column is the first of these its values all read as
INTEGER_RE = r"^\s*[+-]?[0-9]+\s*$"
NUMBER_RE = r"^\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\s*$|^\s*[+-]?(inf|infinity)\s*$"
# --max-categories' default: a text column with more distinct training values than this is an ID or free text.
# Real categories (countries ~250, US counties ~3,100 are the large end) mostly fit; a one-hot or embedding
# lookup of 1,000 entries is still small; an ID column of a table of more than 1,000 rows does not fit.
DEFAULT_MAX_CATEGORIES = 1000
ARROW_TYPES = {"float": "float64", "integer": "int64", "boolean": "bool", "string": "string"}


@dataclasses.dataclass(frozen=True)
class TableOptions:
    """How a table is read: the flags --column-types, --na-values, --drop-columns (and a --schema file's
    column_types); --max-categories and --min-category-count are the data validation's (validation.py)."""

    column_types: dict = dataclasses.field(default_factory=dict)  # name -> type (--column-types)
    schema_types: dict = dataclasses.field(default_factory=dict)  # name -> type (--schema "column_types")
    na_values: tuple = DEFAULT_NA_VALUES
    drop_columns: tuple = ()
    max_categories: int = DEFAULT_MAX_CATEGORIES
    min_category_count: int = 1


@dataclasses.dataclass
class TableInfo:
    """What the scan found, for the data validation and the manifest: each feature column's type, where
    the type came from, its missing values in the whole file, and where a column's values changed type
    (a number or boolean column that turned to text: {"column", "from", "row", "value"})."""

    path: str
    types: dict  # name -> type, in file order
    origins: dict  # name -> "inferred", "--column-types", "--schema", "Parquet"
    missing: dict  # name -> missing cells in the file
    changes: list
    options: TableOptions
    typed: bool


def parse_column_types(text, flag="--column-types"):
    """'a=string,b=integer' -> {"a": "string", "b": "integer"}; ContractError naming the bad entry."""
    out = {}
    for entry in filter(None, (e.strip() for e in (text or "").split(","))):
        name, sep, kind = entry.rpartition("=")
        name, kind = name.strip(), kind.strip()
        if not sep or not name:
            raise ContractError(f"{flag}: {entry!r} is not NAME=TYPE (TYPE one of {', '.join(TYPES)})")
        if kind not in TYPES:
            raise ContractError(f"{flag}: {entry!r}: unknown type {kind!r}; one of {', '.join(TYPES)}")
        if name in out and out[name] != kind:
            raise ContractError(f"{flag}: column {name!r} is given twice, as {out[name]} and as {kind}")
        out[name] = kind
    return out


def table(path, label_column="label", problem="classification", local=None, options=None):
    """The Dataset of a table file (see the module docstring). local: where the file is read (a
    downloaded copy of an s3:// `path`); every message names `path`."""
    options = options or TableOptions()
    reader = open_table(path, local)
    features = _features(path, reader.columns, label_column, options)
    regression = problem == "regression"
    forced, origins = _forced_types(path, features, options, reader)
    scan = Scan(path, features, label_column, forced, origins, options.na_values, regression)
    for first_row, columns, labels in reader.scan_batches(features, label_column):
        scan.add(first_row, columns, labels, reader.text)
    scan.finish()
    rows = scan.rows
    names, index = ([], None) if regression else _classes(path, label_column, scan.classes)
    types = {name: scan.columns[name].final_type() for name in features}
    for name in features:
        origins.setdefault(name, reader.origin)
    typed = any(scan.columns[n].missing for n in features) or any(t == "string" for t in types.values())
    info = TableInfo(path, types, origins, {n: scan.columns[n].missing for n in features}, scan.changes, options, typed)

    def batches():
        for columns, labels in reader.read_batches(features, label_column, types, options.na_values, regression):
            y = _targets(labels) if regression else _label_indices(labels, index)
            yield (columns if typed else _float_matrix(columns)), y

    if typed:
        spec = {
            "kind": "table",
            "typed": True,
            "features": features,
            "columns": [{"name": n, "type": types[n]} for n in features],
        }
        task, dtype = "typed_table", "typed"
    else:
        spec = {"kind": "table", "name": "features", "shape": [len(features)], "dtype": "float32", "features": features}
        task, dtype = "table", "float32"
    return Dataset(
        task,
        names,
        spec,
        rows,
        lambda: _examples(batches(), typed),
        source_dtype=dtype,
        problem=problem,
        target=label_column if regression else None,
        batches=batches,
        table=info,
    )


def _features(path, columns, label_column, options):
    if label_column not in columns:
        raise ContractError(
            f"{path}: no label column {label_column!r}; the columns are {columns} "
            "(name the label column with --label-column)"
        )
    unknown = [c for c in options.drop_columns if c not in columns]
    if unknown:
        raise ContractError(f"{path}: --drop-columns names {unknown}, not in the table; its columns are {columns}")
    if label_column in options.drop_columns:
        raise ContractError(f"{path}: --drop-columns names the label column {label_column!r}")
    features = [c for c in columns if c != label_column and c not in options.drop_columns]
    if not features:
        raise ContractError(f"{path}: no feature columns besides the label column {label_column!r}")
    return features


def _forced_types(path, features, options, reader):
    """The types --column-types and the --schema file set: {name: type}, and {name: origin}."""
    forced, origins = {}, {}
    for flag, given in (("--schema column_types", options.schema_types), ("--column-types", options.column_types)):
        unknown = [c for c in given if c not in features]
        if unknown:
            raise ContractError(
                f"{path}: {flag} names {unknown}, not among the feature columns {features}"
                + (" (a dropped column or the label column?)" if set(unknown) - set(reader.columns) == set() else "")
            )
        for name, kind in given.items():
            if name in forced and forced[name] != kind:
                raise ContractError(
                    f"{path}: column {name!r} is {forced[name]} in the --schema file but {kind} in --column-types"
                )
            forced[name], origins[name] = kind, flag
    return forced, origins


def _classes(path, column, raw_values):
    """(sorted class names, {raw label value: class index})."""
    names_of = {raw: class_name(raw) for raw in raw_values}
    classes = set(names_of.values())
    if len(classes) < 2:
        raise ContractError(
            f"{path}: the label column {column!r} has {len(classes)} distinct value(s) "
            f"{sorted(classes)}; classification needs at least 2"
        )
    names = sorted(classes, key=class_order)
    position = {name: i for i, name in enumerate(names)}
    return names, {raw: position[name] for raw, name in names_of.items()}


def _examples(batches, typed):
    """The batches as single examples (x, y): for callers that want them one at a time."""
    for x, y in batches:
        if typed:
            rows = x.to_pylist()
            yield from zip(rows, y.tolist())
        else:
            yield from zip(x, y.tolist())


# ----------------------------------------------------------------------------- values


def class_name(value):
    """A label value as a class name: integers (however written) by their integer, other text as it is;
    None for a number that is not a class (not finite, or not whole: a regression target)."""
    text = value.strip() if isinstance(value, str) else str(value)
    try:
        number = float(text)
    except ValueError:
        return text
    if not math.isfinite(number) or number != int(number):
        return None
    return str(int(number))


NOT_A_CLASS = "not a class (classes are names or whole numbers): for a numeric target use --problem regression"


def class_order(name):
    """Sort key of class names: whole numbers numerically ("2" before "10"), then the rest as text."""
    number = whole_number(name, signed=True)
    return (1, 0, name) if number is None else (0, number, name)


def _label_indices(labels, index):
    """A batch's label column as int64 class indices (dictionary-encoded: one lookup per distinct value)."""
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(labels)
    lookup = np.asarray([index[v] for v in encoded.dictionary.to_pylist()], dtype=np.int64)
    return lookup[encoded.indices.to_numpy(zero_copy_only=False)]


def _targets(labels):
    return _parses(labels, "float").to_numpy(zero_copy_only=False).astype(np.float32)


def _float_matrix(columns):
    """A batch of numeric columns without missing values as float32 [rows, columns]."""
    import pyarrow as pa

    out = np.empty((columns.num_rows, columns.num_columns), dtype=np.float32)
    for j in range(columns.num_columns):
        out[:, j] = columns.column(j).cast(pa.float64()).to_numpy(zero_copy_only=False)
    return out


# ----------------------------------------------------------------------------- the scan

INF_WHY = "not a finite number (a missing value? name it in --na-values)"


class BadCells:
    """Cells that cannot be read as their column's type: per column the count and the first
    BAD_PER_COLUMN (data row, value, why)."""

    def __init__(self):
        self.columns = {}  # name -> [count, [(row, value, why)], what]

    def add(self, column, what, rows, values, why):
        entry = self.columns.setdefault(column, [0, [], what])
        entry[0] += len(rows)
        room = BAD_PER_COLUMN - len(entry[1])
        if room > 0:
            entry[1].extend((int(r), v, why) for r, v in zip(rows[:room], values[:room]))

    def lines(self):
        out = []
        for column, (count, first, what) in self.columns.items():
            where = what.format(name=repr(column))
            for row, value, why in sorted(first, key=lambda cell: cell[0]):
                out.append(f"{where}: data row {row} has {_short(value)}, {why}")
            if count > len(first):
                out.append(f"{where}: {count - len(first)} more such cell(s)")
        return out

    def count(self):
        return sum(entry[0] for entry in self.columns.values())


class ColumnScan:
    """One feature column through the scan: its type so far (None before a present value), its missing
    cells, and, for an inferred column, where its values stopped being numbers or booleans. `fixed`: the
    type --column-types or --schema set, or "string" for a Parquet text column (kept as stored)."""

    WIDER = {
        None: ("integer", "float", "boolean", "string"),
        "integer": ("integer", "float", "string"),
        "float": ("float", "string"),
        "boolean": ("boolean", "string"),
        "string": ("string",),
    }

    def __init__(self, name, forced, scan):
        self.name, self.forced, self.scan = name, forced, scan
        self.fixed, self.type = forced, None
        self.missing = 0
        self.non_finite = BadCells()  # inf in an inferred column: bad only if the column stays numeric

    def final_type(self):
        if self.type is None:
            raise ContractError(
                f"{self.scan.path}: column {self.name!r} has no value in any row (every cell is missing): "
                f"drop it with --drop-columns {self.name}"
            )
        return self.type

    def _what(self):
        return "column {name}" + (f" ({self.forced}, by {self.scan.origins[self.name]})" if self.forced else "")

    def add_text(self, values, first_row):
        """A batch of the column as text (CSV, or a Parquet column read as text)."""
        import pyarrow.compute as pc

        if self.type == "string" and self.fixed is None:
            return  # inferred text: nothing more to learn in the scan (the validation counts its values)
        if self.fixed is None and self.type in (None, "integer", "float") and self._numbers_fast(values, first_row):
            return
        missing = pc.is_in(values, value_set=self.scan.na_set)
        if values.null_count:
            missing = pc.fill_null(missing, True)
        n_missing = pc.sum(missing).as_py() or 0
        self.missing += n_missing
        if n_missing == len(values):
            return
        where = None
        if n_missing:
            keep = pc.invert(missing)
            values = values.filter(keep)
            where = np.flatnonzero(keep.to_numpy(zero_copy_only=False))
        rows = (lambda positions: first_row + positions) if where is None else (lambda p: first_row + where[p])
        if self.fixed == "string":
            self.type = "string"
        elif self.fixed:
            self._check_forced(values, rows)
        else:
            self._infer(values, rows)

    def _numbers_fast(self, values, first_row):
        """The common case without a lookup per cell: every cell of the batch casts to the column's number
        type as it is (an empty cell or NA would not). A float cast's NaN are its missing values ("NaN").
        False: the general path must look (missing spellings, spaces, a wider type)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if values.null_count:
            return False
        kind = self.type or "integer"
        target = pa.int64() if kind == "integer" else pa.float64()
        if not _casts(values, target):
            return False
        try:
            numbers = values.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return False
        if kind == "float":
            nan = pc.is_nan(numbers).to_numpy(zero_copy_only=False)
            self.missing += int(nan.sum())
            ok = _finite(numbers) | nan
            self._bad(values, ok, lambda p: first_row + p, INF_WHY, into=self.non_finite)
            if nan.all():
                return True
        self.type = kind
        return True

    def _bad(self, values, ok, rows, why, into=None):
        """Record the values where `ok` (numpy bool) is False."""
        bad = np.flatnonzero(~ok)
        if len(bad):
            (into or self.scan.bad).add(self.name, self._what(), rows(bad), _take(values, bad), why)

    def _check_forced(self, values, rows):
        import pyarrow.compute as pc

        self.type = self.fixed
        if self.fixed == "boolean":
            ok = pc.is_in(values, value_set=self.scan.booleans(forced=True)).to_numpy(zero_copy_only=False)
            return self._bad(values, ok, rows, f"not a boolean ({'/'.join((*TRUE_WORDS, *FALSE_WORDS))}/1/0)")
        numbers = _parses(values, self.fixed)
        if numbers is None:
            pattern = INTEGER_RE if self.fixed == "integer" else NUMBER_RE
            ok = pc.match_substring_regex(values, pattern).to_numpy(zero_copy_only=False)
            self._bad(values, ok, rows, "not a whole number" if self.fixed == "integer" else "not a number")
            return
        if self.fixed == "float":
            self._bad(values, _finite(numbers), rows, INF_WHY)

    def _infer(self, values, rows):
        import pyarrow.compute as pc

        numbers = None
        for kind in self.WIDER[self.type]:
            if kind == "string":
                break
            if kind == "boolean":
                if pc.all(pc.is_in(values, value_set=self.scan.booleans())).as_py():
                    break
                continue
            numbers = _parses(values, kind)
            if numbers is not None:
                break
        if kind == "string":
            self._record_change(values, rows)
        self.type = kind
        if kind == "string":
            self.non_finite = BadCells()
        elif kind == "float":
            self._bad(values, _finite(numbers), rows, INF_WHY, into=self.non_finite)

    def _record_change(self, values, rows):
        """The column turns to text: where, when numbers (or booleans) came first (the type_change check)."""
        import pyarrow.compute as pc

        if self.type == "boolean":
            ok = pc.is_in(values, value_set=self.scan.booleans())
        else:
            ok = pc.match_substring_regex(values, INTEGER_RE if self.type == "integer" else NUMBER_RE)
        first = int(np.argmin(ok.to_numpy(zero_copy_only=False)))
        if self.type is None and first == 0:
            return  # text from its first value on
        row = int(rows(np.asarray([first]))[0])
        change = {"column": self.name, "from": self.type or "number", "row": row, "value": values[first].as_py()}
        self.scan.changes.append(change)

    def add_arrow(self, values, first_row):
        """A batch of a Parquet column: its stored type, or read as text when that is text or another type
        is forced."""
        import pyarrow as pa
        import pyarrow.compute as pc

        values = _decoded(values)
        kind = stored_type(values.type)
        if kind is None:
            raise ContractError(
                f"{self.scan.path}: column {self.name!r} has Parquet type {values.type}, which a table column cannot "
                f"hold (one of {', '.join(TYPES)}): convert it, or drop it with --drop-columns {self.name}"
            )
        numeric_to_numeric = self.forced in ("float", "integer") and kind != "string"
        if kind == "string" or (self.forced and self.forced != kind and not numeric_to_numeric):
            if self.fixed is None:
                self.fixed = "string"
            return self.add_text(values.cast(pa.string()), first_row)
        if self.forced == "integer" and kind == "float":  # a whole number each, or a bad cell
            numbers = values.cast(pa.float64())
            whole = pc.fill_null(pc.or_kleene(pc.equal(pc.floor(numbers), numbers), pc.is_nan(numbers)), True)
            self._bad(numbers, whole.to_numpy(zero_copy_only=False), lambda p: first_row + p, "not a whole number")
        missing = values.null_count
        if kind == "float":
            numbers = values.cast(pa.float64())
            nan = pc.fill_null(pc.is_nan(numbers), False)
            missing += pc.sum(nan).as_py() or 0
            ok = pc.fill_null(pc.or_kleene(pc.is_finite(numbers), nan), True).to_numpy(zero_copy_only=False)
            self._bad(numbers, ok, lambda p: first_row + p, INF_WHY)
        self.missing += missing
        if len(values) > missing:
            self.type = self.forced or kind


def _finite(numbers):
    import pyarrow as pa

    return np.isfinite(numbers.cast(pa.float64()).to_numpy(zero_copy_only=False))


def stored_type(arrow_type):
    """A Parquet (Arrow) column type as a table column type, or None for one a table cannot hold."""
    import pyarrow as pa

    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if pa.types.is_boolean(arrow_type):
        return "boolean"
    if pa.types.is_integer(arrow_type):
        return "integer"
    if pa.types.is_floating(arrow_type) or pa.types.is_decimal(arrow_type):
        return "float"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "string"
    return None


def _decoded(values):
    import pyarrow as pa

    return values.dictionary_decode() if pa.types.is_dictionary(values.type) else values


def _parses(values, kind):
    """Text `values` cast to `kind` (integer or float), or None when one of them does not read as it.
    pyarrow's cast does not skip spaces (its CSV reader does): a failed cast is retried trimmed."""
    import pyarrow as pa
    import pyarrow.compute as pc

    target = pa.int64() if kind == "integer" else pa.float64()
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        return values.cast(target)
    for candidate in (values, None):
        if candidate is None:
            candidate = pc.utf8_trim_whitespace(values)
        if not _casts(candidate, target):
            continue
        try:
            return candidate.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    return None


def _casts(values, target, sample=PROBE):
    """Whether the first `sample` values cast to `target`: a failing cast of a whole batch costs ~25x a
    successful one (measured: 0.135 s against 0.005 s for 440,000 values), so a column of text is found out
    on a sample first."""
    import pyarrow as pa

    try:
        values.slice(0, sample).cast(target)
        return True
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False


def _take(values, positions):
    import pyarrow as pa

    return values.take(pa.array(np.asarray(positions[:BAD_PER_COLUMN], dtype=np.int64))).to_pylist()


class Scan:
    """Pass 1 over a table: rows, each feature column's type and missing cells, the labels' raw values,
    the bad cells (all of them counted, the first few kept)."""

    def __init__(self, path, features, label_column, forced, origins, na_values, regression):
        import pyarrow as pa

        self.path, self.features, self.label_column, self.regression = path, features, label_column, regression
        self.origins = origins
        self.na_set = pa.array(sorted({*ALWAYS_MISSING, *na_values}), pa.string())
        self.columns = {name: ColumnScan(name, forced.get(name), self) for name in features}
        self.rows, self.classes, self.changes = 0, set(), []
        self.bad = BadCells()

    def booleans(self, forced=False):
        import pyarrow as pa

        return pa.array([*TRUE_WORDS, *FALSE_WORDS, *(("1", "0") if forced else ())], pa.string())

    def add(self, first_row, columns, labels, text):
        """One batch: {name: Arrow array} of the features (all text when `text`: a CSV), the label column."""
        for name, values in columns.items():
            if text:
                self.columns[name].add_text(values, first_row)
            else:
                self.columns[name].add_arrow(values, first_row)
        self._labels(_decoded(labels), first_row)
        self.rows += len(labels)

    def _labels(self, labels, first_row):
        import pyarrow as pa
        import pyarrow.compute as pc

        text = pa.types.is_string(labels.type) or pa.types.is_large_string(labels.type)
        unique = pc.unique(labels)
        if text and not labels.null_count and not pc.any(pc.is_in(unique, value_set=self.na_set)).as_py():
            missing = np.zeros(len(labels), dtype=bool)  # (looked up among the distinct values only)
        elif text:
            missing = pc.fill_null(pc.is_in(labels, value_set=self.na_set), True)
        elif pa.types.is_floating(labels.type):
            missing = pc.fill_null(pc.is_nan(labels), True)
        else:
            missing = pc.is_null(labels)
        missing = missing if isinstance(missing, np.ndarray) else missing.to_numpy(zero_copy_only=False)
        rows = lambda positions: first_row + positions  # noqa: E731
        if missing.any():
            self._bad_labels(labels, ~missing, rows, "a missing value: a row needs its label")
            where = np.flatnonzero(~missing)
            labels = labels.filter(pa.array(~missing))
            rows = lambda positions: first_row + where[positions]  # noqa: E731
            unique = pc.unique(labels)
        if not self.regression:
            for value in set(unique.to_pylist()) - self.classes:
                if class_name(value) is None:  # its first row in the batch: a bad cell
                    first = pc.index(labels, pa.scalar(value, labels.type)).as_py()
                    self.bad.add(
                        self.label_column, "the label column {name}", rows(np.asarray([first])), [value], NOT_A_CLASS
                    )
                else:
                    self.classes.add(value)
            return
        numbers = _parses(labels, "float")
        if numbers is None:
            ok = pc.match_substring_regex(labels, NUMBER_RE).to_numpy(zero_copy_only=False)
            self._bad_labels(labels, ok, rows, "not a number: a regression target must be one")
            where_ok = np.flatnonzero(ok)
            labels = labels.filter(pa.array(ok))
            rows = (lambda r: lambda p: r(where_ok[p]))(rows)
            numbers = _parses(labels, "float")
        self._bad_labels(labels, _finite(numbers), rows, "not a finite number")

    def _bad_labels(self, labels, ok, rows, why):
        bad = np.flatnonzero(~ok)
        if len(bad):
            what = "the target column {name}" if self.regression else "the label column {name}"
            self.bad.add(self.label_column, what, rows(bad), _take(labels, bad), why)

    def finish(self):
        """Refuse an empty table and every bad cell (one line each), or a column with no value."""
        if self.rows == 0:
            raise ContractError(f"{self.path}: the file has a header but no data rows")
        for name, column in self.columns.items():
            if column.type == "float" and column.non_finite.columns:
                self.bad.columns[name] = column.non_finite.columns[name]  # what: "column {name}"
        lines = self.bad.lines()
        if len(lines) == 1:
            raise ContractError(f"{self.path}: {lines[0]}")
        if lines:
            raise ContractError(
                f"{self.path}: {self.bad.count()} cell(s) cannot be read (the first {BAD_PER_COLUMN} of each "
                "column, one a line):\n  " + "\n  ".join(lines)
            )
        for name in self.features:
            self.columns[name].final_type()


# ----------------------------------------------------------------------------- readers


def check_table_extension(path):
    """The table's format (its extension), or one line saying which extensions there are."""
    extension = os.path.splitext(path)[1].lower()
    if extension not in EXTENSIONS:
        raise ContractError(
            f"table:{path}: unknown table format {extension or '(no extension)'!r}; "
            f"the file name must end in one of {', '.join(EXTENSIONS)}"
        )
    return extension


def open_table(path, local=None):
    extension = check_table_extension(path)
    if extension in CSV_DELIMITERS:
        return CsvTable(path, CSV_DELIMITERS[extension], local)
    return ParquetTable(path, local)


def _check_names(path, columns, hint=""):
    for position, name in enumerate(columns, start=1):
        if not name:
            raise ContractError(f"{path}: column {position} has no name in the header{hint}")
    repeated = sorted({c for c in columns if columns.count(c) > 1})
    if repeated:
        raise ContractError(f"{path}: column name(s) {repeated} occur more than once in the header")


def _short(value, limit=40):
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


class ArrowErrors:
    """Around pyarrow reads: its errors become one line naming the file."""

    def __init__(self, prefix):
        self.prefix = prefix

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        import pyarrow as pa

        if exc_type is not None and issubclass(exc_type, (pa.ArrowException, OSError, UnicodeDecodeError)):
            message = " ".join(str(exc).split())
            raise ContractError(f"{self.prefix}: {message[:300]}") from None
        return False


class CsvTable:
    """A CSV or TSV file through pyarrow's streaming reader: the header read with the csv module (names
    stripped, a UTF-8 byte-order mark dropped), the rows by open_csv under those names."""

    origin = "inferred"
    text = True

    def __init__(self, path, delimiter, local=None):
        self.path, self.delimiter, self.local = path, delimiter, local or path
        try:
            with open(self.local, encoding="utf-8-sig", newline="") as fh:
                header = next(csv.reader(fh, delimiter=delimiter), None)
        except (UnicodeDecodeError, csv.Error) as err:
            raise ContractError(f"{path}: not a readable UTF-8 {self._format} file: {err}") from None
        except OSError as err:
            raise ContractError(f"cannot read {path}: {err}") from None
        if not header or not any(c.strip() for c in header):
            raise ContractError(f"{path}: the file is empty; a table needs a header row naming its columns")
        self.columns = [c.strip() for c in header]
        _check_names(path, self.columns, " (a pandas index saved by to_csv? save with index=False)")

    @property
    def _format(self):
        return "TSV" if self.delimiter == "\t" else "CSV"

    def _batches(self, convert):
        import pyarrow.csv as pacsv

        ragged = []

        def on_ragged(row):
            ragged.append(row)
            return "skip"

        read = pacsv.ReadOptions(block_size=BLOCK, column_names=self.columns, skip_rows=1, use_threads=True)
        parse = pacsv.ParseOptions(delimiter=self.delimiter, invalid_row_handler=on_ragged, newlines_in_values=True)
        row = 1
        with ArrowErrors(f"{self.path}: not a readable UTF-8 {self._format} file"):
            reader = pacsv.open_csv(self.local, read_options=read, parse_options=parse, convert_options=convert)
            for batch in reader:
                if ragged:
                    break
                if batch.num_rows:
                    yield row, batch
                    row += batch.num_rows
        if ragged:
            raise ContractError(
                f"{self.path}: a row has {ragged[0].actual_columns} field(s), the header names "
                f"{ragged[0].expected_columns} columns: {_short(ragged[0].text, 60)}"
            )

    def scan_batches(self, features, label_column):
        import pyarrow as pa
        import pyarrow.csv as pacsv

        convert = pacsv.ConvertOptions(
            include_columns=[*features, label_column],
            column_types={c: pa.string() for c in (*features, label_column)},
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        )
        for row, batch in self._batches(convert):
            yield row, {name: batch.column(name) for name in features}, batch.column(label_column)

    def read_batches(self, features, label_column, types, na_values, regression):
        import pyarrow as pa
        import pyarrow.csv as pacsv

        column_types = {name: pa.type_for_alias(ARROW_TYPES[types[name]]) for name in features}
        column_types[label_column] = pa.float64() if regression else pa.string()
        convert = pacsv.ConvertOptions(
            include_columns=[*features, label_column],
            column_types=column_types,
            null_values=sorted({*ALWAYS_MISSING, *na_values}),
            strings_can_be_null=True,
            quoted_strings_can_be_null=True,
            true_values=[*TRUE_WORDS, "1"],
            false_values=[*FALSE_WORDS, "0"],
        )
        schema = pa.schema([(name, column_types[name]) for name in features])
        for _, batch in self._batches(convert):
            columns = pa.RecordBatch.from_arrays([batch.column(n) for n in features], schema=schema)
            yield columns, batch.column(label_column)


class ParquetTable:
    origin = "Parquet"
    text = False

    def __init__(self, path, local=None):
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ContractError("table:PATH of a Parquet file needs pyarrow (pip install pyarrow)") from None
        self.path, self.local, self._pq = path, local or path, pq
        self.columns = list(self._file().schema_arrow.names)
        _check_names(path, self.columns)

    def _file(self):
        import pyarrow as pa

        try:
            return self._pq.ParquetFile(self.local)
        except (pa.ArrowException, OSError) as err:
            raise ContractError(f"{self.path}: not a readable Parquet file: {err}") from None

    def _batches(self, columns):
        row = 1
        with ArrowErrors(f"{self.path}: not a readable Parquet file"):
            for record in self._file().iter_batches(batch_size=PARQUET_BATCH, columns=columns):
                if record.num_rows:
                    yield row, record
                    row += record.num_rows

    def scan_batches(self, features, label_column):
        for row, record in self._batches([*features, label_column]):
            yield row, {name: record.column(name) for name in features}, record.column(label_column)

    def read_batches(self, features, label_column, types, na_values, regression):
        import pyarrow as pa

        na_set = pa.array(sorted({*ALWAYS_MISSING, *na_values}), pa.string())
        schema = pa.schema([(name, pa.type_for_alias(ARROW_TYPES[types[name]])) for name in features])
        for _, record in self._batches([*features, label_column]):
            arrays = [convert(record.column(name), types[name], na_set) for name in features]
            labels = _decoded(record.column(label_column))
            yield pa.RecordBatch.from_arrays(arrays, schema=schema), labels


def convert(values, kind, na_set):
    """A Parquet column's batch as the column type `kind` (float64, int64, bool or string), missing
    values (nulls, NaN, a text column's missing spellings) as nulls. The scan checked that every present
    value converts."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = _decoded(values)
    stored = stored_type(values.type)
    target = pa.type_for_alias(ARROW_TYPES[kind])
    if stored == "float":
        values = values.cast(pa.float64())
        values = pc.if_else(pc.is_nan(values), pa.scalar(None, pa.float64()), values)
    if stored != "string" and (kind == stored or (kind in ("float", "integer") and stored != "string")):
        return values.cast(target)
    text = values.cast(pa.string())
    text = pc.if_else(pc.is_in(text, value_set=na_set), pa.scalar(None, pa.string()), text)
    if kind == "string":
        return text
    if kind == "boolean":
        truth = pc.is_in(text, value_set=pa.array([*TRUE_WORDS, "1"]))
        return pc.if_else(pc.is_null(text), pa.scalar(None, pa.bool_()), truth)
    return pc.utf8_trim_whitespace(text).cast(target)
