"""Requests to a typed-table model (a table of numbers, integers, booleans and text with missing values:
typed_table.TableSpec): JSON values -> one [n, 1] column per feature, of the column's dtype, or a 400
that names the instance and the column.

The model has one input per column, named as the column, of `Column.dtype` (typed_table's module
docstring): "string" (missing as ""), "float32" (missing as NaN) or "int64" (the column had no missing
value in training: a value is required). Every value goes through typed_table.column_array, the one
conversion of a JSON value to a column's input (the trainer's shards and this server agree on it).

    TF Serving rows      {"instances": [{"<column>": value, ...}, ...]}: every column once per object;
                         a value may also be a one-element list ([value], the input's [1] shape)
    TF Serving columnar  {"inputs": {"<column>": [value, ...], ...}}: one list per column, equal lengths
    :classify            {"examples": [{"<column>": value, ...}]} (with "context" for shared columns)

Values: a string column takes strings (a number is taken as its text: 1 and "1" alike), null or "" for
missing; a number column takes numbers or numeric strings, null (or "") for missing where the column
allows it (dtype float32); a boolean column true, false, 0, 1 (or "true", "false"). A missing column, a
column the model does not have, or a value its column cannot take is a 400, as for the other models of
the user's own inputs (numeric.py): the request does not fit the model's signature. Text values are at
most --max-text-chars characters, as the text models'. A model that answers NaN or infinity for an
instance (one that cannot take a missing value it was given, say) is a 400 naming the instance and its
missing columns, never a 200 with NaN in it (not JSON) nor a 500.
"""

import numpy as np

from disttrain_contract import ContractError
from disttrain_contract.typed_table import TableSpec, column_array
from disttrain_server.errors import ApiError, json_type
from disttrain_server.numeric import check_keys


def spec_of(input_spec):
    """The TableSpec of a model's disttrain.json input (its load checked that it reads)."""
    return TableSpec.from_json(input_spec, "disttrain.json", "input")


def example_object(spec):
    return "{" + ", ".join(f'"{name}": ...' for name in spec.names[:5]) + (", ..." if len(spec.names) > 5 else "") + "}"


def to_batch(instances, spec, max_text_chars):
    """Row instances (objects of the columns) -> {column name: [n, 1] array of its dtype}."""
    names = spec.names
    for index, instance in enumerate(instances):
        if not isinstance(instance, dict):
            raise ApiError(
                400,
                f"instance {index}: this model takes a table row, an object of its columns like "
                f"{example_object(spec)}; got {json_type(instance)}",
            )
        check_keys(f"instance {index}", instance, names, "columns", each="column ")
    return {
        column.name: column_input(
            column, [_unwrapped(instance[column.name]) for instance in instances], max_text_chars, "instance {}"
        )
        for column in spec.columns
    }


def model_batch(batch):
    """A to_batch dict as LoadedModel.predict takes it: the array itself for a model of one column."""
    return batch if len(batch) > 1 else next(iter(batch.values()))


def predict(loaded, batch):
    """The model's answers (float64 [n, width], or [n] for a regression) for a to_batch dict, each finite
    (check_outputs)."""
    return check_outputs(loaded.predict(model_batch(batch)), batch, loaded.table)


def _unwrapped(value):
    """A one-element list is its element (the input's [1] shape, as a client of the SavedModel sends it)."""
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def column_input(column, values, max_text_chars, where):
    """column_array of one column's values, or a 400 naming the first bad value's instance
    (`where`.format(index)) and the column."""
    try:
        array = column_array(column, values)
    except ContractError:
        for index, value in enumerate(values):  # (the error path only: find which instance it was)
            try:
                column_array(column, [value])
            except ContractError as err:
                raise ApiError(400, f"{where.format(index)}: column {err}") from None
        raise  # (column_array refuses a list only for one of its values)
    if column.dtype == "string":
        _check_texts(column, array[:, 0], max_text_chars, where)
    return array


def _check_texts(column, texts, max_chars, where):
    for index, text in enumerate(texts):
        if len(text) > max_chars:
            raise ApiError(
                400,
                f"{where.format(index)}: column {column.name}: the text is {len(text)} characters long, "
                f"the limit is {max_chars} (--max-text-chars)",
            )
        try:
            text.encode("utf-8")  # JSON allows lone surrogates ("\ud800"); TensorFlow strings do not
        except UnicodeEncodeError:
            raise ApiError(
                400, f"{where.format(index)}: column {column.name}: not valid Unicode (lone surrogate escape)"
            ) from None


def check_outputs(rows, batch, spec):
    """`rows` when every instance's answer is finite; else a 400 naming the first instance that is not,
    and the columns it gave no value for (the usual cause: a model that cannot take a missing value)."""
    bad = np.flatnonzero(~np.isfinite(np.asarray(rows, dtype=np.float64).reshape(len(rows), -1)).all(axis=1))
    if not len(bad):
        return rows
    index = int(bad[0])
    missing = [c.name for c in spec.columns if _is_missing(c, batch[c.name][index, 0])]
    cause = (
        f"; it gave no value for {', '.join(missing[:10])}: the model may not handle a missing value there"
        if missing
        else ""
    )
    raise ApiError(400, f"instance {index}: the model answered a non-finite value (NaN or infinity){cause}")


def _is_missing(column, value):
    return value == "" if column.dtype == "string" else column.dtype == "float32" and np.isnan(value)


def typical_row(spec):
    """A row of typical values: each number column's training mean (rounded for integer columns, the
    more frequent value for a boolean), each text column's most frequent value ("" when it has no
    vocabulary: missing). The load's self-test row and the page's prefill; no training record."""
    return {column.name: typical_value(column) for column in spec.columns}


def typical_value(column):
    if column.type == "string":
        return column.vocabulary[0] if column.vocabulary else ""
    mean = column.mean if column.mean is not None else 0.0
    if column.type == "boolean":
        return mean >= 0.5
    if column.type == "integer":
        return int(round(mean))
    return float(f"{mean:.7g}")  # float32's significant digits, as a form field shows it
