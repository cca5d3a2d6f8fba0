"""Turn a :predict request body into a model batch, or say exactly what is wrong with it.

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

# TF Serving's row form is {"instances": [...]}; its columnar form {"inputs": [...]}
# is the same list for a model with a single input, which ours always have.
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


def read_instances(body, max_instances):
    """The list of instances in a raw request body (bytes)."""
    payload = read_json_object(body, '{"instances": [...]}')
    keys = [key for key in INSTANCE_KEYS if key in payload]
    if not keys:
        raise ApiError(400, 'missing "instances": send {"instances": [...]} (or TF Serving\'s {"inputs": [...]})')
    if len(keys) > 1:
        raise ApiError(400, 'send either "instances" or "inputs", not both')
    key = keys[0]
    instances = payload[key]
    if not isinstance(instances, list):
        raise ApiError(400, f'"{key}" must be a list of instances, got {json_type(instances)}')
    if not instances:
        raise ApiError(400, f'"{key}" is empty; send at least one instance')
    if len(instances) > max_instances:
        raise ApiError(413, f"too many instances: {len(instances)}, at most {max_instances} per request (--max-instances)")
    return instances


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
        raise ApiError(422, f"instance {index}: text is {len(instance)} characters long, the limit is {max_chars} (--max-text-chars)")
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
    if isinstance(instance, list):
        return _pixels(index, instance, shape)
    raise ApiError(
        422,
        f'instance {index}: this model takes images; expected {{"b64": "<base64 image file>"}} '
        f"or a {_shape_text(shape)} array of pixel values 0..255, got {json_type(instance)}",
    )


def _encoded_image(index, instance, shape, pixel_budget):
    """TF Serving's binary convention: {"b64": "<base64 of an encoded image file>"}."""
    if set(instance) != {"b64"}:
        raise ApiError(422, f'instance {index}: an image object must have exactly one key "b64", got keys {sorted(instance)}')
    data = decode_b64(instance["b64"], f"instance {index}: ")
    pixel_budget.admit(data, f"instance {index}: ")  # PNG or JPEG within the request's pixels, before OpenCV sees it
    import cv2

    try:
        return decode_image(data, *shape)
    except ContractError as err:
        raise ApiError(422, f"instance {index}: {err}") from None
    except cv2.error:  # decode_image lets OpenCV's own refusals through (e.g. over OPENCV_IO_MAX_IMAGE_PIXELS)
        raise ApiError(422, f"instance {index}: not a decodable image (OpenCV refused it: too large or malformed)") from None


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
        raise ApiError(422, f"instance {index}: pixel array has shape {list(array.shape)}, expected {_shape_text(shape)}")
    if not (np.isfinite(array).all() and array.min() >= 0 and array.max() <= 255):
        raise ApiError(422, f"instance {index}: pixel values must be between 0 and 255")
    return np.rint(array).astype(np.uint8).reshape(shape)


def _shape_text(shape):
    height, width, channels = shape
    text = f"[{height}, {width}, {channels}]"
    return f"{text} (or [{height}, {width}])" if channels == 1 else text

