"""create_app(config): the Flask application factory.

`config` uses Flask's upper-case keys; MAX_CONTENT_LENGTH is Flask's own request
body limit (Werkzeug answers 413 past it, which our handler turns into JSON).
"""

import os

from flask import Flask

from disttrain_contract import Workdir, default_workdir
from disttrain_server import api, faces, metrics, progress, runs, security, shared, v2, web
from disttrain_server.errors import register_error_handlers
from disttrain_server.gallery import Gallery
from disttrain_server.model_store import ModelStore
from disttrain_server.openapi import Parts
from disttrain_server.runs_data import RunFinder

DEFAULT_CONFIG = {
    "MODEL_PATH": None,  # None: WORKDIR/final/model.keras of $DISTTRAIN_WORKDIR (or ./workdir)
    "WORKDIR": None,  # the run whose progress the page shows (None: the one MODEL_PATH is in, WORKDIR/final/model.keras) ...
    "RUNS_DIR": None,  # ... unless this is set: then the newest run-N directory in it (the chart's volume); the dashboard lists its runs
    "PROGRESS_RUN": "newest",  # with RUNS_DIR: "served" shows the served run's progress, not the newest run's
    "MODEL_NAME": "disttrain",
    "MODEL_MODULE": None,  # --model-module MODULE[:FUNCTION]: imported before a model loads (its custom layers register)
    "MAX_CONTENT_LENGTH": 8 * 1024 * 1024,
    "MAX_TEXT_CHARS": 10_000,
    "MAX_INSTANCES": 256,
    "RELOAD_INTERVAL": 5.0,
    "MAX_BATCH_SIZE": 32,  # concurrent predict calls of one process share a model call of up to this many instances; 1 = off
    "BATCH_TIMEOUT_MS": 0.0,  # how long a batch waits for more requests; 0 = never waits, takes what is queued
    "GALLERY_DIR": None,  # None: WORKDIR/gallery
    "GALLERY_SEED": None,  # a folder of photos to enrol at start-up (skipping those already enrolled)
    "TOP_K": 3,  # matches a face search returns unless the request asks for another k
    "API_TOKEN": None,  # bytes: the token (--api-token-file); None: no token is asked for
    "TOKEN_REQUIRED_FOR": "writes",  # "writes" (enrol, delete) or "all" (every /v1 call)
    "PUBLIC_FACE_SEARCH": False,  # True: gallery reads and :search need no token under "writes" (--public-face-search)
    "READ_ONLY_GALLERY": False,  # True: enrol and delete answer 403
    "GALLERY_MAX_ENTRIES": 1000,  # enrolment past it answers 507
    "GALLERY_MAX_BYTES": 200 * 1024 * 1024,  # the gallery folder's bytes; enrolment past it answers 507
    "ALLOWED_HOSTS": [],  # Host headers served; empty: any (see security.check_host)
    "MAX_REQUEST_PIXELS": 16_000_000,  # encoded images of one request, summed, before decoding (uploads.PixelBudget)
    "SHOW_HELDOUT_EXAMPLES": False,  # True: the page embeds held-out rows with their labels, /metadata the training min/max
    "METRICS": True,  # GET /metrics and the counting behind it (see metrics); False: neither
    "METRICS_PORT": None,  # the port /metrics answers on, and nothing else does (--metrics-port); None: on every port
}


def create_app(config=None):
    app = Flask(__name__)
    app.config.from_mapping(DEFAULT_CONFIG)
    app.config.from_mapping(config or {})
    app.json.sort_keys = False  # keep responses in the order TF Serving writes them
    # What request threads share (gunicorn --threads): app.config, read-only after this
    # function; the ModelStore, the Gallery, the RunFinder and the dashboard's ReportCache below, each thread-safe and saying why
    # in its docstring; no other module-level state of ours changes per request (face detection
    # keeps one OpenCV cascade per thread: disttrain_contract.faces).
    model_path = app.config["MODEL_PATH"] or Workdir(default_workdir()).final_model
    observer = metrics.init_app(app)  # first: its hooks time every request, refused ones too (None: metrics off)
    # One store per process: each gunicorn worker loads its own copy after the fork.
    app.extensions[shared.STORE_KEY] = ModelStore(
        model_path,
        app.config["RELOAD_INTERVAL"],
        max_batch_size=app.config["MAX_BATCH_SIZE"],
        batch_timeout=app.config["BATCH_TIMEOUT_MS"] / 1000,
        observer=observer,
        model_module=app.config["MODEL_MODULE"],
    )
    gallery = Gallery(
        app.config["GALLERY_DIR"] or os.path.join(Workdir(default_workdir()).root, "gallery"),
        max_entries=app.config["GALLERY_MAX_ENTRIES"],
        max_bytes=app.config["GALLERY_MAX_BYTES"],
    )
    app.extensions[shared.GALLERY_KEY] = gallery
    # (no WORKDIR given: the run whose final/model.keras is served)
    run_dir = app.config["WORKDIR"] or os.path.dirname(os.path.dirname(os.path.abspath(model_path)))
    app.extensions[shared.FINDER_KEY] = RunFinder(
        run_dir, app.config["RUNS_DIR"] if app.config["PROGRESS_RUN"] == "newest" else None
    )
    if app.config["GALLERY_SEED"]:
        # Every worker runs this after the fork (no TensorFlow needed: faces are embedded
        # lazily); seeding is idempotent and locked, so the first one does the work.
        gallery.seed(app.config["GALLERY_SEED"])
    app.url_map.converters["model_name"] = api.ModelNameConverter  # before the routes that use it
    app.url_map.converters["segment"] = api.SegmentConverter
    register_error_handlers(app)
    security.init_app(app)  # Host, cross-site, token checks before every view; security headers on every response
    app.register_blueprint(api.bp)
    app.register_blueprint(v2.bp)  # KServe's Open Inference Protocol
    app.register_blueprint(faces.bp)
    app.register_blueprint(web.bp)
    app.register_blueprint(progress.bp)
    runs.init_app(app)  # the run dashboard and its report cache
    # /openapi.json: each blueprint describes its own routes; the document lists them in this order.
    app.extensions[shared.OPENAPI_KEY] = Parts(
        paths=(
            api.openapi_paths,
            v2.openapi_paths,
            faces.openapi_paths,
            progress.openapi_paths,
            runs.openapi_paths,
            web.openapi_paths,
        ),
        schemas=(api.openapi_schemas, v2.openapi_schemas, faces.openapi_schemas),
    )
    return app
