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
from disttrain_server.api import model_store, served_model
from disttrain_server.errors import ApiError, ModelUnavailable, json_type
from disttrain_server.gallery import GalleryFull, InvalidName, check_name, public, read_face
from disttrain_server.instances import decode_b64, read_json_object
from disttrain_server.uploads import PixelBudget

bp = Blueprint("faces", __name__)

GALLERY_KEY = "disttrain_gallery"
MAX_TOP_K = 100
# Thumbnails are faces: a browser may keep one for an hour (ids are never reused), a shared
# cache (proxy, CDN) never, so a deleted face does not live on outside the user's browser.
THUMBNAIL_CACHE_SECONDS = 3600
SEARCH_EXAMPLE = '{"image": {"b64": "<base64 photo>"}, "k": 3}'
ENROL_EXAMPLE = '{"name": "Ada Lovelace", "image": {"b64": "<base64 photo>"}}'


def gallery():
    return current_app.extensions[GALLERY_KEY]


def faces_model(name):
    """The loaded model if it is a faces model: 404 unknown name, 503 none loaded, 409 another task."""
    loaded = served_model(name)
    if not loaded.is_faces:
        raise ApiError(409, f"the served model is a {loaded.task} model; face search needs a faces model (task 'faces')")
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
        raise ApiError(422, f'"image" must be an object {{"b64": "<base64 photo>"}}, got {json_type(image)}'
                       + (f" with keys {sorted(image)}" if isinstance(image, dict) else ""))
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
        value = int(value) if value.strip().isdigit() else value
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
    notes = [several_faces_note(face.found), None if matches else "the gallery is empty: enrol people with POST /v1/gallery"]
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
        raise ApiError(403, "the gallery is read-only on this server (--read-only-gallery): enrolment and deletion are off; search works")


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
        entry, _ = gallery().enrol(name, data, loaded if loaded is not None and loaded.is_faces else None, source="api", face=face)
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
