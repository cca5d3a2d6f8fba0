"""The JSON API on the real movie-review model: predictions, status, metadata, and every bad input."""

import json

import pytest

from server.serving import NEGATIVE, POSITIVE, error_of, make_client, predict_url


def test_predict_returns_one_probability_row_per_instance(text_client):
    texts = [POSITIVE, NEGATIVE, "it was a film.", "x" * 10_000]
    response = text_client.post(predict_url(), json={"instances": texts})
    assert response.status_code == 200
    predictions = response.get_json()["predictions"]
    assert len(predictions) == len(texts)
    for row in predictions:
        assert len(row) == 2
        assert all(0.0 <= p <= 1.0 for p in row)
        assert sum(row) == pytest.approx(1.0, abs=1e-5)


def test_obvious_reviews_get_the_obvious_sentiment(text_client):
    meta = text_client.get("/v1/models/disttrain/metadata").get_json()["metadata"]["disttrain"]
    positive = meta["labels"].index("positive")
    predictions = text_client.post(predict_url(), json={"instances": [POSITIVE, NEGATIVE]}).get_json()["predictions"]
    assert predictions[0][positive] > 0.5
    assert predictions[1][positive] < 0.5


def test_columnar_inputs_answer_outputs_with_the_same_numbers(text_client):
    rows = text_client.post(predict_url(), json={"instances": [POSITIVE]}).get_json()
    assert set(rows) == {"predictions"}
    for body in ({"inputs": [POSITIVE]}, {"inputs": {"text": [POSITIVE]}}):  # TF Serving: columnar in, "outputs" out
        columns = text_client.post(predict_url(), json=body).get_json()
        assert set(columns) == {"outputs"} and columns["outputs"] == rows["predictions"]


def test_body_without_content_type_is_accepted_like_tf_serving(text_client):
    response = text_client.post(predict_url(), data=json.dumps({"instances": [POSITIVE]}))
    assert response.status_code == 200 and len(response.get_json()["predictions"]) == 1


def test_model_status_in_tf_serving_shape(text_client):
    body = text_client.get("/v1/models/disttrain").get_json()
    (status,) = body["model_version_status"]
    assert status["state"] == "AVAILABLE" and body["ready"] is True
    assert status["status"] == {"error_code": "OK", "error_message": ""}
    assert int(status["version"]) > 1_600_000_000  # mtime in seconds
    ready = text_client.get("/readyz")
    assert ready.status_code == 200 and ready.get_json()["version"] == status["version"]


def test_metadata_has_labels_input_spec_and_limits(text_client):
    body = text_client.get("/v1/models/disttrain/metadata").get_json()
    assert body["model_spec"]["name"] == "disttrain"
    ours = body["metadata"]["disttrain"]
    assert ours["labels"] == ["negative", "positive"]
    assert ours["input"] == {"kind": "text"}
    assert ours["limits"] == {
        "max_instances": 256,
        "max_text_chars": 10_000,
        "max_upload_bytes": 8 * 1024 * 1024,
        "max_request_pixels": 16_000_000,
    }


def test_healthz_always_ok(text_client, empty_client):
    for client in (text_client, empty_client):
        response = client.get("/healthz")
        assert response.status_code == 200 and response.get_json() == {"status": "ok"}


def test_without_a_model_the_app_runs_and_says_why(empty_client):
    ready = empty_client.get("/readyz")
    assert ready.status_code == 503
    assert ready.get_json()["status"] == "unavailable" and "no model at final/model.keras" in ready.get_json()["reason"]
    assert "/" + "final/model.keras" not in ready.get_json()["reason"]  # the server's own directories stay private
    assert "no model at" in error_of(empty_client.post(predict_url(), json={"instances": ["good"]}), 503)
    (status,) = empty_client.get("/v1/models/disttrain").get_json()["model_version_status"]
    assert status["state"] == "UNKNOWN" and status["status"]["error_code"] == "UNAVAILABLE"
    assert empty_client.get("/v1/models/disttrain").get_json()["ready"] is False
    page = empty_client.get("/")
    assert page.status_code == 200 and "No model is being served yet" in page.get_data(as_text=True)


@pytest.mark.parametrize(
    "body, status, words",
    [
        (b"{not json", 400, "not valid JSON"),
        (b"", 400, "body is empty"),
        (b"\xff\xfe\x00garbage", 400, "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, 400, "nested too deeply"),
        (json.dumps(["a review"]).encode(), 400, "must be a JSON object"),
        (json.dumps("a review").encode(), 400, "must be a JSON object"),
        (json.dumps({"text": "a review"}).encode(), 400, 'missing "instances"'),
        (json.dumps({"instances": ["a"], "inputs": ["b"]}).encode(), 400, "not both"),
        (json.dumps({"instances": "a review"}).encode(), 400, '"instances" must be a list'),
        (json.dumps({"inputs": "x"}).encode(), 400, '"inputs" must be a list'),
        (json.dumps({"inputs": {"text": "x"}}).encode(), 400, '"inputs"."text" must be a list'),
        (json.dumps({"inputs": {"review": ["x"]}}).encode(), 400, 'exactly one key, this model\'s input "text"'),
        (
            json.dumps({"instances": ["a"], "signature_name": "predict_images"}).encode(),
            400,
            "unknown signature_name 'predict_images'",
        ),
        (json.dumps({"instances": ["a"], "signature_name": 1}).encode(), 400, '"signature_name" must be a string'),
        (
            json.dumps({"instances": [{"text": "a", "lang": "en"}]}).encode(),
            422,
            'instance 0: this model has one input, "text"',
        ),
        (
            json.dumps({"instances": [{"text": 3}]}).encode(),
            422,
            "instance 0: this model takes text; expected a string, got number",
        ),
        (json.dumps({"instances": []}).encode(), 400, '"instances" is empty'),
        (json.dumps({"instances": ["ok"] * 257}).encode(), 413, "too many instances: 257"),
        (
            json.dumps({"instances": [3]}).encode(),
            422,
            "instance 0: this model takes text; expected a string, got number",
        ),
        (
            json.dumps({"instances": ["fine", None]}).encode(),
            422,
            "instance 1: this model takes text; expected a string, got null",
        ),
        (json.dumps({"instances": [{"b64": "aGk="}]}).encode(), 422, "expected a string, got object"),
        (json.dumps({"instances": [["nested"]]}).encode(), 422, "expected a string, got array"),
        (json.dumps({"instances": [""]}).encode(), 422, "instance 0: text is empty or only whitespace"),
        (json.dumps({"instances": [" \n\t "]}).encode(), 422, "empty or only whitespace"),
        (json.dumps({"instances": ["x" * 10_001]}).encode(), 422, "10001 characters long, the limit is 10000"),
        (b'{"instances": ["\\ud800"]}', 422, "not valid Unicode"),
    ],
)
def test_bad_predict_request_is_a_json_4xx_naming_the_problem(text_client, body, status, words):
    assert words in error_of(text_client.post(predict_url(), data=body), status)


def test_upload_over_the_size_limit_is_413(text_client):
    body = json.dumps({"instances": ["word " * (2 * 1024 * 1024)]}).encode()  # 10 MB > 8 MB
    assert "larger than the 8388608 byte limit" in error_of(text_client.post(predict_url(), data=body), 413)


def test_unknown_model_name_is_404(text_client):
    assert "unknown model 'other'" in error_of(text_client.post(predict_url("other"), json={"instances": ["hi"]}), 404)
    assert "unknown model 'other'" in error_of(text_client.get("/v1/models/other"), 404)
    assert "unknown model 'other'" in error_of(text_client.get("/v1/models/other/metadata"), 404)


def test_wrong_method_is_405_json(text_client):
    message = error_of(text_client.get(predict_url()), 405)
    assert "method GET is not allowed" in message and "POST" in message
    assert "method POST is not allowed for /healthz" in error_of(text_client.post("/healthz"), 405)
    assert text_client.delete("/v1/models/disttrain").headers["Allow"]


def test_unknown_route_is_404_json(text_client):
    assert "no such endpoint: GET /v2/nothing" in error_of(text_client.get("/v2/nothing"), 404)


def test_a_bug_is_a_json_500_without_internals(tmp_path):
    client = make_client(None, tmp_path)
    client.application.add_url_rule("/boom", view_func=lambda: 1 / 0)
    message = error_of(client.get("/boom"), 500)
    assert "internal error" in message and "ZeroDivision" not in message


def test_report_is_404_json_until_the_aggregator_writes_one(text_client):
    assert "no report.json" in error_of(text_client.get("/report"), 404)


def test_report_is_served_from_next_to_the_model(text_model, tmp_path):
    client = make_client(text_model, tmp_path)
    (tmp_path / "final" / "report.json").write_text(json.dumps({"final": {"accuracy": 0.81}}))
    response = client.get("/report")
    assert response.status_code == 200 and response.get_json() == {"final": {"accuracy": 0.81}}


def test_report_names_files_relative_to_the_run_never_the_servers_volume(text_model, tmp_path):
    """The copier's statistics and plot are recorded as absolute paths on the volume: /report (and the
    dashboard's report.json) give them relative to the run's working directory, and a path outside
    the run as its file name alone; prose with a slash in it is left as written."""
    client = make_client(text_model, tmp_path)
    written = {
        "data": {"stats": f"{tmp_path}/data/stats.json", "plot": f"{tmp_path}/data/stats.png", "passed": True},
        "baseline": "/srv/other-runs/run-1/final/report.json",
        "why": "a 1/2 split of the data",
        "runs": [f"{tmp_path}/final"],
    }
    (tmp_path / "final" / "report.json").write_text(json.dumps(written))
    (tmp_path / "final" / "_SUCCESS").touch()  # the dashboard shows a finished run's report
    for url in ("/report", "/runs/served/report.json"):
        response = client.get(url)
        assert response.status_code == 200 and response.mimetype == "application/json", url
        assert response.get_json() == {
            "data": {"stats": "data/stats.json", "plot": "data/stats.png", "passed": True},
            "baseline": "report.json",
            "why": "a 1/2 split of the data",
            "runs": ["final"],
        }, url
        assert str(tmp_path) not in response.get_data(as_text=True) and "/srv/" not in response.get_data(as_text=True)
