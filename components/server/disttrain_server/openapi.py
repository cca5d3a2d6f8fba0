"""The OpenAPI 3 document served at /openapi.json: its frame and the schema pieces the blueprints share.

Each blueprint describes its own routes next to them (an `openapi_paths(context)` function, and
`openapi_schemas(context)` for the components it refers to); the app factory lists those parts in
the document's order (Parts), and build_spec joins them per request. Built per request from the
live limits and, when a model is loaded, its input kind, so the schema a fuzzer reads is the one
the server enforces: instance schemas for a text model accept only strings, for an image model
only {"b64": ...} objects or pixel arrays, for a numeric model (table, array) numbers nested as its
inputs' shapes (or objects of its named inputs, or of a table's features), for a typed table's model
objects of its columns (text, numbers, booleans, null where a value may be missing).
"""

from dataclasses import dataclass

from disttrain_server.security import PROBE_PATHS, is_api

ERROR = {"$ref": "#/components/schemas/Error"}
STRING = {"type": "string"}
INTEGER = {"type": "integer"}
BOOLEAN = {"type": "boolean"}


def object_of(**properties):
    """An object schema whose listed properties are all required (others are allowed)."""
    return {"type": "object", "required": list(properties), "properties": properties}


def with_optional(schema, **properties):
    return {**schema, "properties": {**schema["properties"], **properties}}


def closed(schema):
    return {**schema, "additionalProperties": False}


def array_of(items):
    return {"type": "array", "items": items}


def enum_of(*values):
    return {"type": "string", "enum": list(values)}


def ref(name):
    return {"$ref": f"#/components/schemas/{name}"}


def json_response(description, schema=ERROR):
    return {"description": description, "content": {"application/json": {"schema": schema}}}


@dataclass(frozen=True)
class Context:
    """What one /openapi.json describes: the served model's name, the limits, and the loaded model's
    `input_spec` and `task` (None: no model yet, so both instance kinds are described); `numeric`: a
    loaded table, array or typed table model's {"tensors" (signature.input_tensors), "features",
    "regression", "table" (a typed table's TableSpec, else None)}."""

    name: str
    limits: dict  # max_instances, max_text_chars, max_upload_bytes, max_request_pixels (shared.limits)
    input_spec: dict = None
    task: str = None
    numeric: dict = None

    @property
    def kind(self):
        return self.input_spec["kind"] if self.input_spec else None

    def model_name(self):
        """The {model_name} path parameter of /v1 and /v2."""
        return {
            "name": "model_name",
            "in": "path",
            "required": True,
            "schema": {"type": "string", "pattern": "^[^/:]+$"},
            "description": f"The served model's name: {self.name!r}. Any other name is a 404.",
        }


@dataclass(frozen=True)
class Parts:
    """The blueprints' parts of the document, in its order: `paths` and `schemas` are functions of a
    Context answering {path: operations} and {name: schema}. A paths function makes new dicts on each
    call, since build_spec adds responses to the operations; schemas are not changed."""

    paths: tuple
    schemas: tuple


def build_spec(parts, context):
    spec = {
        "openapi": "3.0.3",
        "info": {
            "title": "disttrain model server",
            "version": "1",
            "description": "The model disttrain trained, behind TensorFlow Serving's REST API (/v1) and KServe's Open "
            "Inference Protocol (/v2). "
            'Every error is JSON: {"error": "<message>"}. '
            "With a token configured (--api-token-file), the face gallery (its writes, and its list, thumbnails and :search "
            "unless --public-face-search), or every /v1 and /v2 call except the /v2/health probes (--token-required-for all), "
            "need `Authorization: Bearer <token>`. POST bodies must be application/json or multipart/form-data; multipart "
            "also needs an X-Requested-With header. Images must be PNG or JPEG.",
        },
        "paths": {path: operations for part in parts.paths for path, operations in part(context).items()},
        "components": {
            "schemas": {
                "Error": object_of(error=STRING),
                **{name: schema for part in parts.schemas for name, schema in part(context).items()},
            },
            "securitySchemes": {
                "bearerToken": {"type": "http", "scheme": "bearer", "description": "--api-token-file's token"}
            },
        },
    }
    return _with_security_responses(spec)


# What security.py and uploads.py may answer, by operation (the probes skip every check).
SECURITY_RESPONSES = {
    "any": {"400": "The Host header is not in --allowed-hosts."},
    "api": {"401": "This call needs the API token (Authorization: Bearer), or the token is wrong."},
    "write": {
        "403": "A cross-site browser request (Origin, Sec-Fetch-Site), multipart without X-Requested-With, or a write to a --read-only-gallery."
    },
    "body": {
        "415": "The body is not application/json or multipart/form-data, or an image is not a PNG or JPEG "
        "(:predict, :classify and V2 infer also read a text/plain, form-urlencoded or untyped body as JSON)."
    },
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
                    operation["responses"].setdefault(status, json_response(description))
    return spec
