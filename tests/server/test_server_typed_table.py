"""A typed table's model (server.own_models.homes: text, integer, float and boolean columns with missing
values, one named input per column through the model's own StringLookup, IntegerLookup, Discretization
and Normalization) served from raw rows: TF Serving's rows and columns, :classify, KServe's V2 (raw HTTP,
and the kserve SDK against the real gunicorn server), the metadata of both, the page's form, and a
one-line 400 naming the instance and the column for every value the model cannot take."""

import json
import math
import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from disttrain_contract.artifact import load_model, save_model
from kserve_venv import run_with_kserve
from server import fuzz, own_models
from server.own_models import HOMES_LABELS
from server.serving import error_of, http, predict_url, running_server

from disttrain_server import create_app

INFER = "/v2/models/disttrain/infer"
CALLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kserve_client_calls.py")

# Raw rows as a client sends them: strings, numbers, booleans, nulls; "" and numeric strings too.
ROWS = [
    {"city": "paris", "age": 34, "income": 61.5, "rooms": 3, "owner": True},
    {"city": "lyon", "age": None, "income": 40.0, "rooms": 2, "owner": False},
    {"city": None, "age": 70, "income": 95.25, "rooms": 5, "owner": None},
    {"city": "brest", "age": "", "income": "48.5", "rooms": "4", "owner": "true"},  # out of vocabulary
    {"city": "nice", "age": 22, "income": 12, "rooms": 1, "owner": 0},
]
NAN = float("nan")
# The same rows as the model's inputs, written out here (not through the server's conversion).
COLUMNS = {
    "city": np.array([["paris"], ["lyon"], [""], ["brest"], ["nice"]], dtype=object),
    "age": np.array([[34], [NAN], [70], [NAN], [22]], dtype=np.float32),
    "income": np.array([[61.5], [40.0], [95.25], [48.5], [12.0]], dtype=np.float32),
    "rooms": np.array([[3], [2], [5], [4], [1]], dtype=np.int64),
    "owner": np.array([[1], [0], [NAN], [1], [0]], dtype=np.float32),
}


@pytest.fixture(scope="module")
def homes_root(tmp_path_factory):
    return own_models.homes(tmp_path_factory)


def client_of(root, **config):
    return create_app(
        {
            "MODEL_PATH": str(root / "final" / "model.keras"),
            "GALLERY_DIR": str(root / "gallery"),
            "TESTING": True,
            **config,
        }
    ).test_client()


@pytest.fixture(scope="module")
def homes_client(homes_root):
    return client_of(homes_root)


@pytest.fixture(scope="module")
def expected(homes_root):
    """The published model's own predictions on COLUMNS (Keras' model.predict on the named inputs)."""
    model, _ = load_model(str(homes_root / "final" / "model.keras"))
    import tensorflow as tf

    answer = np.asarray(model.predict({k: tf.constant(v) for k, v in COLUMNS.items()}, verbose=0), dtype=np.float64)
    assert answer.shape == (5, 2) and np.isfinite(answer).all()
    return answer


def answer_of(client, body, key="predictions"):
    response = client.post(predict_url(), json=body)
    assert response.status_code == 200, response.get_data(as_text=True)
    return np.array(response.get_json()[key])


def one_line_400(response, *words):
    message = error_of(response, 400)
    assert "\n" not in message and all(word in message for word in words), message
    return message


def test_rows_columns_and_classify_answer_the_models_own_predictions(homes_client, expected):
    np.testing.assert_allclose(answer_of(homes_client, {"instances": ROWS}), expected, atol=1e-5)
    # each value as a one-element list, the inputs' [1] shape (what a SavedModel's client sends)
    listed = [{name: [value] for name, value in row.items()} for row in ROWS]
    np.testing.assert_allclose(answer_of(homes_client, {"instances": listed}), expected, atol=1e-5)
    columns = {"inputs": {name: [row[name] for row in ROWS] for name in ROWS[0]}}
    np.testing.assert_allclose(answer_of(homes_client, columns, "outputs"), expected, atol=1e-5)
    # the answers differ by row: the columns reach the model (a model ignoring them would answer one row)
    assert np.abs(expected - expected[0]).max() > 1e-3
    result = homes_client.post(
        "/v1/models/disttrain:classify",
        json={"context": {"rooms": 3}, "examples": [{k: v for k, v in ROWS[0].items() if k != "rooms"}]},
    )
    assert result.status_code == 200, result.get_data(as_text=True)
    pairs = result.get_json()["result"][0]
    assert [label for label, _ in pairs] == HOMES_LABELS
    np.testing.assert_allclose([score for _, score in pairs], expected[0], atol=1e-5)


def v2_tensors(rows):
    """ROWS as V2 tensors: BYTES for the text, FP32 with NaN and null for missing numbers, INT64, FP64."""

    def missing_as_nan(values):
        return [NAN if value in (None, "") else float(value) for value in values]

    column = {name: [row[name] for row in rows] for name in rows[0]}
    n = len(rows)
    return [
        {"name": "city", "datatype": "BYTES", "shape": [n, 1], "data": [v or "" for v in column["city"]]},
        {"name": "age", "datatype": "FP32", "shape": [n], "data": missing_as_nan(column["age"])},
        {"name": "income", "datatype": "FP64", "shape": [n, 1], "data": [[float(v)] for v in column["income"]]},
        {"name": "rooms", "datatype": "INT64", "shape": [n], "data": [int(v) for v in column["rooms"]]},
        {
            "name": "owner",
            "datatype": "FP32",
            "shape": [n],
            "data": [None if v is None else float(v in (True, "true")) for v in column["owner"]],
        },
    ]


def test_v2_infer_takes_one_typed_tensor_per_column(homes_client, expected):
    body = json.dumps({"id": "homes", "inputs": v2_tensors(ROWS)})  # (NaN: Python's JSON token, read back as NaN)
    response = homes_client.post(INFER, data=body, content_type="application/json")
    assert response.status_code == 200, response.get_data(as_text=True)
    (output,) = response.get_json()["outputs"]
    assert (output["name"], output["datatype"], output["shape"]) == ("probabilities", "FP32", [5, 2])
    np.testing.assert_allclose(np.array(output["data"]).reshape(5, 2), expected, atol=1e-5)
    # a boolean column also takes BOOL, and a float column integers (rows without a missing owner)
    tensors = v2_tensors([ROWS[0], ROWS[1], ROWS[4]])
    tensors[4] = {"name": "owner", "datatype": "BOOL", "shape": [3], "data": [True, False, False]}
    tensors[2] = {"name": "income", "datatype": "INT32", "shape": [3], "data": [61, 40, 12]}
    response = homes_client.post(INFER, data=json.dumps({"inputs": tensors}), content_type="application/json")
    assert response.status_code == 200, response.get_data(as_text=True)
    rows = [ROWS[0], ROWS[1], ROWS[4]]
    rows = [{**row, "income": int(row["income"])} for row in rows]
    np.testing.assert_allclose(
        np.array(response.get_json()["outputs"][0]["data"]).reshape(3, 2),
        answer_of(homes_client, {"instances": rows}),
        atol=1e-6,
    )


def test_metadata_describes_each_column_with_its_dtype(homes_root, homes_client):
    body = homes_client.get("/v1/models/disttrain/metadata").get_json()
    signature = body["metadata"]["signature_def"]["signature_def"]["serving_default"]
    dims = {
        name: (info["dtype"], [int(d["size"]) for d in info["tensor_shape"]["dim"]])
        for name, info in signature["inputs"].items()
    }
    assert dims == {
        "city": ("DT_STRING", [-1, 1]),
        "age": ("DT_FLOAT", [-1, 1]),
        "income": ("DT_FLOAT", [-1, 1]),
        "rooms": ("DT_INT64", [-1, 1]),
        "owner": ("DT_FLOAT", [-1, 1]),
    }
    ours = body["metadata"]["disttrain"]
    assert (ours["task"], ours["problem"], ours["labels"]) == ("typed_table", "classification", HOMES_LABELS)
    columns = {c["name"]: c for c in ours["input"]["columns"]}
    assert columns["city"]["vocabulary"] == ["paris", "lyon", "nice"] and columns["rooms"]["dtype"] == "int64"
    # no column's smallest or largest record by default, as for the other tables
    assert "min" not in columns["age"] and "max" not in columns["age"] and columns["age"]["mean"] == 44.0
    shown = client_of(homes_root, SHOW_HELDOUT_EXAMPLES=True).get("/v1/models/disttrain/metadata").get_json()
    assert shown["metadata"]["disttrain"]["input"]["columns"][1]["max"] == 80.0
    assert homes_client.get("/v2/models/disttrain").get_json()["inputs"] == [
        {"name": "city", "datatype": "BYTES", "shape": [-1, 1]},
        {"name": "age", "datatype": "FP32", "shape": [-1, 1]},
        {"name": "income", "datatype": "FP32", "shape": [-1, 1]},
        {"name": "rooms", "datatype": "INT64", "shape": [-1, 1]},
        {"name": "owner", "datatype": "FP32", "shape": [-1, 1]},
    ]


def with_value(index, column, value):
    return {"instances": [row if i != index else {**row, column: value} for i, row in enumerate(ROWS)]}


BAD_ROWS = [
    (with_value(1, "income", "a lot"), ["instance 1", "column income", "expected a number, got 'a lot'"]),
    (with_value(2, "rooms", None), ["instance 2", "column rooms", "a value is required"]),
    (with_value(0, "rooms", 2.5), ["instance 0", "column rooms", "whole number"]),
    (with_value(3, "rooms", 2**70), ["instance 3", "column rooms", "out of int64's range"]),
    (with_value(4, "income", 1e39), ["instance 4", "column income", "out of float32's range"]),
    (with_value(0, "owner", 2), ["instance 0", "column owner", "true, false, 0 or 1"]),
    (with_value(1, "income", True), ["instance 1", "column income", "expected a number, got True"]),
    (with_value(0, "city", {"name": "paris"}), ["instance 0", "column city", "expected a string or null"]),
    (with_value(2, "city", "x" * 10_001), ["instance 2", "column city", "limit is 10000"]),
    (with_value(1, "age", [1, 2]), ["instance 1", "column age", "expected a finite number"]),
    (
        {"instances": [ROWS[0], {k: v for k, v in ROWS[1].items() if k != "owner"}]},
        ["instance 1", "missing column 'owner'", "this model's columns are 'city', 'age'"],
    ),
    ({"instances": [{**ROWS[0], "garden": True}]}, ["instance 0", "unknown column 'garden'"]),
    ({"instances": [list(ROWS[0].values())]}, ["instance 0", "an object of its columns", "got array"]),
    ({"inputs": {"city": ["paris"], "age": [1]}}, ["missing", "'income'"]),
    (
        {"inputs": {name: [ROWS[0][name]] * (2 if name == "age" else 1) for name in ROWS[0]}},
        ["one entry per instance"],
    ),
]


@pytest.mark.parametrize("body,words", BAD_ROWS)
def test_a_value_the_model_cannot_take_is_a_one_line_400_naming_it(homes_client, body, words):
    one_line_400(homes_client.post(predict_url(), json=body), *words)


def test_a_lone_surrogate_is_refused_and_nan_is_not_a_number(homes_client):
    row = json.dumps(ROWS[0])
    body = '{"instances": [' + row.replace('"paris"', '"\\ud800"') + "]}"
    one_line_400(homes_client.post(predict_url(), data=body, content_type="application/json"), "column city", "Unicode")
    body = '{"instances": [' + row.replace("61.5", "NaN") + "]}"
    one_line_400(homes_client.post(predict_url(), data=body, content_type="application/json"), "column income")


def v2_with(index, tensor):
    tensors = v2_tensors(ROWS)
    tensors[index] = {**tensors[index], **tensor}
    return {"inputs": tensors}


BAD_V2 = [
    (v2_with(2, {"datatype": "BYTES", "data": ["1"] * 5}), ["input 'income'", "'BYTES' is not accepted", "FP32"]),
    (v2_with(2, {"data": [1.0, "x", 3.0, 4.0, 5.0]}), ["input 'income' (FP64)", "instance 1", "expected a number"]),
    (v2_with(3, {"data": [1, 2, None, 4, 5]}), ["input 'rooms'", "instance 2", "column rooms", "a value is required"]),
    (v2_with(3, {"data": [1, 2, 3.5, 4, 5]}), ["input 'rooms' (INT64)", "instance 2", "an integer"]),
    (v2_with(3, {"datatype": "FP32"}), ["'FP32' is not accepted", "send INT64"]),
    (v2_with(0, {"data": ["paris", 5, "", "", ""]}), ["input 'city' (BYTES)", "instance 1", "a string"]),
    (v2_with(1, {"shape": [5, 2]}), ["input 'age'", "[n] or [n, 1]"]),
    (v2_with(1, {"shape": [4]}), ["input 'age'", "shape [4] has 4 elements but data has 5"]),
    (v2_with(4, {"datatype": "BOOL"}), ["input 'owner' (BOOL)", "instance 0", "true or false"]),
    ({"inputs": v2_tensors(ROWS)[:4]}, ["missing input 'owner'"]),
    ({"inputs": v2_tensors(ROWS) + [{"name": "garden", "datatype": "BOOL"}]}, ["unknown input 'garden'"]),
    (v2_with(3, {"shape": [4], "data": [1, 2, 3, 4]}), ["first dimensions differ"]),
]


@pytest.mark.parametrize("body,words", BAD_V2)
def test_a_bad_v2_tensor_is_a_one_line_400_naming_the_column(homes_client, body, words):
    response = homes_client.post(INFER, data=json.dumps(body), content_type="application/json")
    one_line_400(response, *words)


def test_a_model_whose_inputs_are_not_its_columns_is_not_served(homes_root, tmp_path):
    model, meta = load_model(str(homes_root / "final" / "model.keras"))
    spec = json.loads(json.dumps(meta["input"]))
    spec["columns"][3]["dtype"] = "float32"  # the spec says rooms had missing values; the model takes int64
    cases = (
        ({"input": spec}, "input 'rooms' is int64 [1]; its column (integer) is fed as float32 [1]"),
        ({"input": {**spec, "columns": []}}, "input.columns must be a non-empty list"),
    )
    for change, words in cases:
        publish_dir = tmp_path / str(len(words))
        os.makedirs(publish_dir / "final")
        save_model(model, str(publish_dir / "final" / "model.keras"), {**meta, **change})
        response = client_of(publish_dir).get("/readyz")
        assert response.status_code == 503 and words in response.get_json()["reason"], response.get_json()


def test_page_offers_one_field_per_column_with_the_vocabulary(homes_client):
    html = homes_client.get("/").get_data(as_text=True)
    assert "<title>disttrain · table classifier</title>" in html and 'data-typed="true"' in html
    assert '<select id="column-0" data-input="city" data-index="0">' in html
    for choice in ('<option value="">(missing)</option>', '<option value="paris" selected>paris</option>'):
        assert choice in html  # the most frequent city preselected
    assert '<option value="nice">nice</option>' in html
    # numbers: the age may be left empty (a missing value), the rooms may not (int64: none missing in training)
    assert (
        'id="column-1" type="number" step="1" data-input="age" data-index="0" placeholder="empty: missing" value="44"'
        in html
    )
    assert 'id="column-3" type="number" step="1" data-input="rooms" data-index="0" required' in html
    assert 'id="column-2" type="number" step="any" data-input="income"' in html
    assert '<option value="true" selected>true</option>' in html  # owner: mean 0.55
    assert "each text column's most frequent value" in html


def test_openapi_describes_rows_of_columns(homes_client):
    spec = homes_client.get("/openapi.json").get_json()
    body = spec["paths"]["/v1/models/{model_name}:predict"]["post"]["requestBody"]["content"]["application/json"]
    row = body["schema"]["oneOf"][0]["properties"]["instances"]["items"]
    assert row["required"] == ["city", "age", "income", "rooms", "owner"] and row["additionalProperties"] is False
    assert row["properties"]["city"]["nullable"] and "paris, lyon, nice" in row["properties"]["city"]["description"]
    assert row["properties"]["rooms"] == {"type": "integer", "nullable": False, "description": "A number (required)."}
    assert body["example"]["instances"][0] == {"city": "paris", "age": 44, "income": 52.0, "rooms": 3, "owner": True}
    assert homes_client.post(predict_url(), json=body["example"]).status_code == 200
    columns = body["schema"]["oneOf"][1]["properties"]["inputs"]
    assert set(columns["required"]) == set(row["required"])
    v2 = spec["components"]["schemas"]["V2InferRequest"]["properties"]["inputs"]
    assert v2["minItems"] == 5 and "BYTES" in v2["items"]["properties"]["datatype"]["enum"]


json_values = fuzz.json_values(["instances", "inputs", "city", "age", "income", "rooms", "owner", "signature_name"])
bodies = st.one_of(
    json_values.map(lambda value: json.dumps(value).encode()),
    st.lists(
        st.fixed_dictionaries({name: json_values for name in ROWS[0]}, optional={"garden": json_values}),
        min_size=1,
        max_size=3,
    ).map(lambda rows: json.dumps({"instances": rows}).encode()),
    st.fixed_dictionaries({name: st.lists(json_values, min_size=1, max_size=2) for name in ROWS[0]}).map(
        lambda columns: json.dumps({"inputs": columns}).encode()
    ),
    st.binary(max_size=64),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies)
def test_any_body_gets_json_and_a_documented_status(homes_client, body):
    documented = homes_client.get("/openapi.json").get_json()["paths"]["/v1/models/{model_name}:predict"]["post"]
    response = homes_client.post(predict_url(), data=body)
    assert response.status_code < 500, response.get_data(as_text=True)
    assert str(response.status_code) in documented["responses"]
    answer = response.get_json()
    assert answer["error"] if response.status_code != 200 else all(map(math.isfinite, np.ravel(answer["predictions"])))


v2_tensor = st.fixed_dictionaries(
    {
        "name": st.sampled_from(list(ROWS[0])),
        "datatype": st.sampled_from(["FP32", "FP64", "INT64", "INT8", "BYTES", "BOOL"]),
        "shape": st.lists(st.integers(-1, 3), max_size=3),
        "data": st.one_of(json_values, st.lists(st.one_of(st.floats(width=32), st.text(max_size=3)), max_size=4)),
    }
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tensors=st.lists(v2_tensor, max_size=6, unique_by=lambda t: t["name"]))
def test_any_v2_body_gets_json_and_a_documented_status(homes_client, tensors):
    documented = homes_client.get("/openapi.json").get_json()["paths"]["/v2/models/{model_name}/infer"]["post"]
    response = homes_client.post(INFER, data=json.dumps({"inputs": tensors}), content_type="application/json")
    assert response.status_code < 500, response.get_data(as_text=True)
    assert str(response.status_code) in documented["responses"], response.get_data(as_text=True)


def test_kserve_sdk_on_raw_rows_against_gunicorn(homes_root, expected, tmp_path):
    """The kserve SDK's REST client (its own venv: kserve_client_calls.py) on the real server: V1 rows with
    nulls, and V2 with a BYTES tensor and NaN (which the SDK sends as null) for missing numbers."""
    cases = tmp_path / "rows.json"
    columns = {
        name: [None if np.isnan(v) else v for v in values.ravel().tolist()]
        if values.dtype == np.float32
        else values.ravel().tolist()
        for name, values in COLUMNS.items()
    }
    cases.write_text(json.dumps({"rows": ROWS, "columns": columns, "expected": expected.tolist()}))
    with running_server(homes_root, "--workers", "1") as (base, _proc, _log):
        assert http("GET", base + "/readyz")[0] == 200
        done = run_with_kserve(CALLS, "typed-table", base, cases)
    sys.stdout.write(done.stdout)
    assert done.returncode == 0, f"the kserve SDK's checks failed:\n{done.stdout}\n{done.stderr[-4000:]}"
    assert "every check passed" in done.stdout


def test_a_model_that_takes_one_column_is_served_and_its_nan_answer_is_a_400(tmp_path):
    """One column: the request is still an object of the columns (never the bare value). This model has
    no way to take a missing income (no ReLU or lookup after it): its NaN answer is a 400 naming the column."""
    from disttrain_contract.typed_table import TableSpec

    keras = own_models._keras()
    column = own_models.homes_spec().column("income")
    spec = TableSpec(columns=(column,))
    income = keras.Input((1,), name="income", dtype="float32")
    normal = keras.layers.Normalization(mean=column.mean, variance=column.variance)(income)
    model = keras.Model({"income": income}, keras.layers.Dense(2, activation="softmax", name="probabilities")(normal))
    meta = own_models.meta_of(
        "typed_table",
        spec.to_json(),
        HOMES_LABELS,
        "softmax",
        [{"name": "income", "shape": [1], "dtype": "float32"}],
        [{"name": "probabilities", "shape": [2]}],
    )
    own_models.publish_own(str(tmp_path), model, meta)
    client = client_of(tmp_path)
    want = np.asarray(model.predict(np.array([[40.0], [75.5]], dtype=np.float32), verbose=0), dtype=np.float64)
    got = answer_of(client, {"instances": [{"income": 40}, {"income": "75.5"}]})
    np.testing.assert_allclose(got, want, atol=1e-5)
    one_line_400(client.post(predict_url(), json={"instances": [40]}), "instance 0", "an object of its columns")
    tensor = {"name": "income", "datatype": "FP32", "shape": [2], "data": [40.0, 75.5]}
    response = client.post(INFER, json={"inputs": [tensor]})
    assert response.status_code == 200, response.get_data(as_text=True)
    np.testing.assert_allclose(np.array(response.get_json()["outputs"][0]["data"]).reshape(2, 2), want, atol=1e-5)
    one_line_400(
        client.post(predict_url(), json={"instances": [{"income": 40}, {"income": None}]}),
        "instance 1: the model answered a non-finite value",
        "no value for income",
    )
    one_line_400(client.post(INFER, json={"inputs": [{**tensor, "data": [40.0, None]}]}), "instance 1", "income")
