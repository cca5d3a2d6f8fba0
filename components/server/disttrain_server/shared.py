"""What the blueprints share, read from the application serving the request (flask.current_app):
the model store, the gallery, the run finder, the limits the API enforces, the served run's directory.

Like the Flask tutorial's db.py: one small module of accessors that imports no blueprint, so that a
blueprint needing the served model or the runs directory asks here instead of importing another
blueprint (which is how import cycles start: tests/server/test_import_cycles.py fails on one).

The factory (app.create_app) puts each object in app.extensions under the keys below. A module that
adds its own object in its own init_app (metrics, the dashboard's report cache) keeps its key.
"""

import os

from flask import current_app

from disttrain_server.errors import ApiError

STORE_KEY = "disttrain_model_store"  # model_store.ModelStore, one per process
GALLERY_KEY = "disttrain_gallery"  # gallery.Gallery
FINDER_KEY = "disttrain.runs"  # runs_data.RunFinder: the run /progress.json shows
OPENAPI_KEY = "disttrain.openapi"  # openapi.Parts: each blueprint's part of /openapi.json, in order


def model_store():
    return current_app.extensions[STORE_KEY]


def gallery():
    return current_app.extensions[GALLERY_KEY]


def run_finder():
    return current_app.extensions[FINDER_KEY]


def limits():
    """The request limits a client may need to know (the metadata, the page and /openapi.json show them)."""
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


def served_run_dir():
    """The run whose final/model.keras is served (the app's MODEL_PATH)."""
    return os.path.dirname(os.path.dirname(model_store().path))


def runs_dir():
    """--runs-dir (None: the server shows the served run only)."""
    return current_app.config["RUNS_DIR"]
