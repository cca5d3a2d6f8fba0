"""Requests to a numeric model (tasks table and array: a user's own model, or the built-in MLP):
JSON numbers -> the arrays its inputs take, or a 400 naming the input and what it takes.

The inputs are the model's own (signature.input_tensors: names, dtypes, per-example shapes from its
disttrain.json). A request that does not fit them does not fit the model's signature, which TF
Serving answers with 400 (INVALID_ARGUMENT); so does this server, with one line that names the
instance, the input and the expected datatype and shape. (Text and image instances keep their 422s.)

Row instances (TF Serving's "instances"; after instances.read_predict), per model:
  one input        the value, nested as the input's shape: [f1, f2, ...] for a table's [n_features];
                   {"<input name>": value}; a number for an input of shape [] or [1];
                   a table's features by name, {"age": 52, "bmi": 27.1, ...}: every feature once
  several inputs   {"<input name>": value, ...} with every input once (a number for shape [] or [1])
Values are numbers: JSON true/false, strings and null are refused; NaN and Infinity too (Python's
JSON reader takes them; the model's answer would not be JSON). Integer inputs take integers (2.0
counts as 2; 2.5 is refused, never truncated) within the dtype's range; float32 inputs take any
finite number within float32's range, rounded to float32 as TF Serving does with JSON numbers.
"""

import math

import numpy as np

from disttrain_server.errors import ApiError, json_type

FLOAT_KINDS = "f"


def to_batch(instances, tensors, features=()):
    """Row instances -> the model's batch: one array [n, *shape] for a model with one input, a dict
    {input name: array} for a model with several. `features`: a table's column names (feature-keyed
    instances of a one-input table model)."""
    columns = {tensor.name: [] for tensor in tensors}
    for index, instance in enumerate(instances):
        for name, value in split_instance(index, instance, tensors, features).items():
            columns[name].append(value)
    arrays = {}
    for tensor in tensors:
        where = "" if len(tensors) == 1 else f" of input {tensor.name!r}"
        arrays[tensor.name] = stack(
            [
                convert(f"instance {index}: input {tensor.name!r}", value, tensor)
                for index, value in enumerate(columns[tensor.name])
            ],
            f"instances{where}",
        )
    return arrays[tensors[0].name] if len(tensors) == 1 else arrays


def split_instance(index, instance, tensors, features=()):
    """{input name: value} of one row instance."""
    names = [tensor.name for tensor in tensors]
    if len(tensors) > 1:
        if not isinstance(instance, dict):
            raise ApiError(
                400,
                f"instance {index}: this model has {len(names)} inputs; send an object with each of them, "
                f"{example_object(tensors)}, got {json_type(instance)}",
            )
        check_keys(f"instance {index}", instance, names, "inputs")
        return {name: instance[name] for name in names}
    (tensor,) = tensors
    if isinstance(instance, dict):
        if set(instance) == {tensor.name}:
            return {tensor.name: instance[tensor.name]}
        if features and tensor.example_shape == (len(features),):
            check_keys(f"instance {index}", instance, features, "features")
            return {tensor.name: [instance[feature] for feature in features]}
        raise ApiError(
            400,
            f'instance {index}: an object instance must be {{"{tensor.name}": ...}} (this model\'s one input, '
            f"{tensor.describe()}); got keys {sorted(instance)[:10]}",
        )
    return {tensor.name: instance}


def check_keys(where, given, expected, what, each=""):
    """400 naming the missing and the unknown keys of an instance (or a request's tensors) among `expected`,
    the model's `what` ("inputs", "features", "columns"); `each` names one of them in the message ("column ")."""
    missing = [name for name in expected if name not in given]
    unknown = sorted(set(given) - set(expected))
    if missing or unknown:
        parts = ([f"missing {each}{', '.join(map(repr, missing[:10]))}"] if missing else []) + (
            [f"unknown {each}{', '.join(map(repr, unknown[:10]))}"] if unknown else []
        )
        raise ApiError(
            400,
            f"{where}: {' and '.join(parts)}; this model's {what} are {', '.join(map(repr, expected[:30]))}"
            f"{', ...' if len(expected) > 30 else ''} (see /metadata)",
        )


def example_object(tensors):
    return (
        "{" + ", ".join(f'"{tensor.name}": ...' for tensor in tensors[:5]) + (", ..." if len(tensors) > 5 else "") + "}"
    )


def fits(shape, expected):
    """Whether a per-example shape fits the input's (-1: any size)."""
    return len(shape) == len(expected) and all(e == -1 or e == s for s, e in zip(shape, expected))


def expected_text(tensor):
    shape = [size if size != -1 else "any" for size in tensor.example_shape]
    return f"{tensor.numpy_dtype} of shape {shape}" + (" (or one number)" if tensor.example_shape in ((), (1,)) else "")


def convert(where, value, tensor):
    """One instance's value for `tensor` -> a numpy array of its dtype and per-example shape."""
    try:
        array = np.asarray(value, dtype=object)
    except ValueError:  # nested past numpy's 64 dimensions
        raise ApiError(400, f"{where}: expected {expected_text(tensor)}; it is nested too deeply") from None
    expected = tensor.example_shape
    if expected in ((), (1,)) and array.shape in ((), (1,)):
        array = array.reshape(expected)
    nested = next((element for element in array.flat if isinstance(element, (list, dict))), None)
    if nested is not None or not fits(array.shape, expected):
        detail = (
            f"it is ragged or nested deeper ({json_type(nested)} where a number belongs)"
            if nested is not None
            else f"it has shape {list(array.shape)}"
        )
        raise ApiError(400, f"{where}: expected {expected_text(tensor)}; {detail}")
    return elements(where, array, tensor)


def elements(where, array, tensor, integers_only=False):
    """An object array of JSON values -> an array of the tensor's dtype, refusing what is not a number of it."""
    dtype = np.dtype(tensor.numpy_dtype)
    floating = dtype.kind == FLOAT_KINDS
    for position, element in enumerate(array.flat):
        if type(element) not in (int, float) or (type(element) is float and not math.isfinite(element)):
            shown = repr(element) if type(element) is float else json_type(element)
            raise ApiError(
                400, f"{where}: element {position} is {shown}; expected a finite number ({tensor.numpy_dtype})"
            )
        if type(element) is float and (integers_only or not floating) and not element.is_integer():
            raise ApiError(
                400, f"{where}: element {position} is {element!r}; this input takes integers ({tensor.numpy_dtype})"
            )
    try:
        if floating:
            with np.errstate(over="ignore"):  # (checked on the next line)
                converted = array.astype(np.float64).astype(dtype)
            if not np.isfinite(converted).all():
                raise OverflowError
            return converted
        info = np.iinfo(dtype)
        bad = next((i for i, element in enumerate(array.flat) if not info.min <= element <= info.max), None)
        if bad is not None:
            raise OverflowError
        return array.astype(dtype)
    except OverflowError:
        limits = (
            f"{np.finfo(dtype).max:.3g} in magnitude" if floating else f"{np.iinfo(dtype).min}..{np.iinfo(dtype).max}"
        )
        raise ApiError(400, f"{where}: a value is out of {tensor.numpy_dtype}'s range ({limits})") from None


def stack(arrays, what):
    """The instances' arrays as one batch; a 400 when inputs of a free size disagree between instances."""
    try:
        return np.stack(arrays)
    except ValueError:
        shapes = sorted({tuple(array.shape) for array in arrays})
        raise ApiError(
            400,
            f"{what} have different shapes ({', '.join(str(list(shape)) for shape in shapes[:3])}); "
            "the instances of one request must agree",
        ) from None
