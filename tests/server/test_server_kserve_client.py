"""A client nobody here wrote: the kserve SDK's InferenceRESTClient (pip package `kserve`, pinned in
requirements-dev.txt) talking V1 (TF Serving's :predict) and V2 (the Open Inference Protocol) to the
real `disttrain-server` under gunicorn, on the text model and then, published over it, the digits model."""

import asyncio
import base64
import time

import cv2
import httpx
import numpy as np
import pytest
from kserve import InferenceRESTClient, InferInput, InferRequest, RESTConfig

from server.serving import NEGATIVE, POSITIVE, http, publish, running_server

MODEL = "disttrain"
TEXTS = [POSITIVE, NEGATIVE, "an ordinary film"]


def clients():
    return InferenceRESTClient(RESTConfig(protocol="v1", timeout=60)), InferenceRESTClient(RESTConfig(protocol="v2", timeout=60))


async def v2_infer(client, base, infer_input, request_id):
    return await client.infer(base, InferRequest(model_name=MODEL, infer_inputs=[infer_input], request_id=request_id), model_name=MODEL)


def only_output(response, name, shape):
    (output,) = response.outputs
    assert (output.name, output.datatype, list(output.shape)) == (name, "FP32", shape)
    return output.as_numpy()


async def text_model_calls(base):
    v1, v2 = clients()
    try:
        assert await v1.is_model_ready(base, MODEL) is True  # reads "ready" from GET /v1/models/NAME
        rows = np.array((await v1.infer(base, {"instances": TEXTS}, model_name=MODEL))["predictions"])
        assert rows.shape == (3, 2) and rows[0].argmax() == 1 and rows[1].argmax() == 0  # positive, negative
        columns = await v1.infer(base, {"inputs": {"text": TEXTS}}, model_name=MODEL)
        np.testing.assert_allclose(columns["outputs"], rows, atol=1e-6)

        assert await v2.is_server_live(base) is True
        assert await v2.is_server_ready(base) is True
        assert await v2.is_model_ready(base, MODEL) is True
        text = InferInput("text", [3], "BYTES")
        text.set_data_from_numpy(np.array(TEXTS, dtype=object), binary_data=False)
        response = await v2_infer(v2, base, text, "request-1")
        assert response.id == "request-1" and response.model_name == MODEL
        np.testing.assert_allclose(only_output(response, "probabilities", [3, 2]), rows, atol=1e-6)  # FP32 of /v1's numbers

        # The SDK raises httpx.HTTPStatusError carrying our {"error": ...} message.
        wrong = InferInput("review", [1], "BYTES", data=["good"])
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await v2_infer(v2, base, wrong, "request-2")
        assert refused.value.response.status_code == 400 and "unknown input 'review'" in str(refused.value)
        # The binary tensor extension (the SDK's default, binary_data=True) is not supported: a 415 that says so.
        binary = InferInput("text", [1], "BYTES")
        binary.set_data_from_numpy(np.array([POSITIVE], dtype=object))
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await v2_infer(v2, base, binary, "request-3")
        assert refused.value.response.status_code == 415 and "application/json" in str(refused.value)
    finally:
        await v1.close()
        await v2.close()


async def image_model_calls(base, digits):
    v1, v2 = clients()
    try:
        pngs = [{"b64": base64.b64encode(cv2.imencode(".png", d)[1].tobytes()).decode()} for d in digits]
        rows = np.array((await v1.infer(base, {"instances": pngs}, model_name=MODEL))["predictions"])
        pixels = await v1.infer(base, {"signature_name": "serving_default", "instances": [{"image": d.tolist()} for d in digits]}, model_name=MODEL)
        np.testing.assert_allclose(pixels["predictions"], rows, atol=1e-6)

        image = InferInput("image", list(digits.shape), "UINT8")
        image.set_data_from_numpy(digits, binary_data=False)
        response = await v2_infer(v2, base, image, "digits")
        np.testing.assert_allclose(only_output(response, "probabilities", [len(digits), 10]), rows, atol=1e-6)
    finally:
        await v1.close()
        await v2.close()


def test_kserve_sdk_rest_client_v1_and_v2_against_gunicorn(text_model, image_model, digits_test, tmp_path):
    publish(text_model, tmp_path)
    with running_server(tmp_path, "--workers", "1", "--reload-interval", "0.5") as (base, proc, log):
        asyncio.run(text_model_calls(base))
        version = int(http("GET", base + "/readyz")[1]["version"])
        publish(image_model, tmp_path, mtime=version + 10)
        deadline = time.monotonic() + 60
        while http("GET", base + "/v2/models/disttrain")[1]["inputs"][0]["name"] != "image":
            assert time.monotonic() < deadline, "the worker did not load the published image model"
            time.sleep(0.2)
        asyncio.run(image_model_calls(base, digits_test[0][:6]))
