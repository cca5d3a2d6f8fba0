"""The held-out inputs as a model takes them.

Most models take the dataset's x as it is (evaluation.as_model_input: a text model a [n, 1] column
of strings). A model with several named inputs (its disttrain.json's `inputs` has more than one
entry: a Keras dict of named inputs) takes a dict: for a table, each input is named after a feature
column (manifest input "features") and takes that column, shaped [n, 1] or [n] as the input's
recorded shape says ([1] or []), in the input's dtype. Any other multi-input model has no rule for
splitting the dataset's x, and is refused in one line.
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


def rows(x, start, stop=None):
    """Instances start..stop of x (an array, or a dict of arrays taken together)."""
    if isinstance(x, dict):
        return {name: value[start:stop] for name, value in x.items()}
    return x[start:stop]
