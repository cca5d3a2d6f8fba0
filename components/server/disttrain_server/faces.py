"""Face search and the gallery API: POST /v1/models/NAME:search and /v1/gallery.

Photos arrive as a multipart upload (field `image`, as the page sends them)
or as JSON {"image": {"b64": ...}} (TF Serving's binary convention); which
Content-Types and headers a request may use at all is security.py's business.
A photo must be a PNG or JPEG within the request's pixel budget
(uploads.PixelBudget), checked before OpenCV decodes it.
Status codes follow :predict's: 400 for a request that is not of the
expected shape (a field is missing), 422 for content that cannot be used (a
corrupt image, no face in it, an empty name), 413 for a body over the limit
or a photo over the pixel budget, 415 for a format other than PNG or JPEG,
403 for a write to a --read-only-gallery, 507 for an enrolment past a cap.
A photo sent to :search is never stored: only POST /v1/gallery enrols.
"""

from flask import Blueprint, current_app, request, send_file

from disttrain_contract import ContractError
from disttrain_contract.faces import NoFaceFound
from disttrain_contract.layout import whole_number
from disttrain_server.errors import ApiError, ModelUnavailable, json_type
from disttrain_server.gallery import GalleryFull, InvalidName, check_name, public, read_face
from disttrain_server.instances import decode_b64, read_json_object
from disttrain_server.openapi import INTEGER, STRING, array_of, json_response, object_of, with_optional
from disttrain_server.shared import gallery, model_store, served_model
from disttrain_server.uploads import PixelBudget

bp = Blueprint("faces", __name__)

MAX_TOP_K = 100
# Thumbnails are faces: a browser may keep one for an hour (ids are never reused), a shared
# cache (proxy, CDN) never, so a deleted face does not live on outside the user's browser.
THUMBNAIL_CACHE_SECONDS = 3600
SEARCH_EXAMPLE = '{"image": {"b64": "<base64 photo>"}, "k": 3}'
ENROL_EXAMPLE = '{"name": "Ada Lovelace", "image": {"b64": "<base64 photo>"}}'


def faces_model(name):
    """The loaded model if it is a faces model: 404 unknown name, 503 none loaded, 409 another task."""
    loaded = served_model(name)
    if not loaded.is_faces:
        raise ApiError(
            409, f"the served model is a {loaded.task} model; face search needs a faces model (task 'faces')"
        )
    return loaded


def read_upload(example):
    """(photo bytes, other fields) from a multipart form or a JSON object; the photo passed the pixel budget."""
    data, fields = _upload(example)
    PixelBudget(current_app.config["MAX_REQUEST_PIXELS"]).admit(data, "image: ")
    return data, fields


def _upload(example):
    if request.mimetype == "multipart/form-data":
        upload = request.files.get("image")  # over MAX_CONTENT_LENGTH: Werkzeug raises 413 here
        if upload is None:
            raise ApiError(400, 'missing the "image" file field (multipart/form-data)')
        data = upload.read()
        if not data:
            raise ApiError(422, "image: the uploaded file is empty")
        return data, request.form
    payload = read_json_object(request.get_data(cache=False), example)
    if "image" not in payload:
        raise ApiError(400, f'missing "image": send {example} or a multipart form with an "image" file')
    image = payload["image"]
    if not isinstance(image, dict) or set(image) != {"b64"}:
        raise ApiError(
            422,
            f'"image" must be an object {{"b64": "<base64 photo>"}}, got {json_type(image)}'
            + (f" with keys {sorted(image)}" if isinstance(image, dict) else ""),
        )
    data = decode_b64(image["b64"], "image: ")
    if not data:
        raise ApiError(422, "image: the photo is empty")
    return data, payload


def face_of(data):
    """read_face with its refusals as 422s."""
    import cv2

    try:
        return read_face(data)
    except NoFaceFound:
        raise ApiError(422, "no face found in the image: send a photo with a clear, frontal face") from None
    except ContractError as err:
        raise ApiError(422, f"image: {err}") from None
    except cv2.error:  # OpenCV's own refusals, e.g. more pixels than OPENCV_IO_MAX_IMAGE_PIXELS
        raise ApiError(422, "image: not a decodable image (OpenCV refused it: too large or malformed)") from None


def several_faces_note(found):
    return f"{found} faces found; used the most face-like (eyes found, then detector confidence)" if found > 1 else None


def face_object(face):
    """The `face` of a search answer: the box used, the face cascade's confidence (its last
    stage's score, higher is more face-like; not a probability) and the eyes found in it."""
    return {"box": [int(v) for v in face.box], "confidence": face.confidence, "eyes": int(face.eyes)}


def top_k(fields):
    value = fields.get("k", current_app.config["TOP_K"])
    if isinstance(value, str):  # a form field
        value = value if (number := whole_number(value.strip())) is None else number
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOP_K:
        raise ApiError(422, f'"k" must be an integer from 1 to {MAX_TOP_K}, got {value!r}')
    return value


@bp.post("/v1/models/<model_name:model_name>:search")
def search(model_name):
    loaded = faces_model(model_name)
    data, fields = read_upload(SEARCH_EXAMPLE)
    k = top_k(fields)
    _, face = face_of(data)
    matches = gallery().search(loaded, face.crop, k)
    notes = [
        several_faces_note(face.found),
        None if matches else "the gallery is empty: enrol people with POST /v1/gallery",
    ]
    body = {
        "model_spec": {"name": model_name, "version": str(loaded.version)},
        "face": face_object(face),
        "faces_found": face.found,
        "matches": matches,
    }
    if any(notes):
        body["note"] = "; ".join(n for n in notes if n)
    return body


@bp.get("/v1/gallery")
def list_gallery():
    entries = [public(e) for e in gallery().entries()]
    return {"count": len(entries), "entries": entries}


def refuse_if_read_only():
    if current_app.config["READ_ONLY_GALLERY"]:
        raise ApiError(
            403,
            "the gallery is read-only on this server (--read-only-gallery): enrolment and deletion are off; search works",
        )


@bp.post("/v1/gallery")
def enrol():
    refuse_if_read_only()
    try:
        gallery().check_room()
    except GalleryFull as err:  # full already: say so before reading and decoding the photo
        raise ApiError(507, str(err)) from None
    data, fields = read_upload(ENROL_EXAMPLE)
    name = fields.get("name")
    if name is None:
        raise ApiError(400, 'missing "name": the person\'s name')
    if not isinstance(name, str):
        raise ApiError(422, f'"name" must be a string, got {json_type(name)}')
    try:
        loaded = model_store().get()
    except ModelUnavailable:
        loaded = None  # the face is stored now and embedded by the first search under a faces model
    try:
        name = check_name(name)
    except InvalidName as err:
        raise ApiError(422, f"name: {err}") from None
    face = face_of(data)
    try:
        entry, _ = gallery().enrol(
            name, data, loaded if loaded is not None and loaded.is_faces else None, source="api", face=face
        )
    except GalleryFull as err:
        raise ApiError(507, str(err)) from None
    except ContractError as err:  # the photo was fine (checked above): the gallery folder is not writable
        raise ApiError(503, f"cannot store the entry: {err}") from None
    body = public(entry)
    if note := several_faces_note(entry["faces_found"]):
        body["note"] = note
    return body, 201, {"Location": f"/v1/gallery/{entry['id']}"}


@bp.delete("/v1/gallery/<entry_id>")
def delete(entry_id):
    refuse_if_read_only()
    try:
        entry = gallery().delete(entry_id)
    except ContractError as err:
        raise ApiError(503, f"cannot change the gallery: {err}") from None
    if entry is None:
        raise ApiError(404, f"no gallery entry {entry_id!r}")
    return {"deleted": public(entry)}


@bp.get("/v1/gallery/<entry_id>/thumbnail.png")
def thumbnail(entry_id):
    if gallery().find(entry_id) is None:
        raise ApiError(404, f"no gallery entry {entry_id!r}")
    try:
        # An id is never reused, so its thumbnail never changes: the user's browser may keep it a while.
        response = send_file(gallery().thumbnail_path(entry_id), mimetype="image/png", max_age=THUMBNAIL_CACHE_SECONDS)
        response.cache_control.public = False
        response.cache_control.private = True
        return response
    except FileNotFoundError:
        raise ApiError(404, f"no gallery entry {entry_id!r}") from None


# This blueprint's part of /openapi.json (openapi.build_spec puts the parts together).


def _photo_body(example, **fields):
    """A photo upload: multipart (a browser form) or JSON with TF Serving's {"b64": ...}."""
    form = {"image": {"type": "string", "format": "binary", "description": "The photo file (PNG or JPEG)."}}
    form.update({key: {"type": "string", "description": schema["description"]} for key, schema in fields.items()})
    b64 = {
        "type": "object",
        "required": ["b64"],
        "additionalProperties": False,
        "properties": {
            "b64": {"type": "string", "format": "byte", "description": "base64 of the photo file (PNG or JPEG)."}
        },
    }
    required = ["image"] + [key for key, schema in fields.items() if schema.pop("required", False)]
    return {
        "required": True,
        "content": {
            "multipart/form-data": {"schema": {"type": "object", "required": required, "properties": form}},
            "application/json": {
                "schema": {"type": "object", "required": required, "properties": {"image": b64, **fields}},
                "example": example,
            },
        },
    }


def openapi_paths(context):
    """:search and the gallery, one function per operation (each makes new dicts: build_spec adds responses)."""
    upload = _upload_note(context.limits)
    return {
        "/v1/models/{model_name}:search": {"post": _search_operation(context.model_name(), upload)},
        "/v1/gallery": {"get": _gallery_operation(), "post": _enrol_operation(upload)},
        "/v1/gallery/{entry_id}": {"delete": _delete_operation()},
        "/v1/gallery/{entry_id}/thumbnail.png": {"get": _thumbnail_operation()},
    }


def _upload_note(limits):
    """What :search and the enrolment say of the photo they take."""
    return (
        "The photo goes through the same face detector as the training photos; the most face-like one is used "
        f"(eyes found in it, then the detector's confidence). The body may be at most {limits['max_upload_bytes']} bytes."
    )


def _entry_id():
    """The {entry_id} path parameter."""
    return {
        "name": "entry_id",
        "in": "path",
        "required": True,
        "schema": STRING,
        "description": "A gallery entry's id.",
    }


def _search_operation(model_name, upload):
    """POST /v1/models/{model_name}:search."""
    return {
        "summary": "The enrolled people nearest to the face in a photo (faces models).",
        "description": f"{upload} The photo is not stored. Matches are sorted by Euclidean distance between embeddings, "
        "nearest first (the same person is typically below 0.5, different people around 1). An empty gallery answers 200 "
        "with no matches and a note.",
        "parameters": [model_name],
        "requestBody": _photo_body(
            {"image": {"b64": "/9j/4AAQSkZJRg..."}, "k": 3},
            k={
                "type": "integer",
                "minimum": 1,
                "maximum": 100,
                "description": "How many matches (default --top-k).",
            },
        ),
        "responses": {
            "200": json_response(
                "The face used and the nearest entries.", {"$ref": "#/components/schemas/SearchResult"}
            ),
            "400": json_response("Not a search request: no image field, or a body that is not a JSON object."),
            "404": json_response("Unknown model name."),
            "409": json_response("The served model is not a faces model."),
            "413": json_response("Body over the upload limit."),
            "422": json_response("Unusable content: not base64, not a decodable image, no face found, k out of range."),
            "503": json_response("No model is loaded."),
        },
    }


def _gallery_operation():
    """GET /v1/gallery."""
    return {
        "summary": "The enrolled people, oldest first.",
        "responses": {"200": json_response("The gallery.", {"$ref": "#/components/schemas/Gallery"})},
    }


def _enrol_operation(upload):
    """POST /v1/gallery."""
    return {
        "summary": "Enrol a person from a photo.",
        "description": f"{upload} The face is embedded once now (and once per newly published model), never per search.",
        "requestBody": _photo_body(
            {"name": "Ada Lovelace", "image": {"b64": "/9j/4AAQSkZJRg..."}},
            name={
                "type": "string",
                "minLength": 1,
                "maxLength": 100,
                "required": True,
                "description": "The person's name (1 to 100 characters).",
            },
        ),
        "responses": {
            "201": json_response(
                "The new entry; `note` says if the photo had several faces.",
                {"$ref": "#/components/schemas/GalleryEntry"},
            ),
            "400": json_response("No image or no name field, or a body that is not a JSON object."),
            "413": json_response("Body over the upload limit."),
            "422": json_response(
                "Unusable content: an empty or too long name, not base64, not a decodable image, no face found."
            ),
            "503": json_response("The gallery folder cannot be written."),
        },
    }


def _delete_operation():
    """DELETE /v1/gallery/{entry_id}."""
    return {
        "summary": "Remove an entry (its crop, thumbnail and embeddings).",
        "parameters": [_entry_id()],
        "responses": {
            "200": json_response(
                "The removed entry.", object_of(deleted={"$ref": "#/components/schemas/GalleryEntry"})
            ),
            "404": json_response("No gallery entry with this id."),
            "503": json_response("The gallery folder cannot be written."),
        },
    }


def _thumbnail_operation():
    """GET /v1/gallery/{entry_id}/thumbnail.png."""
    return {
        "summary": "A small colour picture of the entry's face.",
        "parameters": [_entry_id()],
        "responses": {
            "200": {
                "description": "PNG image.",
                "content": {"image/png": {"schema": {"type": "string", "format": "binary"}}},
            },
            "404": json_response("No gallery entry with this id."),
        },
    }


def openapi_schemas(context):
    return {
        "GalleryEntry": {
            # confidence and eyes: entries enrolled before the detector reported them have neither
            **with_optional(
                object_of(
                    id=STRING, name=STRING, box=array_of(INTEGER), faces_found=INTEGER, created=STRING, thumbnail=STRING
                ),
                confidence={"type": "number"},
                eyes=INTEGER,
            ),
            "description": "box is [x, y, width, height] of the face in the enrolled photo; thumbnail is its URL path; "
            "source is 'api' or 'seed:<file>'; note (on enrolment) says if the photo had several faces.",
        },
        "Gallery": object_of(count=INTEGER, entries=array_of({"$ref": "#/components/schemas/GalleryEntry"})),
        "SearchResult": {
            **object_of(
                model_spec=object_of(name=STRING, version=STRING),
                face=object_of(box=array_of(INTEGER), confidence={"type": "number"}, eyes=INTEGER),
                faces_found=INTEGER,
                matches=array_of(object_of(name=STRING, id=STRING, distance={"type": "number", "minimum": 0})),
            ),
            "description": "face.box is [x, y, width, height] of the face used (the most face-like: eyes found, then "
            "face.confidence, the face detector's score, higher is more face-like, not a probability); note appears when "
            "several faces were found or the gallery is empty.",
        },
    }
