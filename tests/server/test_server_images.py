"""The JSON API on the real digits (8x8x1) image model: b64 images, pixel arrays, and bad images."""

import base64
import json

import cv2
import numpy as np
import pytest

from server.serving import error_of, predict_url


def png_b64(image):
    ok, encoded = cv2.imencode(".png", image)
    assert ok
    return base64.b64encode(encoded.tobytes()).decode()


def predict(client, instances):
    response = client.post(predict_url(), json={"instances": instances})
    assert response.status_code == 200, response.get_data(as_text=True)
    return np.array(response.get_json()["predictions"])


def test_b64_png_digits_are_classified(image_client, digits_test):
    images, labels = digits_test[0][:60], digits_test[1][:60]
    probs = predict(image_client, [{"b64": png_b64(image)} for image in images])
    assert probs.shape == (60, 10)
    assert np.allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    # 2 epochs reach ~75% held-out accuracy; chance is 10%
    assert (probs.argmax(axis=1) == labels).mean() > 0.5


def test_pixel_arrays_and_b64_png_give_the_same_probabilities(image_client, digits_test):
    image = digits_test[0][0]  # uint8 [8, 8, 1]; PNG is lossless and needs no resize
    from_png = predict(image_client, [{"b64": png_b64(image)}])
    from_hwc = predict(image_client, [image.tolist()])
    from_hw = predict(image_client, [image[..., 0].tolist()])
    assert np.allclose(from_png, from_hwc) and np.allclose(from_png, from_hw)


def test_larger_colour_jpeg_is_resized_and_converted(image_client, digits_test):
    image = digits_test[0][0]
    big_colour = cv2.cvtColor(cv2.resize(image, (64, 64), interpolation=cv2.INTER_NEAREST), cv2.COLOR_GRAY2BGR)
    ok, jpeg = cv2.imencode(".jpg", big_colour)
    probs = predict(image_client, [{"b64": base64.b64encode(jpeg.tobytes()).decode()}])
    assert probs.shape == (1, 10) and probs.sum() == pytest.approx(1.0, abs=1e-5)


def test_b64_with_line_breaks_is_accepted(image_client, digits_test):
    encoded = png_b64(digits_test[0][0])
    wrapped = "\n".join(encoded[i : i + 76] for i in range(0, len(encoded), 76))
    assert predict(image_client, [{"b64": wrapped}]).shape == (1, 10)


GOOD_PIXELS = np.zeros((8, 8, 1), dtype=np.uint8).tolist()
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "instance, words",
    [
        ({"b64": "not base64 at all!"}, '"b64" is not valid base64'),
        ({"b64": "abc"}, "not valid base64"),  # bad padding
        ({"b64": "é"}, "not valid base64"),
        ({"b64": ""}, "the image is empty"),
        ({"b64": base64.b64encode(PNG_SIGNATURE + b"\x00" * 64).decode()}, "not a decodable image"),
        ({"b64": 42}, '"b64" must be a string of base64, got number'),
        ({"b64": "aGk=", "extra": 1}, 'exactly one key "b64"'),
        ({"bytes": "aGk="}, 'exactly one key "b64"'),
        ("a string for an image model", "this model takes images"),
        (7, "this model takes images"),
        (None, "got null"),
        ([[1, 2], [3, 4]], "pixel array has shape [2, 2], expected [8, 8, 1] (or [8, 8])"),
        (np.zeros((8, 8, 3)).tolist(), "shape [8, 8, 3]"),
        ([[0] * 8] * 7 + [[0] * 7], "ragged"),
        ([["a"] * 8] * 8, "pixel values must be numbers"),
        ([[True] * 8] * 8, "pixel values must be numbers"),
        ([[None] * 8] * 8, "pixel values must be numbers"),
        ([[256] * 8] * 8, "between 0 and 255"),
        ([[-1] * 8] * 8, "between 0 and 255"),
        ([[1e400] * 8] * 8, "between 0 and 255"),  # JSON overflow -> infinity
    ],
)
def test_bad_image_instance_is_422_naming_the_problem(image_client, instance, words):
    # json.dumps writes float("inf") as the non-standard Infinity; 1e400 is valid JSON that overflows to it
    body = json.dumps({"instances": [GOOD_PIXELS, instance]}).replace("Infinity", "1e400")
    message = error_of(image_client.post(predict_url(), data=body), 422)
    assert message.startswith("instance 1:") and words in message


def test_truncated_png_is_422(image_client, digits_test):
    ok, encoded = cv2.imencode(".png", cv2.resize(digits_test[0][0], (64, 64)))
    truncated = base64.b64encode(encoded.tobytes()[: len(encoded) // 2]).decode()
    assert "not a decodable image" in error_of(
        image_client.post(predict_url(), json={"instances": [{"b64": truncated}]}), 422
    )


def test_image_upload_over_the_size_limit_is_413(image_client):
    noise = np.random.default_rng(0).integers(0, 256, (1800, 1800, 3), dtype=np.uint8)  # ~9.7 MB PNG
    body = json.dumps({"instances": [{"b64": png_b64(noise)}]})
    assert len(body) > 8 * 1024 * 1024
    assert "larger than the 8388608 byte limit" in error_of(image_client.post(predict_url(), data=body), 413)


def test_metadata_describes_the_image_input(image_client):
    meta = image_client.get("/v1/models/disttrain/metadata").get_json()["metadata"]["disttrain"]
    assert meta["labels"] == [str(d) for d in range(10)]
    assert meta["input"] == {"kind": "image", "height": 8, "width": 8, "channels": 1}
