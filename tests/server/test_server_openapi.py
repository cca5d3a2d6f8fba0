"""/openapi.json matches the routes, and no request body, however odd, gets a 5xx or an undocumented status."""

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server import fuzz
from server.serving import predict_url

PREDICT_PATH = "/v1/models/{model_name}:predict"
# Files a browser fetches by itself (/static/*, /favicon.ico): not API operations, not in the spec.
BROWSER_FILES = {"static", "web.favicon"}
# Prometheus' text format for its scraper (metrics.py): not a JSON API operation either.
NOT_JSON_API = BROWSER_FILES | {"metrics.scrape"}


def spec_of(client):
    response = client.get("/openapi.json")
    assert response.status_code == 200
    return response.get_json()


def test_spec_lists_exactly_the_routes_the_app_serves(text_client):
    spec = spec_of(text_client)
    assert spec["openapi"].startswith("3.")
    routes = {}
    for rule in text_client.application.url_map.iter_rules():
        if rule.endpoint in NOT_JSON_API:
            continue
        path = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule)
        # One path may have several rules (GET and POST /v1/gallery are two views).
        routes.setdefault(path, set()).update({m.lower() for m in rule.methods} - {"head", "options"})
    documented = {path: set(operations) for path, operations in spec["paths"].items()}
    assert documented == routes


def test_spec_follows_the_loaded_model_and_limits(text_client, image_client, empty_client):
    def instance_schema(client):
        body = spec_of(client)["paths"][PREDICT_PATH]["post"]["requestBody"]["content"]["application/json"]["schema"]
        return body["oneOf"][0]["properties"]["instances"]

    # items: the instance, or the instance keyed by the input name ({"text": ...}, {"image": ...})
    text, keyed = instance_schema(text_client)["items"]["anyOf"]
    assert instance_schema(text_client)["maxItems"] == 256 and text["type"] == "string" and text["maxLength"] == 10_000
    assert keyed["properties"] == {"text": text}
    image, keyed = instance_schema(image_client)["items"]["anyOf"]
    assert image["anyOf"][0]["required"] == ["b64"] and keyed["properties"] == {"image": image}
    assert image["anyOf"][1]["minItems"] == 8 and image["anyOf"][1]["items"]["items"]["minItems"] == 1  # [8][8][1]
    assert len(instance_schema(empty_client)["items"]["anyOf"][0]["anyOf"]) == 4  # no model yet: text or any image form


json_values = fuzz.json_values(["b64", "instances", "inputs", "x", "text", "image", "signature_name"])
bodies = st.one_of(
    json_values.map(lambda value: json.dumps(value).encode()),
    json_values.map(lambda value: json.dumps({"instances": value}).encode()),
    st.lists(json_values, min_size=1, max_size=5).map(lambda values: json.dumps({"instances": values}).encode()),
    st.binary(max_size=64),
)


@pytest.mark.parametrize("client_name", ["text_client", "image_client"])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies)
def test_any_body_gets_json_and_a_documented_status(request, client_name, body):
    client = request.getfixturevalue(client_name)
    documented = spec_of(client)["paths"][PREDICT_PATH]["post"]["responses"]
    response = client.post(predict_url(), data=body)
    assert response.status_code < 500, response.get_data(as_text=True)
    assert str(response.status_code) in documented
    payload = response.get_json()
    if response.status_code == 200:
        sent = json.loads(body)
        if "instances" in sent:  # TF Serving: a row request answers "predictions", a columnar one "outputs"
            assert len(payload["predictions"]) == len(sent["instances"])
        else:
            columns = sent["inputs"]
            assert len(payload["outputs"]) == len(
                columns if isinstance(columns, list) else next(iter(columns.values()))
            )
    else:
        assert payload["error"]
