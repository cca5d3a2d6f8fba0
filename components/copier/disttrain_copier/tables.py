"""table:PATH: numeric feature columns and one label column, from a CSV, TSV or Parquet file.

The format is chosen by the file's extension: .csv (comma-separated) and .tsv (tab-separated) are read
with the csv module (UTF-8, a header row naming the columns, blank lines ignored); .parquet and .pq with
pyarrow's ParquetFile.iter_batches. Either way the file is streamed in batches of BATCH rows, twice: the
first pass counts the rows (the copier preallocates its shards), checks every value and collects the
class names; the second yields the examples. Memory is one batch, whatever the file's size.
An s3:// table is downloaded once onto the output volume and read there (sources.py says why).

  * the label column (--label-column, default "label"): classification: its distinct values are the
    classes, as strings; a number with an integer value is named by that integer ("1", "1.0" and a
    Parquet 1 are all class "1"), and integer names sort numerically before other names, which sort
    alphabetically; y is the class's index. A non-integer number (3.7) is refused: it is a regression
    target. Regression: every value must be a finite number; y is float32.
  * every other column is a feature, in file order: each value must be a finite number (a Parquet
    boolean counts as 0/1). x is float32 [n, n_features].

Errors name the column and the first bad row. Rows are counted as "data rows" from 1, the header not
counted (the first row under the header is data row 1); for CSV/TSV the file's line number is given
too (it differs when a quoted value spans lines or blank lines are skipped).
"""

import csv
import math
import os

import numpy as np

from disttrain_contract import ContractError
from disttrain_contract.layout import whole_number
from disttrain_copier.dataset import Dataset

CSV_DELIMITERS = {".csv": ",", ".tsv": "\t"}
PARQUET_EXTENSIONS = (".parquet", ".pq")
EXTENSIONS = (*CSV_DELIMITERS, *PARQUET_EXTENSIONS)
BATCH = 4096


def table(path, label_column="label", problem="classification", local=None):
    """The Dataset of a table file (see the module docstring). local: where the file is read (a
    downloaded copy of an s3:// `path`); every message names `path`."""
    reader = open_table(path, local)
    columns = reader.columns
    if label_column not in columns:
        raise ContractError(
            f"{path}: no label column {label_column!r}; the columns are {columns} "
            "(name the label column with --label-column)"
        )
    features = [c for c in columns if c != label_column]
    if not features:
        raise ContractError(f"{path}: no feature columns besides the label column {label_column!r}")
    regression = problem == "regression"

    # pass 1: count, check every value, find the classes
    rows, classes = 0, set()
    for batch in reader.batches(features, label_column):
        rows += len(batch.x)
        if not regression:
            classes.update(class_name(v, batch, i, label_column) for i, v in enumerate(batch.labels))
        else:
            targets(batch, label_column)
    if rows == 0:
        raise ContractError(f"{path}: the file has a header but no data rows")
    if regression:
        names, index = [], None
    else:
        if len(classes) < 2:
            raise ContractError(
                f"{path}: the label column {label_column!r} has {len(classes)} distinct value(s) "
                f"{sorted(classes)}; classification needs at least 2"
            )
        names = sorted(classes, key=class_order)
        index = {name: i for i, name in enumerate(names)}

    def stream():
        for batch in reader.batches(features, label_column):
            x = batch.x.astype(np.float32)
            if regression:
                y = targets(batch, label_column).astype(np.float32)
            else:
                y = [index[class_name(v, batch, i, label_column)] for i, v in enumerate(batch.labels)]
            yield from zip(x, y)

    spec = {"kind": "table", "name": "features", "shape": [len(features)], "dtype": "float32", "features": features}
    return Dataset(
        "table",
        names,
        spec,
        rows,
        stream,
        source_dtype="float32",
        problem=problem,
        target=label_column if regression else None,
    )


# ----------------------------------------------------------------------------- values


def class_name(value, batch, i, column):
    """A label value as a class name: integers (however written) by their integer, other text as it is."""
    text = value.strip() if isinstance(value, str) else ("" if value is None else str(value))
    if not text:
        raise ContractError(f"{batch.path}: the label column {column!r} is empty in {batch.where(i)}")
    try:
        number = float(text)
    except ValueError:
        return text
    if not math.isfinite(number):
        raise ContractError(
            f"{batch.path}: the label column {column!r} has {text!r} in {batch.where(i)}; "
            "a label must be a class name or a whole number"
        )
    if number != int(number):
        raise ContractError(
            f"{batch.path}: the label column {column!r} has {text!r} in {batch.where(i)}, not a class "
            "(classes are names or whole numbers): for a numeric target use --problem regression"
        )
    return str(int(number))


def class_order(name):
    """Sort key of class names: whole numbers numerically ("2" before "10"), then the rest as text."""
    number = whole_number(name, signed=True)
    return (1, 0, name) if number is None else (0, number, name)


def targets(batch, column):
    """The label column of a batch as float64 regression targets; every value a finite number."""
    out = np.empty(len(batch.labels), dtype=np.float64)
    for i, value in enumerate(batch.labels):
        text = value.strip() if isinstance(value, str) else value
        if text is None or text == "":
            raise ContractError(f"{batch.path}: the target column {column!r} is empty in {batch.where(i)}")
        try:
            out[i] = float(text)
        except (TypeError, ValueError):
            raise ContractError(
                f"{batch.path}: the target column {column!r} has a non-numeric value {text!r} in "
                f"{batch.where(i)}; a regression target must be a number"
            ) from None
        if not math.isfinite(out[i]):
            raise ContractError(
                f"{batch.path}: the target column {column!r} has {text!r} in {batch.where(i)}; "
                "a regression target must be a finite number"
            )
    return out


def parse_cells(cells, names, batch):
    """[rows][columns] of strings (or numbers) -> float64 [rows, columns], or a ContractError naming the
    first bad cell in reading order (row by row, then column by column)."""
    try:
        values = np.asarray(cells, dtype=np.float64)
        if not cells:
            return values.reshape(0, len(names))
    except (TypeError, ValueError):
        values = None
    if values is None:
        for i, row in enumerate(cells):
            for j, cell in enumerate(row):
                text = cell.strip() if isinstance(cell, str) else cell
                if text is None or text == "":
                    raise ContractError(
                        f"{batch.path}: column {names[j]!r} is empty in {batch.where(i)}; "
                        "every feature value must be a number"
                    )
                try:
                    float(text)
                except (TypeError, ValueError):
                    raise ContractError(
                        f"{batch.path}: column {names[j]!r} has a non-numeric value {_short(text)} in "
                        f"{batch.where(i)}; feature columns must be numbers (a text column must be "
                        "encoded as numbers, dropped, or be the --label-column)"
                    ) from None
        raise ContractError(f"{batch.path}: could not read the feature values as numbers")  # not reached
    check_finite(values, names, batch)
    return values


def check_finite(values, names, batch):
    bad = np.argwhere(~np.isfinite(values))
    if len(bad):
        i, j = (int(v) for v in bad[0])
        raise ContractError(
            f"{batch.path}: column {names[j]!r} has {float(values[i, j])!r} in {batch.where(i)}; "
            "feature values must be finite numbers"
        )


def _short(value, limit=40):
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


# ----------------------------------------------------------------------------- readers


class Batch:
    """BATCH rows of a table: features float64 [m, d] (checked), the label column's raw values, and
    where each row is in the file."""

    def __init__(self, path, first_row, lines=None):
        self.path, self.first_row, self.lines = path, first_row, lines
        self.x, self.labels = None, None

    def where(self, i):
        row = f"data row {self.first_row + i}"
        return f"{row} (line {self.lines[i]})" if self.lines is not None else row


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


class CsvTable:
    def __init__(self, path, delimiter, local=None):
        self.path, self.delimiter, self.local = path, delimiter, local or path
        with self._open() as fh:
            try:
                header = next(csv.reader(fh, delimiter=delimiter), None)
            except (UnicodeDecodeError, csv.Error) as err:
                raise ContractError(f"{path}: not a readable UTF-8 {self._format} file: {err}") from None
        if not header or not any(c.strip() for c in header):
            raise ContractError(f"{path}: the file is empty; a table needs a header row naming its columns")
        self.columns = [c.strip() for c in header]
        _check_names(path, self.columns, " (a pandas index saved by to_csv? save with index=False)")

    @property
    def _format(self):
        return "TSV" if self.delimiter == "\t" else "CSV"

    def _open(self):
        try:
            return open(self.local, encoding="utf-8-sig", newline="")  # -sig: a BOM is not part of the first name
        except OSError as err:
            raise ContractError(f"cannot read {self.path}: {err}") from None

    def batches(self, features, label_column):
        feature_index = [self.columns.index(c) for c in features]
        label_index = self.columns.index(label_column)
        width = len(self.columns)
        row, rows, lines = 0, [], []
        with self._open() as fh:
            reader = csv.reader(fh, delimiter=self.delimiter)
            try:
                next(reader)  # the header
                for fields in reader:
                    if not fields or (len(fields) == 1 and not fields[0].strip() and width > 1):
                        continue  # a blank line
                    row += 1
                    if len(fields) != width:
                        raise ContractError(
                            f"{self.path}: data row {row} (line {reader.line_num}) has {len(fields)} "
                            f"field(s), the header names {width} columns"
                        )
                    rows.append(fields)
                    lines.append(reader.line_num)
                    if len(rows) == BATCH:
                        yield self._batch(rows, lines, row - len(rows) + 1, feature_index, label_index, features)
                        rows, lines = [], []
            except (UnicodeDecodeError, csv.Error) as err:
                raise ContractError(
                    f"{self.path}: not a readable UTF-8 {self._format} file (near line {reader.line_num + 1}): {err}"
                ) from None
        if rows:
            yield self._batch(rows, lines, row - len(rows) + 1, feature_index, label_index, features)

    def _batch(self, rows, lines, first_row, feature_index, label_index, features):
        batch = Batch(self.path, first_row, lines)
        batch.x = parse_cells([[fields[j] for j in feature_index] for fields in rows], features, batch)
        batch.labels = [fields[label_index] for fields in rows]
        return batch


class ParquetTable:
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

    def batches(self, features, label_column):
        import pyarrow as pa

        row = 0
        try:
            for record in self._file().iter_batches(batch_size=BATCH, columns=[*features, label_column]):
                batch = Batch(self.path, row + 1)
                row += record.num_rows
                if not record.num_rows:
                    continue
                x = np.empty((record.num_rows, len(features)), dtype=np.float64)
                for j, name in enumerate(features):
                    x[:, j] = self._column(record.column(j), name, batch)
                check_finite(x, features, batch)
                batch.x = x
                batch.labels = record.column(len(features)).to_pylist()
                yield batch
        except (pa.ArrowException, OSError) as err:
            raise ContractError(f"{self.path}: not a readable Parquet file: {err}") from None

    def _column(self, array, name, batch):
        """One feature column of a record batch as float64 values."""
        import pyarrow as pa

        kind = array.type
        if pa.types.is_dictionary(kind):
            array, kind = array.dictionary_decode(), kind.value_type
        if array.null_count:
            first = int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])
            raise ContractError(
                f"{self.path}: column {name!r} is empty (null) in {batch.where(first)}; "
                "every feature value must be a number"
            )
        if (
            pa.types.is_integer(kind)
            or pa.types.is_floating(kind)
            or pa.types.is_boolean(kind)
            or pa.types.is_decimal(kind)
        ):
            return array.cast(pa.float64()).to_numpy(zero_copy_only=False)
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            return parse_cells([[v] for v in array.to_pylist()], [name], batch)[:, 0]
        raise ContractError(
            f"{self.path}: column {name!r} has Parquet type {kind}, not numeric (from {batch.where(0)}); "
            "feature columns must be numbers"
        )
