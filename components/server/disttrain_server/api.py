"""The JSON API: TF Serving's REST API under /v1, health probes, report, OpenAPI (KServe's V2: v2.py); each route's part of
/openapi.json is described at the end of the module, as in every blueprint."""

import os
from dataclasses import dataclass

from flask import Blueprint, current_app, request
from werkzeug.routing import BaseConverter

from disttrain_contract.layout import REPORT_FILE, whole_number
from disttrain_contract.tasks import TASKS
from disttrain_contract.typed_table import is_typed
from disttrain_server import typed
from disttrain_server.errors import ApiError, ModelUnavailable
from disttrain_server.instances import read_classify, read_predict
from disttrain_server.model_calls import check_version, model_routes, predict_rows, resolve
from disttrain_server.openapi import (
    BOOLEAN,
    INTEGER,
    STRING,
    Context,
    array_of,
    build_spec,
    closed,
    enum_of,
    json_response,
    object_of,
    ref,
    with_optional,
)
from disttrain_server.heldout import REPORT_HEADERS
from disttrain_server.runs_data import served_report
from disttrain_server.shared import OPENAPI_KEY, limits, model_store, served_model, served_run_dir
from disttrain_server.signature import (
    INPUT_NAMES,
    PREDICT_METHOD,
    SIGNATURE_NAME,
    TF_DTYPES,
    input_tensor,
    input_tensors,
    signature_def,
)

bp = Blueprint("api", __name__)


class ModelNameConverter(BaseConverter):
    """A model name never contains ':' so /v1/models/NAME:predict cannot be read as a model called 'NAME:predict'."""

    regex = "[^/:]+"


class SegmentConverter(ModelNameConverter):
    """A version or label, for the same reason: /v1/models/NAME/versions/V:predict is version V's :predict."""


@bp.get("/healthz")
def healthz():
    # Liveness only: a missing model is a readiness problem, not a reason to restart.
    return {"status": "ok"}


@bp.get("/readyz")
def readyz():
    try:
        loaded = model_store().get()
    except ModelUnavailable as err:
        return {"status": "unavailable", "reason": err.reason}, 503
    ready = {"status": "ready", "model": current_app.config["MODEL_NAME"], "version": str(loaded.version)}
    failure = model_store().load_failure
    if failure is not None:
        # Ready (the loaded model answers), and the newer publication that could not replace it is named.
        ready["load_failure"] = {"version": str(failure.version), "reason": failure.reason}
    if loaded.batcher:
        # This worker process's batching so far: requests per model call is what it saves.
        b = loaded.batcher
        ready["batching"] = {
            "max_batch_size": b.max_batch_size,
            "model_calls": b.calls,
            "requests": b.requests,
            "instances": b.instances,
        }
    return ready


MODEL_PATHS = (
    "/v1/models/<model_name:model_name>",
    "/v1/models/<model_name:model_name>/versions/<segment:version>",
    "/v1/models/<model_name:model_name>/labels/<segment:label>",
)


@model_routes(bp, MODEL_PATHS, "", "GET")
def model_status(model_name, version=None, label=None):
    """TF Serving's GetModelStatusResponse: the served version AVAILABLE and, when the newest published
    file could not be served (it failed to load or its self-test), that version in state END with the
    reason; /versions/V of the failed version shows its entry only."""
    # "ready" is not TF Serving's: KServe's V1 clients read it (InferenceRESTClient.is_model_ready).
    try:
        loaded, unavailable = served_model(model_name), None
    except ModelUnavailable as err:
        loaded, unavailable = None, err.reason
    failure = model_store().load_failure
    failed = (
        []
        if failure is None
        else [
            {
                "version": str(failure.version),
                "state": "END",
                "status": {"error_code": "UNKNOWN", "error_message": failure.reason},
            }
        ]
    )
    if failed and version is not None and label is None and whole_number(version) == failure.version:
        entries = failed
    elif loaded is not None:
        check_version(model_name, loaded, version, label)
        entries = [
            {"version": str(loaded.version), "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
        ] + failed
    else:
        entries = failed or [
            {
                "version": version or "0",
                "state": "UNKNOWN",
                "status": {"error_code": "UNAVAILABLE", "error_message": unavailable},
            }
        ]
    return {"model_version_status": entries, "ready": any(entry["state"] == "AVAILABLE" for entry in entries)}


# Training statistics that are a single record's value (the smallest and largest of each feature):
# /metadata leaves them out unless --show-heldout-examples, which hands out whole rows anyway.
ROW_STATISTICS = ("min", "max")


def described_input(spec):
    """The model's input as /metadata describes it: its statistics without ROW_STATISTICS by default
    (a typed table's: each column's)."""
    if current_app.config["SHOW_HELDOUT_EXAMPLES"]:
        return spec
    statistics, columns = spec.get("statistics"), spec.get("columns")
    if statistics:
        spec = {**spec, "statistics": {k: v for k, v in statistics.items() if k not in ROW_STATISTICS}}
    if is_typed(spec) and isinstance(columns, list):
        spec = {**spec, "columns": [{k: v for k, v in c.items() if k not in ROW_STATISTICS} for c in columns]}
    return spec


@model_routes(bp, MODEL_PATHS, "/metadata", "GET")
def model_metadata(model_name, version=None, label=None):
    """TF Serving's GetModelMetadataResponse: the serving_default signature_def, plus our own facts
    (task, labels, input, limits, embedding_size) as a second metadata field, "disttrain"."""
    loaded = resolve(model_name, version, label)
    ours = {
        "task": loaded.task,
        "labels": loaded.labels,
        "input": described_input(loaded.input_spec),
        "limits": limits(),
    }
    if loaded.own_inputs:
        # classification (probabilities over labels) or regression (one value of target per instance)
        ours.update(problem=loaded.meta.get("problem", "classification"), target=loaded.target)
    if loaded.is_faces:
        # :predict answers embeddings of face crops; :search takes whole photos.
        ours["embedding_size"] = loaded.meta["embedding_size"]
    return {
        "model_spec": {"name": model_name, "signature_name": "", "version": str(loaded.version)},
        "metadata": {"signature_def": signature_def(loaded), "disttrain": ours},
    }


@model_routes(bp, MODEL_PATHS, ":predict", "POST")
def predict(model_name, version=None, label=None):
    loaded = resolve(model_name, version, label)
    # Read the body ourselves instead of request.get_json(): its errors are HTML-ish
    # prose and it insists on a Content-Type, which TF Serving clients do not always send.
    names = [tensor.name for tensor in input_tensors(loaded)]
    instances, columnar = read_predict(
        request.get_data(cache=False), names, current_app.config["MAX_INSTANCES"], objects=loaded.is_typed
    )
    rows = predict_rows(loaded, instances).tolist()
    # TF Serving: a row request ("instances") answers "predictions", a columnar one ("inputs") "outputs".
    return {"outputs": rows} if columnar else {"predictions": rows}


@model_routes(bp, MODEL_PATHS, ":classify", "POST")
def classify(model_name, version=None, label=None):
    """TF Serving's Classify: {"examples": [{"<input>": value}, ...]} -> {"result": [[[label, score], ...], ...]},
    the pairs in label order (the model's output order, like TF Serving's classes/scores)."""
    loaded = resolve(model_name, version, label)
    if loaded.is_faces:
        raise ApiError(
            409, "this is a faces model, which has no classes: use :predict for embeddings or :search to find people"
        )
    if loaded.is_regression:
        raise ApiError(
            409,
            f"this is a regression model (it predicts {loaded.target or 'a value'}), which has no classes: use :predict",
        )
    instances = read_classify(
        request.get_data(cache=False),
        input_tensor(loaded).name,
        current_app.config["MAX_INSTANCES"],
        objects=loaded.own_inputs,
        whole=loaded.is_typed,
    )
    rows = predict_rows(loaded, instances).tolist()
    return {"result": [[[label, score] for label, score in zip(loaded.labels, row)] for row in rows]}


@bp.get("/report")
def report():
    path = os.path.join(os.path.dirname(model_store().path), REPORT_FILE)  # the contract's report.Report
    try:
        body = served_report(path, served_run_dir())
        return current_app.response_class(body, mimetype="application/json", headers=REPORT_HEADERS)
    except (FileNotFoundError, IsADirectoryError):
        raise ApiError(
            404, "no report.json next to the served model (the aggregator writes one when it publishes)"
        ) from None


@bp.get("/openapi.json")
def openapi():
    numeric = None
    try:
        loaded = model_store().get()
        input_spec, task = loaded.input_spec, loaded.task
        if loaded.own_inputs:
            numeric = {
                "tensors": input_tensors(loaded),
                "features": loaded.features,
                "regression": loaded.is_regression,
                "table": loaded.table,  # a typed table's TableSpec, or None
            }
    except ModelUnavailable:
        input_spec, task = None, None  # describe both instance kinds until we know which one applies
    # the parts and their order: the app factory's (app.create_app)
    return build_spec(
        current_app.extensions[OPENAPI_KEY],
        Context(current_app.config["MODEL_NAME"], limits(), input_spec, task, numeric),
    )


# This blueprint's part of /openapi.json (openapi.build_spec puts the parts together).


def openapi_paths(context):
    """The health probes, TF Serving's REST API, /report and /openapi.json itself."""
    return {
        "/healthz": {
            "get": {
                "summary": "Liveness: the process answers.",
                "responses": {"200": json_response("Alive.", {"$ref": "#/components/schemas/Health"})},
            }
        },
        "/readyz": {
            "get": {
                "summary": "Readiness: a model is loaded in this process and answered its self-test.",
                "responses": {
                    "200": json_response("A model is loaded.", {"$ref": "#/components/schemas/Ready"}),
                    "503": json_response(
                        "No model could be loaded; `reason` says why.", {"$ref": "#/components/schemas/NotReady"}
                    ),
                },
            }
        },
        **_tf_serving_paths(
            context.limits, _instance(context), context.model_name(), context.kind, context.task, context.numeric
        ),
        "/report": {
            "get": {
                "summary": "The aggregator's report.json (per-worker and final held-out metrics), without a "
                "regression's held-out (actual, predicted) pairs and a face run's people's names unless "
                "--show-heldout-examples (its 'withheld' object names what is left out).",
                "responses": {
                    "200": {
                        "description": "The report.",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    "404": json_response("No report next to the served model."),
                },
            }
        },
        "/openapi.json": {
            "get": {
                "summary": "This description.",
                "responses": {
                    "200": {
                        "description": "OpenAPI 3 document.",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    }
                },
            }
        },
    }


def openapi_schemas(context):
    task, numeric = context.task, context.numeric
    retrieval = getattr(TASKS.get(task), "retrieval", False)
    # an embedding's components lie in [-1, 1]; probabilities in [0, 1]
    rows = array_of(array_of({"type": "number", "minimum": -1 if retrieval else 0, "maximum": 1}))
    if numeric and numeric["regression"]:
        rows = array_of({"type": "number"})
    return {
        "Health": object_of(status=enum_of("ok")),
        "Ready": with_optional(
            object_of(status=enum_of("ready"), model=STRING, version=STRING),
            # present when micro-batching is on: this worker process's counts so far
            batching=object_of(max_batch_size=INTEGER, model_calls=INTEGER, requests=INTEGER, instances=INTEGER),
            # present when the newest published model could not replace the loaded one
            load_failure=object_of(version=STRING, reason=STRING),
        ),
        "NotReady": object_of(status=enum_of("unavailable"), reason=STRING),
        "ModelStatus": with_optional(
            object_of(
                model_version_status=array_of(
                    object_of(
                        version=STRING,
                        state=enum_of("AVAILABLE", "END", "UNKNOWN"),
                        status=object_of(error_code=STRING, error_message=STRING),
                    )
                )
            ),
            ready={
                "type": "boolean",
                "description": "Not TF Serving's: what KServe's V1 clients read (is_model_ready).",
            },
        ),
        "Metadata": object_of(
            model_spec=object_of(name=STRING, signature_name=STRING, version=STRING),
            metadata=object_of(
                signature_def=object_of(
                    signature_def=object_of(
                        serving_default=object_of(
                            inputs={"type": "object", "additionalProperties": TENSOR_INFO},
                            outputs={"type": "object", "additionalProperties": TENSOR_INFO},
                            method_name=enum_of(PREDICT_METHOD),
                        )
                    )
                ),
                disttrain=object_of(
                    task=STRING,
                    labels=array_of(STRING),
                    input=object_of(
                        kind=enum_of("text", "image", "table", "array")
                    ),  # plus height, width, channels for images; ...
                    limits=object_of(
                        max_instances=INTEGER,
                        max_text_chars=INTEGER,
                        max_upload_bytes=INTEGER,
                        max_request_pixels=INTEGER,
                    ),
                ),
            ),
        ),
        # Probabilities for a classifier; embedding components (-1..1) for a faces model.
        "Predictions": object_of(predictions=rows),
        "Outputs": object_of(outputs=rows),
        "ClassifyResult": object_of(
            result=array_of(
                array_of(
                    {
                        "type": "array",
                        "minItems": 2,
                        "maxItems": 2,
                        "items": {"anyOf": [STRING, {"type": "number"}]},
                        "description": "[label, score]",
                    }
                )
            )
        ),
    }


def _instance(context):
    """The schema of one row instance: the loaded model's kind, or any kind while none is loaded."""
    kind, numeric = context.kind, context.numeric
    variants = []
    if kind in ("text", None):
        variants.append(_text_instance(context.limits["max_text_chars"]))
    if kind in ("image", None):
        variants.extend(_image_instances(context.input_spec if kind == "image" else None))
    if numeric and numeric["table"]:
        variants = [_typed_instance(numeric["table"], context.limits["max_text_chars"])]
    elif numeric:
        variants = [_numeric_instance(numeric)]
    return variants[0] if len(variants) == 1 else {"anyOf": variants}


def _typed_instance(table, max_chars):
    """A row of a typed table's model: an object of every column (typed.py)."""
    return closed(object_of(**{column.name: _column_value(column, max_chars) for column in table.columns}))


def _column_value(column, max_chars):
    """One column's value: text, a number, an integer or a boolean; nullable where a value may be missing."""
    missing = column.dtype != "int64"
    if column.type == "string":
        seen = ", ".join(column.vocabulary[:10]) + (", ..." if len(column.vocabulary) > 10 else "")
        return {
            "type": "string",
            "maxLength": max_chars,
            "nullable": True,
            "description": 'Text; null or "" for a missing value.' + (f" Seen in training: {seen}." if seen else ""),
        }
    if column.type == "boolean":
        return {
            "anyOf": [
                {"type": "boolean", "nullable": missing},
                {"type": "integer", "minimum": 0, "maximum": 1, "nullable": missing},
            ]
        }
    schema = {"type": "integer" if column.dtype == "int64" else "number", "nullable": missing}
    return {**schema, "description": "A number; null for a missing value." if missing else "A number (required)."}


def _text_instance(max_chars):
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": max_chars,
        "pattern": r"\S",
        "description": "A text to classify (not empty or only whitespace).",
    }


def _image_instances(spec):
    height, width, channels = (spec.get(k) for k in ("height", "width", "channels")) if spec else (None, None, None)
    pixel = {"type": "number", "minimum": 0, "maximum": 255}

    def dims(*sizes):
        # Nested arrays, outermost first; sizes are exact when a model is loaded.
        schema = pixel
        for size in reversed(sizes):
            schema = {"type": "array", "items": schema}
            if size:
                schema.update(minItems=size, maxItems=size)
        return schema

    shapes = [dims(height, width, channels)]
    if channels in (1, None):
        shapes.append(dims(height, width))
    b64 = {
        "type": "object",
        "required": ["b64"],
        "additionalProperties": False,
        "properties": {"b64": {"type": "string", "format": "byte", "description": "base64 of a PNG or JPEG file."}},
    }
    return [b64, *shapes]


def _numeric_value(tensor):
    """One instance's value of a numeric input: numbers nested as its per-example shape (-1: any length);
    a number alone for an input of shape [] or [1]."""
    schema = {"type": "integer" if tensor.numpy_dtype[0] in "iu" else "number"}
    number = dict(schema)
    for size in reversed(tensor.example_shape):
        schema = {"type": "array", "items": schema}
        if size != -1:
            schema.update(minItems=size, maxItems=size)
    return {"anyOf": [number, schema]} if tensor.example_shape in ((), (1,)) else schema


def _numeric_instance(numeric):
    """A row instance of a numeric model: its one input's value (or a table's features by name), or an
    object of its several named inputs."""
    tensors = numeric["tensors"]
    if len(tensors) > 1:
        return closed(object_of(**{tensor.name: _numeric_value(tensor) for tensor in tensors}))
    variants = [_numeric_value(tensors[0])]
    features = numeric["features"]
    if features and tensors[0].example_shape == (len(features),):
        variants.append(closed(object_of(**{feature: {"type": "number"} for feature in features})))
    return variants[0] if len(variants) == 1 else {"anyOf": variants}


def _numeric_example(numeric):
    def zeros(tensor):
        value = 0
        for size in reversed(tensor.example_shape):
            value = [value] * (size if size != -1 else 1)
        return value

    tensors = numeric["tensors"]
    return {t.name: zeros(t) for t in tensors} if len(tensors) > 1 else zeros(tensors[0])


# TF Serving's TensorInfo in JSON (GetModelMetadataResponse): sizes are strings, -1 for the batch.
TENSOR_INFO = object_of(
    dtype=enum_of("DT_STRING", *TF_DTYPES.values()),
    tensor_shape=object_of(dim=array_of(object_of(size=STRING, name=STRING)), unknown_rank=BOOLEAN),
    name=STRING,
)


def _tf_serving_paths(limits, instance, model_name, kind, task, numeric=None):
    """TF Serving's REST API: status, metadata, :predict and :classify, each also under /versions/V and /labels/L
    (MODEL_PATHS); each operation is described anew for every path (build_spec adds responses to it)."""
    requests = _model_requests(limits, instance, kind, task, numeric)
    return {
        prefix + suffix: {method: describe(requests, parameters)}
        for prefix, parameters in _model_path_parameters(model_name)
        for suffix, method, describe in MODEL_OPERATIONS
    }


def _model_path_parameters(model_name):
    """[(path, its parameters)] of MODEL_PATHS in OpenAPI's syntax: a model, a version of it, a label of it."""
    version = {
        "name": "version",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": "^[^/:]+$"},
        "description": "The served version (see the status); any other is a 404.",
    }
    label = {
        "name": "label",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "enum": ["latest", "stable"]},
        "description": "A version label: 'latest' and 'stable' both name the one served version; any other is a 404.",
    }
    return [
        ("/v1/models/{model_name}", [model_name]),
        ("/v1/models/{model_name}/versions/{version}", [model_name, version]),
        ("/v1/models/{model_name}/labels/{label}", [model_name, label]),
    ]


@dataclass(frozen=True)
class _ModelRequests:
    """What the /v1 model operations of one /openapi.json say alike of the served model's requests."""

    limits: dict  # shared.limits
    names: list  # the input names a request may key its values by
    rows: dict  # the schema of :predict's "instances"
    columns: dict  # of its "inputs" (the columnar form)
    classify_example: dict  # of one :classify example
    several_inputs: bool  # a numeric model with several named inputs: its instances are objects of them already
    example_instance: object  # the instance the requests' examples show
    predict_summary: str
    predict_200: str  # what a 200 of :predict holds
    signature: dict  # the schema of "signature_name"


def _model_requests(limits, instance, kind, task, numeric):
    """The _ModelRequests of a model of `kind` and `task` (None: no model loaded) whose row instance is `instance`."""
    if numeric:
        names = [tensor.name for tensor in numeric["tensors"]]
    else:
        names = [INPUT_NAMES[task]] if task else sorted(set(INPUT_NAMES.values()))
    # a typed table's rows are objects of its columns, however many
    several_inputs = bool(numeric) and (len(names) > 1 or numeric["table"] is not None)
    if getattr(TASKS.get(task), "retrieval", False):
        predict_summary = "Embeddings of face crops (faces models)."
        predict_200 = (
            "One embedding (L2-normalised) per face crop; compare by Euclidean distance. For whole photos use :search."
        )
    elif numeric and numeric["regression"]:
        predict_summary = "Predicted values (a regression) for a batch of instances."
        predict_200 = "One number per instance: the model's prediction of its target (see metadata)."
    else:
        predict_summary = "Class probabilities for a batch of instances."
        predict_200 = "One row of probabilities per instance, in label order (see metadata)."
    example_instance = "a wonderful, moving film" if kind != "image" else {"b64": "iVBORw0KGgo..."}
    if numeric and numeric["table"]:
        example_instance = typed.typical_row(numeric["table"])
    elif numeric:
        example_instance = _numeric_example(numeric)
    signature = {
        "type": "string",
        "enum": [SIGNATURE_NAME, ""],
        "description": f"Optional; {SIGNATURE_NAME!r} (or empty) is the only signature.",
    }
    rows, columns, classify_example = _instance_schemas(
        limits["max_instances"], instance, names, numeric, several_inputs
    )
    return _ModelRequests(
        limits,
        names,
        rows,
        columns,
        classify_example,
        several_inputs,
        example_instance,
        predict_summary,
        predict_200,
        signature,
    )


def _instance_schemas(max_instances, instance, names, numeric, several_inputs):
    """(rows, columns, classify_example): the schemas of :predict's "instances" and "inputs" and of one :classify example."""

    def listed(items):
        return {"type": "array", "minItems": 1, "maxItems": max_instances, "items": items}

    if several_inputs:
        # several named inputs: rows are objects of them (`instance`), columns one list per input
        values = {n: listed(instance["properties"][n]) for n in names}
        classify_example = closed(object_of(**{n: instance["properties"][n] for n in names}))
        return listed(instance), closed(object_of(**values)), classify_example
    # A row instance may be keyed by the input name; the columnar form may be an object keyed by it.
    keyed_instance = {
        "type": "object",
        "minProperties": 1,
        "maxProperties": 1,
        "additionalProperties": False,
        "properties": {n: instance for n in names},
    }
    keyed_list = {
        "type": "object",
        "minProperties": 1,
        "maxProperties": 1,
        "additionalProperties": False,
        "properties": {n: listed(instance) for n in names},
    }
    columns = {"anyOf": [listed(instance), keyed_list]}
    return listed({"anyOf": [instance, keyed_instance]}), columns, keyed_instance


NOT_FOUND = "Unknown model name, version or label."
BAD_INSTANCES = "An instance this model cannot take: wrong type, empty or too long text, bad base64, corrupt image, wrong pixel shape or range."


def _status_operation(requests, parameters):
    return {
        "summary": "Model version status (TF Serving's GetModelStatus).",
        "parameters": parameters,
        "responses": {
            "200": json_response(
                "Status of the served version (AVAILABLE), and of a newer published one that could not be served "
                "(END, with the reason); state UNKNOWN while no model was found.",
                ref("ModelStatus"),
            ),
            "404": json_response(NOT_FOUND),
        },
    }


def _metadata_operation(requests, parameters):
    return {
        "summary": "The serving_default signature_def (TF Serving's GetModelMetadata), and labels, input and limits under metadata.disttrain.",
        "parameters": parameters,
        "responses": {
            "200": json_response("Metadata.", ref("Metadata")),
            "404": json_response(NOT_FOUND),
            "503": json_response("No model is loaded."),
        },
    }


def _predict_operation(requests, parameters):
    rows, columns, signature = requests.rows, requests.columns, requests.signature
    return {
        "summary": requests.predict_summary,
        "description": "TF Serving's Predict. Row form: {\"instances\": [...]} answers {\"predictions\": [...]}; columnar form: "
        "{\"inputs\": [...]} or {\"inputs\": {\"<input name>\": [...]}} answers {\"outputs\": [...]}. Row instances may be "
        "keyed by the input name ({\"<input name>\": value}). Text models take strings; image models take {\"b64\": ...} "
        "(an encoded image file) or pixel arrays [height][width][channels] (or [height][width] for one channel); "
        "a typed table's model rows of its columns ({\"<column>\": value, ...}, null for a missing value) or one list "
        "per column. "
        f"The request body may be at most {requests.limits['max_upload_bytes']} bytes.",
        "parameters": parameters,
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "oneOf": [
                            {
                                "type": "object",
                                "required": ["instances"],
                                "properties": {"instances": rows, "signature_name": signature},
                                "not": {"required": ["inputs"]},
                            },
                            {
                                "type": "object",
                                "required": ["inputs"],
                                "properties": {"inputs": columns, "signature_name": signature},
                                "not": {"required": ["instances"]},
                            },
                        ]
                    },
                    "example": {"instances": [requests.example_instance]},
                }
            },
        },
        "responses": {
            "200": json_response(
                requests.predict_200 + " Under \"predictions\" for a row request, \"outputs\" for a columnar one.",
                {"oneOf": [ref("Predictions"), ref("Outputs")]},
            ),
            "400": json_response(
                "Not a predict request: empty or invalid JSON, not an object, no instance list, empty list, "
                "an unknown signature_name, a columnar object not keyed by the input name; for a numeric "
                "(table, array) model also an instance that does not fit its inputs: a missing or unknown "
                "input or feature, a wrong shape, a value that is not a finite number of the input's dtype; "
                "for a typed table's model a missing or unknown column, a value its column cannot take "
                "(text in a number column, null where the column had no missing value), or an instance "
                "the model answers NaN for."
            ),
            "404": json_response(NOT_FOUND),
            "413": json_response("Body over the upload limit, or more instances than allowed."),
            "422": json_response(BAD_INSTANCES),
            "503": json_response("No model is loaded."),
        },
    }


def _classify_operation(requests, parameters):
    example = requests.example_instance if requests.several_inputs else {requests.names[0]: requests.example_instance}
    return {
        "summary": "TF Serving's Classify: [label, score] pairs per example, in label order (classifiers only).",
        "parameters": parameters,
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": with_optional(
                        object_of(
                            examples={
                                "type": "array",
                                "minItems": 1,
                                "maxItems": requests.limits["max_instances"],
                                # {} when "context" holds the feature
                                "items": {**requests.classify_example, "minProperties": 0},
                            }
                        ),
                        signature_name=requests.signature,
                        context={
                            "type": "object",
                            "description": "Features shared by every example (then absent from the examples).",
                        },
                    ),
                    "example": {"examples": [example]},
                }
            },
        },
        "responses": {
            "200": json_response("One list of [label, score] per example.", ref("ClassifyResult")),
            "400": json_response(
                "Not a classify request: empty or invalid JSON, no examples, an unknown signature_name, a feature in both context and an example."
            ),
            "404": json_response(NOT_FOUND),
            "409": json_response("The served model is a faces model or a regression, which have no classes."),
            "413": json_response("Body over the upload limit, or more examples than allowed."),
            "422": json_response(
                "An example this model cannot take: not an object keyed by the input name, or "
                + BAD_INSTANCES[0].lower()
                + BAD_INSTANCES[1:]
            ),
            "503": json_response("No model is loaded."),
        },
    }


# The operations under each model path, in /openapi.json's order: (suffix, method, the function describing the
# operation from the _ModelRequests and the path's parameters).
MODEL_OPERATIONS = (
    ("", "get", _status_operation),
    ("/metadata", "get", _metadata_operation),
    (":predict", "post", _predict_operation),
    (":classify", "post", _classify_operation),
)
