"""KServe's Open Inference Protocol (V2) over REST: health, metadata and typed-tensor inference.

Spec: https://github.com/kserve/open-inference-protocol/blob/main/specification/protocol/inference_rest.md
(the same text as kserve/docs/predict-api/v2/required_api.md). A request names the model's one
input ("text", "image" or "face": signature.py) with its datatype and shape:

    text models          BYTES  [n] or [n, 1]            one string per text
    image, faces models  UINT8  [n, h, w, c] ([n, h, w]) pixels 0..255, flat or nested, row-major
                         BYTES  [n] or [n, 1]            base64 of a PNG or JPEG file each

and gets the output ("probabilities" or "embedding") as FP32 [n, width].

A numeric model (tables, arrays: a user's own model) takes its own inputs, each named and typed as
/v2/models/NAME lists them, each given once, all with the same n:

    float inputs (FP32, FP64, FP16)   any of FP16, FP32, FP64, INT8..INT64, UINT8..UINT64: the numbers
                                      are cast to the input's dtype (FP64 -> FP32 rounds to nearest, what
                                      TF Serving does with JSON numbers; a value beyond its range is a 400)
    integer inputs (INT64, INT32 ...) INT8..INT64, UINT8..UINT64 with values in the input's range; FP
                                      datatypes are refused (a cast would truncate 2.5 to 2)
    shape                             [n, *the input's shape] (-1 there: any size); an input of shape
                                      [] or [1] also takes [n] and [n, 1]

and gets "probabilities" FP32 [n, labels] (classifiers, whatever their head) or "value" FP32 [n]
(regressions). A typed table's model (typed.py) takes one tensor per column, named as the column:

    text columns                      BYTES [n] or [n, 1]; "" (or null) is a missing value
    number columns                    FP32 [n] or [n, 1] (a float column: any float or integer datatype,
                                      NaN or null a missing value where the column allows one); INT64
                                      (any integer datatype) for an integer column without missing values
    boolean columns                   BOOL too (true, false), besides the number datatypes

every value converted by typed_table.column_array, a bad one a 400 naming the input and the instance.
The instances go through
the same checks, limits and batch path as /v1 (model_calls.predict_rows); errors are {"error": "..."}:
400 for a request that does not fit the model's tensors (unknown input or output name, wrong
datatype, shape and data disagreeing), 413 and 422 as in /v1. Tensor data in binary form (the
"binary tensor data" extension, an application/octet-stream body) is not supported: 415.
"""

import math
from importlib.metadata import version as package_version

import numpy as np
from flask import Blueprint, current_app, request

from disttrain_server import numeric, typed
from disttrain_server.errors import ApiError, ModelUnavailable, json_type
from disttrain_server.instances import check_count, read_json_object
from disttrain_server.model_calls import model_routes, predict_rows, resolve
from disttrain_server.openapi import (
    BOOLEAN,
    INTEGER,
    STRING,
    array_of,
    enum_of,
    json_response,
    object_of,
    ref,
    with_optional,
)
from disttrain_server.shared import model_store
from disttrain_server.signature import OUTPUT_NAMES, V2_DATATYPES, input_tensor, input_tensors, output_tensor

bp = Blueprint("v2", __name__)

SERVER_NAME = "disttrain-server"
# "<project>_<format>" (the protocol's Platforms section): a Keras model file run by TensorFlow.
PLATFORM = "tensorflow_keras"
MODEL_PATHS = ("/v2/models/<model_name:model_name>", "/v2/models/<model_name:model_name>/versions/<segment:version>")
EXAMPLE = '{"inputs": [{"name": ..., "shape": [...], "datatype": ..., "data": [...]}]}'


@bp.get("/v2")
def server_metadata():
    return {"name": SERVER_NAME, "version": package_version(SERVER_NAME), "extensions": []}


@bp.get("/v2/health/live")
def server_live():
    return {"live": True}


@bp.get("/v2/health/ready")
def server_ready():
    # Like /readyz: 503 until the one model is loaded, so it works as a readinessProbe too.
    try:
        model_store().get()
    except ModelUnavailable:
        return {"ready": False}, 503
    return {"ready": True}


@model_routes(bp, MODEL_PATHS, "/ready", "GET")
def model_ready(model_name, version=None):
    try:
        resolve(model_name, version)
    except ModelUnavailable:
        return {"name": model_name, "ready": False}, 503
    return {"name": model_name, "ready": True}


@model_routes(bp, MODEL_PATHS, "", "GET")
def model_metadata(model_name, version=None):
    loaded = resolve(model_name, version)
    return {
        "name": model_name,
        "versions": [str(loaded.version)],
        "platform": PLATFORM,
        "inputs": [tensor.v2() for tensor in input_tensors(loaded)],
        "outputs": [output_tensor(loaded).v2()],
    }


@model_routes(bp, MODEL_PATHS, "/infer", "POST")
def infer(model_name, version=None):
    loaded = resolve(model_name, version)
    payload = read_json_object(request.get_data(cache=False), EXAMPLE)
    request_id = payload.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise ApiError(400, f'"id" must be a string, got {json_type(request_id)}')
    if not isinstance(payload.get("parameters", {}), (dict, type(None))):
        raise ApiError(400, f'"parameters" must be an object, got {json_type(payload["parameters"])}')
    out = output_tensor(loaded)
    check_requested_outputs(payload.get("outputs"), out.name)
    if loaded.is_typed:
        count, batch = read_typed_inputs(payload.get("inputs"), input_tensors(loaded), loaded.table)
        rows = typed.predict(loaded, batch)
    elif loaded.is_numeric:
        count, batch = read_numeric_inputs(payload.get("inputs"), input_tensors(loaded))
        rows = loaded.predict(batch)
    else:
        count, instances = read_input(payload.get("inputs"), input_tensor(loaded))
        rows = predict_rows(loaded, instances)
    answer = {"model_name": model_name, "model_version": str(loaded.version)}
    if request_id is not None:
        answer["id"] = request_id  # the protocol: an "id" given must be returned
    # The one output, requested or by default ("outputs" absent: every output), row-major.
    answer["outputs"] = [
        {
            "name": out.name,
            "datatype": out.v2_datatype,
            "shape": [count, *rows.shape[1:]],
            "data": rows.astype(np.float32).ravel().tolist(),
        }
    ]
    return answer


def check_requested_outputs(outputs, output_name):
    """Requested outputs ("outputs", optional) must name the model's one output."""
    if outputs is None:
        return
    if not isinstance(outputs, list):
        raise ApiError(400, f'"outputs" must be a list of {{"name": ...}} objects, got {json_type(outputs)}')
    for index, output in enumerate(outputs):
        if not isinstance(output, dict) or output.get("name") != output_name:
            got = repr(output.get("name")) if isinstance(output, dict) else json_type(output)
            raise ApiError(400, f'outputs[{index}]: unknown output {got}; this model has one output, "{output_name}"')
        parameters = output.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise ApiError(400, f'outputs[{index}]: "parameters" must be an object, got {json_type(parameters)}')
        if parameters.get("binary_data"):
            raise ApiError(
                400, f"outputs[{index}]: binary_data outputs are not supported; this server answers JSON tensors"
            )


def read_input(inputs, tensor):
    """(n, instances) for the model's one input tensor, checked against `tensor` (signature.Tensor)."""
    if not isinstance(inputs, list) or not inputs:
        raise ApiError(400, f'"inputs" must be a non-empty list of tensors like {EXAMPLE}, got {json_type(inputs)}')
    names = [item.get("name") if isinstance(item, dict) else None for item in inputs]
    unknown = [name for name in names if name != tensor.name]
    if unknown:
        raise ApiError(
            400,
            f"unknown input {unknown[0]!r}; this model has one input, {tensor.name!r} ({tensor.v2_datatype} {list(tensor.shape)})",
        )
    if len(inputs) > 1:
        raise ApiError(400, f"input {tensor.name!r} is given {len(inputs)} times; send it once")
    (item,) = inputs
    datatype, shape, data = item.get("datatype"), item.get("shape"), item.get("data")
    if not isinstance(item.get("parameters", {}), (dict, type(None))):
        raise ApiError(400, f'input {tensor.name!r}: "parameters" must be an object')
    rank = max(len(tensor.shape), 2)  # strings may come as [n] or [n, 1]
    if (
        not isinstance(shape, list)
        or not 1 <= len(shape) <= rank
        or not all(type(size) is int and size >= 0 for size in shape)
    ):
        raise ApiError(
            400,
            f'input {tensor.name!r}: "shape" must be a list of 1 to {rank} non-negative integers, '
            f"batch first (this model: {list(tensor.shape)}), got {shape!r}",
        )
    if shape[0] == 0:
        raise ApiError(400, f"input {tensor.name!r}: shape {shape} has no instances; send at least one")
    check_count(shape[0], current_app.config["MAX_INSTANCES"])
    accepted = ["BYTES"] if tensor.dtype == "DT_STRING" else ["UINT8", "BYTES"]
    if datatype not in accepted:
        raise ApiError(
            400,
            f"input {tensor.name!r}: datatype {datatype!r} is not accepted; send {' or '.join(accepted)} (see /v2/models/NAME)",
        )
    if not isinstance(data, list):
        raise ApiError(
            400, f'input {tensor.name!r}: "data" must be a list (flat or nested, row-major), got {json_type(data)}'
        )
    flat = _flatten(data, len(shape), tensor.name)
    if len(flat) != math.prod(shape):
        raise ApiError(
            400, f"input {tensor.name!r}: shape {shape} has {math.prod(shape)} elements but data has {len(flat)}"
        )
    if datatype == "BYTES":
        if shape[1:] not in ([], [1]):
            raise ApiError(
                400,
                f"input {tensor.name!r}: BYTES shape must be [n] or [n, 1], one {'text' if tensor.dtype == 'DT_STRING' else 'encoded image'} per instance; got {shape}",
            )
        bad = next((i for i, value in enumerate(flat) if not isinstance(value, str)), None)
        if bad is not None:
            raise ApiError(
                400, f"input {tensor.name!r}: BYTES element {bad} is a {json_type(flat[bad])}, expected a string"
            )
        # An image model's BYTES are encoded files, base64 in JSON: TF Serving's {"b64": ...} instances.
        return shape[0], flat if tensor.dtype == "DT_STRING" else [{"b64": value} for value in flat]
    return shape[0], _pixels(flat, shape, tensor)


FLOAT_DATATYPES = ("FP16", "FP32", "FP64")
INTEGER_DATATYPES = ("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64")


def accepted_datatypes(tensor):
    """What a numeric input takes: any number type for a float input, integer types for an integer one."""
    own = tensor.v2_datatype
    others = FLOAT_DATATYPES + INTEGER_DATATYPES if own in FLOAT_DATATYPES else INTEGER_DATATYPES
    return [own] + [datatype for datatype in others if datatype != own]


def read_numeric_inputs(inputs, tensors, read_tensor=None):
    """(n, batch) for a numeric model: one tensor per input (numeric.to_batch's batch: an array, or a dict by name).
    `read_tensor(item, tensor)` -> (n, array) reads one of them (None: _numeric_tensor); with it the batch is
    always the dict."""
    if not isinstance(inputs, list) or not inputs:
        raise ApiError(400, f'"inputs" must be a non-empty list of tensors like {EXAMPLE}, got {json_type(inputs)}')
    by_name = {tensor.name: tensor for tensor in tensors}
    takes = ", ".join(f"{tensor.name!r} ({tensor.describe()})" for tensor in tensors[:20])
    names = [item.get("name") if isinstance(item, dict) else None for item in inputs]
    unknown = [name for name in names if not isinstance(name, str) or name not in by_name]
    if unknown:
        shown = (
            repr(unknown[0])
            if isinstance(unknown[0], str) or unknown[0] is None
            else f"name of type {json_type(unknown[0])}"
        )
        raise ApiError(
            400, f"unknown input {shown}; this model's input{'s are' if len(tensors) > 1 else ' is'} {takes}"
        )
    repeated = next((name for name in names if names.count(name) > 1), None)
    if repeated is not None:
        raise ApiError(400, f"input {repeated!r} is given {names.count(repeated)} times; send it once")
    missing = [tensor.name for tensor in tensors if tensor.name not in names]
    if missing:
        raise ApiError(400, f"missing input {missing[0]!r}; this model takes {takes}, each once")
    arrays, counts = {}, {}
    for item in inputs:
        tensor = by_name[item["name"]]
        counts[tensor.name], arrays[tensor.name] = (read_tensor or _numeric_tensor)(item, tensor)
    if len(set(counts.values())) > 1:
        raise ApiError(400, f"the inputs' first dimensions differ ({counts}); every input has one row per instance")
    return counts[tensors[0].name], arrays[tensors[0].name] if len(tensors) == 1 and not read_tensor else arrays


def typed_datatypes(column):
    """What a typed table's column takes: BYTES for text; a number column its own datatype first, then
    any integer datatype (and any float one for a float32 column); BOOL too for a boolean column."""
    if column.dtype == "string":
        return ["BYTES"]
    own = "FP32" if column.dtype == "float32" else "INT64"
    others = FLOAT_DATATYPES + INTEGER_DATATYPES if own == "FP32" else INTEGER_DATATYPES
    return [own] + [d for d in others if d != own] + (["BOOL"] if column.type == "boolean" else [])


def read_typed_inputs(inputs, tensors, table):
    """(n, {column name: [n, 1] array}) for a typed table's model: one tensor per column, [n] or [n, 1].

    V2 has no null: a missing value is "" in a BYTES tensor, and NaN in a float tensor (JSON's NaN token,
    which Python's reader takes) for a column that allows one (dtype float32); JSON null is taken as
    missing too. Each value goes through typed.column_input (typed_table.column_array)."""
    max_chars = current_app.config["MAX_TEXT_CHARS"]
    return read_numeric_inputs(
        inputs, tensors, lambda item, tensor: _typed_tensor(item, table.column(tensor.name), max_chars)
    )


def _check_datatype(item, name, accepted):
    """A tensor's "parameters" (an object, if given) and its datatype, one of `accepted` (the first the model's own)."""
    if not isinstance(item.get("parameters", {}), (dict, type(None))):
        raise ApiError(400, f'input {name!r}: "parameters" must be an object')
    datatype = item.get("datatype")
    if datatype not in accepted:
        raise ApiError(
            400,
            f"input {name!r}: datatype {datatype!r} is not accepted; send {accepted[0]}"
            + (f" (or {', '.join(accepted[1:])})" if len(accepted) > 1 else "")
            + " (see /v2/models/NAME)",
        )


def _tensor_data(name, shape, data):
    """A tensor's data, flattened, once its shape (batch first) is checked: at least one instance, within the
    instance limit, and as many elements as the shape holds."""
    if shape[0] == 0:
        raise ApiError(400, f"input {name!r}: shape {shape} has no instances; send at least one")
    check_count(shape[0], current_app.config["MAX_INSTANCES"])
    if not isinstance(data, list):
        raise ApiError(400, f'input {name!r}: "data" must be a list (flat or nested, row-major), got {json_type(data)}')
    flat = _flatten(data, len(shape), name)
    if len(flat) != math.prod(shape):
        raise ApiError(400, f"input {name!r}: shape {shape} has {math.prod(shape)} elements but data has {len(flat)}")
    return flat


def _typed_tensor(item, column, max_chars):
    name, datatype, shape, data = column.name, item.get("datatype"), item.get("shape"), item.get("data")
    _check_datatype(item, name, typed_datatypes(column))
    if (
        not isinstance(shape, list)
        or not 1 <= len(shape) <= 2
        or not all(type(size) is int and size >= 0 for size in shape)
        or shape[1:] not in ([], [1])
    ):
        raise ApiError(400, f'input {name!r}: "shape" must be [n] or [n, 1], one value per instance; got {shape!r}')
    flat = _tensor_data(name, shape, data)
    values = [_typed_element(name, datatype, index, value) for index, value in enumerate(flat)]
    return shape[0], typed.column_input(column, values, max_chars, f"input {name!r}: instance {{}}")


def _typed_element(name, datatype, index, value):
    """One element of a typed table's tensor as column_array's JSON value (None: missing), checked against
    its datatype: BYTES strings, BOOL booleans, integer datatypes integers, float datatypes numbers."""
    if value is None:
        return None
    fits = {
        "BYTES": isinstance(value, str),
        "BOOL": isinstance(value, bool),
    }.get(datatype)
    if fits is None:
        kinds = (int,) if datatype in INTEGER_DATATYPES else (int, float)
        fits = isinstance(value, kinds) and not isinstance(value, bool)
    if not fits:
        expected = {"BYTES": "a string", "BOOL": "true or false"}.get(
            datatype, "an integer" if datatype in INTEGER_DATATYPES else "a number"
        )
        shown = repr(value) if isinstance(value, float) else json_type(value)
        raise ApiError(400, f"input {name!r} ({datatype}): instance {index}: expected {expected}, got {shown}")
    if isinstance(value, float) and math.isnan(value):
        return None  # V2's missing value in a float tensor (column_array refuses it where none may be missing)
    return value


def _numeric_tensor(item, tensor):
    name, expected = tensor.name, tensor.example_shape
    datatype, shape, data = item.get("datatype"), item.get("shape"), item.get("data")
    _check_datatype(item, name, accepted_datatypes(tensor))
    if not isinstance(shape, list) or not shape or not all(type(size) is int and size >= 0 for size in shape):
        raise ApiError(
            400,
            f'input {name!r}: "shape" must be a list of non-negative integers, batch first '
            f"({list(tensor.shape)}), got {shape!r}",
        )
    scalar = expected in ((), (1,)) and shape[1:] in ([], [1])
    if not scalar and not numeric.fits(tuple(shape[1:]), expected):
        raise ApiError(
            400, f"input {name!r}: shape {shape} does not fit this input's {list(tensor.shape)} ({tensor.describe()})"
        )
    flat = _tensor_data(name, shape, data)
    rows = (shape[0], *expected) if scalar else tuple(shape)
    array = np.asarray(flat, dtype=object).reshape(rows) if flat else np.empty(rows, dtype=object)
    return shape[0], numeric.elements(
        f"input {name!r} ({datatype})", array, tensor, integers_only=datatype in INTEGER_DATATYPES
    )


def _pixels(flat, shape, tensor):
    """UINT8 data -> one [h, w, c] (or [h, w]) array per instance, for instances.to_batch to check and stack."""
    height, width, channels = tensor.shape[1:]
    if shape[1:] not in ([height, width, channels], [height, width] if channels == 1 else None):
        expected = f"[n, {height}, {width}, {channels}]" + (f" or [n, {height}, {width}]" if channels == 1 else "")
        raise ApiError(400, f"input {tensor.name!r}: shape {shape} does not fit this model's images, {expected}")
    bad = next((i for i, value in enumerate(flat) if type(value) is not int or not 0 <= value <= 255), None)
    if bad is not None:
        raise ApiError(400, f"input {tensor.name!r}: UINT8 element {bad} is {flat[bad]!r}, expected an integer 0..255")
    return list(np.asarray(flat, dtype=np.uint8).reshape(shape))


def _flatten(data, rank, name):
    """The elements of `data` in row-major order; nesting may be natural (up to the shape's rank) or flat."""
    flat = []

    def walk(value, depth):
        if isinstance(value, list):
            if depth == rank:
                raise ApiError(400, f'input {name!r}: "data" is nested deeper than the shape\'s {rank} dimensions')
            for element in value:
                walk(element, depth + 1)
        else:
            flat.append(value)

    walk(data, 0)
    return flat


# This blueprint's part of /openapi.json (openapi.build_spec puts the parts together).

V2_TENSOR = object_of(name=STRING, datatype=enum_of(*V2_DATATYPES.values()), shape=array_of(INTEGER))
# Data: flat or nested row-major; elements are strings (BYTES) or numbers.
V2_DATA = {"type": "array", "items": {}, "description": "The tensor's elements in row-major order, flat or nested."}
V2_PARAMETERS = {"type": "object", "nullable": True, "description": "Accepted and ignored: no parameters are defined."}
V2_SCHEMAS = {
    "V2ServerMetadata": object_of(name=STRING, version=STRING, extensions=array_of(STRING)),
    "V2Live": object_of(live=BOOLEAN),
    "V2Ready": object_of(ready=BOOLEAN),
    "V2ModelReady": object_of(name=STRING, ready=BOOLEAN),
    "V2ModelMetadata": object_of(
        name=STRING, versions=array_of(STRING), platform=STRING, inputs=array_of(V2_TENSOR), outputs=array_of(V2_TENSOR)
    ),
    "V2InferRequest": {
        **with_optional(
            object_of(
                inputs={
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 1,
                    "items": with_optional(
                        object_of(
                            name=STRING,
                            shape=array_of({"type": "integer", "minimum": 0}),
                            datatype=enum_of("BYTES", "UINT8"),
                            data=V2_DATA,
                        ),
                        parameters=V2_PARAMETERS,
                    ),
                }
            ),
            id=STRING,
            parameters=V2_PARAMETERS,
            outputs=array_of(with_optional(object_of(name=STRING), parameters=V2_PARAMETERS)),
        ),
        "description": "One input, named as the model's metadata says: BYTES [n] (or [n, 1]) of texts for a text model; "
        "UINT8 [n, height, width, channels] of pixels, or BYTES [n] of base64 PNG/JPEG files, for an image or faces model.",
    },
    "V2InferResponse": with_optional(
        object_of(
            model_name=STRING,
            model_version=STRING,
            outputs=array_of(object_of(name=STRING, datatype=enum_of("FP32"), shape=array_of(INTEGER), data=V2_DATA)),
        ),
        id={"type": "string", "description": "The request's id, if it had one."},
    ),
}


def openapi_paths(context):
    """This blueprint's part of /openapi.json (openapi.build_spec): KServe's Open Inference Protocol (REST),
    server and model health and metadata, typed-tensor inference."""
    model_name, task, numeric = context.model_name(), context.task, context.numeric
    version = {
        "name": "version",
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
        "description": "The served version (versions in the model metadata); any other is a 404.",
    }
    not_found = json_response("Unknown model name or version.")
    output = OUTPUT_NAMES.get(task, "probabilities") if task else "probabilities (classifiers) or embedding (faces)"
    if numeric and numeric["regression"]:
        output = "value"
    paths = {
        "/v2": {
            "get": {
                "summary": "Server metadata (Open Inference Protocol).",
                "responses": {"200": json_response("The server.", ref("V2ServerMetadata"))},
            }
        },
        "/v2/health/live": {
            "get": {"summary": "Server liveness (V2).", "responses": {"200": json_response("Alive.", ref("V2Live"))}}
        },
        "/v2/health/ready": {
            "get": {
                "summary": "Server readiness (V2): the model is loaded.",
                "responses": {
                    "200": json_response("Ready.", ref("V2Ready")),
                    "503": json_response("No model is loaded.", ref("V2Ready")),
                },
            }
        },
    }
    for prefix, extra in (("/v2/models/{model_name}", []), ("/v2/models/{model_name}/versions/{version}", [version])):
        parameters = [model_name, *extra]
        paths[prefix] = {
            "get": {
                "summary": "Model metadata (V2): its one input and one output, with datatype and shape.",
                "parameters": parameters,
                "responses": {
                    "200": json_response("Metadata.", ref("V2ModelMetadata")),
                    "404": not_found,
                    "503": json_response("No model is loaded."),
                },
            }
        }
        paths[prefix + "/ready"] = {
            "get": {
                "summary": "Model readiness (V2).",
                "parameters": parameters,
                "responses": {
                    "200": json_response("Ready.", ref("V2ModelReady")),
                    "404": not_found,
                    "503": json_response("Not loaded.", ref("V2ModelReady")),
                },
            }
        }
        paths[prefix + "/infer"] = {
            "post": {
                "summary": f"Inference (V2): FP32 [n, width] output {output!r} ([n] for a regression's 'value'); the request's id is echoed.",
                "parameters": parameters,
                "requestBody": {"required": True, "content": {"application/json": {"schema": ref("V2InferRequest")}}},
                "responses": {
                    "200": json_response("The output tensor.", ref("V2InferResponse")),
                    "400": json_response(
                        "Not an inference request for this model: invalid JSON, an unknown input or output name, "
                        "a datatype it does not take, a shape that does not fit it or disagrees with the data."
                    ),
                    "404": not_found,
                    "413": json_response("Body over the upload limit, or more instances than allowed."),
                    "422": json_response(
                        "An instance this model cannot take: empty or too long text, bad base64, corrupt image."
                    ),
                    "503": json_response("No model is loaded."),
                },
            }
        }
    return paths


def openapi_schemas(context):
    """The V2 messages (a numeric model's request names its own inputs and datatypes)."""
    if context.numeric:
        return {**V2_SCHEMAS, "V2InferRequest": _v2_numeric_request(context.numeric)}
    return V2_SCHEMAS


def _v2_numeric_request(numeric):
    """A numeric model's V2 request: each of its inputs once, in any order, a numeric datatype."""
    tensors, table = numeric["tensors"], numeric.get("table")
    if table:
        datatypes = sorted({datatype for column in table.columns for datatype in typed_datatypes(column)})
    else:
        datatypes = sorted({datatype for tensor in tensors for datatype in accepted_datatypes(tensor)})
    item = with_optional(
        object_of(
            name=enum_of(*(t.name for t in tensors)),
            shape=array_of({"type": "integer", "minimum": 0}),
            datatype=enum_of(*datatypes),
            data=V2_DATA,
        ),
        parameters=V2_PARAMETERS,
    )
    schema = V2_SCHEMAS["V2InferRequest"]
    infer_request = {
        **schema,
        "properties": {
            **schema["properties"],
            "inputs": {"type": "array", "minItems": len(tensors), "maxItems": len(tensors), "items": item},
        },
    }
    infer_request["description"] = (
        "Each of the model's inputs once (see /v2/models/NAME), shape [n, *its shape] ([n] also for an "
        "input of shape [1]): a float input takes any numeric datatype (cast to its dtype), an integer "
        "input integer datatypes only."
    )
    if table:
        infer_request["description"] = (
            "One tensor per column of the table, named as the column (see /v2/models/NAME), shape [n] or "
            "[n, 1]: BYTES for a text column (\"\" for a missing value), a number datatype for the others "
            "(a float column takes any, NaN for a missing value; an integer column integer datatypes), BOOL "
            "for a boolean column too."
        )
    return infer_request
