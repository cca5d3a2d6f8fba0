"""What every model API (TF Serving's /v1 in api.py, KServe's V2 in v2.py) shares: its routes under a model's
paths, the loaded model a request names, and the one batch path of every prediction. A helper of the
blueprints, which import it and never each other."""

from flask import current_app

from disttrain_contract.layout import whole_number
from disttrain_server import numeric, typed
from disttrain_server.errors import ApiError
from disttrain_server.instances import to_batch
from disttrain_server.shared import served_model
from disttrain_server.signature import input_tensors
from disttrain_server.uploads import PixelBudget

# TF Serving's optional path parts: /versions/V names a version, /labels/L a version label.
# This server serves one version at a time (the newest published model, whose version is its
# mtime), so a version other than that one is a 404, and each of these labels names it.
SERVED_LABELS = ("latest", "stable")


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
    if version is not None and whole_number(version) != loaded.version:  # "0123" is 123, as TF Serving's int64
        raise ApiError(
            404, f"version {version!r} of model {name!r} is not served; this server serves version {served} only"
        )
    if label is not None and label not in SERVED_LABELS:
        raise ApiError(
            404,
            f"unknown version label {label!r} for model {name!r}; the labels {', '.join(SERVED_LABELS)} name the served version {served}",
        )


def resolve(name, version=None, label=None):
    """The loaded model a request names: 404 for another model, version or label; 503 while none is loaded."""
    loaded = served_model(name)
    check_version(name, loaded, version, label)
    return loaded


def predict_rows(loaded, instances):
    """Model outputs (float64 numpy [n, width]) for a list of request instances: the one batch path
    of every API (TF Serving :predict and :classify, KServe V2 infer), through the micro-batcher."""
    config = current_app.config
    if loaded.is_typed:
        return typed.predict(loaded, typed.to_batch(instances, loaded.table, config["MAX_TEXT_CHARS"]))
    if loaded.is_numeric:
        batch = numeric.to_batch(instances, input_tensors(loaded), loaded.features)
    else:
        batch = to_batch(
            instances, loaded.input_spec, config["MAX_TEXT_CHARS"], PixelBudget(config["MAX_REQUEST_PIXELS"])
        )
    return loaded.predict(batch)
