"""The OpenAPI 3 description served at /openapi.json.

Built per request from the live limits and, when a model is loaded, its input
kind, so the schema a fuzzer reads is the one the server enforces: instance
schemas for a text model accept only strings, for an image model only
{"b64": ...} objects or pixel arrays, for a numeric model (table, array) numbers
nested as its inputs' shapes (or objects of its named inputs, or of a table's
features).
"""

from disttrain_server import progress, runs
from disttrain_server.security import PROBE_PATHS, is_api
from disttrain_server.signature import INPUT_NAMES, OUTPUT_NAMES, PREDICT_METHOD, SIGNATURE_NAME, TF_DTYPES, V2_DATATYPES

ERROR = {"$ref": "#/components/schemas/Error"}
STRING = {"type": "string"}
INTEGER = {"type": "integer"}
BOOLEAN = {"type": "boolean"}


def _object(**properties):
    """An object schema whose listed properties are all required (others are allowed)."""
    return {"type": "object", "required": list(properties), "properties": properties}


def _with_optional(schema, **properties):
    return {**schema, "properties": {**schema["properties"], **properties}}


def _array(items):
    return {"type": "array", "items": items}


def _enum(*values):
    return {"type": "string", "enum": list(values)}


def _response(description, schema=ERROR):
    return {"description": description, "content": {"application/json": {"schema": schema}}}


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
        return _with_closed(_object(**{tensor.name: _numeric_value(tensor) for tensor in tensors}))
    variants = [_numeric_value(tensors[0])]
    features = numeric["features"]
    if features and tensors[0].example_shape == (len(features),):
        variants.append(_with_closed(_object(**{feature: {"type": "number"} for feature in features})))
    return variants[0] if len(variants) == 1 else {"anyOf": variants}


def _with_closed(schema):
    return {**schema, "additionalProperties": False}


def _numeric_example(numeric):
    def zeros(tensor):
        value = 0
        for size in reversed(tensor.example_shape):
            value = [value] * (size if size != -1 else 1)
        return value

    tensors = numeric["tensors"]
    return {t.name: zeros(t) for t in tensors} if len(tensors) > 1 else zeros(tensors[0])


def _photo_body(example, **fields):
    """A photo upload: multipart (a browser form) or JSON with TF Serving's {"b64": ...}."""
    form = {"image": {"type": "string", "format": "binary", "description": "The photo file (PNG or JPEG)."}}
    form.update({key: {"type": "string", "description": schema["description"]} for key, schema in fields.items()})
    b64 = {
        "type": "object",
        "required": ["b64"],
        "additionalProperties": False,
        "properties": {"b64": {"type": "string", "format": "byte", "description": "base64 of the photo file (PNG or JPEG)."}},
    }
    required = ["image"] + [key for key, schema in fields.items() if schema.pop("required", False)]
    return {
        "required": True,
        "content": {
            "multipart/form-data": {"schema": {"type": "object", "required": required, "properties": form}},
            "application/json": {"schema": {"type": "object", "required": required, "properties": {"image": b64, **fields}}, "example": example},
        },
    }


def _gallery_paths(limits, model_name, unknown_model):
    entry_id = {"name": "entry_id", "in": "path", "required": True, "schema": STRING, "description": "A gallery entry's id."}
    no_entry = _response("No gallery entry with this id.")
    upload = ("The photo goes through the same face detector as the training photos; the most face-like one is used "
              f"(eyes found in it, then the detector's confidence). The body may be at most {limits['max_upload_bytes']} bytes.")
    return {
        "/v1/models/{model_name}:search": {
            "post": {
                "summary": "The enrolled people nearest to the face in a photo (faces models).",
                "description": f"{upload} The photo is not stored. Matches are sorted by Euclidean distance between embeddings, "
                "nearest first (the same person is typically below 0.5, different people around 1). An empty gallery answers 200 "
                "with no matches and a note.",
                "parameters": [model_name],
                "requestBody": _photo_body(
                    {"image": {"b64": "/9j/4AAQSkZJRg..."}, "k": 3},
                    k={"type": "integer", "minimum": 1, "maximum": 100, "description": "How many matches (default --top-k)."},
                ),
                "responses": {
                    "200": _response("The face used and the nearest entries.", {"$ref": "#/components/schemas/SearchResult"}),
                    "400": _response("Not a search request: no image field, or a body that is not a JSON object."),
                    "404": unknown_model,
                    "409": _response("The served model is not a faces model."),
                    "413": _response("Body over the upload limit."),
                    "422": _response("Unusable content: not base64, not a decodable image, no face found, k out of range."),
                    "503": _response("No model is loaded."),
                },
            }
        },
        "/v1/gallery": {
            "get": {
                "summary": "The enrolled people, oldest first.",
                "responses": {"200": _response("The gallery.", {"$ref": "#/components/schemas/Gallery"})},
            },
            "post": {
                "summary": "Enrol a person from a photo.",
                "description": f"{upload} The face is embedded once now (and once per newly published model), never per search.",
                "requestBody": _photo_body(
                    {"name": "Ada Lovelace", "image": {"b64": "/9j/4AAQSkZJRg..."}},
                    name={"type": "string", "minLength": 1, "maxLength": 100, "required": True, "description": "The person's name (1 to 100 characters)."},
                ),
                "responses": {
                    "201": _response("The new entry; `note` says if the photo had several faces.", {"$ref": "#/components/schemas/GalleryEntry"}),
                    "400": _response("No image or no name field, or a body that is not a JSON object."),
                    "413": _response("Body over the upload limit."),
                    "422": _response("Unusable content: an empty or too long name, not base64, not a decodable image, no face found."),
                    "503": _response("The gallery folder cannot be written."),
                },
            },
        },
        "/v1/gallery/{entry_id}": {
            "delete": {
                "summary": "Remove an entry (its crop, thumbnail and embeddings).",
                "parameters": [entry_id],
                "responses": {
                    "200": _response("The removed entry.", _object(deleted={"$ref": "#/components/schemas/GalleryEntry"})),
                    "404": no_entry,
                    "503": _response("The gallery folder cannot be written."),
                },
            }
        },
        "/v1/gallery/{entry_id}/thumbnail.png": {
            "get": {
                "summary": "A small colour picture of the entry's face.",
                "parameters": [entry_id],
                "responses": {"200": {"description": "PNG image.", "content": {"image/png": {"schema": {"type": "string", "format": "binary"}}}}, "404": no_entry},
            }
        },
    }


def _ref(name):
    return {"$ref": f"#/components/schemas/{name}"}


# TF Serving's TensorInfo in JSON (GetModelMetadataResponse): sizes are strings, -1 for the batch.
TENSOR_INFO = _object(
    dtype=_enum("DT_STRING", *TF_DTYPES.values()),
    tensor_shape=_object(dim=_array(_object(size=STRING, name=STRING)), unknown_rank=BOOLEAN),
    name=STRING,
)
V2_TENSOR = _object(name=STRING, datatype=_enum(*V2_DATATYPES.values()), shape=_array(INTEGER))
# Data: flat or nested row-major; elements are strings (BYTES) or numbers.
V2_DATA = {"type": "array", "items": {}, "description": "The tensor's elements in row-major order, flat or nested."}
V2_PARAMETERS = {"type": "object", "nullable": True, "description": "Accepted and ignored: no parameters are defined."}
V2_SCHEMAS = {
    "V2ServerMetadata": _object(name=STRING, version=STRING, extensions=_array(STRING)),
    "V2Live": _object(live=BOOLEAN),
    "V2Ready": _object(ready=BOOLEAN),
    "V2ModelReady": _object(name=STRING, ready=BOOLEAN),
    "V2ModelMetadata": _object(name=STRING, versions=_array(STRING), platform=STRING, inputs=_array(V2_TENSOR), outputs=_array(V2_TENSOR)),
    "V2InferRequest": {
        **_with_optional(
            _object(inputs={"type": "array", "minItems": 1, "maxItems": 1,
                            "items": _with_optional(_object(name=STRING, shape=_array({"type": "integer", "minimum": 0}),
                                                            datatype=_enum("BYTES", "UINT8"), data=V2_DATA), parameters=V2_PARAMETERS)}),
            id=STRING,
            parameters=V2_PARAMETERS,
            outputs=_array(_with_optional(_object(name=STRING), parameters=V2_PARAMETERS)),
        ),
        "description": "One input, named as the model's metadata says: BYTES [n] (or [n, 1]) of texts for a text model; "
        "UINT8 [n, height, width, channels] of pixels, or BYTES [n] of base64 PNG/JPEG files, for an image or faces model.",
    },
    "V2InferResponse": _with_optional(
        _object(model_name=STRING, model_version=STRING, outputs=_array(_object(name=STRING, datatype=_enum("FP32"), shape=_array(INTEGER), data=V2_DATA))),
        id={"type": "string", "description": "The request's id, if it had one."},
    ),
}


def _tf_serving_paths(limits, instance, model_name, kind, task, numeric=None):
    """TF Serving's REST API: status, metadata, :predict and :classify, each also under /versions/V and /labels/L."""
    if numeric:
        names = [tensor.name for tensor in numeric["tensors"]]
    else:
        names = [INPUT_NAMES[task]] if task else sorted(set(INPUT_NAMES.values()))
    instance_list = {"type": "array", "minItems": 1, "maxItems": limits["max_instances"], "items": instance}
    # A row instance may be keyed by the input name; the columnar form may be an object keyed by it.
    keyed_instance = {"type": "object", "minProperties": 1, "maxProperties": 1, "additionalProperties": False, "properties": {n: instance for n in names}}
    rows = {"type": "array", "minItems": 1, "maxItems": limits["max_instances"], "items": {"anyOf": [instance, keyed_instance]}}
    columns = {"anyOf": [instance_list, {"type": "object", "minProperties": 1, "maxProperties": 1, "additionalProperties": False,
                                         "properties": {n: instance_list for n in names}}]}
    if numeric and len(names) > 1:
        # several named inputs: rows are objects of them (`instance`), columns one list per input
        values = {tensor.name: {"type": "array", "minItems": 1, "maxItems": limits["max_instances"], "items": _numeric_value(tensor)}
                  for tensor in numeric["tensors"]}
        keyed_instance = _with_closed(_object(**{n: instance["properties"][n] for n in names}))
        rows = {"type": "array", "minItems": 1, "maxItems": limits["max_instances"], "items": instance}
        columns = _with_closed(_object(**values))
    signature = {"type": "string", "enum": [SIGNATURE_NAME, ""], "description": f"Optional; {SIGNATURE_NAME!r} (or empty) is the only signature."}
    version = {"name": "version", "in": "path", "required": True, "schema": {"type": "string", "pattern": "^[^/:]+$"},
               "description": "The served version (see the status); any other is a 404."}
    label = {"name": "label", "in": "path", "required": True, "schema": {"type": "string", "enum": ["latest", "stable"]},
             "description": "A version label: 'latest' and 'stable' both name the one served version; any other is a 404."}
    not_found = _response("Unknown model name, version or label.")
    if task == "faces":
        predict_summary = "Embeddings of face crops (faces models)."
        predict_200 = "One embedding (L2-normalised) per face crop; compare by Euclidean distance. For whole photos use :search."
    elif numeric and numeric["regression"]:
        predict_summary = "Predicted values (a regression) for a batch of instances."
        predict_200 = "One number per instance: the model's prediction of its target (see metadata)."
    else:
        predict_summary = "Class probabilities for a batch of instances."
        predict_200 = "One row of probabilities per instance, in label order (see metadata)."
    example_instance = "a wonderful, moving film" if kind != "image" else {"b64": "iVBORw0KGgo..."}
    if numeric:
        example_instance = _numeric_example(numeric)
    bad_instances = "An instance this model cannot take: wrong type, empty or too long text, bad base64, corrupt image, wrong pixel shape or range."
    paths = {}
    for prefix, extra in (("/v1/models/{model_name}", []), ("/v1/models/{model_name}/versions/{version}", [version]),
                          ("/v1/models/{model_name}/labels/{label}", [label])):
        parameters = [model_name, *extra]
        paths[prefix] = {
            "get": {
                "summary": "Model version status (TF Serving's GetModelStatus).",
                "parameters": parameters,
                "responses": {
                    "200": _response("Status of the served version; state UNKNOWN while no model is loaded.", _ref("ModelStatus")),
                    "404": not_found,
                },
            }
        }
        paths[prefix + "/metadata"] = {
            "get": {
                "summary": "The serving_default signature_def (TF Serving's GetModelMetadata), and labels, input and limits under metadata.disttrain.",
                "parameters": parameters,
                "responses": {"200": _response("Metadata.", _ref("Metadata")), "404": not_found, "503": _response("No model is loaded.")},
            }
        }
        paths[prefix + ":predict"] = {
            "post": {
                "summary": predict_summary,
                "description": "TF Serving's Predict. Row form: {\"instances\": [...]} answers {\"predictions\": [...]}; columnar form: "
                "{\"inputs\": [...]} or {\"inputs\": {\"<input name>\": [...]}} answers {\"outputs\": [...]}. Row instances may be "
                "keyed by the input name ({\"<input name>\": value}). Text models take strings; image models take {\"b64\": ...} "
                "(an encoded image file) or pixel arrays [height][width][channels] (or [height][width] for one channel). "
                f"The request body may be at most {limits['max_upload_bytes']} bytes.",
                "parameters": parameters,
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "oneOf": [
                                    {"type": "object", "required": ["instances"], "properties": {"instances": rows, "signature_name": signature}, "not": {"required": ["inputs"]}},
                                    {"type": "object", "required": ["inputs"], "properties": {"inputs": columns, "signature_name": signature}, "not": {"required": ["instances"]}},
                                ]
                            },
                            "example": {"instances": [example_instance]},
                        }
                    },
                },
                "responses": {
                    "200": _response(predict_200 + " Under \"predictions\" for a row request, \"outputs\" for a columnar one.",
                                     {"oneOf": [_ref("Predictions"), _ref("Outputs")]}),
                    "400": _response("Not a predict request: empty or invalid JSON, not an object, no instance list, empty list, "
                                     "an unknown signature_name, a columnar object not keyed by the input name; for a numeric "
                                     "(table, array) model also an instance that does not fit its inputs: a missing or unknown "
                                     "input or feature, a wrong shape, a value that is not a finite number of the input's dtype."),
                    "404": not_found,
                    "413": _response("Body over the upload limit, or more instances than allowed."),
                    "422": _response(bad_instances),
                    "503": _response("No model is loaded."),
                },
            }
        }
        paths[prefix + ":classify"] = {
            "post": {
                "summary": "TF Serving's Classify: [label, score] pairs per example, in label order (classifiers only).",
                "parameters": parameters,
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": _with_optional(
                                _object(examples={"type": "array", "minItems": 1, "maxItems": limits["max_instances"],
                                                  "items": {**keyed_instance, "minProperties": 0}}),  # {} when "context" holds the feature
                                signature_name=signature,
                                context={"type": "object", "description": "Features shared by every example (then absent from the examples)."},
                            ),
                            "example": {"examples": [example_instance if numeric and len(names) > 1 else {names[0]: example_instance}]},
                        }
                    },
                },
                "responses": {
                    "200": _response("One list of [label, score] per example.", _ref("ClassifyResult")),
                    "400": _response("Not a classify request: empty or invalid JSON, no examples, an unknown signature_name, a feature in both context and an example."),
                    "404": not_found,
                    "409": _response("The served model is a faces model or a regression, which have no classes."),
                    "413": _response("Body over the upload limit, or more examples than allowed."),
                    "422": _response("An example this model cannot take: not an object keyed by the input name, or " + bad_instances[0].lower() + bad_instances[1:]),
                    "503": _response("No model is loaded."),
                },
            }
        }
    return paths


def _v2_paths(model_name, task, numeric=None):
    """KServe's Open Inference Protocol (REST): server and model health and metadata, typed-tensor inference."""
    version = {"name": "version", "in": "path", "required": True, "schema": {"type": "string"},
               "description": "The served version (versions in the model metadata); any other is a 404."}
    not_found = _response("Unknown model name or version.")
    output = OUTPUT_NAMES.get(task, "probabilities") if task else "probabilities (classifiers) or embedding (faces)"
    if numeric and numeric["regression"]:
        output = "value"
    paths = {
        "/v2": {"get": {"summary": "Server metadata (Open Inference Protocol).", "responses": {"200": _response("The server.", _ref("V2ServerMetadata"))}}},
        "/v2/health/live": {"get": {"summary": "Server liveness (V2).", "responses": {"200": _response("Alive.", _ref("V2Live"))}}},
        "/v2/health/ready": {
            "get": {
                "summary": "Server readiness (V2): the model is loaded.",
                "responses": {"200": _response("Ready.", _ref("V2Ready")), "503": _response("No model is loaded.", _ref("V2Ready"))},
            }
        },
    }
    for prefix, extra in (("/v2/models/{model_name}", []), ("/v2/models/{model_name}/versions/{version}", [version])):
        parameters = [model_name, *extra]
        paths[prefix] = {
            "get": {
                "summary": "Model metadata (V2): its one input and one output, with datatype and shape.",
                "parameters": parameters,
                "responses": {"200": _response("Metadata.", _ref("V2ModelMetadata")), "404": not_found, "503": _response("No model is loaded.")},
            }
        }
        paths[prefix + "/ready"] = {
            "get": {
                "summary": "Model readiness (V2).",
                "parameters": parameters,
                "responses": {"200": _response("Ready.", _ref("V2ModelReady")), "404": not_found, "503": _response("Not loaded.", _ref("V2ModelReady"))},
            }
        }
        paths[prefix + "/infer"] = {
            "post": {
                "summary": f"Inference (V2): FP32 [n, width] output {output!r} ([n] for a regression's 'value'); the request's id is echoed.",
                "parameters": parameters,
                "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("V2InferRequest")}}},
                "responses": {
                    "200": _response("The output tensor.", _ref("V2InferResponse")),
                    "400": _response("Not an inference request for this model: invalid JSON, an unknown input or output name, "
                                     "a datatype it does not take, a shape that does not fit it or disagrees with the data."),
                    "404": not_found,
                    "413": _response("Body over the upload limit, or more instances than allowed."),
                    "422": _response("An instance this model cannot take: empty or too long text, bad base64, corrupt image."),
                    "503": _response("No model is loaded."),
                },
            }
        }
    return paths


def build_spec(name, limits, input_spec=None, task=None, numeric=None):
    """`limits`: max_instances, max_text_chars, max_upload_bytes; `input_spec` and `task`: the model's, if loaded;
    `numeric`: a loaded table or array model's {"tensors" (signature.input_tensors), "features", "regression"}."""
    kind = input_spec["kind"] if input_spec else None
    variants = []
    if kind in ("text", None):
        variants.append(_text_instance(limits["max_text_chars"]))
    if kind in ("image", None):
        variants.extend(_image_instances(input_spec if kind == "image" else None))
    if numeric:
        variants = [_numeric_instance(numeric)]
    instance = variants[0] if len(variants) == 1 else {"anyOf": variants}
    model_name = {
        "name": "model_name",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": "^[^/:]+$"},
        "description": f"The served model's name: {name!r}. Any other name is a 404.",
    }
    unknown_model = _response("Unknown model name.")
    rows = _array(_array({"type": "number", "minimum": -1 if task == "faces" else 0, "maximum": 1}))
    if numeric and numeric["regression"]:
        rows = _array({"type": "number"})
    spec = {
        "openapi": "3.0.3",
        "info": {
            "title": "disttrain model server",
            "version": "1",
            "description": "The model disttrain trained, behind TensorFlow Serving's REST API (/v1) and KServe's Open "
            "Inference Protocol (/v2). "
            'Every error is JSON: {"error": "<message>"}. '
            "With a token configured (--api-token-file), gallery writes, or every /v1 and /v2 call except the /v2/health "
            "probes (--token-required-for all), "
            "need `Authorization: Bearer <token>`. POST bodies must be application/json or multipart/form-data; multipart "
            "also needs an X-Requested-With header. Images must be PNG or JPEG.",
        },
        "paths": {
            "/healthz": {
                "get": {
                    "summary": "Liveness: the process answers.",
                    "responses": {"200": _response("Alive.", {"$ref": "#/components/schemas/Health"})},
                }
            },
            "/readyz": {
                "get": {
                    "summary": "Readiness: a model is loaded in this process.",
                    "responses": {
                        "200": _response("A model is loaded.", {"$ref": "#/components/schemas/Ready"}),
                        "503": _response("No model could be loaded; `reason` says why.", {"$ref": "#/components/schemas/NotReady"}),
                    },
                }
            },
            **_tf_serving_paths(limits, instance, model_name, kind, task, numeric),
            **_v2_paths(model_name, task, numeric),
            **_gallery_paths(limits, model_name, unknown_model),
            "/report": {
                "get": {
                    "summary": "The aggregator's report.json (per-worker and final held-out metrics).",
                    "responses": {
                        "200": {"description": "The report.", "content": {"application/json": {"schema": {"type": "object"}}}},
                        "404": _response("No report next to the served model."),
                    },
                }
            },
            **progress.openapi_paths(),
            **runs.openapi_paths(),
            "/openapi.json": {
                "get": {
                    "summary": "This description.",
                    "responses": {"200": {"description": "OpenAPI 3 document.", "content": {"application/json": {"schema": {"type": "object"}}}}},
                }
            },
            "/": {
                "get": {
                    "summary": "The web demo page.",
                    "responses": {"200": {"description": "HTML page.", "content": {"text/html": {"schema": {"type": "string"}}}}},
                }
            },
        },
        "components": {
            "schemas": {
                "Error": _object(error=STRING),
                "Health": _object(status=_enum("ok")),
                "Ready": _with_optional(
                    _object(status=_enum("ready"), model=STRING, version=STRING),
                    # present when micro-batching is on: this worker process's counts so far
                    batching=_object(max_batch_size=INTEGER, model_calls=INTEGER, requests=INTEGER, instances=INTEGER),
                ),
                "NotReady": _object(status=_enum("unavailable"), reason=STRING),
                "ModelStatus": _with_optional(
                    _object(
                        model_version_status=_array(
                            _object(
                                version=STRING,
                                state=_enum("AVAILABLE", "UNKNOWN"),
                                status=_object(error_code=STRING, error_message=STRING),
                            )
                        )
                    ),
                    ready={"type": "boolean", "description": "Not TF Serving's: what KServe's V1 clients read (is_model_ready)."},
                ),
                "Metadata": _object(
                    model_spec=_object(name=STRING, signature_name=STRING, version=STRING),
                    metadata=_object(
                        signature_def=_object(signature_def=_object(serving_default=_object(
                            inputs={"type": "object", "additionalProperties": TENSOR_INFO},
                            outputs={"type": "object", "additionalProperties": TENSOR_INFO},
                            method_name=_enum(PREDICT_METHOD),
                        ))),
                        disttrain=_object(
                            task=STRING,
                            labels=_array(STRING),
                            input=_object(kind=_enum("text", "image", "table", "array")),  # plus height, width, channels for images; ...
                            limits=_object(max_instances=INTEGER, max_text_chars=INTEGER, max_upload_bytes=INTEGER, max_request_pixels=INTEGER),
                        ),
                    ),
                ),
                # Probabilities for a classifier; embedding components (-1..1) for a faces model.
                "Predictions": _object(predictions=rows),
                "Outputs": _object(outputs=rows),
                "ClassifyResult": _object(result=_array(_array({"type": "array", "minItems": 2, "maxItems": 2, "items": {"anyOf": [STRING, {"type": "number"}]},
                                                                 "description": "[label, score]"}))),
                **V2_SCHEMAS,
                "GalleryEntry": {
                    # confidence and eyes: entries enrolled before the detector reported them have neither
                    **_with_optional(_object(id=STRING, name=STRING, box=_array(INTEGER), faces_found=INTEGER, created=STRING,
                                             thumbnail=STRING), confidence={"type": "number"}, eyes=INTEGER),
                    "description": "box is [x, y, width, height] of the face in the enrolled photo; thumbnail is its URL path; "
                    "source is 'api' or 'seed:<file>'; note (on enrolment) says if the photo had several faces.",
                },
                "Gallery": _object(count=INTEGER, entries=_array({"$ref": "#/components/schemas/GalleryEntry"})),
                "SearchResult": {
                    **_object(
                        model_spec=_object(name=STRING, version=STRING),
                        face=_object(box=_array(INTEGER), confidence={"type": "number"}, eyes=INTEGER),
                        faces_found=INTEGER,
                        matches=_array(_object(name=STRING, id=STRING, distance={"type": "number", "minimum": 0})),
                    ),
                    "description": "face.box is [x, y, width, height] of the face used (the most face-like: eyes found, then "
                    "face.confidence, the face detector's score, higher is more face-like, not a probability); note appears when "
                    "several faces were found or the gallery is empty.",
                },
            },
            "securitySchemes": {"bearerToken": {"type": "http", "scheme": "bearer", "description": "--api-token-file's token"}},
        },
    }
    if numeric:
        spec["components"]["schemas"]["V2InferRequest"] = _v2_numeric_request(numeric)
    return _with_security_responses(spec)


def _v2_numeric_request(numeric):
    """A numeric model's V2 request: each of its inputs once, in any order, a numeric datatype."""
    from disttrain_server.v2 import accepted_datatypes

    tensors = numeric["tensors"]
    datatypes = sorted({datatype for tensor in tensors for datatype in accepted_datatypes(tensor)})
    item = _with_optional(_object(name=_enum(*(t.name for t in tensors)), shape=_array({"type": "integer", "minimum": 0}),
                                  datatype=_enum(*datatypes), data=V2_DATA), parameters=V2_PARAMETERS)
    schema = V2_SCHEMAS["V2InferRequest"]
    request = {**schema, "properties": {**schema["properties"], "inputs": {"type": "array", "minItems": len(tensors),
                                                                           "maxItems": len(tensors), "items": item}}}
    request["description"] = ("Each of the model's inputs once (see /v2/models/NAME), shape [n, *its shape] ([n] also for an "
                              "input of shape [1]): a float input takes any numeric datatype (cast to its dtype), an integer "
                              "input integer datatypes only.")
    return request


# What security.py and uploads.py may answer, by operation (the probes skip every check).
SECURITY_RESPONSES = {
    "any": {"400": "The Host header is not in --allowed-hosts."},
    "api": {"401": "This call needs the API token (Authorization: Bearer), or the token is wrong."},
    "write": {"403": "A cross-site browser request (Origin, Sec-Fetch-Site), multipart without X-Requested-With, or a write to a --read-only-gallery."},
    "body": {"415": "The body is not application/json or multipart/form-data, or an image is not a PNG or JPEG "
             "(:predict, :classify and V2 infer also read a text/plain, form-urlencoded or untyped body as JSON)."},
    "images": {"413": "Images over --max-request-pixels in total, or the body over the upload limit."},
    "enrol": {"507": "The gallery is full: --gallery-max-entries or --gallery-max-mb."},
}


def _with_security_responses(spec):
    for path, operations in spec["paths"].items():
        if path in PROBE_PATHS:
            continue
        for method, operation in operations.items():
            if method not in ("get", "post", "delete"):
                continue  # path-level "parameters"
            kinds = ["any"]
            kinds += ["api"] if is_api(path) else []
            kinds += ["write"] if method in ("post", "delete") else []
            kinds += ["body", "images"] if method == "post" else []
            kinds += ["enrol"] if (path, method) == ("/v1/gallery", "post") else []
            for kind in kinds:
                for status, description in SECURITY_RESPONSES[kind].items():
                    operation["responses"].setdefault(status, _response(description))
    return spec
