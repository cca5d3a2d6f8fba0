"""The OpenAPI 3 description served at /openapi.json.

Built per request from the live limits and, when a model is loaded, its input
kind, so the schema a fuzzer reads is the one the server enforces: instance
schemas for a text model accept only strings, for an image model only
{"b64": ...} objects or pixel arrays.
"""

from disttrain_server import progress

ERROR = {"$ref": "#/components/schemas/Error"}
STRING = {"type": "string"}
INTEGER = {"type": "integer"}


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
    upload = f"The photo goes through the same face detector as the training photos; the most face-like one is used (eyes found in it, then the detector's confidence). The body may be at most {limits['max_upload_bytes']} bytes."
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


def build_spec(name, limits, input_spec=None, task=None):
    """`limits`: max_instances, max_text_chars, max_upload_bytes; `input_spec` and `task`: the model's, if loaded."""
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
    if task == "faces":
        predict_summary = "Embeddings of face crops (faces models)."
        predict_200 = "One embedding (L2-normalised) per face crop; compare by Euclidean distance. For whole photos use :search."
    else:
        predict_summary = "Class probabilities for a batch of instances."
        predict_200 = "One row of probabilities per instance, in label order (see metadata)."
    spec = {
        "openapi": "3.0.3",
        "info": {
            "title": "disttrain model server",
            "version": "1",
            "description": "TensorFlow-Serving-shaped REST API for the model disttrain trained. "
            'Every error is JSON: {"error": "<message>"}. '
            "With a token configured (--api-token-file), gallery writes, or every /v1 call (--token-required-for all), "
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
                    "summary": predict_summary,
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
                        "200": _response(predict_200, {"$ref": "#/components/schemas/Predictions"}),
                        "400": _response("Not a predict request: empty or invalid JSON, not an object, no instance list, empty list."),
                        "404": unknown_model,
                        "413": _response("Body over the upload limit, or more instances than allowed."),
                        "422": _response("An instance this model cannot take: wrong type, empty or too long text, bad base64, corrupt image, wrong pixel shape or range."),
                        "503": _response("No model is loaded."),
                    },
                }
            },
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
                        limits=_object(max_instances=INTEGER, max_text_chars=INTEGER, max_upload_bytes=INTEGER, max_request_pixels=INTEGER),
                    ),
                ),
                # Probabilities for a classifier; embedding components (-1..1) for a faces model.
                "Predictions": _object(predictions=_array(_array({"type": "number", "minimum": -1 if task == "faces" else 0, "maximum": 1}))),
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
    return _with_security_responses(spec)


# What security.py and uploads.py may answer, by operation (the probes skip every check).
SECURITY_RESPONSES = {
    "any": {"400": "The Host header is not in --allowed-hosts."},
    "api": {"401": "This call needs the API token (Authorization: Bearer), or the token is wrong."},
    "write": {"403": "A cross-site browser request (Origin, Sec-Fetch-Site), multipart without X-Requested-With, or a write to a --read-only-gallery."},
    "body": {"415": "The body is not application/json or multipart/form-data, or an image is not a PNG or JPEG."},
    "images": {"413": "Images over --max-request-pixels in total, or the body over the upload limit."},
    "enrol": {"507": "The gallery is full: --gallery-max-entries or --gallery-max-mb."},
}


def _with_security_responses(spec):
    for path, operations in spec["paths"].items():
        if path in ("/healthz", "/readyz"):
            continue
        for method, operation in operations.items():
            if method not in ("get", "post", "delete"):
                continue  # path-level "parameters"
            kinds = ["any"]
            kinds += ["api"] if path.startswith("/v1/") else []
            kinds += ["write"] if method in ("post", "delete") else []
            kinds += ["body", "images"] if method == "post" else []
            kinds += ["enrol"] if (path, method) == ("/v1/gallery", "post") else []
            for kind in kinds:
                for status, description in SECURITY_RESPONSES[kind].items():
                    operation["responses"].setdefault(status, _response(description))
    return spec
