"""A typed table: columns of numbers, integers, booleans and text, with missing values, as the copier
stores it and as every later stage reads it (the task "typed_table"; tasks.py).

The copier makes a `table:PATH` source a typed table when a feature column is not all finite numbers
(text, a boolean with holes, a missing value) or `--column-types` says so; a table of finite numbers
only stays the task "table" (float32 x in .npy). A typed table's shards keep the raw values:

    NAME.parquet   one column per feature, in the table's order, with its Arrow type (float64, int64,
                   bool, string) and nulls where a value is missing
    NAME.y.npy     the labels, as for every npy task: int64 class indices, or float32 targets

and the manifest's input is the TableSpec below (`kind` "table", `columns` in file order), computed by
the copier from the training shards only.

What a model is given (`Column.dtype`, the same in training, in the exports and in serving): a column of
shape [n, 1] per feature, named as the column.

    column type  no missing value in training    a missing value in training
    float        float32                         float32, missing as NaN
    integer      int64                           float32, missing as NaN
    boolean      int64 (0, 1)                    float32 (0., 1.), missing as NaN
    string       string, missing as ""           string, missing as ""

("In training": the copier asks about every split, the held-out one too, so that a column whose only
missing values are held out still takes them; its statistics are the training shards' only.)

A string column's vocabulary never holds "": an empty cell is a missing value (the copier's
`--na-values` spellings too), so "" always means "missing" to a lookup. A value the spec's dtype cannot
hold (text in a number column, a null in an int64 column, a number beyond int64's or float32's range) is
refused by `column_array`, naming the column: the server's 4xx for a bad instance.

Importing this module imports neither TensorFlow nor pyarrow (the server reads the spec without them);
`read_columns` imports pyarrow.
"""

import dataclasses
import math

import numpy as np

from disttrain_contract.errors import ContractError
from disttrain_contract.records import Fields, RecordError

TYPES = ("float", "integer", "boolean", "string")
DTYPES = ("float32", "int64", "string")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
FLOAT32_MAX = float(np.finfo(np.float32).max)  # a larger number would be infinity as float32


def model_dtype(column_type, has_missing):
    """The dtype a model's input for a column of this type takes (the table in the module docstring)."""
    if column_type not in TYPES:
        raise ValueError(f"unknown column type {column_type!r}; one of {', '.join(TYPES)}")
    if column_type == "string":
        return "string"
    if column_type == "float" or has_missing:
        return "float32"
    return "int64"


@dataclasses.dataclass(frozen=True)
class Column:
    """One feature column's type and its statistics over the training shards.

    Numeric columns (float, integer, boolean): mean, variance, min, max over the present values (None
    when no value is present). String columns: `vocabulary`, the values seen in training at least the
    copier's minimum count, most frequent first (ties alphabetically), at most its cap, with their
    `counts`; values outside it (rarer, or only in the held-out split) are out of vocabulary.
    """

    name: str
    type: str
    dtype: str
    missing: int = 0  # training examples with no value
    mean: float = None
    variance: float = None
    min: float = None
    max: float = None
    vocabulary: tuple = ()
    counts: tuple = ()

    @property
    def numeric(self):
        return self.type != "string"

    def to_json(self):
        out = {"name": self.name, "type": self.type, "dtype": self.dtype, "missing": self.missing}
        if self.numeric:
            out.update(mean=self.mean, variance=self.variance, min=self.min, max=self.max)
        else:
            out.update(vocabulary=list(self.vocabulary), counts=list(self.counts))
        return out

    @classmethod
    def from_json(cls, obj, what, path):
        f = Fields(obj, what, path)
        name = f.string("name", required=True)
        column_type = f.string("type", required=True)
        if column_type not in TYPES:
            raise f.error("type", f"one of {', '.join(TYPES)}")
        dtype = f.string("dtype", required=True)
        if dtype not in DTYPES:
            raise f.error("dtype", f"one of {', '.join(DTYPES)}")
        kwargs = {"missing": f.integer("missing", default=0)}
        if column_type == "string":
            vocabulary = f.array("vocabulary", default=[])
            counts = f.array("counts", default=[])
            if not all(isinstance(v, str) and v for v in vocabulary):
                raise f.error("vocabulary", "a list of non-empty strings")
            if len(counts) != len(vocabulary) or not all(isinstance(c, int) for c in counts):
                raise f.error("counts", "one integer per vocabulary entry")
            kwargs.update(vocabulary=tuple(vocabulary), counts=tuple(counts))
        else:
            for key in ("mean", "variance", "min", "max"):
                kwargs[key] = f.number(key, default=None)
        return cls(name=name, type=column_type, dtype=dtype, **kwargs)


@dataclasses.dataclass(frozen=True)
class TableSpec:
    """A typed table's columns (the manifest's input, and disttrain.json's for a model trained on one)."""

    columns: tuple

    @property
    def names(self):
        return [c.name for c in self.columns]

    def column(self, name):
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_json(self):
        return {"kind": "table", "typed": True, "features": self.names, "columns": [c.to_json() for c in self.columns]}

    @classmethod
    def from_json(cls, obj, what="manifest.json", path="input"):
        f = Fields(obj, what, path)
        raw = f.array("columns", required=True)
        if not raw:
            raise RecordError(f"{what}: {path}.columns must be a non-empty list")
        columns = tuple(Column.from_json(c, what, f"{path}.columns[{i}]") for i, c in enumerate(raw))
        names = [c.name for c in columns]
        if len(set(names)) != len(names):
            raise RecordError(f"{what}: {path}.columns name a column twice")
        return cls(columns=columns)


def encoded_width(spec):
    """The width of the one numeric vector disttrain's preprocessing block makes of a row of `spec`
    (the trainer's disttrain_trainer/preprocessing.py builds it, in this layout):

        every numeric column   1, its value imputed (the training mean) and standardised
        a numeric column with missing values in training    + 1, its missing indicator (1. missing, 0. not)
        every string column    1 + len(vocabulary): a one-hot of the out-of-vocabulary slot, then the vocabulary
        a string column with missing values in training     + 1, the missing value's own slot

    The build(spec) of a --model-module is told it as spec.input.shape."""
    width = 0
    for column in spec.columns:
        width += (1 if column.numeric else 1 + len(column.vocabulary)) + (1 if column.missing else 0)
    return width


def is_typed(input_spec):
    """Whether a manifest's (or disttrain.json's) input describes a typed table."""
    return isinstance(input_spec, dict) and input_spec.get("kind") == "table" and bool(input_spec.get("typed"))


def column_array(column, values):
    """A list of JSON values (None for missing) as the model's input for `column`: an [n, 1] numpy array
    of its dtype (strings as an object array of str). ContractError naming the column for a value the
    dtype cannot hold."""
    n = len(values)
    if column.dtype == "string":
        out = np.empty((n, 1), dtype=object)
        for i, v in enumerate(values):
            if v is None:
                out[i, 0] = ""
            elif isinstance(v, str):
                out[i, 0] = v
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                out[i, 0] = _number_text(v)  # a category spelled as a number in JSON ("1" and 1 alike)
            else:
                raise ContractError(f"{column.name}: expected a string or null, got {_short(v)}")
        return out
    out = np.empty((n, 1), dtype=np.float32 if column.dtype == "float32" else np.int64)
    for i, v in enumerate(values):
        out[i, 0] = _number(column, v)
    return out


def _number(column, v):
    if v is None or (isinstance(v, str) and v == ""):
        if column.dtype == "float32":
            return math.nan
        raise ContractError(f"{column.name}: a value is required (the column had no missing value in training)")
    if isinstance(v, bool):
        if column.type != "boolean":
            raise ContractError(f"{column.name}: expected a number, got {_short(v)}")
        return int(v)
    if isinstance(v, str):
        text = v.strip().lower()
        if column.type == "boolean" and text in ("true", "false"):
            return int(text == "true")
        try:
            v = float(text)
        except ValueError:
            raise ContractError(f"{column.name}: expected a number, got {_short(v)}") from None
    if not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
        raise ContractError(f"{column.name}: expected a finite number, got {_short(v)}")
    if column.type == "boolean" and v not in (0, 1):
        raise ContractError(f"{column.name}: expected true, false, 0 or 1, got {_short(v)}")
    if column.dtype == "int64":
        if isinstance(v, float) and not v.is_integer():
            raise ContractError(f"{column.name}: expected a whole number, got {_short(v)}")
        if not INT64_MIN <= int(v) <= INT64_MAX:
            raise ContractError(f"{column.name}: {_short(v)} is out of int64's range")
        return int(v)
    if abs(v) > FLOAT32_MAX:  # (an int of any size compares exactly; float() of a huge one would raise)
        raise ContractError(f"{column.name}: {_short(v)} is out of float32's range")
    return float(v)


def _number_text(v):
    if isinstance(v, int):
        return str(v)  # (exact at any size; float() of a huge int would raise)
    return str(int(v)) if v.is_integer() else repr(v)


def _short(v, limit=40):
    text = repr(v)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_columns(path, spec):
    """A typed shard's NAME.parquet as {column name: [n, 1] array of the column's model dtype}, missing
    values as the module docstring's table says. Reads the columns whole (a shard fits in memory, as an
    .npy shard does); no per-example Python loop but for string columns' None -> ""."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=spec.names)
    out = {}
    for column in spec.columns:
        values = table.column(column.name)
        if column.dtype == "string":
            values = pc.fill_null(values.cast("string"), "")
            array = np.asarray(values.to_numpy(zero_copy_only=False), dtype=object)
        elif column.dtype == "float32":
            array = values.cast("float64").to_numpy(zero_copy_only=False).astype(np.float32)
        else:
            if values.null_count:
                raise ContractError(f"{path}: column {column.name!r} has a missing value; its spec says none")
            array = values.cast("int64").to_numpy(zero_copy_only=False)
        out[column.name] = array.reshape(-1, 1)
    return out
