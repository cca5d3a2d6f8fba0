"""What the served copy of a run's report leaves out: single held-out examples and people's names.

The aggregator's report.json keeps, for the operator, a regression's sample of held-out (actual,
predicted) pairs (analysis.models.<model>.points) and, for faces, every held-out person's name with
their retrieval figures (analysis.models.<model>.people), beside the names of every person of the
dataset (labels, and the keys of data.splits.<split>.label_counts). Its analysis.png draws those
points, or one row per person under their name. The files on the volume stay whole; this module
decides what of them a request is given (/report, /runs/<run>/report.json, /runs/<run>/analysis.png
and the links to it):

  held-out values (a regression's points, and the held-out target's smallest and largest value, which bound
    its lowest and highest bin and slice; VALUES): only with --show-heldout-examples, the switch that
    already hands out held-out rows with their labels; under --token-required-for all, only to a
    request with the API token, as /metadata's per-record min/max are then.
  people's names (a face run's; NAMES): only with --show-heldout-examples, and, as names are face
    data, only to a request with the API token wherever the token guards reads of face data (a token
    and --token-required-for all, or writes without --public-face-search).

Everything aggregated stays: RMSE, MAE, R², bias, error quantiles, the bins' and slices' figures,
the faces' accuracy and people_right/people_count. A served report with something left out says so
in its "withheld" object: each left-out field, what it is and what serves it.

Invariants: withheld(report) never changes its argument; a report whose kind cannot be told (not a
JSON object, no task) is served as it is, having no analysis to strip, but its analysis.png is not
(plot_refusal). Shared by request threads: nothing but app.config, read-only.
"""

import hmac

from flask import current_app, request

VALUES, NAMES = "values", "names"
# A served report (and analysis.png) differs with the request's token: a cache keeps one per token sent.
REPORT_HEADERS = {"Cache-Control": "no-cache", "Vary": "Authorization"}
FLAG = "--show-heldout-examples (chart: server.showHeldoutExamples)"
WHAT = {VALUES: "the held-out examples' own targets and predictions", NAMES: "the people's names"}
DRAWN = {VALUES: "plots held-out examples one by one", NAMES: "shows the held-out people by name"}


def kind_of(report):
    """VALUES (a regression run), NAMES (a face run) or None (a classifier: nothing per example)."""
    if not isinstance(report, dict):
        return None
    if report.get("problem") == "regression":
        return VALUES
    if report.get("task") == "faces":
        return NAMES
    return None


def has_token():
    """The request carries the right API token (compared in constant time, as security.check_token)."""
    token = current_app.config["API_TOKEN"]
    scheme, _, sent = request.headers.get("Authorization", "").partition(" ")
    if token is None or scheme.lower() != "bearer" or not sent.strip():
        return False
    return hmac.compare_digest(sent.strip().encode("latin-1", "replace"), token)


def needs_token(kind):
    """Whether the token rules guard this kind of data (see the module docstring)."""
    config = current_app.config
    if config["API_TOKEN"] is None:
        return False
    if config["TOKEN_REQUIRED_FOR"] == "all":
        return True
    return kind == NAMES and not config["PUBLIC_FACE_SEARCH"]


def refusal(kind):
    """None if this request may have `kind` of data; else (status, what is left out and what serves it):
    403 without the operator's opt-in, 401 when it takes the API token and the request has none."""
    if kind is None:
        return None
    if not current_app.config["SHOW_HELDOUT_EXAMPLES"]:
        return 403, f"{WHAT[kind]} (served with {FLAG})"
    if needs_token(kind) and not has_token():
        return 401, f"{WHAT[kind]} (served to a request with the API token: Authorization: Bearer <token>)"
    return None


def withheld(report):
    """(the report as this request may have it, {left-out field: why}) (a new dict; `report` unchanged)."""
    kind = kind_of(report)
    refused = refusal(kind)
    if refused is None:
        return report, {}
    why = refused[1]
    out = dict(report)
    left_out = {}
    analysis = out.get("analysis")
    field = "points" if kind == VALUES else "people"
    if isinstance(analysis, dict) and isinstance(analysis.get("models"), dict):
        models = {}
        for name, model in analysis["models"].items():
            if isinstance(model, dict) and field in model:
                model = {key: value for key, value in model.items() if key != field}
                left_out[f"analysis.models.*.{field}"] = why
            if kind == VALUES and isinstance(model, dict):
                model = without_extremes(model, left_out, why)
            models[name] = model
        out["analysis"] = dict(analysis, models=models)
    if kind == NAMES:
        if "labels" in out:
            out["labels"] = None
            left_out["labels"] = why
        out["data"] = without_label_counts(out.get("data"), left_out, why)
    if left_out:
        out["withheld"] = left_out
    return out, left_out


EXTREMES = "analysis.models.*.predicted_vs_actual|slices: the lowest min_target, the highest max_target"


def without_extremes(model, left_out, why):
    """A regression model's analysis without the held-out target's smallest and largest value, which bound
    its lowest and highest bin and slice (the inner bounds are quantiles, aggregates like the median)."""
    out = dict(model)
    for key in ("predicted_vs_actual", "slices"):
        rows = model.get(key)
        if not isinstance(rows, list) or not rows or not all(isinstance(row, dict) for row in rows):
            continue
        rows = [dict(row) for row in rows]
        first, last = rows[0], rows[-1]
        first["min_target"], last["max_target"] = None, None
        if key == "slices":  # their names say the bounds too ("25 to 87.5")
            first["slice"] = f"up to {number_text(first.get('max_target'))}"
            last["slice"] = f"from {number_text(last.get('min_target'))}" if len(rows) > 1 else "all"
        out[key] = rows
        left_out[EXTREMES] = why
    return out


def number_text(value):
    return f"{value:.4g}" if isinstance(value, (int, float)) else "?"


def without_label_counts(data, left_out, why):
    """report.data with no split's label_counts (keyed by the people's names)."""
    if not isinstance(data, dict) or not isinstance(data.get("splits"), dict):
        return data
    splits = {}
    for name, split in data["splits"].items():
        if isinstance(split, dict) and "label_counts" in split:
            split = {key: value for key, value in split.items() if key != "label_counts"}
            left_out["data.splits.*.label_counts"] = why
        splits[name] = split
    return dict(data, splits=splits)


def plot_refusal(report):
    """None if this request may have the run's analysis.png; else (status, why). The plot draws a
    regression's points and a face run's people by name; a report whose kind cannot be read (damaged,
    gone) does not say what the plot draws, so it is not served either."""
    if not isinstance(report, dict) or "task" not in report:
        return 404, "analysis.png is served beside a readable report.json, which says what it draws"
    refused = refusal(kind_of(report))
    if refused is None:
        return None
    status, why = refused
    return status, f"this run's analysis.png {DRAWN[kind_of(report)]}: it is left out with {why}"
