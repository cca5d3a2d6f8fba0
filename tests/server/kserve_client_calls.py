"""The kserve SDK's REST client (V1 and V2) against a running disttrain-server: run by
tests/server/test_server_kserve_client.py with the python of its own virtualenv (.venv-kserve,
`make venv-kserve`), because every kserve release pins protobuf<7 and python-dateutil<3, older than what
TensorFlow's own resolution picks: one venv for both would test our code with a protobuf the
images do not have. The SDK only talks HTTP to the server, so it needs nothing else of ours.

    .venv-kserve/bin/python kserve_client_calls.py text BASE_URL POSITIVE NEGATIVE
    .venv-kserve/bin/python kserve_client_calls.py image BASE_URL DIGITS.npy
    .venv-kserve/bin/python kserve_client_calls.py table BASE_URL X.npy EXPECTED.npy          (one input "features")
    .venv-kserve/bin/python kserve_client_calls.py two-inputs BASE_URL X.npy EXPECTED.npy     (inputs "age" and "bmi")
    .venv-kserve/bin/python kserve_client_calls.py typed-table BASE_URL CASES.json             (rows, columns, expected)

Exit status 0 when every check passed; an AssertionError's traceback otherwise (a test's output).
"""

import asyncio
import base64
import json
import sys

import httpx
import numpy as np
from kserve import InferenceRESTClient, InferInput, InferRequest, RESTConfig
from PIL import Image  # the SDK's own dependency: encodes the PNGs the way a user's client would

MODEL = "disttrain"


def clients():
    return InferenceRESTClient(RESTConfig(protocol="v1", timeout=60)), InferenceRESTClient(
        RESTConfig(protocol="v2", timeout=60)
    )


async def v2_infer(client, base, infer_input, request_id):
    return await client.infer(
        base, InferRequest(model_name=MODEL, infer_inputs=[infer_input], request_id=request_id), model_name=MODEL
    )


def only_output(response, name, shape):
    (output,) = response.outputs
    assert (output.name, output.datatype, list(output.shape)) == (name, "FP32", shape), (
        output.name,
        output.datatype,
        output.shape,
    )
    return output.as_numpy()


async def expect_refusal(call, status, words):
    """The SDK raises httpx.HTTPStatusError carrying our {"error": ...} message."""
    try:
        await call
    except httpx.HTTPStatusError as refused:
        assert refused.response.status_code == status and words in str(refused), (
            refused.response.status_code,
            str(refused),
        )
    else:
        raise AssertionError(f"expected a {status} refusal")


async def text_model_calls(base, positive, negative):
    texts = [positive, negative, "an ordinary film"]
    v1, v2 = clients()
    try:
        assert await v1.is_model_ready(base, MODEL) is True  # reads "ready" from GET /v1/models/NAME
        rows = np.array((await v1.infer(base, {"instances": texts}, model_name=MODEL))["predictions"])
        assert rows.shape == (3, 2) and rows[0].argmax() == 1 and rows[1].argmax() == 0, rows  # positive, negative
        columns = await v1.infer(base, {"inputs": {"text": texts}}, model_name=MODEL)
        np.testing.assert_allclose(columns["outputs"], rows, atol=1e-6)

        assert await v2.is_server_live(base) is True
        assert await v2.is_server_ready(base) is True
        assert await v2.is_model_ready(base, MODEL) is True
        text = InferInput("text", [3], "BYTES")
        text.set_data_from_numpy(np.array(texts, dtype=object), binary_data=False)
        response = await v2_infer(v2, base, text, "request-1")
        assert response.id == "request-1" and response.model_name == MODEL, (response.id, response.model_name)
        np.testing.assert_allclose(
            only_output(response, "probabilities", [3, 2]), rows, atol=1e-6
        )  # FP32 of /v1's numbers

        wrong = InferInput("review", [1], "BYTES", data=["good"])
        await expect_refusal(v2_infer(v2, base, wrong, "request-2"), 400, "unknown input 'review'")
        # The binary tensor extension (the SDK's default, binary_data=True) is not supported: a 415 that says so.
        binary = InferInput("text", [1], "BYTES")
        binary.set_data_from_numpy(np.array([positive], dtype=object))
        await expect_refusal(v2_infer(v2, base, binary, "request-3"), 415, "application/json")
    finally:
        await v1.close()
        await v2.close()


def png_b64(pixels):
    import io

    buffer = io.BytesIO()
    Image.fromarray(pixels.squeeze(-1) if pixels.shape[-1] == 1 else pixels).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


async def image_model_calls(base, digits):
    v1, v2 = clients()
    try:
        pngs = [{"b64": png_b64(d)} for d in digits]
        rows = np.array((await v1.infer(base, {"instances": pngs}, model_name=MODEL))["predictions"])
        assert rows.shape == (len(digits), 10), rows.shape
        pixels = await v1.infer(
            base,
            {"signature_name": "serving_default", "instances": [{"image": d.tolist()} for d in digits]},
            model_name=MODEL,
        )
        np.testing.assert_allclose(pixels["predictions"], rows, atol=1e-6)

        image = InferInput("image", list(digits.shape), "UINT8")
        image.set_data_from_numpy(digits, binary_data=False)
        response = await v2_infer(v2, base, image, "digits")
        np.testing.assert_allclose(only_output(response, "probabilities", [len(digits), 10]), rows, atol=1e-6)
    finally:
        await v1.close()
        await v2.close()


async def table_model_calls(base, x, expected):
    """A user's own table classifier (one input, "features" FP32 [-1, n_features]): V1 rows and V2 FP32 and FP64."""
    v1, v2 = clients()
    try:
        rows = np.array((await v1.infer(base, {"instances": x.tolist()}, model_name=MODEL))["predictions"])
        np.testing.assert_allclose(rows, expected, atol=1e-6)
        assert await v2.is_model_ready(base, MODEL) is True
        features = InferInput("features", list(x.shape), "FP32")
        features.set_data_from_numpy(x.astype(np.float32), binary_data=False)
        np.testing.assert_allclose(
            only_output(await v2_infer(v2, base, features, "table"), "probabilities", list(expected.shape)),
            expected,
            atol=1e-6,
        )
        as_fp64 = InferInput("features", list(x.shape), "FP64")
        as_fp64.set_data_from_numpy(x.astype(np.float64), binary_data=False)
        np.testing.assert_allclose(
            only_output(await v2_infer(v2, base, as_fp64, "table-fp64"), "probabilities", list(expected.shape)),
            expected,
            atol=1e-6,
        )
        wrong = InferInput("features", [1, x.shape[1] - 1], "FP32", data=[0.0] * (x.shape[1] - 1))
        await expect_refusal(v2_infer(v2, base, wrong, "short"), 400, f"does not fit this input's [-1, {x.shape[1]}]")
    finally:
        await v1.close()
        await v2.close()


async def two_inputs_calls(base, x, expected):
    """A model with two named inputs: V1 rows as objects, and one V2 request with two input tensors."""
    v1, v2 = clients()
    try:
        instances = [{"age": float(age), "bmi": float(bmi)} for age, bmi in x]
        rows = np.array((await v1.infer(base, {"instances": instances}, model_name=MODEL))["predictions"])
        np.testing.assert_allclose(rows, expected, atol=1e-6)
        age, bmi = InferInput("age", [len(x), 1], "FP32"), InferInput("bmi", [len(x), 1], "FP32")
        age.set_data_from_numpy(x[:, :1].astype(np.float32), binary_data=False)
        bmi.set_data_from_numpy(x[:, 1:].astype(np.float32), binary_data=False)
        request = InferRequest(model_name=MODEL, infer_inputs=[age, bmi], request_id="two")
        response = await v2.infer(base, request, model_name=MODEL)
        np.testing.assert_allclose(only_output(response, "probabilities", list(expected.shape)), expected, atol=1e-6)
    finally:
        await v1.close()
        await v2.close()


def typed_tensors(columns, rows=None):
    """One InferInput per column of the typed table (`columns`: {name: values}, the first `rows` of them):
    BYTES for the text, INT64 for the rooms, FP32 for the rest with NaN for a missing value."""
    tensors = []
    for name, values in columns.items():
        values = values[:rows]
        datatype = {"city": "BYTES", "rooms": "INT64"}.get(name, "FP32")
        dtype = {"BYTES": object, "INT64": np.int64, "FP32": np.float32}[datatype]
        tensor = InferInput(name, [len(values), 1], datatype)
        # (None is NaN in a float32 array; the SDK's orjson sends NaN as null)
        tensor.set_data_from_numpy(np.array(values, dtype=dtype).reshape(-1, 1), binary_data=False)
        tensors.append(tensor)
    return tensors


async def typed_table_calls(base, rows, columns, expected):
    """A typed table's model (server.own_models.homes): V1 raw rows with strings and nulls, and V2 with one
    tensor per column (typed_tensors); a null where a value is required is the server's 400 naming it."""
    v1, v2 = clients()
    expected = np.array(expected)
    try:
        answer = np.array((await v1.infer(base, {"instances": rows}, model_name=MODEL))["predictions"])
        np.testing.assert_allclose(answer, expected, atol=1e-5)
        request = InferRequest(model_name=MODEL, infer_inputs=typed_tensors(columns), request_id="typed")
        response = await v2.infer(base, request, model_name=MODEL)
        np.testing.assert_allclose(only_output(response, "probabilities", list(expected.shape)), expected, atol=1e-5)
        tensors = [t for t in typed_tensors(columns, rows=1) if t.name != "rooms"]
        tensors.append(InferInput("rooms", [1], "INT64", data=[None]))
        request = InferRequest(model_name=MODEL, infer_inputs=tensors, request_id="null")
        await expect_refusal(v2.infer(base, request, model_name=MODEL), 400, "column rooms: a value is required")
    finally:
        await v1.close()
        await v2.close()


def main(argv):
    task, base = argv[0], argv[1]
    if task == "text":
        asyncio.run(text_model_calls(base, argv[2], argv[3]))
    elif task == "image":
        asyncio.run(image_model_calls(base, np.load(argv[2], allow_pickle=False)))
    elif task == "typed-table":
        with open(argv[2]) as fh:
            cases = json.load(fh)
        asyncio.run(typed_table_calls(base, cases["rows"], cases["columns"], cases["expected"]))
    elif task in ("table", "two-inputs"):
        calls = table_model_calls if task == "table" else two_inputs_calls
        asyncio.run(calls(base, np.load(argv[2], allow_pickle=False), np.load(argv[3], allow_pickle=False)))
    else:
        sys.exit(f"unknown task {task!r}: text, image, table, two-inputs or typed-table")
    print(f"kserve SDK {task} calls: every check passed")


if __name__ == "__main__":
    main(sys.argv[1:])
