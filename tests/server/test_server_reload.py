"""Hot reload: a newly published model is served without a restart; a broken one never replaces a good one."""

import json
import os
import zipfile

import pytest

from disttrain_contract import Workdir
from disttrain_contract.artifact import META_MEMBER
from disttrain_server.errors import ModelUnavailable
from disttrain_server.model_store import ModelStore
from server.serving import POSITIVE, make_client, predict_url, publish


def p_positive(client):
    response = client.post(predict_url(), json={"instances": [POSITIVE]})
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()["predictions"][0][1]  # labels are ["negative", "positive"]


def version(client):
    return client.get("/v1/models/disttrain").get_json()["model_version_status"][0]["version"]


def test_replacing_the_model_file_changes_version_and_predictions(text_model, flipped_text_model, tmp_path):
    client = make_client(text_model, tmp_path, RELOAD_INTERVAL=0)
    before_version, before = version(client), p_positive(client)
    assert before > 0.5

    # The aggregator's way: a new file renamed over the old one. A later mtime is a later version.
    publish(flipped_text_model, tmp_path, mtime=int(before_version) + 10)
    assert version(client) == str(int(before_version) + 10)
    assert p_positive(client) == pytest.approx(1.0 - before, abs=1e-5)  # same model, outputs swapped
    assert client.get("/readyz").get_json()["version"] == str(int(before_version) + 10)


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_store_checks_the_file_at_most_once_per_interval(text_model, flipped_text_model, tmp_path):
    clock = FakeClock()
    store = ModelStore(publish(text_model, tmp_path, mtime=1_700_000_000), reload_interval=5, clock=clock)
    first = store.get()
    assert first.version == 1_700_000_000

    publish(flipped_text_model, tmp_path, mtime=1_700_000_100)
    clock.now += 4.9
    assert store.get() is first  # not time to look yet: no stat, no load
    clock.now += 0.2
    second = store.get()
    assert second is not first and second.version == 1_700_000_100
    clock.now += 10
    assert store.get() is second  # unchanged file: nothing reloaded


def test_missing_model_is_unavailable_until_one_is_published(text_model, tmp_path):
    clock = FakeClock()
    store = ModelStore(Workdir(tmp_path).final_model, reload_interval=5, clock=clock)
    with pytest.raises(ModelUnavailable, match="no model at"):
        store.get()
    publish(text_model, tmp_path)
    clock.now += 5
    assert store.get().labels == ["negative", "positive"]


def test_broken_publication_keeps_serving_the_previous_model(text_model, tmp_path):
    clock = FakeClock()
    path = publish(text_model, tmp_path)
    store = ModelStore(path, reload_interval=1, clock=clock)
    good = store.get()

    with open(path + ".tmp", "wb") as fh:
        fh.write(b"this is not a keras file")
    os.replace(path + ".tmp", path)
    clock.now += 1
    assert store.get() is good

    os.unlink(path)  # even a vanished file does not unload what is in memory
    clock.now += 1
    assert store.get() is good


def test_unloadable_model_at_start_is_503_with_the_reason(tmp_path):
    os.makedirs(os.path.dirname(Workdir(tmp_path).final_model))
    with open(Workdir(tmp_path).final_model, "wb") as fh:
        fh.write(b"PK\x05\x06" + b"\x00" * 18)  # an empty zip: no disttrain.json inside
    client = make_client(None, tmp_path)
    response = client.get("/readyz")
    assert response.status_code == 503
    assert "not a disttrain model" in response.get_json()["reason"]
    assert (
        response.get_json()["reason"].startswith("final/model.keras ")
        and str(tmp_path) not in response.get_json()["reason"]
    )


def with_meta(model, path, **changes):
    """A copy of `model` whose disttrain.json has `changes` (the weights are untouched)."""
    with zipfile.ZipFile(model) as source, zipfile.ZipFile(path, "w") as target:
        for item in source.infolist():
            data = source.read(item)
            if item.filename == META_MEMBER:
                data = json.dumps({**json.loads(data), **changes})
            target.writestr(item, data)
    return path


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"task": "regression"}, "task 'regression' is not served"),
        ({"task": "faces", "embedding_size": 2}, "a faces model must take 32x32x1 face crops"),
        ({"labels": ["a", "b", "c"]}, "the model has 2 outputs but disttrain.json names 3 labels"),
        ({"input": {"kind": "audio"}}, "no usable input spec"),
    ],
)
def test_model_the_api_cannot_describe_is_refused_with_the_reason(text_model, tmp_path, changes, words):
    client = make_client(with_meta(text_model, tmp_path / "odd.keras", **changes), tmp_path)
    response = client.get("/readyz")
    assert response.status_code == 503 and words in response.get_json()["reason"]
