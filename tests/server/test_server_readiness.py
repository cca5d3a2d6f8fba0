"""Serve what was trained, readiness that means it answers, a bad model file as a recorded load failure.

A keras.applications network with a float32 input and its own Rescaling inside (EfficientNetV2B0,
weights=None, 32x32x3), published as the trainer and aggregator publish an own model, answers
:predict, :classify and V2 infer with exactly model.predict of the pixels the trainer would feed it
(uint8 0..255 cast to float32). A model that does not answer its self-test (its call raises for the
signature's input, or it answers NaN) is not ready: /readyz 503 and TF Serving's model status say
why. A disttrain.json with a malformed model_code is a recorded failure: the earlier model keeps
serving and the file is not loaded again per request.
"""

import base64
import logging
import os

import cv2
import numpy as np
import pytest

from disttrain_contract import Workdir
from disttrain_contract.artifact import decode_image
from server.own_models import meta_of, publish_own
from server.serving import error_of, make_client, predict_url, publish
from server.test_server_reload import with_meta

INFER = "/v2/models/disttrain/infer"
SIZE, LABELS = 32, [f"class{i}" for i in range(10)]
IMAGE_SPEC = {"kind": "image", "height": SIZE, "width": SIZE, "channels": 3}


def _keras():
    from disttrain_contract.tensorflow_import import import_tensorflow

    import_tensorflow()
    import keras

    keras.utils.set_random_seed(0)
    return keras


def own_image_meta(model, spec=IMAGE_SPEC, labels=LABELS):
    """disttrain.json of an own image model as the trainer writes it (tasks.base.metadata: its inputs and outputs)."""
    inputs = [
        {
            "name": t.name.split(":")[0],
            "shape": [None if d is None else int(d) for d in t.shape[1:]],
            "dtype": str(t.dtype),
        }
        for t in model.inputs
    ]
    return meta_of("image", spec, labels, "softmax", inputs, [{"name": "probabilities", "shape": [len(labels)]}])


@pytest.fixture(scope="module")
def float_image_root(tmp_path_factory):
    """EfficientNetV2B0 (float32 input, Rescaling and Normalization inside) published with its disttrain.json.
    (MobileNetV3Small at this size answers exactly 0.1 for every class untrained: no comparison could fail.)"""
    keras = _keras()
    model = keras.applications.EfficientNetV2B0(weights=None, input_shape=(SIZE, SIZE, 3), classes=len(LABELS))
    assert str(model.inputs[0].dtype) == "float32"
    root = tmp_path_factory.mktemp("float-image")
    publish_own(str(root), model, own_image_meta(model))
    return root, model


@pytest.fixture(scope="module")
def float_image_client(float_image_root):
    from disttrain_server import create_app

    root, _ = float_image_root
    return create_app(
        {"MODEL_PATH": str(root / "final" / "model.keras"), "GALLERY_DIR": str(root / "gallery"), "TESTING": True}
    ).test_client()


def images():
    """Three PNG files of random pixels (decoded exactly as encoded: lossless, already the model's size)."""
    rng = np.random.default_rng(7)
    pixels = rng.integers(0, 256, (3, SIZE, SIZE, 3), dtype=np.uint8)
    return [cv2.imencode(".png", image)[1].tobytes() for image in pixels]


def expected(model, files):
    """model.predict on what the trainer feeds for these files: decode_image's uint8 pixels cast to the model's float32."""
    pixels = np.stack([decode_image(data, SIZE, SIZE, 3) for data in files])
    return pixels, model.predict(pixels.astype(np.float32), verbose=0)


def ok_json(response):
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def test_float_input_model_answers_what_keras_predicts_on_the_trained_pixel_scale(float_image_client, float_image_root):
    _, model = float_image_root
    files = images()
    pixels, want = expected(model, files)
    # the rows differ (by far more than the tolerance): an answer on other pixels or another scale would show
    assert np.abs(want[0] - want[1]).max() > 1e-4
    assert np.abs(model.predict(pixels.astype(np.float32) / 255, verbose=0) - want).max() > 1e-4

    encoded = [{"b64": base64.b64encode(data).decode()} for data in files]
    from_files = ok_json(float_image_client.post(predict_url(), json={"instances": encoded}))["predictions"]
    np.testing.assert_allclose(from_files, want, atol=1e-5, rtol=0)
    from_pixels = ok_json(float_image_client.post(predict_url(), json={"instances": pixels.tolist()}))["predictions"]
    np.testing.assert_allclose(from_pixels, want, atol=1e-5, rtol=0)
    columnar = ok_json(float_image_client.post(predict_url(), json={"inputs": {"image": pixels.tolist()}}))["outputs"]
    np.testing.assert_allclose(columnar, want, atol=1e-5, rtol=0)

    classified = ok_json(
        float_image_client.post("/v1/models/disttrain:classify", json={"examples": [{"image": e} for e in encoded]})
    )
    scores = [[score for _, score in row] for row in classified["result"]]
    np.testing.assert_allclose(scores, want, atol=1e-5, rtol=0)


def test_float_input_model_answers_v2_infer_with_pixels_and_encoded_files(float_image_client, float_image_root):
    _, model = float_image_root
    files = images()
    pixels, want = expected(model, files)
    for tensor in (
        {"name": "image", "datatype": "UINT8", "shape": list(pixels.shape), "data": pixels.ravel().tolist()},
        {
            "name": "image",
            "datatype": "BYTES",
            "shape": [len(files)],
            "data": [base64.b64encode(f).decode() for f in files],
        },
    ):
        (output,) = ok_json(float_image_client.post(INFER, json={"inputs": [tensor]}))["outputs"]
        assert output["shape"] == [3, len(LABELS)]
        np.testing.assert_allclose(np.reshape(output["data"], output["shape"]), want, atol=1e-5, rtol=0)


def test_float_input_model_refuses_pixels_it_cannot_take_in_one_line(float_image_client):
    bad = np.zeros((SIZE, SIZE, 3)).tolist()
    bad[0][0][0] = "red"
    message = error_of(float_image_client.post(predict_url(), json={"instances": [bad]}), 422)
    assert "\n" not in message and "pixel values must be numbers" in message
    message = error_of(
        float_image_client.post(
            INFER,
            json={
                "inputs": [
                    {
                        "name": "image",
                        "datatype": "UINT8",
                        "shape": [1, SIZE, SIZE, 3],
                        "data": [1e40] * (SIZE * SIZE * 3),
                    }
                ]
            },
        ),
        400,
    )
    assert "\n" not in message and "expected an integer 0..255" in message


# --------------------------------------------------------------------------- self-test


def tiny_image_model(keras, side=8):
    """uint8 [side, side, 1] -> softmax over two labels, the built-in image model's input."""
    inputs = keras.Input((side, side, 1), dtype="uint8", name="image")
    x = keras.layers.Flatten()(keras.layers.Rescaling(1 / 255)(inputs))
    return keras.Model(inputs, keras.layers.Dense(2, activation="softmax")(x))


def nan_model(keras):
    """A model that answers NaN whatever its input: its weights are NaN (as a diverged training leaves them)."""
    model = tiny_image_model(keras)
    dense = model.layers[-1]
    dense.set_weights([np.full_like(w, np.nan) for w in dense.get_weights()])
    return model


def raising_model(keras):
    """A model whose call raises for the signature's input: it reshapes any image to 64 values, so a 4x4 one fails."""
    inputs = keras.Input((None, None, 1), dtype="uint8", name="image")
    x = keras.layers.Reshape((64,))(keras.layers.Rescaling(1 / 255)(inputs))
    return keras.Model(inputs, keras.layers.Dense(2, activation="softmax")(x))


SMALL_SPEC = {"kind": "image", "height": 8, "width": 8, "channels": 1}


@pytest.fixture(scope="module")
def small_models(tmp_path_factory):
    """{name: model file}: a good tiny image model, one answering NaN, one whose call raises (declared 4x4)."""
    keras = _keras()
    folder = tmp_path_factory.mktemp("small-models")
    files = {}
    for name, model, spec in (
        ("good", tiny_image_model(keras), SMALL_SPEC),
        ("nan", nan_model(keras), SMALL_SPEC),
        ("raises", raising_model(keras), {**SMALL_SPEC, "height": 4, "width": 4}),
    ):
        root = folder / name
        files[name] = publish_own(str(root), model, own_image_meta(model, spec, ["no", "yes"]))
    return files


def status_of(client, path="/v1/models/disttrain"):
    return ok_json(client.get(path))


@pytest.mark.parametrize(
    "name, words", [("nan", "answered non-finite values"), ("raises", "does not answer its self-test")]
)
def test_model_failing_its_self_test_is_not_ready(small_models, tmp_path, name, words):
    client = make_client(small_models[name], tmp_path)
    ready = client.get("/readyz")
    assert ready.status_code == 503, ready.get_data(as_text=True)
    reason = ready.get_json()["reason"]
    assert words in reason and "\n" not in reason and str(tmp_path) not in reason
    status = status_of(client)
    version = str(os.stat(Workdir(tmp_path).final_model).st_mtime_ns // 1_000_000_000)
    assert status == {
        "model_version_status": [
            {"version": version, "state": "END", "status": {"error_code": "UNKNOWN", "error_message": reason}}
        ],
        "ready": False,
    }
    assert status_of(client, f"/v1/models/disttrain/versions/{version}")["model_version_status"][0]["state"] == "END"
    assert (
        error_of(client.post(predict_url(), json={"instances": [np.zeros((8, 8)).tolist()]}), 503)
        == f"model not available: {reason}"
    )
    assert client.get("/v2/health/ready").status_code == 503


def test_failed_self_test_keeps_the_earlier_model_serving_and_shows_both(small_models, tmp_path):
    client = make_client(None, tmp_path, RELOAD_INTERVAL=0)
    publish(small_models["good"], tmp_path, mtime=1_700_000_000)
    pixels = np.full((8, 8), 200).tolist()
    before = ok_json(client.post(predict_url(), json={"instances": [pixels]}))["predictions"]

    publish(small_models["nan"], tmp_path, mtime=1_700_000_100)
    ready = ok_json(client.get("/readyz"))
    assert ready["version"] == "1700000000"
    assert ready["load_failure"]["version"] == "1700000100" and "non-finite" in ready["load_failure"]["reason"]
    entries = status_of(client)["model_version_status"]
    assert [(e["version"], e["state"], e["status"]["error_code"]) for e in entries] == [
        ("1700000000", "AVAILABLE", "OK"),
        ("1700000100", "END", "UNKNOWN"),
    ]
    assert entries[1]["status"]["error_message"] == ready["load_failure"]["reason"]
    assert ok_json(client.post(predict_url(), json={"instances": [pixels]}))["predictions"] == before

    publish(small_models["good"], tmp_path, mtime=1_700_000_200)  # a good publication clears the failure
    ready = ok_json(client.get("/readyz"))
    assert ready["version"] == "1700000200" and "load_failure" not in ready
    assert len(status_of(client)["model_version_status"]) == 1


# --------------------------------------------------------------------------- malformed disttrain.json


@pytest.mark.parametrize(
    "model_code, words",
    [
        ("ownlayers", '"model_code" must be an object'),
        (["ownlayers"], '"model_code" must be an object'),
        ({"sha256": "ab" * 32}, '"model_code.module" must be a non-empty string, got nothing'),
        ({"module": "ownlayers", "sha256": 7}, '"model_code.sha256" must be a non-empty string, got int 7'),
    ],
)
def test_malformed_model_code_is_a_recorded_failure_while_the_earlier_model_serves(
    small_models, tmp_path, caplog, model_code, words
):
    client = make_client(None, tmp_path, RELOAD_INTERVAL=0)
    publish(small_models["good"], tmp_path, mtime=1_700_000_000)
    pixels = np.full((8, 8), 10).tolist()
    before = ok_json(client.post(predict_url(), json={"instances": [pixels]}))["predictions"]

    bad = with_meta(small_models["good"], tmp_path / "bad.keras", model_code=model_code)
    publish(bad, tmp_path, mtime=1_700_000_100)
    with caplog.at_level(logging.WARNING, logger="disttrain_server.model_store"):
        for _ in range(5):  # every request checks the file (RELOAD_INTERVAL=0); the failed one is not loaded again
            assert ok_json(client.post(predict_url(), json={"instances": [pixels]}))["predictions"] == before
        ready = ok_json(client.get("/readyz"))
    failures = [r for r in caplog.records if r.getMessage().startswith("cannot load")]
    assert len(failures) == 1, [r.getMessage() for r in failures]
    assert words in ready["load_failure"]["reason"] and "\n" not in ready["load_failure"]["reason"]
    assert ready["load_failure"]["reason"].startswith("final/model.keras: ")
    (_, failed) = status_of(client)["model_version_status"]
    assert failed["version"] == "1700000100" and failed["state"] == "END" and words in failed["status"]["error_message"]


def test_malformed_model_code_with_no_earlier_model_is_503_with_the_field_named(small_models, tmp_path):
    client = make_client(with_meta(small_models["good"], tmp_path / "bad.keras", model_code="ownlayers"), tmp_path)
    ready = client.get("/readyz")
    assert ready.status_code == 503 and '"model_code" must be an object' in ready.get_json()["reason"]
    message = error_of(client.post(predict_url(), json={"instances": [np.zeros((8, 8)).tolist()]}), 503)
    assert message == f"model not available: {ready.get_json()['reason']}" and "final/model.keras: " in message
