"""TF Serving's REST API as its own documentation writes it, sent to our server on the real models.

The request and response shapes below are copied from TF Serving's REST documentation,
https://www.tensorflow.org/tfx/serving/api_rest (source: tensorflow/serving,
tensorflow_serving/g3doc/api_rest.md). Their models are not ours, so the feature names and values
are swapped for our input's name ("text" or "image") and real reviews and digits; the structure is
theirs. Each is accepted and answered in the documented shape, or refused with the documented
{"error": ...}.
"""

import base64
import json
import re
import shutil
import subprocess

import cv2
import numpy as np
import pytest

from server.serving import NEGATIVE, POSITIVE, error_of, http, predict_url, publish, running_server

DOC = "https://www.tensorflow.org/tfx/serving/api_rest"
MODEL = "/v1/models/disttrain"


def png_b64(pixels):
    ok, encoded = cv2.imencode(".png", pixels)
    assert ok
    return base64.b64encode(encoded.tobytes()).decode()


def rows_of(answer, key, count, width):
    """The documented response {key: [row, ...]} with one probability row per instance."""
    assert set(answer) == {key}, answer
    rows = answer[key]
    assert len(rows) == count and all(len(row) == width for row in rows)
    assert np.allclose(np.sum(rows, axis=1), 1.0, atol=1e-5)
    return np.array(rows)


# -- Predict API: "Specifying input tensors in row format" / "... in column format" (DOC)

TEXT_REQUESTS = [
    # {"instances": [ "foo", "bar", "baz" ]}  "List of 3 scalar tensors."
    ({"instances": [POSITIVE, NEGATIVE, "an ordinary film"]}, "predictions"),
    # {"instances": [{"tag": "foo", "signal": ..., "sensor": ...}, {"tag": "bar", ...}]}: one object per row,
    # keyed by input name (our model has the one input)
    ({"instances": [{"text": POSITIVE}, {"text": NEGATIVE}, {"text": "an ordinary film"}]}, "predictions"),
    # {"inputs": {"tag": ["foo", "bar"], "signal": ..., "sensor": ...}}: columnar, keyed by input name
    ({"inputs": {"text": [POSITIVE, NEGATIVE, "an ordinary film"]}}, "outputs"),
    # "inputs": <(nested)list>: columnar, the single input's tensor itself
    ({"inputs": [POSITIVE, NEGATIVE, "an ordinary film"]}, "outputs"),
    # "signature_name": <string>  "(Optional) Serving signature to use."
    ({"signature_name": "serving_default", "instances": [POSITIVE, NEGATIVE, "an ordinary film"]}, "predictions"),
    ({"signature_name": "serving_default", "inputs": {"text": [POSITIVE, NEGATIVE, "an ordinary film"]}}, "outputs"),
]


@pytest.mark.parametrize("body, key", TEXT_REQUESTS)
def test_documented_predict_requests_get_the_documented_response(text_client, body, key):
    expected = rows_of(
        text_client.post(predict_url(), json={"instances": [POSITIVE, NEGATIVE, "an ordinary film"]}).get_json(),
        "predictions",
        3,
        2,
    )
    response = text_client.post(predict_url(), json=body)
    assert response.status_code == 200, response.get_data(as_text=True)
    np.testing.assert_allclose(rows_of(response.get_json(), key, 3, 2), expected, atol=1e-6)


def test_documented_nested_and_binary_tensors_on_the_image_model(image_client, digits_test):
    digits = digits_test[0][:4]
    # {"instances": [ [[1, 2]], [[3, 4]] ]}  "List of 2 tensors each of [1, 2] shape": ours are [8, 8, 1]
    nested = rows_of(
        image_client.post(predict_url(), json={"instances": digits.tolist()}).get_json(), "predictions", 4, 10
    )
    # "Encoding binary values": {"b64": <base64 encoded string>} as a tensor value, alone or keyed by the input name
    for instances in (
        [{"b64": png_b64(d)} for d in digits],
        [{"image": {"b64": png_b64(d)}} for d in digits],
        [{"image": d.tolist()} for d in digits],
    ):
        answer = image_client.post(predict_url(), json={"instances": instances}).get_json()
        np.testing.assert_allclose(rows_of(answer, "predictions", 4, 10), nested, atol=1e-6)
    columns = image_client.post(predict_url(), json={"inputs": {"image": digits.tolist()}}).get_json()
    np.testing.assert_allclose(rows_of(columns, "outputs", 4, 10), nested, atol=1e-6)


# -- Classify API (DOC): {"signature_name"?, "context"?, "examples": [{feature: value}]} -> {"result": [[[label, score], ...]]}


def test_documented_classify_request_with_binary_image_features(image_client, digits_test):
    x = digits_test[0]
    # The doc's classify example: "examples": [{"image": {"b64": "aW1hZ2UgYnl0ZXM="}, "caption": "seaside"}, ...]
    # (our model has no "caption" feature and one signature)
    body = {"examples": [{"image": {"b64": png_b64(x[0])}}, {"image": {"b64": png_b64(x[1])}}]}
    answer = image_client.post(f"{MODEL}:classify", json=body).get_json()
    assert set(answer) == {"result"} and len(answer["result"]) == 2
    probabilities = image_client.post(predict_url(), json={"instances": x[:2].tolist()}).get_json()["predictions"]
    for pairs, row in zip(answer["result"], probabilities):
        assert [label for label, _ in pairs] == [str(d) for d in range(10)]  # label order, like TF Serving's classes
        np.testing.assert_allclose([score for _, score in pairs], row, atol=1e-6)


def test_classify_context_holds_features_shared_by_every_example(text_client):
    shared = text_client.post(
        f"{MODEL}:classify", json={"context": {"text": POSITIVE}, "examples": [{}, {}]}
    ).get_json()["result"]
    alone = text_client.post(
        f"{MODEL}:classify", json={"signature_name": "serving_default", "examples": [{"text": POSITIVE}]}
    ).get_json()["result"]
    # the same classes and scores for each example; a batch of two may round differently from a batch of one
    # in the last bits (TensorFlow's CPU kernels pick their loop by batch size; seen on an AVX2-only host)
    assert len(shared) == 2 and all(
        [label for label, _ in example] == [label for label, _ in alone[0]] for example in shared
    )
    assert all(
        [score for _, score in example] == pytest.approx([score for _, score in alone[0]], rel=1e-6)
        for example in shared
    )
    assert dict(alone[0])["positive"] > 0.5
    assert "also in \"context\"" in error_of(
        text_client.post(f"{MODEL}:classify", json={"context": {"text": "a"}, "examples": [{"text": "b"}]}), 400
    )


def test_classify_needs_a_classifier_and_named_features(text_client, face_model, tmp_path):
    from server.serving import make_client

    face_client = make_client(face_model, tmp_path)
    assert "faces model, which has no classes" in error_of(
        face_client.post(f"{MODEL}:classify", json={"examples": [{"face": [[0] * 32] * 32}]}), 409
    )
    assert 'one feature, "text"' in error_of(
        text_client.post(f"{MODEL}:classify", json={"examples": [{"review": "good"}]}), 422
    )
    assert '"examples" must be a non-empty list' in error_of(
        text_client.post(f"{MODEL}:classify", json={"instances": ["good"]}), 400
    )
    assert "unknown signature_name 'classify_objects'" in error_of(
        text_client.post(
            f"{MODEL}:classify", json={"signature_name": "classify_objects", "examples": [{"text": "good"}]}
        ),
        400,
    )


# -- Model status and metadata API (DOC), with /versions/${VERSION} and /labels/${LABEL}


def test_documented_status_response_under_every_path(text_client):
    # DOC, "Make REST API calls to ModelServer": the status TF Serving printed for its example model
    documented = {
        "model_version_status": [
            {"version": "123", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
        ]
    }
    plain = text_client.get(MODEL).get_json()
    version = plain["model_version_status"][0]["version"]
    assert plain.pop("ready") is True  # our one extra key: what KServe's V1 clients read
    assert same_structure(plain, documented) and plain["model_version_status"][0]["state"] == "AVAILABLE"
    for path in (f"{MODEL}/versions/{version}", f"{MODEL}/labels/latest", f"{MODEL}/labels/stable"):
        assert text_client.get(path).get_json() == {**plain, "ready": True}, path


# What TF Serving 2.x prints for GET /v1/models/NAME/metadata (GetModelMetadataResponse in JSON): the
# structure, with a Keras model's names; the doc only names the proto, so this is its printout.
TF_SERVING_METADATA = {
    "model_spec": {"name": "model", "signature_name": "", "version": "1"},
    "metadata": {
        "signature_def": {
            "signature_def": {
                "serving_default": {
                    "inputs": {
                        "input_data": {
                            "dtype": "DT_FLOAT",
                            "tensor_shape": {
                                "dim": [{"size": "-1", "name": ""}, {"size": "4", "name": ""}],
                                "unknown_rank": False,
                            },
                            "name": "serving_default_input_data:0",
                        }
                    },
                    "outputs": {
                        "output_data": {
                            "dtype": "DT_FLOAT",
                            "tensor_shape": {
                                "dim": [{"size": "-1", "name": ""}, {"size": "1", "name": ""}],
                                "unknown_rank": False,
                            },
                            "name": "StatefulPartitionedCall:0",
                        }
                    },
                    "method_name": "tensorflow/serving/predict",
                }
            }
        }
    },
}


def same_structure(ours, theirs):
    """The same keys at every level (names of tensors aside: they are the model's), lists of like items, like scalars."""
    if isinstance(theirs, dict):
        if not isinstance(ours, dict):
            return False
        if set(theirs) <= {"input_data", "output_data"}:  # a map keyed by tensor names
            return len(ours) == len(theirs) and all(
                same_structure(v, next(iter(theirs.values()))) for v in ours.values()
            )
        return set(ours) == set(theirs) and all(same_structure(ours[k], theirs[k]) for k in theirs)
    if isinstance(theirs, list):
        return isinstance(ours, list) and all(same_structure(item, theirs[0]) for item in ours)
    return type(ours) is type(theirs)


@pytest.mark.parametrize(
    "client_name, input_name, dtype, dims, outputs",
    [
        ("text_client", "text", "DT_STRING", ["-1"], 2),
        ("image_client", "image", "DT_UINT8", ["-1", "8", "8", "1"], 10),
    ],
)
def test_metadata_is_a_tf_serving_signature_def(request, client_name, input_name, dtype, dims, outputs):
    client = request.getfixturevalue(client_name)
    body = client.get(f"{MODEL}/metadata").get_json()
    ours = body["metadata"].pop("disttrain")  # our own facts, as a second metadata field
    assert set(ours) == {"task", "labels", "input", "limits"} and len(ours["labels"]) == outputs
    assert same_structure(body, TF_SERVING_METADATA)
    signature = body["metadata"]["signature_def"]["signature_def"]["serving_default"]
    ((name, tensor),) = signature["inputs"].items()
    assert (name, tensor["dtype"], [d["size"] for d in tensor["tensor_shape"]["dim"]]) == (input_name, dtype, dims)
    ((name, tensor),) = signature["outputs"].items()
    assert (name, tensor["dtype"], [d["size"] for d in tensor["tensor_shape"]["dim"]]) == (
        "probabilities",
        "DT_FLOAT",
        ["-1", str(outputs)],
    )
    version = body["model_spec"]["version"]
    for path in (f"{MODEL}/versions/{version}/metadata", f"{MODEL}/labels/stable/metadata"):
        again = client.get(path).get_json()
        again["metadata"].pop("disttrain")
        assert again == body


def test_versioned_and_labelled_predict_paths(text_client):
    version = text_client.get(MODEL).get_json()["model_version_status"][0]["version"]
    # POST http://host:port/v1/models/${MODEL_NAME}[/versions/${VERSION}|/labels/${LABEL}]:predict
    expected = text_client.post(predict_url(), json={"instances": [POSITIVE]}).get_json()
    for path in (
        f"{MODEL}/versions/{version}:predict",
        f"{MODEL}/labels/latest:predict",
        f"{MODEL}/labels/stable:predict",
    ):
        assert text_client.post(path, json={"instances": [POSITIVE]}).get_json() == expected, path
    assert (
        text_client.post(f"{MODEL}/versions/{version}:classify", json={"examples": [{"text": POSITIVE}]}).status_code
        == 200
    )


# -- Errors: {"error": <error message string>} (DOC, first section), with a 4xx status


def test_documented_errors(text_client):
    version = int(text_client.get(MODEL).get_json()["model_version_status"][0]["version"])
    # DOC: POST /v1/models/half:predict -> 404 {"error": "Servable not found for request: Latest(half)"}
    assert "unknown model 'half'" in error_of(
        text_client.post("/v1/models/half:predict", json={"instances": [1.0, 5.0]}), 404
    )
    # DOC's half_plus_three request {"instances": [1.0, 2.0, 5.0]}: numbers, not what a text model takes
    assert "expected a string, got number" in error_of(
        text_client.post(predict_url(), json={"instances": [1.0, 2.0, 5.0]}), 422
    )
    other = version - 1
    for method, path in (
        ("GET", f"{MODEL}/versions/{other}"),
        ("GET", f"{MODEL}/versions/{other}/metadata"),
        ("POST", f"{MODEL}/versions/{other}:predict"),
        ("POST", f"{MODEL}/versions/{other}:classify"),
    ):
        assert f"version '{other}' of model 'disttrain' is not served" in error_of(
            text_client.open(path, method=method, json={"instances": ["a"]}), 404
        )
    for method, path in (("GET", f"{MODEL}/labels/canary"), ("POST", f"{MODEL}/labels/canary:predict")):
        assert "unknown version label 'canary'" in error_of(
            text_client.open(path, method=method, json={"instances": ["a"]}), 404
        )
    # a regressor's verb: our models are classifiers
    assert "no such endpoint" in error_of(
        text_client.post(f"{MODEL}:regress", data=json.dumps({"examples": [{"x": 1.0}]})), 404
    )
    assert "unknown signature_name 'tensorflow/serving/regress'" in error_of(
        text_client.post(predict_url(), json={"signature_name": "tensorflow/serving/regress", "instances": ["a"]}), 400
    )


# -- The docs' own call, with the real curl against the real server (gunicorn)
#
# TF Serving's Docker page (https://www.tensorflow.org/tfx/serving/docker) queries a model with
#     curl -d '{"instances": [1.0, 2.0, 5.0]}' -X POST http://localhost:8501/v1/models/half_plus_two:predict
# and curl -d declares the body application/x-www-form-urlencoded. KServe's docs call V2 infer the same way
# (curl -d @./input.json). The same content type is what a form on another site can send: a browser's
# request from another site is refused (security.py; every case, unit-level: test_server_security.py).


def curl(*args):
    """The real curl: (HTTP status, body, the Content-Type curl sent)."""
    assert shutil.which("curl"), "this test runs the real curl, as TF Serving's docs do: apt-get install curl"
    done = subprocess.run(
        ["curl", "-sS", "-v", "-w", "\n%{http_code}", *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    body, _, status = done.stdout.rpartition("\n")
    sent = re.search(r"^> content-type: (.*?)\s*$", done.stderr, re.M | re.I)
    return int(status), body, sent and sent.group(1)


def test_the_documented_curl_call_on_a_real_server(text_model, tmp_path):
    publish(text_model, tmp_path)
    with running_server(tmp_path, "--workers", "1") as (base, _proc, _log):
        url = base + predict_url()
        expected = http("POST", url, {"instances": [POSITIVE, NEGATIVE]})[1]["predictions"]
        status, body, sent = curl("-d", json.dumps({"instances": [POSITIVE, NEGATIVE]}), "-X", "POST", url)
        assert sent == "application/x-www-form-urlencoded"
        assert status == 200, body
        np.testing.assert_allclose(json.loads(body)["predictions"], expected, atol=1e-6)

        status, body, _ = curl("-d", json.dumps({"examples": [{"text": POSITIVE}]}), base + f"{MODEL}:classify")
        assert status == 200, body
        assert dict(json.loads(body)["result"][0])["positive"] > 0.5
        infer = {"inputs": [{"name": "text", "shape": [2], "datatype": "BYTES", "data": [POSITIVE, NEGATIVE]}]}
        status, body, _ = curl("-d", json.dumps(infer), base + "/v2/models/disttrain/infer")
        assert status == 200, body
        np.testing.assert_allclose(np.reshape(json.loads(body)["outputs"][0]["data"], (2, -1)), expected, atol=1e-5)

        # The same request as a browser sends it for a page on another site: refused, one JSON line saying why.
        for header, named in [
            ("Origin: https://evil.example", "https://evil.example"),
            ("Sec-Fetch-Site: cross-site", "cross-site"),
            ("Sec-Fetch-Site: same-site", "same-site"),
        ]:
            status, body, _ = curl("-d", json.dumps({"instances": [POSITIVE]}), "-H", header, url)
            assert status == 403, body
            assert (
                body.strip().count("\n") == 0
                and "cross-site request refused" in json.loads(body)["error"]
                and named in body
            )
        # The page's own origin is served
        status, body, _ = curl("-d", json.dumps({"instances": [POSITIVE]}), "-H", f"Origin: {base}", url)
        assert status == 200, body
        # Writes stay JSON-only: curl -d to the gallery is refused, and says how to send JSON
        status, body, _ = curl("-d", json.dumps({"name": "Ada", "image": "x"}), base + "/v1/gallery")
        assert status == 415 and "--json" in json.loads(body)["error"], body
