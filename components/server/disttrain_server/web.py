"""The demo page at /: a form that calls the JSON API from the browser; and its icon."""

import os
from datetime import datetime, timezone

from flask import Blueprint, current_app, render_template, url_for

from disttrain_contract import ContractError
from disttrain_contract.layout import REPORT_FILE
from disttrain_contract.report import Report
from disttrain_server import tryit
from disttrain_server.errors import ModelUnavailable
from disttrain_server.runs_data import served_name
from disttrain_server.shared import limits, model_store

bp = Blueprint("web", __name__)

# What the browser tab says the page is for, by the served model's task.
TASK_TITLES = {"text": "text classifier", "image": "image classifier", "faces": "face search"}

# The icon is a fixed file, so browsers may keep it a day without asking again.
FAVICON_MAX_AGE = 24 * 3600


@bp.app_template_filter("utc_time")
def utc_time(seconds):
    """A model version (its file's mtime) as the time it was published; demo.js writes the same format."""
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


@bp.app_template_filter("utc_iso")
def utc_iso(seconds):
    """The same moment for <time datetime="...">, to the second."""
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def page_title(name, model):
    """'disttrain · text classifier'; the model's --model-name too when it is not the default,
    which is also the product's name and read 'disttrain · disttrain'."""
    parts = ["disttrain"] if name == "disttrain" else ["disttrain", name]
    if model and model.own_inputs:
        # (the input's kind: a typed table's model is a table classifier too)
        parts.append(f"{model.input_spec['kind']} {'regression' if model.is_regression else 'classifier'}")
    else:
        parts.append(TASK_TITLES.get(model.task, f"{model.task} model") if model else "no model yet")
    return " · ".join(parts)


def training_data(model_path):
    """The "data" part of the report.json beside the served model (the copier's statistics and
    validation result), or None: no report, an older one without it, or unreadable. The page
    reads the small file on each visit, so it follows a newly published report; nothing is shared
    between request threads."""
    try:
        data = Report.read(os.path.join(os.path.dirname(model_path), REPORT_FILE)).data
        shards = [split for name, split in sorted(data["splits"].items()) if name != "test"]
        return {
            "shard_sizes": [split["examples"] for split in shards],
            "train": sum(split["examples"] for split in shards),
            "test": data["splits"]["test"]["examples"],
            "max_shard_skew": max(v for name, v in data["label_skew"].items() if name != "test"),
            "passed": data["passed"],
            "checks": sorted(data["checks"].items()),
            "warnings": data["warnings"],
        }
    except (ContractError, KeyError, TypeError, AttributeError, ValueError):
        return None


@bp.get("/")
def index():
    try:
        loaded, unavailable = model_store().get(), None
    except ModelUnavailable as err:
        loaded, unavailable = None, err.reason
    name = current_app.config["MODEL_NAME"]
    # The page learns what the API will ask of it: which calls need the token (it asks the user for it
    # on the first 401 either way) and whether the gallery takes changes at all.
    config = current_app.config
    token_required_for = config["TOKEN_REQUIRED_FOR"] if config["API_TOKEN"] is not None else ""
    return render_template(
        "index.html",
        title=page_title(name, loaded),
        name=name,
        model=loaded,
        unavailable=unavailable,
        limits=limits(),
        token_required_for=token_required_for,
        read_only_gallery=config["READ_ONLY_GALLERY"],
        token_for_face_reads=config["API_TOKEN"] is not None
        and (token_required_for == "all" or not config["PUBLIC_FACE_SEARCH"]),
        data=training_data(model_store().path) if loaded else None,
        tryit=tryit.form(loaded, config["SHOW_HELDOUT_EXAMPLES"], prefill=token_required_for != "all")
        if loaded and loaded.own_inputs
        else None,
        dashboard=url_for("runs.run_page", run=served_name()),
    )


@bp.get("/favicon.ico")
def favicon():
    """Browsers ask every origin for /favicon.ico, on the JSON pages too; without this each visit
    logged a 404. static/favicon.ico is static/favicon.svg (which the page links) drawn at 32 px
    by Chromium, one PNG inside an ICO header.
    A file for the browser, not an API operation: left out of /openapi.json like /static/*."""
    response = current_app.send_static_file("favicon.ico")
    response.cache_control.public = True
    response.cache_control.max_age = FAVICON_MAX_AGE
    response.cache_control.no_cache = None  # send_static_file's default: revalidate on every use
    return response


def openapi_paths(context):
    """This blueprint's part of /openapi.json (openapi.build_spec): the page, not its icon (see favicon)."""
    return {
        "/": {
            "get": {
                "summary": "The web demo page.",
                "responses": {
                    "200": {"description": "HTML page.", "content": {"text/html": {"schema": {"type": "string"}}}}
                },
            }
        },
    }
