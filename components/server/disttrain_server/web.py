"""The demo page at /: a form that calls the JSON API from the browser."""

from datetime import datetime, timezone

from flask import Blueprint, current_app, render_template

from disttrain_server.api import limits, model_store
from disttrain_server.errors import ModelUnavailable

bp = Blueprint("web", __name__)

# The page and its script/style come from this server only; nothing is fetched from outside.
CSP = "default-src 'self'; img-src 'self' data: blob:; object-src 'none'; base-uri 'none'; form-action 'self'"


@bp.app_template_filter("utc_time")
def utc_time(seconds):
    """A model version (its file's mtime) as the time it was published; demo.js writes the same format."""
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


@bp.get("/")
def index():
    try:
        loaded, unavailable = model_store().get(), None
    except ModelUnavailable as err:
        loaded, unavailable = None, err.reason
    html = render_template("index.html", name=current_app.config["MODEL_NAME"], model=loaded, unavailable=unavailable, limits=limits())
    return html, {"Content-Security-Policy": CSP}
