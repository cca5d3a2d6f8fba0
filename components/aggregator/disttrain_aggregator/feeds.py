"""The held-out inputs as a model takes them.

Most models take the dataset's x as it is (evaluation.as_model_input: a text model a [n, 1] column
of strings). A model with several named inputs (its disttrain.json's `inputs` has more than one
entry: a Keras dict of named inputs) takes a dict: for a table, each input is named after a feature
column (manifest input "features") and takes that column, shaped [n, 1] or [n] as the input's
recorded shape says ([1] or []), in the input's dtype. Any other multi-input model has no rule for
splitting the dataset's x, and is refused in one line. A typed table's split is already a dict of its columns
(typed_table.read_columns): each input takes the column of its name.
"""

import numpy as np

from disttrain_contract import ContractError
from disttrain_contract.tasks import TASKS


def input_specs(meta):
    """The model's own inputs from its disttrain.json: [{"name", "shape", "dtype"}] (empty: not recorded)."""
    specs = (meta or {}).get("inputs")
    return list(specs) if isinstance(specs, list) else []


def feed(task, manifest_input, meta, x):
    """x (the held-out split, after evaluation.as_model_input) as the model of `meta` takes it."""
    specs = input_specs(meta)
    if isinstance(x, dict):  # a typed table's columns: each input takes its own, by name
        return typed_columns(specs, x)
    if len(specs) <= 1:
        return x
    names = [spec.get("name") for spec in specs]
    if not TASKS[task].feature_inputs:
        raise ContractError(
            f"the model takes {len(specs)} named inputs ({', '.join(map(str, names))}); only a table "
            "model's inputs can be fed from the dataset (one per feature column), this is a "
            f"{task!r} dataset"
        )
    features = list((manifest_input or {}).get("features") or [])
    missing = [name for name in names if name not in features]
    if missing:
        raise ContractError(
            f"the model's input(s) {', '.join(map(str, missing))} name no feature column of the dataset "
            f"({', '.join(features)}): a table model's named inputs are its feature columns"
        )
    out = {}
    for spec in specs:
        column = np.asarray(x)[:, features.index(spec["name"])]
        shape = [d for d in (spec.get("shape") or [])]
        if shape not in ([], [1], [None]):
            raise ContractError(
                f"the model's input {spec['name']!r} has shape {shape}; a feature column's input takes "
                "one value per example (shape [1] or [])"
            )
        dtype = spec.get("dtype") or "float32"
        out[spec["name"]] = column.reshape(-1, 1).astype(dtype) if shape else column.astype(dtype)
    return out


def typed_columns(specs, x):
    """A typed table's held-out columns ({name: [n, 1] array}, typed_table.read_columns) as a model with these
    recorded inputs takes them: each its column, [n, 1] or [n] as its shape says, in its dtype (text stays an
    array of str)."""
    if not specs:
        return x
    out = {}
    for spec in specs:
        name = spec.get("name")
        if name not in x:
            raise ContractError(
                f"the model's input {name!r} names no column of the dataset ({', '.join(x)}): a typed table "
                "model's named inputs are its columns"
            )
        shape, dtype = list(spec.get("shape") or []), spec.get("dtype") or "float32"
        column = x[name] if shape else x[name][:, 0]
        try:
            out[name] = column if dtype == "string" else column.astype(dtype)
        except TypeError:  # a dtype numpy has no name for (bfloat16): the model casts float32 itself
            out[name] = column.astype("float32")
    return out


def rows(x, start, stop=None):
    """Instances start..stop of x (an array, or a dict of arrays taken together)."""
    if isinstance(x, dict):
        return {name: value[start:stop] for name, value in x.items()}
    return x[start:stop]
