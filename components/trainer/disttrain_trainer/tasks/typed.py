"""A typed table's columns (task typed_table) as a model takes them, one of two ways, decided by the model's inputs:

  raw columns  every input is named after a column of the table ([n, 1] or [n], the column's Column.dtype or one
               it converts to): the model gets the columns as they are, a dict of named batches, and does its own
               lookups and normalisation (build(spec) reads them from spec.table, a typed_table.TableSpec);
  the block    the model has one input, a float vector of typed_table.encoded_width(spec) values: disttrain's
               preprocessing block (preprocessing.py) is put in front of it. The trainer applies the block to its
               shard once (as it tokenizes a text shard once) and trains the model on the vectors; the published
               model is the block and the trained model behind it (preprocessing.with_block), so the exports and
               the server take the raw columns either way.

Why the block runs once and not in every step: it has no weights, so its output for an example never changes,
and the step is then the numeric path's step exactly (the same tensors, the same cost); a parameter-server
worker's examples travel as floats, with no lookup table to place on it.

Dtypes (typed_table's table): a string column goes into a string input only; a float32 column (a float, or a
column with missing values: NaN) into a float input only; an int64 column into an integer or a float input
(cast once, when the data is read).
"""

import sys

import numpy as np

from disttrain_contract.errors import ContractError
from disttrain_contract.typed_table import encoded_width


def kind(dtype):
    """ "string", "float" or "integer" of a Keras dtype name ("float32", "bfloat16", "int64", "uint8", "bool")."""
    dtype = str(dtype)
    if dtype == "string":
        return "string"
    if "float" in dtype:
        return "float"
    return "integer"


def fits(column_dtype, model_dtype):
    """Whether a column of `column_dtype` (typed_table.DTYPES) goes into a model input of `model_dtype`."""
    data, model = kind(column_dtype), kind(model_dtype)
    return data == model or (data == "integer" and model == "float")


def input_name(tensor):
    return tensor.name.split(":")[0]


def check_inputs(model, table):
    """{input name: (dtype, keep_axis)} of a raw-columns model, or None for a one-vector model (the block in
    front); ContractError, one line, for inputs that are neither (naming the column and its dtype, or the
    block's width)."""
    width = encoded_width(table)
    names = [input_name(t) for t in model.inputs]
    columns = set(table.names)
    if all(name in columns for name in names):
        return raw_inputs(model, table)
    listed = ", ".join(table.names[:12]) + (", ..." if len(table.names) > 12 else "")
    if len(model.inputs) > 1:
        strangers = [name for name in names if name not in columns]
        raise ContractError(
            f"the model's input(s) {', '.join(map(repr, strangers))} name no column of the table ({listed}): name "
            f"each input after the column it takes, or give the model one input keras.Input(shape=({width},)) for "
            "disttrain's preprocessing block"
        )
    t = model.inputs[0]
    shape, dtype = tuple(t.shape[1:]), str(t.dtype)
    if shape not in ((width,), (None,)) or kind(dtype) != "float":
        raise ContractError(
            f"the model's input {names[0]!r} has shape {list(shape)} and dtype {dtype}; a model with one input gets "
            f"disttrain's preprocessing block's vector of the table's columns, {width} float32 values: make it "
            f"keras.Input(shape=({width},)) (or name its inputs after the table's columns: {listed})"
        )
    return None


def raw_inputs(model, table):
    """The raw-columns model's inputs checked against their columns: {name: (dtype, keep_axis)}."""
    out = {}
    for t in model.inputs:
        name, shape, dtype = input_name(t), tuple(t.shape[1:]), str(t.dtype)
        column = table.column(name)
        if shape not in ((), (1,), (None,)):
            raise ContractError(
                f"the model's input {name!r} has shape {list(shape)}; an input named after a column takes one "
                "value per example (shape [1] or [])"
            )
        if not fits(column.dtype, dtype):
            why = ", with missing values as NaN" if column.dtype == "float32" and column.type != "float" else ""
            raise ContractError(
                f"the model's input {name!r} takes {dtype}, the table's {column.type} column {name!r} is given as "
                f"{column.dtype}{why}: make it keras.Input(shape=(1,), dtype={column.dtype!r}, name={name!r})"
            )
        out[name] = (dtype, len(t.shape) > 1)
    unused = [n for n in table.names if n not in out]
    if unused:
        print(
            f"note: the model takes {len(out)} of the table's {len(table.names)} columns; it leaves out "
            + ", ".join(unused[:12])
            + (", ..." if len(unused) > 12 else ""),
            file=sys.stderr,
            flush=True,
        )
    return out


def as_dtype(values, dtype):
    """A column's [n, 1] (or [n]) array in an input's dtype (strings stay an object array of str)."""
    if kind(dtype) == "string":
        return values
    try:
        return values.astype(np.dtype(dtype), copy=False)
    except TypeError:  # (a dtype numpy has no name for, bfloat16: the model casts float32 itself)
        return values.astype(np.float32, copy=False)


def columns_for(x, inputs):
    """A split's columns (a dict of [n, 1] arrays) as a raw-columns model takes them: `inputs` check_inputs'."""
    return {
        name: as_dtype(x[name] if keep_axis else x[name][:, 0], dtype) for name, (dtype, keep_axis) in inputs.items()
    }


def all_columns(x, table):
    """A split's columns as the published block model takes them: every column, in the table's order."""
    return {name: x[name] for name in table.names}


def first_rows(x, n):
    """The first n rows of a dict of columns, or of an array."""
    return {name: value[:n] for name, value in x.items()} if isinstance(x, dict) else x[:n]


def training_input(x, table, inputs):
    """A training split's columns as the trained model takes them: a raw-columns model's dict (`inputs`:
    check_inputs'), or the block's float32 vectors [n, encoded_width] for a one-vector model (inputs None)."""
    if inputs is not None:
        return columns_for(x, inputs)
    from disttrain_trainer.preprocessing import encode

    return encode(table, x)


def published_input(x, table, inputs):
    """A split's columns as the published model takes them (the held-out and validation evaluations)."""
    return columns_for(x, inputs) if inputs is not None else all_columns(x, table)


def describe_input(table, inputs):
    """The trained model's input, for messages."""
    if inputs is not None:
        return f"the table's columns {', '.join(list(inputs)[:8])}{', ...' if len(inputs) > 8 else ''}"
    return f"the preprocessing block's vectors, {encoded_width(table)} float32 values"


def preprocessing_meta(table, inputs):
    """disttrain.json's "preprocessing" of a model on a typed table: how its columns reach it."""
    if inputs is not None:
        return {"way": "columns", "columns": list(inputs)}
    return {"way": "block", "width": encoded_width(table), "block": "disttrain_trainer.preprocessing"}


def check_flags(config, raw):
    """What a typed table refuses whichever way the model takes it."""
    from disttrain_trainer import privacy

    if privacy.enabled(config):
        raise ContractError(
            "differential privacy does not cover a typed table's spec: its vocabularies and statistics, which "
            + ("the model's build(spec) reads" if raw else "disttrain's preprocessing block is built from")
            + ", come from the private training split and are not counted in ε; train without --dp-l2-clip, "
            "--dp-noise-multiplier and --dp-delta"
        )
