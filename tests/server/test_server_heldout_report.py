"""What the server serves of a run's report: no single held-out values and no people's names unless the
operator opts in (--show-heldout-examples), and then under the token rules (disttrain_server.heldout).

Real runs: a regression run (copier on the diabetes table, one trainer, the aggregator: its report.json
holds up to 300 held-out (actual, predicted) pairs and analysis.png plots them) and the faces run the
face tests share (its report.json names every held-out person, analysis.png one row per person), each
served by a real Flask app as --model would serve it (the served run is the model's directory's).
"""

import importlib.util
import json
import os

import pytest

from disttrain_contract import Workdir
from disttrain_server import heldout
from disttrain_server.app import create_app
from stages import stage

# tests/own_models.py (the users' tables), which this directory's own_models shadows on sys.path
_spec = importlib.util.spec_from_file_location("tables", os.path.join(os.path.dirname(__file__), "..", "own_models.py"))
tables = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tables)

TOKEN = "h" * 43
WITH_TOKEN = {"Authorization": f"Bearer {TOKEN}"}
FLAG = "--show-heldout-examples"


@pytest.fixture(scope="module")
def regression_run(tmp_path_factory):
    """A whole real regression run; its workdir (~60 s on 2 busy cores)."""
    root = tmp_path_factory.mktemp("regression-run")
    csv = tables.diabetes_csv(str(root / "diabetes.csv"))
    work = root / "work"
    stage(
        "copier",
        "--source",
        f"table:{csv}",
        "--n-shards",
        1,
        "--workdir",
        work,
        "--label-column",
        "progression",
        "--problem",
        "regression",
    )
    stage("trainer", "--workdir", work, "--worker-index", 0, "--epochs", 20)
    stage("aggregator", "--workdir", work)
    return work


@pytest.fixture(scope="module")
def faces_run(face_model):
    return os.path.dirname(os.path.dirname(face_model))


def client(run, tmp_path, **config):
    app = create_app(
        {
            "MODEL_PATH": Workdir(str(run)).final_model,
            "GALLERY_DIR": str(tmp_path / "gallery"),
            "TESTING": True,
            **config,
        }
    )
    return app.test_client()


def on_disk(run):
    with open(os.path.join(Workdir(str(run)).final, "report.json")) as fh:
        return json.load(fh)


def names_in(report):
    """Every person's name the file on disk holds (labels: all of them; the analysis: the held-out ones)."""
    held_out = {p["person"] for p in report["analysis"]["models"]["final"]["people"]}
    assert held_out and held_out <= set(report["labels"])
    return set(report["labels"])


def numbers(value):
    """Every number in a JSON value."""
    if isinstance(value, dict):
        return set().union(*map(numbers, value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*map(numbers, value)) if value else set()
    return {value} if isinstance(value, float) else set()


def served_reports(c):
    """The served report as /report and as the dashboard's report.json (the same body, both open paths)."""
    bodies = []
    for url in ("/report", "/runs/served/report.json"):
        response = c.get(url)
        assert response.status_code == 200 and "Authorization" in response.headers["Vary"], url
        bodies.append(response.get_json())
    assert bodies[0] == bodies[1]
    return bodies[0]


def analysis_png(c, headers=None):
    return c.get("/runs/served/analysis.png", headers=headers or {})


def test_by_default_a_regression_report_has_no_held_out_values_and_says_so(regression_run, tmp_path):
    disk = on_disk(regression_run)
    pairs = {name: m["points"] for name, m in disk["analysis"]["models"].items() if "points" in m}
    assert len(pairs) >= 1 and len(pairs["final"]["actual"]) == min(300, disk["test_examples"])  # the file is whole
    c = client(regression_run, tmp_path)
    served = served_reports(c)
    assert all("points" not in m for m in served["analysis"]["models"].values())
    assert FLAG in served["withheld"]["analysis.models.*.points"]
    # no model's prediction of a held-out example anywhere in the body (the targets are whole numbers here, which
    # the aggregated figures, a slice's bounds say, can equal; a prediction is a float no aggregate hits)
    predictions = {v for p in pairs.values() for v in p["predicted"]}
    assert len(predictions) > 50 and not predictions & numbers(served)
    # the aggregated figures stay, as the aggregator wrote them, but for the held-out target's smallest and
    # largest value, the outer bounds of the bins and slices (the inner ones are its quantiles)
    low, high = min(pairs["final"]["actual"]), max(pairs["final"]["actual"])
    for name, model in disk["analysis"]["models"].items():
        mine = served["analysis"]["models"][name]
        assert {k: v for k, v in model.items() if k not in ("points", "predicted_vs_actual", "slices")} == {
            k: v for k, v in mine.items() if k not in ("predicted_vs_actual", "slices")
        }
        for key in ("predicted_vs_actual", "slices"):
            rows, served_rows = model[key], mine[key]
            assert len(rows) == len(served_rows) > 1 and rows[0]["min_target"] <= low and rows[-1]["max_target"] >= high
            assert served_rows[0]["min_target"] is None and served_rows[-1]["max_target"] is None
            for row, served_row in zip(rows, served_rows):
                assert {k: v for k, v in row.items() if k not in ("min_target", "max_target", "slice")} == {
                    k: v for k, v in served_row.items() if k not in ("min_target", "max_target", "slice")
                }
            assert [r["max_target"] for r in rows[:-1]] == [r["max_target"] for r in served_rows[:-1]]
        assert mine["slices"][0]["slice"].startswith("up to ") and mine["slices"][-1]["slice"].startswith("from ")
    assert FLAG in served["withheld"][heldout.EXTREMES]
    assert served["final"] == disk["final"] and served["analysis"]["compare"] == disk["analysis"]["compare"]
    # the plot of the points is refused, in one line, and the pages say why instead of showing it
    response = analysis_png(c)
    assert response.status_code == 403
    assert "plots held-out examples one by one" in response.get_json()["error"] and FLAG in response.get_json()["error"]
    page = c.get("/runs/served").get_data(as_text=True)
    assert 'id="analysis-withheld"' in page and 'id="analysis-png"' not in page and 'id="withheld"' in page
    assert c.get("/runs/served/report.png").status_code == 200  # the aggregated bars stay
    progress = c.get("/progress.json").get_json()
    assert progress["state"] == "finished" and progress["analysis"] is None
    assert "plots held-out examples" in progress["analysis_withheld"]


def test_by_default_a_face_report_names_nobody_and_says_so(faces_run, tmp_path):
    disk = on_disk(faces_run)
    names = names_in(disk)
    c = client(faces_run, tmp_path)
    served = served_reports(c)
    text = json.dumps(served)
    assert not [name for name in names if json.dumps(name) in text]
    assert set(served["withheld"]) == {"analysis.models.*.people", "labels", "data.splits.*.label_counts"}
    assert served["labels"] is None
    final, disk_final = served["analysis"]["models"]["final"], disk["analysis"]["models"]["final"]
    assert "people" not in final
    assert (final["accuracy"], final["people_right"], final["people_count"]) == (
        disk_final["accuracy"],
        disk_final["people_right"],
        disk_final["people_count"],
    )
    assert served["data"]["splits"]["test"]["examples"] == disk["data"]["splits"]["test"]["examples"]
    assert analysis_png(c).status_code == 403 and "by name" in analysis_png(c).get_json()["error"]
    page = c.get("/runs/served").get_data(as_text=True)
    assert 'id="analysis-withheld"' in page and 'id="analysis-png"' not in page
    assert not [name for name in names if name in page]


@pytest.mark.parametrize("which", ["regression", "faces"])
def test_the_opt_in_serves_the_report_and_the_plot_whole(which, regression_run, faces_run, tmp_path):
    run = regression_run if which == "regression" else faces_run
    c = client(run, tmp_path, SHOW_HELDOUT_EXAMPLES=True)
    served, disk = served_reports(c), on_disk(run)
    assert "withheld" not in served
    assert served["analysis"] == disk["analysis"] and served["labels"] == disk["labels"]
    with open(os.path.join(Workdir(str(run)).final, "analysis.png"), "rb") as fh:
        assert analysis_png(c).get_data() == fh.read()
    page = c.get("/runs/served").get_data(as_text=True)
    assert 'id="analysis-png"' in page and 'id="withheld"' not in page
    assert c.get("/progress.json").get_json()["analysis"].startswith("/runs/served/analysis.png?v=")


def test_face_names_follow_the_face_data_token_rule(faces_run, tmp_path):
    """With the opt-in and a token that guards face reads (writes, no --public-face-search), the names go
    only to a request with the token; the dashboard's <img> sends none, so it gets the note; a wrong token
    is no token. --public-face-search opens them as it opens the gallery."""
    names = names_in(on_disk(faces_run))
    guarded = client(faces_run, tmp_path, SHOW_HELDOUT_EXAMPLES=True, API_TOKEN=TOKEN.encode())
    served = served_reports(guarded)
    assert "API token" in served["withheld"]["labels"] and not [n for n in names if json.dumps(n) in json.dumps(served)]
    response = analysis_png(guarded)
    assert response.status_code == 401 and response.headers["WWW-Authenticate"].startswith("Bearer")
    assert analysis_png(guarded, {"Authorization": "Bearer wrong"}).status_code == 401
    assert 'id="analysis-withheld"' in guarded.get("/runs/served").get_data(as_text=True)
    body = guarded.get("/report", headers=WITH_TOKEN).get_json()
    assert "withheld" not in body and set(body["labels"]) == names
    assert analysis_png(guarded, WITH_TOKEN).status_code == 200
    public = client(faces_run, tmp_path, SHOW_HELDOUT_EXAMPLES=True, API_TOKEN=TOKEN.encode(), PUBLIC_FACE_SEARCH=True)
    assert "withheld" not in served_reports(public) and analysis_png(public).status_code == 200
    # without the opt-in the token does not bring them: the operator has not chosen to serve them
    closed = client(faces_run, tmp_path, API_TOKEN=TOKEN.encode())
    assert "labels" in closed.get("/report", headers=WITH_TOKEN).get_json()["withheld"]


def test_under_required_for_all_held_out_values_need_the_token(regression_run, faces_run, tmp_path):
    """--token-required-for all: the dashboard and /report stay open, and every held-out value in them goes
    only to a request with the token (as /metadata's min/max then do); under writes a regression's go to all."""
    for run in (regression_run, faces_run):
        c = client(run, tmp_path, SHOW_HELDOUT_EXAMPLES=True, API_TOKEN=TOKEN.encode(), TOKEN_REQUIRED_FOR="all")
        assert c.get("/runs/served").status_code == 200 and c.get("/runs.json").status_code == 200
        assert "withheld" in served_reports(c) and analysis_png(c).status_code == 401
        assert "withheld" not in c.get("/report", headers=WITH_TOKEN).get_json()
        assert analysis_png(c, WITH_TOKEN).status_code == 200
        public = client(
            run,
            tmp_path,
            SHOW_HELDOUT_EXAMPLES=True,
            API_TOKEN=TOKEN.encode(),
            TOKEN_REQUIRED_FOR="all",
            PUBLIC_FACE_SEARCH=True,
        )
        assert "withheld" in served_reports(public)  # --public-face-search opens reads under writes only
    writes = client(regression_run, tmp_path, SHOW_HELDOUT_EXAMPLES=True, API_TOKEN=TOKEN.encode())
    assert "withheld" not in served_reports(writes) and analysis_png(writes).status_code == 200
