"""The OpenAPI 3 description served at /openapi.json.

Built per request from the live limits and, when a model is loaded, its input
kind, so the schema a fuzzer reads is the one the server enforces: instance
schemas for a text model accept only strings, for an image model only
{"b64": ...} objects or pixel arrays.
"""

ERROR = {"$ref": "#/components/schemas/Error"}
STRING = {"type": "string"}
INTEGER = {"type": "integer"}


def _object(**properties):
    """An object schema whose listed properties are all required (others are allowed)."""
    return {"type": "object", "required": list(properties), "properties": properties}


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
        "properties": {"b64": {"type": "string", "format": "byte", "description": "base64 of an encoded image file (PNG, JPEG, ...)."}},
    }
    return [b64, *shapes]


def build_spec(name, limits, input_spec=None):
    """`limits`: max_instances, max_text_chars, max_upload_bytes; `input_spec`: the model's, if loaded."""
    kind = input_spec["kind"] if input_spec else None
    variants = []
    if kind in ("text", None):
        variants.append(_text_instance(limits["max_text_chars"]))
    if kind in ("image", None):
        variants.extend(_image_instances(input_spec if kind == "image" else None))
    instance = variants[0] if len(variants) == 1 else {"anyOf": variants}
    instance_list = {"type": "array", "minItems": 1, "maxItems": limits["max_instances"], "items": instance}
    model_name = {
        "name": "model_name",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": "^[^/:]+$"},
        "description": f"The served model's name: {name!r}. Any other name is a 404.",
    }
    unknown_model = _response("Unknown model name.")
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "disttrain model server",
            "version": "1",
            "description": "TensorFlow-Serving-shaped REST API for the model disttrain trained. "
            'Every error is JSON: {"error": "<message>"}.',
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
            "/v1/models/{model_name}": {
                "get": {
                    "summary": "Model version status (TF Serving shape).",
                    "parameters": [model_name],
                    "responses": {
                        "200": _response("Status of the served version; state UNKNOWN while no model is loaded.", {"$ref": "#/components/schemas/ModelStatus"}),
                        "404": unknown_model,
                    },
                }
            },
            "/v1/models/{model_name}/metadata": {
                "get": {
                    "summary": "Labels and input spec of the served model.",
                    "parameters": [model_name],
                    "responses": {
                        "200": _response("Metadata.", {"$ref": "#/components/schemas/Metadata"}),
                        "404": unknown_model,
                        "503": _response("No model is loaded."),
                    },
                }
            },
            "/v1/models/{model_name}:predict": {
                "post": {
                    "summary": "Class probabilities for a batch of instances.",
                    "description": "Text models take strings; image models take {\"b64\": ...} (an encoded image file) "
                    "or pixel arrays [height][width][channels] (or [height][width] for one channel). "
                    f"The request body may be at most {limits['max_upload_bytes']} bytes.",
                    "parameters": [model_name],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "oneOf": [
                                        {"type": "object", "required": ["instances"], "properties": {"instances": instance_list}, "not": {"required": ["inputs"]}},
                                        {"type": "object", "required": ["inputs"], "properties": {"inputs": instance_list}, "not": {"required": ["instances"]}},
                                    ]
                                },
                                "example": {"instances": ["a wonderful, moving film"] if kind != "image" else [{"b64": "iVBORw0KGgo..."}]},
                            }
                        },
                    },
                    "responses": {
                        "200": _response("One row of probabilities per instance, in label order (see metadata).", {"$ref": "#/components/schemas/Predictions"}),
                        "400": _response("Not a predict request: empty or invalid JSON, not an object, no instance list, empty list."),
                        "404": unknown_model,
                        "413": _response("Body over the upload limit, or more instances than allowed."),
                        "422": _response("An instance this model cannot take: wrong type, empty or too long text, bad base64, corrupt image, wrong pixel shape or range."),
                        "503": _response("No model is loaded."),
                    },
                }
            },
            "/report": {
                "get": {
                    "summary": "The aggregator's report.json (per-worker and final held-out metrics).",
                    "responses": {
                        "200": {"description": "The report.", "content": {"application/json": {"schema": {"type": "object"}}}},
                        "404": _response("No report next to the served model."),
                    },
                }
            },
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
                "Ready": _object(status=_enum("ready"), model=STRING, version=STRING),
                "NotReady": _object(status=_enum("unavailable"), reason=STRING),
                "ModelStatus": _object(
                    model_version_status=_array(
                        _object(
                            version=STRING,
                            state=_enum("AVAILABLE", "UNKNOWN"),
                            status=_object(error_code=STRING, error_message=STRING),
                        )
                    )
                ),
                "Metadata": _object(
                    model_spec=_object(name=STRING, version=STRING),
                    metadata=_object(
                        task=STRING,
                        labels=_array(STRING),
                        input=_object(kind=_enum("text", "image")),  # plus height, width, channels for images
                        limits=_object(max_instances=INTEGER, max_text_chars=INTEGER, max_upload_bytes=INTEGER),
                    ),
                ),
                "Predictions": _object(predictions=_array(_array({"type": "number", "minimum": 0, "maximum": 1}))),
            }
        },
    }
