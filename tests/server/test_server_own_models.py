"""A user's own models (server.own_models: a table classifier with a sigmoid head, a table regression,
a model with two named inputs and logits, an int64 array classifier) through every API the server
speaks: TF Serving's REST API (row and columnar), KServe's V2, the metadata of both, and a 400 with
one line naming the input and what it takes for every request that does not fit the model."""

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from disttrain_contract.artifact import load_model, save_model
from server import fuzz
from server.own_models import CANCER_FEATURES, own_outputs, held_out
from server.serving import error_of, make_client, predict_url, publish

from disttrain_server import create_app

INFER = "/v2/models/disttrain/infer"


def showing_rows(root):
    """A client of the model in root/final (root/data beside it) run with --show-heldout-examples."""
    return create_app(
        {
            "MODEL_PATH": str(root / "final" / "model.keras"),
            "GALLERY_DIR": str(root / "gallery"),
            "TESTING": True,
            "SHOW_HELDOUT_EXAMPLES": True,
        }
    ).test_client()


def predictions(client, body, key="predictions"):
    response = client.post(predict_url(), json=body)
    assert response.status_code == 200, response.get_data(as_text=True)
    return np.array(response.get_json()[key])


def v2_output(client, inputs, name, datatype="FP32", **extra):
    response = client.post(INFER, json={"inputs": inputs, **extra})
    assert response.status_code == 200, response.get_data(as_text=True)
    (output,) = response.get_json()["outputs"]
    assert (output["name"], output["datatype"]) == (name, datatype), output
    return np.array(output["data"]).reshape(output["shape"])


def one_line_400(response, *words):
    message = error_of(response, 400)
    assert "\n" not in message and all(word in message for word in words), message
    return message


def test_table_classifier_answers_probabilities_from_its_sigmoid_head(cancer_client, cancer_root):
    x, _ = held_out(cancer_root)
    expected = own_outputs(cancer_root, x[:5])  # [n, 2]: P(benign), P(malignant) from the one unit
    rows = predictions(cancer_client, {"instances": x[:5].tolist()})
    assert rows.shape == (5, 2)
    np.testing.assert_allclose(rows, expected, atol=1e-6)
    np.testing.assert_allclose(rows.sum(1), 1.0, atol=1e-6)
    # the same instances keyed by the input's name, and by the table's feature names
    keyed = predictions(cancer_client, {"instances": [{"features": row} for row in x[:5].tolist()]})
    by_feature = predictions(cancer_client, {"instances": [dict(zip(CANCER_FEATURES, row)) for row in x[:5].tolist()]})
    np.testing.assert_allclose(keyed, expected, atol=1e-6)
    np.testing.assert_allclose(by_feature, expected, atol=1e-6)
    # columnar: a list, or an object keyed by the input's name; answered under "outputs"
    np.testing.assert_allclose(predictions(cancer_client, {"inputs": x[:5].tolist()}, "outputs"), expected, atol=1e-6)
    np.testing.assert_allclose(
        predictions(cancer_client, {"inputs": {"features": x[:5].tolist()}}, "outputs"), expected, atol=1e-6
    )
    # :classify names the labels
    result = cancer_client.post(
        "/v1/models/disttrain:classify", json={"examples": [dict(zip(CANCER_FEATURES, x[0].tolist()))]}
    )
    assert [label for label, _ in result.get_json()["result"][0]] == ["benign", "malignant"]
    np.testing.assert_allclose([score for _, score in result.get_json()["result"][0]], expected[0], atol=1e-6)


def test_table_regression_answers_one_value_per_instance(diabetes_client, diabetes_root):
    x, y = held_out(diabetes_root)
    expected = own_outputs(diabetes_root, x)
    values = predictions(diabetes_client, {"instances": x.tolist()})
    assert values.shape == (len(x),)  # a number per instance, not [[v]]
    np.testing.assert_allclose(values, expected, rtol=1e-6)
    assert np.sqrt(np.mean((values - y) ** 2)) < 0.5 * np.std(y)  # the model learned something
    np.testing.assert_allclose(
        predictions(diabetes_client, {"inputs": {"features": x[:3].tolist()}}, "outputs"), expected[:3], rtol=1e-6
    )
    refused = diabetes_client.post("/v1/models/disttrain:classify", json={"examples": [{"features": x[0].tolist()}]})
    assert "regression model (it predicts progression)" in error_of(refused, 409)


def test_metadata_describes_the_own_signature(
    cancer_client, cancer_root, diabetes_client, two_inputs_client, counts_client
):
    def signature(client):
        body = client.get("/v1/models/disttrain/metadata").get_json()
        return body["metadata"]["signature_def"]["signature_def"]["serving_default"], body["metadata"]["disttrain"]

    def dims(info):
        return info["dtype"], [int(d["size"]) for d in info["tensor_shape"]["dim"]]

    sig, ours = signature(cancer_client)
    assert {name: dims(info) for name, info in sig["inputs"].items()} == {"features": ("DT_FLOAT", [-1, 5])}
    assert {name: dims(info) for name, info in sig["outputs"].items()} == {"probabilities": ("DT_FLOAT", [-1, 2])}
    assert (ours["task"], ours["problem"], ours["labels"], ours["input"]["features"]) == (
        "table",
        "classification",
        ["benign", "malignant"],
        CANCER_FEATURES,
    )
    assert set(ours["input"]["statistics"]) == {"mean", "variance"}  # no feature's smallest or largest record
    _, shown = signature(showing_rows(cancer_root))
    assert (
        set(shown["input"]["statistics"]) == {"mean", "variance", "min", "max"}
        and len(shown["input"]["statistics"]["min"]) == 5
    )
    sig, ours = signature(diabetes_client)
    assert {name: dims(info) for name, info in sig["outputs"].items()} == {"value": ("DT_FLOAT", [-1])}
    assert (ours["problem"], ours["target"], ours["labels"]) == ("regression", "progression", [])
    sig, _ = signature(two_inputs_client)
    assert {name: dims(info) for name, info in sig["inputs"].items()} == {
        "age": ("DT_FLOAT", [-1, 1]),
        "bmi": ("DT_FLOAT", [-1, 1]),
    }
    sig, _ = signature(counts_client)
    assert {name: dims(info) for name, info in sig["inputs"].items()} == {"x": ("DT_INT64", [-1, 2, 3])}

    assert two_inputs_client.get("/v2/models/disttrain").get_json()["inputs"] == [
        {"name": "age", "datatype": "FP32", "shape": [-1, 1]},
        {"name": "bmi", "datatype": "FP32", "shape": [-1, 1]},
    ]
    assert diabetes_client.get("/v2/models/disttrain").get_json()["outputs"] == [
        {"name": "value", "datatype": "FP32", "shape": [-1]}
    ]
    assert counts_client.get("/v2/models/disttrain").get_json()["inputs"] == [
        {"name": "x", "datatype": "INT64", "shape": [-1, 2, 3]}
    ]


def test_v2_infer_on_table_models(cancer_client, cancer_root, diabetes_client, diabetes_root):
    x, _ = held_out(cancer_root)
    expected = own_outputs(cancer_root, x[:4])
    tensor = {"name": "features", "shape": [4, 5], "datatype": "FP32", "data": x[:4].ravel().tolist()}
    np.testing.assert_allclose(v2_output(cancer_client, [tensor], "probabilities"), expected, atol=1e-6)
    nested_fp64 = {
        **tensor,
        "datatype": "FP64",
        "data": x[:4].astype(np.float64).tolist(),
    }  # cast to the model's float32
    np.testing.assert_allclose(v2_output(cancer_client, [nested_fp64], "probabilities"), expected, atol=1e-6)
    rounded = np.rint(x[:4]).astype(np.int64)
    as_int64 = {**tensor, "datatype": "INT64", "data": rounded.ravel().tolist()}
    np.testing.assert_allclose(
        v2_output(cancer_client, [as_int64], "probabilities"),
        own_outputs(cancer_root, rounded.astype(np.float32)),
        atol=1e-6,
    )

    x, _ = held_out(diabetes_root)
    values = v2_output(
        diabetes_client,
        [{"name": "features", "shape": [3, 4], "datatype": "FP32", "data": x[:3].tolist()}],
        "value",
        outputs=[{"name": "value"}],
    )
    assert values.shape == (3,)
    np.testing.assert_allclose(values, own_outputs(diabetes_root, x[:3]), rtol=1e-6)


def test_two_named_inputs_row_columnar_classify_and_v2(two_inputs_client, two_inputs_root):
    x, _ = held_out(two_inputs_root)
    expected = own_outputs(two_inputs_root, {"age": x[:4, :1], "bmi": x[:4, 1:]})  # the logits as probabilities
    np.testing.assert_allclose(expected.sum(1), 1.0, atol=1e-6)
    rows = [{"age": float(age), "bmi": float(bmi)} for age, bmi in x[:4]]  # a number for a [1] input
    np.testing.assert_allclose(predictions(two_inputs_client, {"instances": rows}), expected, atol=1e-6)
    rows = [{"age": [float(age)], "bmi": [float(bmi)]} for age, bmi in x[:4]]
    np.testing.assert_allclose(predictions(two_inputs_client, {"instances": rows}), expected, atol=1e-6)
    columns = {"inputs": {"age": x[:4, :1].tolist(), "bmi": x[:4, 1].tolist()}}
    np.testing.assert_allclose(predictions(two_inputs_client, columns, "outputs"), expected, atol=1e-6)
    classify = two_inputs_client.post(
        "/v1/models/disttrain:classify",
        json={"examples": [{"bmi": float(x[0, 1])}], "context": {"age": float(x[0, 0])}},
    )
    np.testing.assert_allclose([score for _, score in classify.get_json()["result"][0]], expected[0], atol=1e-6)

    tensors = [
        {"name": "bmi", "shape": [4], "datatype": "FP32", "data": x[:4, 1].tolist()},
        {"name": "age", "shape": [4, 1], "datatype": "FP32", "data": x[:4, :1].tolist()},
    ]
    np.testing.assert_allclose(v2_output(two_inputs_client, tensors, "probabilities"), expected, atol=1e-6)

    one_line_400(
        two_inputs_client.post(predict_url(), json={"instances": [{"age": 50}]}), "instance 0", "missing 'bmi'"
    )
    one_line_400(
        two_inputs_client.post(predict_url(), json={"instances": [[50, 26]]}), "instance 0", "2 inputs", '"age"'
    )
    one_line_400(
        two_inputs_client.post(predict_url(), json={"instances": [{"age": 50, "bmi": 26, "sex": 1}]}), "unknown 'sex'"
    )
    one_line_400(
        two_inputs_client.post(predict_url(), json={"inputs": {"age": [50, 60], "bmi": [26]}}), "one entry per instance"
    )
    one_line_400(two_inputs_client.post(INFER, json={"inputs": tensors[:1]}), "missing input 'age'")
    one_line_400(
        two_inputs_client.post(
            INFER, json={"inputs": [tensors[0], {**tensors[1], "shape": [3, 1], "data": x[:3, :1].tolist()}]}
        ),
        "first dimensions differ",
    )


def test_int64_array_model(counts_client, counts_root):
    x, _ = held_out(counts_root)
    expected = own_outputs(counts_root, x[:3])
    np.testing.assert_allclose(predictions(counts_client, {"instances": x[:3].tolist()}), expected, atol=1e-6)
    np.testing.assert_allclose(
        predictions(counts_client, {"instances": x[:3].astype(float).tolist()}), expected, atol=1e-6
    )  # 2.0 is 2
    tensor = {"name": "x", "shape": [3, 2, 3], "datatype": "INT64", "data": x[:3].ravel().tolist()}
    np.testing.assert_allclose(v2_output(counts_client, [tensor], "probabilities"), expected, atol=1e-6)
    np.testing.assert_allclose(
        v2_output(counts_client, [{**tensor, "datatype": "INT32"}], "probabilities"), expected, atol=1e-6
    )
    one_line_400(
        counts_client.post(INFER, json={"inputs": [{**tensor, "datatype": "FP32"}]}),
        "datatype 'FP32' is not accepted",
        "INT64",
    )
    one_line_400(
        counts_client.post(predict_url(), json={"instances": [[[1, 2, 2.5], [0, 0, 0]]]}),
        "instance 0",
        "2.5",
        "integers (int64)",
    )
    one_line_400(
        counts_client.post(predict_url(), json={"instances": [[[1, 2, 2**64], [0, 0, 0]]]}), "out of int64's range"
    )
    one_line_400(
        counts_client.post(predict_url(), json={"instances": [[1, 2, 3, 4, 5, 6]]}),
        "int64 of shape [2, 3]",
        "shape [6]",
    )


BAD_TABLE_REQUESTS = [
    ({"instances": [[1.0, 2.0, 3.0]]}, ["instance 0", "input 'features'", "float32 of shape [5]", "shape [3]"]),
    ({"instances": [[1.0, 2.0, 3.0, 4.0, "5"]]}, ["instance 0", "element 4 is string", "finite number (float32)"]),
    ({"instances": [[1.0, 2.0, 3.0, 4.0, None]]}, ["element 4 is null"]),
    ({"instances": [[1.0, 2.0, 3.0, 4.0, True]]}, ["element 4 is boolean"]),
    ({"instances": [[1.0, 2.0, 3.0, 4.0, 1e39]]}, ["out of float32's range"]),
    ({"instances": [[1.0, 2.0, 3.0, 4.0, [5.0]]]}, ["ragged or nested deeper"]),
    ({"instances": [[1.0] * 5, [[1.0] * 5]]}, ["instance 1", "shape [1, 5]"]),
    ({"instances": [dict(zip(CANCER_FEATURES[:4], [1.0] * 4))]}, ["instance 0", "missing 'concavity'"]),
    ({"instances": [{**dict(zip(CANCER_FEATURES, [1.0] * 5)), "age": 3}]}, ["unknown 'age'"]),
    ({"inputs": {"x": [[1.0] * 5]}}, ['"inputs" as an object', '"features"']),
]


@pytest.mark.parametrize("body,words", BAD_TABLE_REQUESTS)
def test_bad_table_request_is_a_one_line_400(cancer_client, body, words):
    one_line_400(cancer_client.post(predict_url(), json=body), *words)


def test_nan_and_infinity_are_refused(cancer_client):
    # Python's JSON reader takes NaN and Infinity; the model's answer to them would not be JSON
    response = cancer_client.post(
        predict_url(), data=b'{"instances": [[1, 2, 3, 4, NaN]]}', content_type="application/json"
    )
    one_line_400(response, "element 4 is nan")
    response = cancer_client.post(
        predict_url(), data=b'{"instances": [[1, 2, 3, 4, -Infinity]]}', content_type="application/json"
    )
    one_line_400(response, "element 4 is -inf")


BAD_V2_REQUESTS = [
    (
        {"name": "features", "shape": [1, 5], "datatype": "BYTES", "data": ["a"] * 5},
        ["datatype 'BYTES' is not accepted", "send FP32"],
    ),
    (
        {"name": "features", "shape": [1, 4], "datatype": "FP32", "data": [1.0] * 4},
        ["shape [1, 4] does not fit", "FP32 [-1, 5]"],
    ),
    ({"name": "features", "shape": [2, 5], "datatype": "FP32", "data": [1.0] * 5}, ["has 10 elements but data has 5"]),
    (
        {"name": "features", "shape": [1, 5], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0, "x"]},
        ["element 4 is string"],
    ),
    (
        {"name": "features", "shape": [1, 5], "datatype": "INT64", "data": [1, 2, 3, 4, 5.5]},
        ["(INT64)", "5.5", "integers"],
    ),
    (
        {"name": "radius", "shape": [1, 5], "datatype": "FP32", "data": [1.0] * 5},
        ["unknown input 'radius'", "'features' (FP32 [-1, 5])"],
    ),
    (
        {"name": {}, "shape": [], "datatype": "FP16", "data": []},
        ["unknown input name of type object"],
    ),  # (found by schemathesis: was a 500)
]


@pytest.mark.parametrize("tensor,words", BAD_V2_REQUESTS)
def test_bad_v2_request_is_a_one_line_400(cancer_client, tensor, words):
    one_line_400(cancer_client.post(INFER, json={"inputs": [tensor]}), *words)


def test_a_model_its_disttrain_json_misdescribes_is_not_served(cancer_root, tmp_path):
    model, meta = load_model(str(cancer_root / "final" / "model.keras"))
    for change, words in (
        (
            {"inputs": [{"name": "features", "shape": [4], "dtype": "float32"}]},
            "input 'features' is float32 [4], the model takes float32 [5]",
        ),
        ({"head": "value"}, "a classifier's head must be one of softmax, logits, sigmoid, sigmoid_logits"),
        ({"problem": "regression", "labels": []}, 'a regression model\'s head must be "value"'),
        ({"head": "softmax"}, "the model has 1 outputs but disttrain.json names 2 labels"),
        (
            {"inputs": [{"name": "features", "shape": [5], "dtype": "string"}]},
            "inputs of a type this server cannot take: features (string)",
        ),
        (
            {"inputs": [{"name": "features", "shape": [5], "dtype": ["float32"]}]},
            "inputs of a type this server cannot take: features (['float32'])",
        ),
    ):
        path = str(tmp_path / "model.keras")
        save_model(model, path, {**meta, **change})
        client = make_client(path, tmp_path / "workdir")
        ready = client.get("/readyz")
        assert ready.status_code == 503 and words in ready.get_json()["reason"], (change, ready.get_json())


@pytest.mark.parametrize(
    "change, words",
    [
        ({"features": 5}, '"input.features" must be a list of column names, got 5'),
        ({"features": [1, 2, 3, 4, 5]}, '"input.features" must be a list of column names'),
        ({"statistics": "x"}, '"input.statistics" must be an object of number lists'),
        ({"statistics": {"mean": "abc"}}, '"input.statistics.mean" must be a list of numbers'),
        ({"statistics": {"mean": [1, "2", 3, 4, 5]}}, '"input.statistics.mean" must be a list of numbers'),
    ],
)
def test_a_malformed_input_spec_is_a_recorded_failure_while_the_earlier_model_serves(
    cancer_root, tmp_path, change, words
):
    """An input spec whose features or statistics the page, /metadata and feature-keyed instances
    cannot read (each answered 500 on every request) is refused at load, with the earlier model
    answering all three meanwhile."""
    source = str(cancer_root / "final" / "model.keras")
    model, meta = load_model(source)
    client = make_client(source, tmp_path / "workdir", RELOAD_INTERVAL=0)
    row = {"instances": [dict(zip(CANCER_FEATURES, [14.0, 19.0, 100.0, 0.2, 0.6]))]}
    before = predictions(client, row)
    bad = str(tmp_path / "bad.keras")
    save_model(model, bad, {**meta, "input": {**meta["input"], **change}})
    publish(bad, tmp_path / "workdir")
    ready = client.get("/readyz").get_json()
    assert words in ready["load_failure"]["reason"] and "\n" not in ready["load_failure"]["reason"], ready
    assert ready["status"] == "ready" and str(tmp_path) not in ready["load_failure"]["reason"]
    assert client.get("/").status_code == 200 and client.get("/openapi.json").status_code == 200
    assert client.get("/v1/models/disttrain/metadata").get_json()["metadata"]["disttrain"]["input"]["features"] == (
        CANCER_FEATURES
    )
    assert (predictions(client, row) == before).all()


def test_page_offers_a_prefilled_form_per_feature(cancer_client, cancer_root, diabetes_client, counts_client):
    """By default the form holds the training mean and the page no row of the data; the operator's
    --show-heldout-examples prefills held-out rows with their true labels."""
    html = cancer_client.get("/").get_data(as_text=True)
    x, y = held_out(cancer_root)
    mean = load_model(str(cancer_root / "final" / "model.keras"))[1]["input"]["statistics"]["mean"]
    assert (
        "<title>disttrain · table classifier</title>" in html
        and 'src="/static/tryit.js"' in html
        and "<script>" not in html
    )
    for index, feature in enumerate(CANCER_FEATURES):
        assert f'<label for="field-features-{index}">{feature}</label>' in html
        assert f'data-index="{index}" value="{float(f"{mean[index]:.7g}")}"' in html
    assert "Prefilled with the training mean of each feature" in html and 'id="example"' not in html
    assert "held-out" not in html.split('id="example-note"')[1].split("</p>")[0]
    for row in x[:20]:  # not one held-out value of the 20 rows the opt-in shows, nor their labels
        assert f'{float(f"{row[0]:.7g}")}, {float(f"{row[1]:.7g}")}' not in html
    assert "label benign" not in html and "label malignant" not in html

    shown = showing_rows(cancer_root).get("/").get_data(as_text=True)
    for index in range(len(CANCER_FEATURES)):
        assert f'data-index="{index}" value="{float(f"{x[0, index]:.7g}")}"' in shown  # the first held-out example
    assert "Prefilled with a held-out example" in shown and 'id="example"' in shown
    assert f"label {['benign', 'malignant'][int(y[0])]}" in shown
    assert f'{float(f"{x[1, 0]:.7g}")}, {float(f"{x[1, 1]:.7g}")}' in shown  # the rows, as the default page lacks them
    # every API call behind the token: the page holds neither rows nor the statistics /metadata would need it for
    guarded = create_app(
        {
            "MODEL_PATH": str(cancer_root / "final" / "model.keras"),
            "GALLERY_DIR": str(cancer_root / "gallery"),
            "TESTING": True,
            "SHOW_HELDOUT_EXAMPLES": True,
            "API_TOKEN": b"s3cret",
            "TOKEN_REQUIRED_FOR": "all",
        }
    )
    page = guarded.test_client().get("/").get_data(as_text=True)
    assert "Enter a value for every field." in page and f'value="{float(f"{mean[0]:.7g}")}"' not in page
    assert (
        f'value="{float(f"{x[0, 0]:.7g}")}"' not in page
        and "label benign" not in page
        and "label malignant" not in page
    )
    html = diabetes_client.get("/").get_data(as_text=True)
    assert (
        "<title>disttrain · table regression</title>" in html
        and "predicts <strong>progression</strong> (regression)" in html
    )
    html = counts_client.get("/").get_data(as_text=True)
    assert '<label for="field-x-5">x[1, 2]</label>' in html  # an array of six: a field per element


def test_page_prefills_the_training_mean_without_data(cancer_root, tmp_path):
    client = make_client(str(cancer_root / "final" / "model.keras"), tmp_path)  # published alone: no data/ beside it
    html = client.get("/").get_data(as_text=True)
    assert "Prefilled with the training mean of each feature" in html
    mean = load_model(str(cancer_root / "final" / "model.keras"))[1]["input"]["statistics"]["mean"]
    assert f'data-index="0" value="{float(f"{mean[0]:.7g}")}"' in html


def test_openapi_describes_numeric_instances(cancer_client, two_inputs_client):
    spec = cancer_client.get("/openapi.json").get_json()
    body = spec["paths"]["/v1/models/{model_name}:predict"]["post"]["requestBody"]["content"]["application/json"]
    rows = body["schema"]["oneOf"][0]["properties"]["instances"]
    assert json.dumps(body["example"]) in json.dumps(body) and isinstance(body["example"]["instances"][0], list)
    assert rows["maxItems"] == 256
    spec = two_inputs_client.get("/openapi.json").get_json()
    body = spec["paths"]["/v1/models/{model_name}:predict"]["post"]["requestBody"]["content"]["application/json"]
    assert set(body["example"]["instances"][0]) == {"age", "bmi"}


json_values = fuzz.json_values(["instances", "inputs", "features", "age", "bmi", "radius", "signature_name"])
bodies = st.one_of(
    json_values.map(lambda value: json.dumps(value).encode()),
    json_values.map(lambda value: json.dumps({"instances": value}).encode()),
    st.lists(
        st.one_of(json_values, st.lists(st.floats(allow_nan=False, width=32), min_size=5, max_size=5)),
        min_size=1,
        max_size=4,
    ).map(lambda values: json.dumps({"instances": values}).encode()),
    st.binary(max_size=64),
)


@pytest.mark.parametrize("client_name", ["cancer_client", "two_inputs_client", "diabetes_client"])
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies)
def test_any_body_to_an_own_model_gets_json_and_a_documented_status(request, client_name, body):
    client = request.getfixturevalue(client_name)
    documented = client.get("/openapi.json").get_json()["paths"]["/v1/models/{model_name}:predict"]["post"]["responses"]
    response = client.post(predict_url(), data=body)
    assert response.status_code < 500, response.get_data(as_text=True)
    assert str(response.status_code) in documented
    assert response.is_json and (response.status_code == 200 or response.get_json()["error"])


v2_tensors = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["features", "age", "bmi", "x"]),
        "datatype": st.sampled_from(["FP32", "FP64", "INT64", "INT8", "BYTES", "BOOL"]),
        "shape": st.lists(st.integers(-1, 6), max_size=3),
        "data": st.one_of(json_values, st.lists(st.floats(width=32), max_size=12)),
    },
    optional={"parameters": json_values},
)
v2_bodies = st.one_of(
    json_values.map(lambda value: json.dumps(value).encode()),
    st.fixed_dictionaries(
        {"inputs": st.lists(v2_tensors, max_size=3)}, optional={"id": json_values, "outputs": json_values}
    ).map(lambda v: json.dumps(v).encode()),
)


@pytest.mark.parametrize("client_name", ["cancer_client", "two_inputs_client", "counts_client"])
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=v2_bodies)
def test_any_v2_body_to_an_own_model_gets_json_and_a_documented_status(request, client_name, body):
    client = request.getfixturevalue(client_name)
    documented = client.get("/openapi.json").get_json()["paths"]["/v2/models/{model_name}/infer"]["post"]["responses"]
    response = client.post(INFER, data=body)
    assert response.status_code < 500, response.get_data(as_text=True)
    assert str(response.status_code) in documented, response.get_data(as_text=True)
    assert response.get_json()["outputs" if response.status_code == 200 else "error"]
