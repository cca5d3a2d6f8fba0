"""The JSON API: TF Serving's REST API under /v1, health probes, report, OpenAPI (KServe's V2: v2.py)."""

import os

from flask import Blueprint, current_app, request, send_file
from werkzeug.routing import BaseConverter

from disttrain_server.errors import ApiError, ModelUnavailable
from disttrain_server import numeric
from disttrain_server.instances import read_classify, read_predict, to_batch
from disttrain_server.openapi import build_spec
from disttrain_server.signature import input_tensor, input_tensors, signature_def
from disttrain_server.uploads import PixelBudget

bp = Blueprint("api", __name__)

STORE_KEY = "disttrain_model_store"


class ModelNameConverter(BaseConverter):
    """A model name never contains ':' so /v1/models/NAME:predict cannot be read as a model called 'NAME:predict'."""

    regex = "[^/:]+"


class SegmentConverter(ModelNameConverter):
    """A version or label, for the same reason: /v1/models/NAME/versions/V:predict is version V's :predict."""


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


# TF Serving's optional path parts: /versions/V names a version, /labels/L a version label.
# This server serves one version at a time (the newest published model, whose version is its
# mtime), so a version other than that one is a 404, and each of these labels names it.
SERVED_LABELS = ("latest", "stable")
MODEL_PATHS = (
    "/v1/models/<model_name:model_name>",
    "/v1/models/<model_name:model_name>/versions/<segment:version>",
    "/v1/models/<model_name:model_name>/labels/<segment:label>",
)


def model_routes(blueprint, paths, suffix, method):
    """Register a view under each of `paths` (a model path with and without its optional version
    or label part) + `suffix`: the view takes model_name and the optional part as keywords."""

    def register(view):
        for path in paths:
            blueprint.add_url_rule(path + suffix, view_func=view, methods=[method])
        return view

    return register


def check_version(name, loaded, version=None, label=None):
    """404 unless `version` is the served one and `label` one of SERVED_LABELS (either may be absent)."""
    served = str(loaded.version)
    if version is not None and not (version.isdigit() and int(version) == loaded.version):  # "0123" is 123, as TF Serving's int64
        raise ApiError(404, f"version {version!r} of model {name!r} is not served; this server serves version {served} only")
    if label is not None and label not in SERVED_LABELS:
        raise ApiError(404, f"unknown version label {label!r} for model {name!r}; the labels {', '.join(SERVED_LABELS)} name the served version {served}")


def resolve(name, version=None, label=None):
    """The loaded model a request names: 404 for another model, version or label; 503 while none is loaded."""
    loaded = served_model(name)
    check_version(name, loaded, version, label)
    return loaded


def predict_rows(loaded, instances):
    """Model outputs (float64 numpy [n, width]) for a list of request instances: the one batch path
    of every API (TF Serving :predict and :classify, KServe V2 infer), through the micro-batcher."""
    config = current_app.config
    if loaded.is_numeric:
        batch = numeric.to_batch(instances, input_tensors(loaded), loaded.features)
    else:
        batch = to_batch(instances, loaded.input_spec, config["MAX_TEXT_CHARS"], PixelBudget(config["MAX_REQUEST_PIXELS"]))
    return loaded.predict(batch)


@model_routes(bp, MODEL_PATHS, "", "GET")
def model_status(model_name, version=None, label=None):
    # "ready" is not TF Serving's: KServe's V1 clients read it (InferenceRESTClient.is_model_ready).
    try:
        loaded = resolve(model_name, version, label)
    except ModelUnavailable as err:
        entry = {"version": version or "0", "state": "UNKNOWN", "status": {"error_code": "UNAVAILABLE", "error_message": err.reason}}
    else:
        entry = {"version": str(loaded.version), "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
    return {"model_version_status": [entry], "ready": entry["state"] == "AVAILABLE"}


@model_routes(bp, MODEL_PATHS, "/metadata", "GET")
def model_metadata(model_name, version=None, label=None):
    """TF Serving's GetModelMetadataResponse: the serving_default signature_def, plus our own facts
    (task, labels, input, limits, embedding_size) as a second metadata field, "disttrain"."""
    loaded = resolve(model_name, version, label)
    ours = {"task": loaded.task, "labels": loaded.labels, "input": loaded.input_spec, "limits": limits()}
    if loaded.is_numeric:
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
    instances, columnar = read_predict(request.get_data(cache=False), names, current_app.config["MAX_INSTANCES"])
    rows = predict_rows(loaded, instances).tolist()
    # TF Serving: a row request ("instances") answers "predictions", a columnar one ("inputs") "outputs".
    return {"outputs": rows} if columnar else {"predictions": rows}


@model_routes(bp, MODEL_PATHS, ":classify", "POST")
def classify(model_name, version=None, label=None):
    """TF Serving's Classify: {"examples": [{"<input>": value}, ...]} -> {"result": [[[label, score], ...], ...]},
    the pairs in label order (the model's output order, like TF Serving's classes/scores)."""
    loaded = resolve(model_name, version, label)
    if loaded.is_faces:
        raise ApiError(409, "this is a faces model, which has no classes: use :predict for embeddings or :search to find people")
    if loaded.is_regression:
        raise ApiError(409, f"this is a regression model (it predicts {loaded.target or 'a value'}), which has no classes: use :predict")
    instances = read_classify(request.get_data(cache=False), input_tensor(loaded).name, current_app.config["MAX_INSTANCES"],
                              objects=loaded.is_numeric)
    rows = predict_rows(loaded, instances).tolist()
    return {"result": [[[label, score] for label, score in zip(loaded.labels, row)] for row in rows]}


@bp.get("/report")
def report():
    path = os.path.join(os.path.dirname(model_store().path), "report.json")
    try:
        return send_file(path, mimetype="application/json", max_age=0)
    except (FileNotFoundError, IsADirectoryError):
        raise ApiError(404, "no report.json next to the served model (the aggregator writes one when it publishes)") from None


@bp.get("/openapi.json")
def openapi():
    numeric = None
    try:
        loaded = model_store().get()
        input_spec, task = loaded.input_spec, loaded.task
        if loaded.is_numeric:
            numeric = {"tensors": input_tensors(loaded), "features": loaded.features, "regression": loaded.is_regression}
    except ModelUnavailable:
        input_spec, task = None, None  # describe both instance kinds until we know which one applies
    return build_spec(current_app.config["MODEL_NAME"], limits(), input_spec, task, numeric)
