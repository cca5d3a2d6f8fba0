"""The demo page's generic "try it" form for a numeric model (tasks table and array): one labelled
number field per feature (a table), per element (an array of at most MAX_FIELDS numbers) or a JSON
box (a larger array), prefilled with the training mean of each feature (the model's input statistics),
or, when the operator asks for it (--show-heldout-examples), with held-out rows and their true labels:
rows are people's or things' own records, which a public page should not hand out by default.

The examples come from the served run's data, WORKDIR/data (the copier's manifest.json and its
held-out test split; WORKDIR is the directory of final/, the one the served model was published
in). The model's disttrain.json carries no example, and the aggregator's report has none either;
the server already reads the run's files for the page, so it reads the first MAX_EXAMPLES rows of
test.x.npy memory-mapped (a large split costs no more than those rows), not verified against the
manifest's sha256 (read_split would read and hash the whole split on every page view): these are
examples to try, not evaluation data. When the data is gone, or is not the served model's (other
features or shape: a newer copier run), the fields hold the training mean from the model's input
statistics instead, and the page says so.

A typed table's model gets one field per column (typed_form): a <select> of its vocabulary for a text
column, with an empty choice (a missing value); false/true for a boolean column; a number field for the
others, which may be left empty where the column allows a missing value (dtype float32: sent as null).
A <select> rather than free text with a <datalist>: the model's lookup takes every value outside the
vocabulary as the same out-of-vocabulary value, so the vocabulary and "missing" are every choice the
model tells apart, and a typo cannot pass for one (a text column without a vocabulary gets a text
field). Prefilled with typed.typical_row (no held-out row: its shards are Parquet, which the server
does not read).
"""

import math
import os

import numpy as np

from disttrain_contract import ContractError, Manifest
from disttrain_server import typed

MAX_FIELDS = 16  # an array input with more elements gets one JSON box instead of a field each
MAX_EXAMPLES = 20
MAX_EXAMPLE_NUMBERS = 20_000  # the examples travel in the page: at most this many numbers in all


def form(loaded, show_heldout=False, prefill=True):
    """{"inputs": [{"name", "shape", "fields": [{"id", "label", "index"}] or "box": True}], "examples":
    [{"values": {input name: flat list}, "truth": str}], "source": "held-out" | "mean" | None}.
    Held-out rows only with show_heldout; otherwise (and when the rows are not at hand) the mean;
    nothing with prefill False (the page of a server whose every API call needs the token: the
    statistics are the model's metadata, which the token guards)."""
    if loaded.is_typed:
        return typed_form(loaded.table, prefill)
    inputs = [_input(item, loaded, len(loaded.inputs)) for item in loaded.inputs]
    if not prefill:
        return {"inputs": inputs, "examples": [], "source": None}
    examples = held_out_examples(loaded) if show_heldout else []
    source = "held-out" if examples else None
    if not examples:
        mean = _mean_example(loaded)
        if mean:
            examples, source = [mean], "mean"
    return {"inputs": inputs, "examples": examples, "source": source}


def _size(shape):
    return None if any(size is None for size in shape) else math.prod(shape)


def _input(item, loaded, count):
    name, shape = item["name"], item["shape"]
    features = loaded.features
    if count == 1 and features and shape == [len(features)]:
        labels = features
    elif count > 1 and name in features and shape in ([], [1]):
        labels = [name]
    elif _size(shape) is not None and _size(shape) <= MAX_FIELDS:
        labels = [name + str(list(index)) for index in np.ndindex(*shape)] if shape else [name]
    else:
        return {"name": name, "shape": shape, "box": True, "id": f"input-{name}"}
    fields = [{"id": f"field-{name}-{index}", "label": label, "index": index} for index, label in enumerate(labels)]
    return {"name": name, "shape": shape, "fields": fields}


def _data_dir(loaded):
    return os.path.join(os.path.dirname(os.path.dirname(loaded.path)), "data")


def held_out_examples(loaded):
    """Up to MAX_EXAMPLES rows of the served run's test split, as {input name: flat values}, with the truth."""
    data = _data_dir(loaded)
    try:
        manifest = Manifest.read(data)
        spec = loaded.input_spec
        if (
            manifest.task != loaded.task
            or manifest.input.get("shape") != spec.get("shape")
            or manifest.input.get("features") != spec.get("features")
        ):
            return []
        x = np.load(os.path.join(data, f"{manifest.test.name}.x.npy"), mmap_mode="r", allow_pickle=False)
        y = np.load(os.path.join(data, f"{manifest.test.name}.y.npy"), mmap_mode="r", allow_pickle=False)
        per_row = max(1, int(np.prod(x.shape[1:])))
        count = min(len(x), len(y), MAX_EXAMPLES, max(1, MAX_EXAMPLE_NUMBERS // per_row))
        rows, truths = np.array(x[:count]), np.array(y[:count])
    except (ContractError, OSError, ValueError):
        return []
    examples = []
    for row, truth in zip(rows, truths):
        values = _split_row(row, loaded)
        if values is None:
            return []
        examples.append({"values": values, "truth": _truth(truth, loaded)})
    return examples


def _split_row(row, loaded):
    """One data row as {input name: flat values}: the whole row for one input, a table's columns for
    inputs named after its features; None when the row does not fit the inputs."""
    inputs, features = loaded.inputs, loaded.features
    if len(inputs) == 1:
        size = _size(inputs[0]["shape"])
        if size is not None and size != row.size:
            return None
        return {inputs[0]["name"]: [_number(v) for v in row.ravel()]}
    if not features or any(item["name"] not in features for item in inputs):
        return None
    return {item["name"]: [_number(row[features.index(item["name"])])] for item in inputs}


def _truth(value, loaded):
    if loaded.is_regression:
        return f"{loaded.target or 'value'} {_number(value)}"
    labels = loaded.labels
    index = int(value)
    return f"label {labels[index]}" if 0 <= index < len(labels) else None


def _number(value):
    """A value as the number a field shows: integers as integers, floats to float32's 7 significant digits."""
    value = value.item() if hasattr(value, "item") else value
    if isinstance(value, (int, np.integer)) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e15):
        return int(value)
    return float(f"{value:.7g}")


def _mean_example(loaded):
    """The training mean of each feature (statistics per element of the last axis), when no data is at hand."""
    mean = (loaded.input_spec.get("statistics") or {}).get("mean")
    if not mean:
        return None
    integer = np.dtype(loaded.inputs[0]["dtype"]).kind in "iu" if loaded.inputs else False
    row = np.asarray(mean, dtype=np.float64)
    if len(loaded.inputs) == 1:
        shape = loaded.inputs[0]["shape"]
        if _size(shape) is None or not shape or shape[-1] != len(mean):
            return None
        row = np.broadcast_to(row, shape)
    if integer:
        row = np.rint(row)
    values = _split_row(row, loaded)
    return {"values": values, "truth": None} if values else None


def typed_form(table, prefill=True):
    """form() of a typed table's model: one field per column, {"id", "label", "index": 0, "control":
    "number" (with "integer", "optional"), "text" or "choice" (with "choices" [{"value", "label"}], and
    "boolean" for a boolean column's)};
    the example's values are the fields' texts ("" for missing)."""
    inputs = [
        {"name": column.name, "shape": [1], "fields": [_typed_field(column, position)]}
        for position, column in enumerate(table.columns)
    ]
    if not prefill:
        return {"inputs": inputs, "examples": [], "source": None}
    row = typed.typical_row(table)
    values = {name: [_field_text(value)] for name, value in row.items()}
    return {"inputs": inputs, "examples": [{"values": values, "truth": None}], "source": "typical"}


def _typed_field(column, position):
    field = {"id": f"column-{position}", "label": column.name, "index": 0}
    optional = column.dtype != "int64"
    if column.type == "boolean":
        choices = [{"value": "false", "label": "false"}, {"value": "true", "label": "true"}]
        missing = [{"value": "", "label": "(missing)"}] if optional else []
        return {**field, "control": "choice", "boolean": True, "choices": missing + choices}
    if column.type == "string":
        if not column.vocabulary:
            return {**field, "control": "text"}
        choices = [{"value": "", "label": "(missing)"}] + [{"value": v, "label": v} for v in column.vocabulary]
        return {**field, "control": "choice", "choices": choices}
    return {**field, "control": "number", "integer": column.type == "integer", "optional": optional}


def _field_text(value):
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
