"""The JSON API: TF Serving's REST shape under /v1, health probes, report, OpenAPI."""

import os

from flask import Blueprint, current_app, request, send_file
from werkzeug.routing import BaseConverter

from disttrain_server.errors import ApiError, ModelUnavailable
from disttrain_server.instances import read_instances, to_batch
from disttrain_server.openapi import build_spec
from disttrain_server.uploads import PixelBudget

bp = Blueprint("api", __name__)

STORE_KEY = "disttrain_model_store"


class ModelNameConverter(BaseConverter):
    """A model name never contains ':' so /v1/models/NAME:predict cannot be read as a model called 'NAME:predict'."""

    regex = "[^/:]+"


def model_store():
    return current_app.extensions[STORE_KEY]


def limits():
    config = current_app.config
    return {
        "max_instances": config["MAX_INSTANCES"],
        "max_text_chars": config["MAX_TEXT_CHARS"],
        "max_upload_bytes": config["MAX_CONTENT_LENGTH"],
        "max_request_pixels": config["MAX_REQUEST_PIXELS"],
    }


def served_model(name):
    """The loaded model if `name` is ours: 404 for another name, 503 while none is loaded."""
    served = current_app.config["MODEL_NAME"]
    if name != served:
        raise ApiError(404, f"unknown model {name!r}; this server serves {served!r}")
    return model_store().get()


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
    if loaded.batcher:
        # This worker process's batching so far: requests per model call is what it saves.
        b = loaded.batcher
        ready["batching"] = {"max_batch_size": b.max_batch_size, "model_calls": b.calls, "requests": b.requests, "instances": b.instances}
    return ready


@bp.get("/v1/models/<model_name:model_name>")
def model_status(model_name):
    try:
        loaded = served_model(model_name)
    except ModelUnavailable as err:
        entry = {"version": "0", "state": "UNKNOWN", "status": {"error_code": "UNAVAILABLE", "error_message": err.reason}}
    else:
        entry = {"version": str(loaded.version), "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
    return {"model_version_status": [entry]}


@bp.get("/v1/models/<model_name:model_name>/metadata")
def model_metadata(model_name):
    loaded = served_model(model_name)
    metadata = {"task": loaded.task, "labels": loaded.labels, "input": loaded.input_spec, "limits": limits()}
    if loaded.is_faces:
        # :predict answers embeddings of face crops; :search takes whole photos.
        metadata["embedding_size"] = loaded.meta["embedding_size"]
    return {"model_spec": {"name": model_name, "version": str(loaded.version)}, "metadata": metadata}


@bp.post("/v1/models/<model_name:model_name>:predict")
def predict(model_name):
    loaded = served_model(model_name)
    # Read the body ourselves instead of request.get_json(): its errors are HTML-ish
    # prose and it insists on a Content-Type, which TF Serving clients do not always send.
    instances = read_instances(request.get_data(cache=False), current_app.config["MAX_INSTANCES"])
    batch = to_batch(instances, loaded.input_spec, current_app.config["MAX_TEXT_CHARS"], PixelBudget(current_app.config["MAX_REQUEST_PIXELS"]))
    return {"predictions": loaded.predict(batch).tolist()}


@bp.get("/report")
def report():
    path = os.path.join(os.path.dirname(model_store().path), "report.json")
    try:
        return send_file(path, mimetype="application/json", max_age=0)
    except (FileNotFoundError, IsADirectoryError):
        raise ApiError(404, "no report.json next to the served model (the aggregator writes one when it publishes)") from None


@bp.get("/openapi.json")
def openapi():
    try:
        loaded = model_store().get()
        input_spec, task = loaded.input_spec, loaded.task
    except ModelUnavailable:
        input_spec, task = None, None  # describe both instance kinds until we know which one applies
    return build_spec(current_app.config["MODEL_NAME"], limits(), input_spec, task)
