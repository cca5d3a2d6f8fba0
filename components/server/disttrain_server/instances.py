"""Turn a :predict or :classify request body into a model batch, or say exactly what is wrong with it.

Status codes: 400 for a body that is not a predict request at all (not JSON,
not an object, no instance list), 413 for too many instances, 422 for a
well-formed request whose instances this model cannot take. Instance errors
name the instance index so a client can find the culprit in a batch.
"""

import base64
import binascii
import json
import re

import numpy as np

from disttrain_contract import ContractError
from disttrain_contract.artifact import decode_image
from disttrain_contract.evaluation import as_model_input
from disttrain_server.errors import ApiError, json_type
from disttrain_server.signature import SIGNATURE_NAME

# TF Serving's row form is {"instances": [...]} and answers {"predictions": [...]}; its columnar
# form {"inputs": [...]} (or {"inputs": {"<input name>": [...]}}) answers {"outputs": [...]}.
# The built-in models have a single input and a single output, so both are one list of instances;
# a numeric model with several named inputs takes row objects keyed by input name, or one column per
# input (turned into such rows here), and numeric.to_batch checks them.
INSTANCE_KEYS = ("instances", "inputs")
_WHITESPACE = re.compile(rb"\s+")


def read_json_object(body, example):
    """The JSON object in a raw request body (bytes); 400 naming `example` (the expected shape) if it is not one."""
    if not body.strip():
        raise ApiError(400, f"request body is empty; send JSON like {example}")
    try:
        payload = json.loads(body)
    except ValueError as err:  # includes UnicodeDecodeError for non-UTF bodies
        raise ApiError(400, f"request body is not valid JSON: {err}") from None
    except RecursionError:
        raise ApiError(400, "request body is not usable JSON: nested too deeply") from None
    if not isinstance(payload, dict):
        raise ApiError(400, f"request body must be a JSON object like {example}, got {json_type(payload)}")
    return payload


def check_signature(payload):
    """TF Serving's optional "signature_name": ours is serving_default (empty means the default too); others are a 400."""
    name = payload.get("signature_name", "")
    if not isinstance(name, str):
        raise ApiError(400, f'"signature_name" must be a string, got {json_type(name)}')
    if name not in ("", SIGNATURE_NAME):
        raise ApiError(400, f"unknown signature_name {name!r}: this model has one signature, {SIGNATURE_NAME!r}")


def check_count(count, max_instances):
    if count > max_instances:
        raise ApiError(413, f"too many instances: {count}, at most {max_instances} per request (--max-instances)")


def read_predict(body, input_name, max_instances, objects=False):
    """(instances, columnar) from a raw :predict body (bytes): the instance list, and whether the
    request used the columnar "inputs" form (whose answer is {"outputs": ...}). `input_name`: the
    model's input, or a list of its several inputs' names. `objects`: rows are objects of the named
    inputs even for a model of one (a typed table's columns, typed.to_batch checks them)."""
    if not isinstance(input_name, str):
        if len(input_name) > 1 or objects:
            return _read_predict_inputs(body, list(input_name), max_instances)
        (input_name,) = input_name
    payload = read_json_object(body, '{"instances": [...]}')
    check_signature(payload)
    keys = [key for key in INSTANCE_KEYS if key in payload]
    if not keys:
        raise ApiError(400, 'missing "instances": send {"instances": [...]} (or TF Serving\'s {"inputs": [...]})')
    if len(keys) > 1:
        raise ApiError(400, 'send either "instances" or "inputs", not both')
    columnar = keys[0] == "inputs"
    instances, field = payload[keys[0]], f'"{keys[0]}"'
    if columnar and isinstance(instances, dict):
        instances, field = _named_column(instances, input_name), f'"inputs"."{input_name}"'
    if not isinstance(instances, list):
        raise ApiError(400, f"{field} must be a list of instances, got {json_type(instances)}")
    if not instances:
        raise ApiError(400, f"{field} is empty; send at least one instance")
    check_count(len(instances), max_instances)
    if not columnar:
        instances = [_named_row(i, instance, input_name) for i, instance in enumerate(instances)]
    return instances, columnar


def _read_predict_inputs(body, names, max_instances):
    """read_predict for a model with several named inputs: rows are objects keyed by them (checked by
    numeric.to_batch); the columnar form is an object of one list per input, turned into such rows."""
    payload = read_json_object(body, '{"instances": [{' + ", ".join(f'"{name}": ...' for name in names[:3]) + '}]}')
    check_signature(payload)
    keys = [key for key in INSTANCE_KEYS if key in payload]
    if not keys:
        raise ApiError(400, 'missing "instances": send {"instances": [...]} (or TF Serving\'s {"inputs": {...}})')
    if len(keys) > 1:
        raise ApiError(400, 'send either "instances" or "inputs", not both')
    columnar, instances = keys[0] == "inputs", payload[keys[0]]
    if columnar:
        if not isinstance(instances, dict):
            raise ApiError(
                400,
                f'"inputs" must be an object with one list per input of this model ({", ".join(names)}), got {json_type(instances)}',
            )
        missing, unknown = [n for n in names if n not in instances], sorted(set(instances) - set(names))
        if missing or unknown:
            raise ApiError(
                400,
                f'"inputs" must have exactly this model\'s inputs as keys ({", ".join(names)}); '
                + "; ".join(([f"missing {missing}"] if missing else []) + ([f"unknown {unknown}"] if unknown else [])),
            )
        bad = next((n for n in names if not isinstance(instances[n], list)), None)
        if bad is not None:
            raise ApiError(400, f'"inputs"."{bad}" must be a list of instances, got {json_type(instances[bad])}')
        counts = {n: len(instances[n]) for n in names}
        if len(set(counts.values())) > 1:
            raise ApiError(400, f'the inputs\' lists must have one entry per instance each; got {counts}')
        count = counts[names[0]]
        if not count:
            raise ApiError(400, '"inputs" are empty; send at least one instance')
        check_count(count, max_instances)
        return [{n: instances[n][i] for n in names} for i in range(count)], True
    if not isinstance(instances, list):
        raise ApiError(400, f'"instances" must be a list of instances, got {json_type(instances)}')
    if not instances:
        raise ApiError(400, '"instances" is empty; send at least one instance')
    check_count(len(instances), max_instances)
    return instances, False


def read_classify(body, input_name, max_instances, objects=False, whole=False):
    """The instances of a raw :classify body (bytes): TF Serving's {"examples": [{"<input name>": value}, ...]},
    with an optional "context" of features shared by every example. `objects`: a numeric model's
    examples (several inputs, or a table's features by name) pass as whole objects, for numeric.to_batch
    to check; `input_name` is then its first input's. `whole`: every example passes as its whole object
    (a typed table's row of columns, for typed.to_batch)."""
    example = f'{{"examples": [{{"{input_name}": ...}}]}}'
    payload = read_json_object(body, example)
    check_signature(payload)
    examples, context = payload.get("examples"), payload.get("context", {})
    if not isinstance(examples, list) or not examples:
        raise ApiError(400, f'"examples" must be a non-empty list of objects like {example}, got {json_type(examples)}')
    if not isinstance(context, dict):
        raise ApiError(400, f'"context" must be an object of features shared by all examples, got {json_type(context)}')
    check_count(len(examples), max_instances)
    instances = []
    for index, features in enumerate(examples):
        if not isinstance(features, dict):
            raise ApiError(
                422,
                f"example {index}: expected an object of features like {{\"{input_name}\": ...}}, got {json_type(features)}",
            )
        shared = set(features) & set(context)
        if shared:
            raise ApiError(
                400,
                f"example {index}: features {sorted(shared)} are also in \"context\" (TF Serving: a feature is in one or the other)",
            )
        features = {**context, **features}
        if whole or (objects and set(features) != {input_name}):
            instances.append(features)
            continue
        if set(features) != {input_name}:
            raise ApiError(422, f'example {index}: this model has one feature, "{input_name}"; got {sorted(features)}')
        instances.append(features[input_name])
    return instances


def _named_column(inputs, input_name):
    """The tensor of TF Serving's columnar object form, {"<input name>": [...]}."""
    if set(inputs) != {input_name}:
        raise ApiError(
            400,
            f'"inputs" as an object must have exactly one key, this model\'s input "{input_name}" (see /metadata); got keys {sorted(inputs)}',
        )
    return inputs[input_name]


def _named_row(index, instance, input_name):
    """A row instance keyed by the input name, {"<input name>": value}, is that value; others pass as they are."""
    if isinstance(instance, dict) and input_name in instance:
        if len(instance) > 1:
            raise ApiError(
                422, f'instance {index}: this model has one input, "{input_name}"; got keys {sorted(instance)}'
            )
        return instance[input_name]
    return instance


def to_batch(instances, input_spec, max_text_chars, pixel_budget):
    """A batch for LoadedModel.predict: a [n, 1] string column or uint8 [n, h, w, c].

    `pixel_budget`: the request's uploads.PixelBudget; every encoded image passes it before it is decoded."""
    if input_spec["kind"] == "text":
        return as_model_input("text", [_text(i, inst, max_text_chars) for i, inst in enumerate(instances)])
    shape = (input_spec["height"], input_spec["width"], input_spec["channels"])
    return np.stack([_image(i, inst, shape, pixel_budget) for i, inst in enumerate(instances)])


def _text(index, instance, max_chars):
    if not isinstance(instance, str):
        raise ApiError(422, f"instance {index}: this model takes text; expected a string, got {json_type(instance)}")
    if len(instance) > max_chars:
        raise ApiError(
            422,
            f"instance {index}: text is {len(instance)} characters long, the limit is {max_chars} (--max-text-chars)",
        )
    if not instance.strip():
        raise ApiError(422, f"instance {index}: text is empty or only whitespace")
    try:
        instance.encode("utf-8")  # JSON allows lone surrogates ("\ud800"); TensorFlow strings do not
    except UnicodeEncodeError:
        raise ApiError(422, f"instance {index}: text is not valid Unicode (lone surrogate escape)") from None
    return instance


def _image(index, instance, shape, pixel_budget):
    if isinstance(instance, dict):
        return _encoded_image(index, instance, shape, pixel_budget)
    if isinstance(instance, (list, np.ndarray)):  # JSON arrays; arrays V2 already typed as UINT8
        return _pixels(index, instance, shape)
    raise ApiError(
        422,
        f'instance {index}: this model takes images; expected {{"b64": "<base64 image file>"}} '
        f"or a {_shape_text(shape)} array of pixel values 0..255, got {json_type(instance)}",
    )


def _encoded_image(index, instance, shape, pixel_budget):
    """TF Serving's binary convention: {"b64": "<base64 of an encoded image file>"}."""
    if set(instance) != {"b64"}:
        raise ApiError(
            422, f'instance {index}: an image object must have exactly one key "b64", got keys {sorted(instance)}'
        )
    data = decode_b64(instance["b64"], f"instance {index}: ")
    pixel_budget.admit(data, f"instance {index}: ")  # PNG or JPEG within the request's pixels, before OpenCV sees it
    import cv2

    try:
        return decode_image(data, *shape)
    except ContractError as err:
        raise ApiError(422, f"instance {index}: {err}") from None
    except cv2.error:  # decode_image lets OpenCV's own refusals through (e.g. over OPENCV_IO_MAX_IMAGE_PIXELS)
        raise ApiError(
            422, f"instance {index}: not a decodable image (OpenCV refused it: too large or malformed)"
        ) from None


def decode_b64(encoded, where=""):
    """The bytes of a "b64" string; 422 naming `where` (a message prefix) if it is not base64."""
    if not isinstance(encoded, str):
        raise ApiError(422, f'{where}"b64" must be a string of base64, got {json_type(encoded)}')
    try:
        # Line breaks are common in base64 from other tools (MIME wraps at 76 columns).
        return base64.b64decode(_WHITESPACE.sub(b"", encoded.encode("ascii")), validate=True)
    except (UnicodeEncodeError, binascii.Error) as err:
        raise ApiError(422, f'{where}"b64" is not valid base64 ({err})') from None


def _pixels(index, instance, shape):
    height, width, channels = shape
    try:
        array = np.asarray(instance)
    except ValueError:  # ragged nesting
        raise ApiError(422, f"instance {index}: pixel array is ragged; expected {_shape_text(shape)}") from None
    if array.dtype.kind not in "iuf":  # strings, booleans, nulls, objects, numbers too big for int64
        raise ApiError(422, f"instance {index}: pixel values must be numbers 0..255")
    accepted = [(height, width, channels)] + ([(height, width)] if channels == 1 else [])
    if array.shape not in accepted:
        raise ApiError(
            422, f"instance {index}: pixel array has shape {list(array.shape)}, expected {_shape_text(shape)}"
        )
    if not (np.isfinite(array).all() and array.min() >= 0 and array.max() <= 255):
        raise ApiError(422, f"instance {index}: pixel values must be between 0 and 255")
    return np.rint(array).astype(np.uint8).reshape(shape)


def _shape_text(shape):
    height, width, channels = shape
    text = f"[{height}, {width}, {channels}]"
    return f"{text} (or [{height}, {width}])" if channels == 1 else text
