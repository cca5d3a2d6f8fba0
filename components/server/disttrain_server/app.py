"""create_app(config): the Flask application factory.

`config` uses Flask's upper-case keys; MAX_CONTENT_LENGTH is Flask's own request
body limit (Werkzeug answers 413 past it, which our handler turns into JSON).
"""

from flask import Flask

from disttrain_contract import Workdir, default_workdir
from disttrain_server import api, web
from disttrain_server.errors import register_error_handlers
from disttrain_server.model_store import ModelStore

DEFAULT_CONFIG = {
    "MODEL_PATH": None,  # None: WORKDIR/final/model.keras of $DISTTRAIN_WORKDIR (or ./workdir)
    "MODEL_NAME": "disttrain",
    "MAX_CONTENT_LENGTH": 8 * 1024 * 1024,
    "MAX_TEXT_CHARS": 10_000,
    "MAX_INSTANCES": 256,
    "RELOAD_INTERVAL": 5.0,
}


def create_app(config=None):
    app = Flask(__name__)
    app.config.from_mapping(DEFAULT_CONFIG)
    app.config.from_mapping(config or {})
    app.json.sort_keys = False  # keep responses in the order TF Serving writes them
    model_path = app.config["MODEL_PATH"] or Workdir(default_workdir()).final_model
    # One store per process: each gunicorn worker loads its own copy after the fork.
    app.extensions[api.STORE_KEY] = ModelStore(model_path, app.config["RELOAD_INTERVAL"])
    app.url_map.converters["model_name"] = api.ModelNameConverter  # before the routes that use it
    register_error_handlers(app)
    app.register_blueprint(api.bp)
    app.register_blueprint(web.bp)
    return app
