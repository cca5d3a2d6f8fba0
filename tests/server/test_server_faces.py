"""Face search on the real faces model (trained once per session by the real pipeline) and the real detector."""

import io
import json
import os

import cv2
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from disttrain_contract.evaluation import pairwise_distances, predict
from disttrain_contract.artifact import load_model
from disttrain_contract.faces import augment, find_face, preprocess, preprocessing_of
from disttrain_server import create_app
from server import fuzz
from server.face_photos import astronaut, b64, blank, lfw_photos, other_view, png, side_by_side, write_seed
from server.serving import error_of, make_client, predict_url, publish

SEARCH = "/v1/models/disttrain:search"
SEVERAL_FACES = "2 faces found; used the most face-like (eyes found, then detector confidence)"
# What a non-browser client adds to a multipart request (the page sends it too): the server refuses
# multipart without it, so that a form on another site cannot post one (tests/server/test_server_security.py).
FORM_HEADERS = {"X-Requested-With": "pytest"}
PEOPLE = {f"person {i}": i for i in (0, 3, 7, 12, 21)}  # name -> index of the sample photo


def enrol(client, name, image):
    response = client.post(
        "/v1/gallery", data={"name": name, "image": (io.BytesIO(png(image)), "photo.png")}, headers=FORM_HEADERS
    )
    assert response.status_code == 201, response.get_data(as_text=True)
    return response.get_json()


def search(client, image, **fields):
    response = client.post(SEARCH, json={"image": b64(image), **fields})
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def gallery_of(client):
    return client.application.extensions["disttrain_gallery"]


def folder_state(root):
    """Every file in the gallery folder with its size and mtime: any write shows up."""
    return {
        os.path.join(d, f): (os.stat(os.path.join(d, f)).st_size, os.stat(os.path.join(d, f)).st_mtime_ns)
        for d, _, files in os.walk(root)
        for f in files
    }


@pytest.fixture
def face_client(face_model, tmp_path):
    return make_client(face_model, tmp_path, RELOAD_INTERVAL=0)


@pytest.fixture
def enrolled(face_client):
    """face_client with the five PEOPLE enrolled: (client, {name: entry})."""
    return face_client, {name: enrol(face_client, name, lfw_photos()[i]) for name, i in PEOPLE.items()}


def test_enrol_list_search_and_delete(enrolled):
    client, entries = enrolled
    listed = client.get("/v1/gallery").get_json()
    assert listed["count"] == 5 and [e["name"] for e in listed["entries"]] == list(PEOPLE)
    for entry in listed["entries"]:
        assert entry == entries[entry["name"]] and entry["source"] == "api" and entry["faces_found"] == 1
        x, y, w, h = entry["box"]
        assert 0 <= x < x + w <= 150 and 0 <= y < y + h <= 150 and w > 50  # the face fills the middle of the photo
        thumb = client.get(entry["thumbnail"])
        assert thumb.status_code == 200 and thumb.content_type == "image/png"
        assert cv2.imdecode(np.frombuffer(thumb.data, np.uint8), cv2.IMREAD_UNCHANGED).shape == (96, 96, 3)

    before = folder_state(gallery_of(client).root)
    for name, i in PEOPLE.items():
        answer = search(client, other_view(lfw_photos()[i]))
        distances = [m["distance"] for m in answer["matches"]]
        assert answer["matches"][0]["name"] == name, answer
        assert answer["matches"][0]["id"] == entries[name]["id"]
        assert len(distances) == 3 and distances == sorted(distances)
        assert distances[0] < 0.5 and distances[1] - distances[0] > 0.2, distances  # same person near, others far
        assert answer["faces_found"] == 1 and "note" not in answer and len(answer["face"]["box"]) == 4
    # A multipart search, as the page sends it, with k: the same ranking, longer.
    response = client.post(
        SEARCH, data={"image": (io.BytesIO(png(other_view(lfw_photos()[3]))), "q.png"), "k": "5"}, headers=FORM_HEADERS
    )
    assert [m["name"] for m in response.get_json()["matches"]][:1] == ["person 3"] and len(
        response.get_json()["matches"]
    ) == 5
    # Searching stored nothing: same entries, not one file written.
    assert client.get("/v1/gallery").get_json() == listed
    assert folder_state(gallery_of(client).root) == before

    gone = entries["person 7"]
    assert client.delete(f"/v1/gallery/{gone['id']}").get_json() == {"deleted": gone}
    assert [e["name"] for e in client.get("/v1/gallery").get_json()["entries"]] == [
        "person 0",
        "person 3",
        "person 12",
        "person 21",
    ]
    assert "person 7" not in [m["name"] for m in search(client, other_view(lfw_photos()[7]), k=10)["matches"]]
    error_of(client.get(gone["thumbnail"]), 404)
    assert "no gallery entry" in error_of(client.delete(f"/v1/gallery/{gone['id']}"), 404)
    assert not os.path.exists(gallery_of(client).crop_path(gone["id"]))


def test_gallery_embeddings_are_computed_once_not_per_search(enrolled):
    client, _ = enrolled
    gallery = gallery_of(client)
    assert gallery.embedded == 5  # one per enrolment
    loaded = client.application.extensions["disttrain_model_store"].get()
    cache = gallery.cache_path(loaded)
    stamp = os.stat(cache).st_mtime_ns
    for i in PEOPLE.values():
        search(client, other_view(lfw_photos()[i]))
    assert gallery.embedded == 5 and os.stat(cache).st_mtime_ns == stamp
    # A fresh process (another gunicorn worker) reads them from the cache file instead of recomputing.
    other = make_client(None, os.path.dirname(gallery.root), RELOAD_INTERVAL=0)
    assert search(other, other_view(lfw_photos()[12]))["matches"][0]["name"] == "person 12"
    assert gallery_of(other).embedded == 0


def test_a_new_model_recomputes_the_gallery_once(enrolled, other_face_model, tmp_path):
    client, entries = enrolled
    gallery = gallery_of(client)
    store = client.application.extensions["disttrain_model_store"]
    first = search(client, other_view(lfw_photos()[0]))["matches"]
    old_cache = gallery.cache_path(store.get())

    publish(other_face_model, tmp_path, mtime=store.get().version + 10)
    second = search(client, other_view(lfw_photos()[0]))["matches"]
    new = store.get()
    assert new.version == int(os.path.getmtime(new.path)) and gallery.cache_path(new) != old_cache
    assert gallery.embedded == 10  # the five faces, once, with the new model
    stamp = os.stat(gallery.cache_path(new)).st_mtime_ns
    search(client, other_view(lfw_photos()[3]))
    assert gallery.embedded == 10 and os.stat(gallery.cache_path(new)).st_mtime_ns == stamp
    assert [m["distance"] for m in second] != [m["distance"] for m in first]

    # The cached embeddings are the new model's embeddings of the stored crops, preprocessed its way.
    model, meta = load_model(other_face_model)
    with np.load(gallery.cache_path(new)) as npz:
        cached = dict(zip(npz["ids"].tolist(), npz["embeddings"]))
    crops = np.stack(
        [cv2.imread(gallery.crop_path(e["id"]), cv2.IMREAD_GRAYSCALE)[..., None] for e in entries.values()]
    )
    np.testing.assert_allclose(
        np.stack([cached[e["id"]] for e in entries.values()]),
        predict(model, preprocess(crops, preprocessing_of(meta))),
        atol=1e-5,
    )


def test_photo_with_several_faces_uses_the_most_face_like_and_says_so(enrolled):
    client, entries = enrolled
    photo = side_by_side(lfw_photos()[12], lfw_photos()[21])
    answer = search(client, photo)
    assert answer["faces_found"] == 2 and answer["note"] == SEVERAL_FACES
    x, _, w, _ = answer["face"]["box"]
    assert x + w <= 225 and w > 100  # the enlarged face on the left
    assert answer["matches"][0]["name"] == "person 12"

    response = client.post("/v1/gallery", json={"name": "pair", "image": b64(photo)})
    assert response.status_code == 201 and response.get_json()["note"] == SEVERAL_FACES


def test_empty_gallery_search_is_200_with_a_note(face_client):
    answer = search(face_client, astronaut())
    assert answer["matches"] == [] and "gallery is empty" in answer["note"] and answer["faces_found"] == 1


def test_bad_requests_are_json_4xx(enrolled, face_model, tmp_path):
    client, _ = enrolled
    photo = lfw_photos()[0]
    assert "no face found" in error_of(client.post(SEARCH, json={"image": b64(blank())}), 422)
    assert "no face found" in error_of(client.post("/v1/gallery", json={"name": "nobody", "image": b64(blank())}), 422)
    assert "not a decodable image" in error_of(
        client.post(SEARCH, data={"image": (io.BytesIO(png(photo)[:200]), "cut.png")}, headers=FORM_HEADERS), 422
    )
    assert "only PNG or JPEG images are accepted" in error_of(
        client.post(SEARCH, data={"image": (io.BytesIO(b"hello, world\n"), "notes.txt")}, headers=FORM_HEADERS), 415
    )
    assert "not valid base64" in error_of(client.post(SEARCH, json={"image": {"b64": "***"}}), 422)
    assert "empty" in error_of(
        client.post(SEARCH, data={"image": (io.BytesIO(b""), "empty.png")}, headers=FORM_HEADERS), 422
    )
    assert 'missing "image"' in error_of(client.post(SEARCH, json={"k": 3}), 400)
    assert 'missing the "image" file field' in error_of(
        client.post(SEARCH, data={"k": "3"}, headers=FORM_HEADERS, content_type="multipart/form-data"), 400
    )
    assert "must be a JSON object" in error_of(client.post(SEARCH, json=[1, 2]), 400)
    assert '"k" must be an integer from 1 to 100' in error_of(
        client.post(SEARCH, json={"image": b64(photo), "k": 0}), 422
    )
    assert '"k" must be' in error_of(client.post(SEARCH, json={"image": b64(photo), "k": True}), 422)
    # a form field of Unicode digits ("³" passes str.isdigit, int() refuses it) is no number
    assert '"k" must be' in error_of(
        client.post(SEARCH, data={"image": (io.BytesIO(png(photo)), "p.png"), "k": "³"}, headers=FORM_HEADERS), 422
    )
    assert "unknown model" in error_of(client.post("/v1/models/other:search", json={"image": b64(photo)}), 404)

    assert 'missing "name"' in error_of(client.post("/v1/gallery", json={"image": b64(photo)}), 400)
    assert "name is empty" in error_of(
        client.post(
            "/v1/gallery", data={"name": "  ", "image": (io.BytesIO(png(photo)), "p.png")}, headers=FORM_HEADERS
        ),
        422,
    )
    assert "the limit is 100" in error_of(
        client.post("/v1/gallery", json={"name": "x" * 101, "image": b64(photo)}), 422
    )
    assert '"name" must be a string' in error_of(client.post("/v1/gallery", json={"name": 7, "image": b64(photo)}), 422)
    assert client.get("/v1/gallery").get_json()["count"] == 5  # nothing bad got in

    small = make_client(face_model, tmp_path / "small", MAX_CONTENT_LENGTH=100_000)
    big = np.random.default_rng(0).integers(0, 256, (300, 300, 3), dtype=np.uint8)  # noise: ~270 KB as PNG
    assert "100000 byte limit" in error_of(
        small.post(SEARCH, data={"image": (io.BytesIO(png(big)), "big.png")}, headers=FORM_HEADERS), 413
    )
    assert "100000 byte limit" in error_of(
        small.post("/v1/gallery", data={"name": "big", "image": (io.BytesIO(png(big)), "b.png")}, headers=FORM_HEADERS),
        413,
    )


def test_predict_gives_embeddings_of_face_crops(face_client):
    crop = find_face(lfw_photos()[5]).crop
    view = augment(crop, np.random.default_rng(0))
    stranger = find_face(lfw_photos()[40]).crop
    response = face_client.post(
        predict_url(), json={"instances": [crop.tolist(), view[..., 0].tolist(), b64(stranger)]}
    )
    assert response.status_code == 200, response.get_data(as_text=True)
    embeddings = np.array(response.get_json()["predictions"])
    assert embeddings.shape == (3, 64)
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-4)
    distances = pairwise_distances(embeddings, embeddings)
    # the view is near; the stranger at least 1.5x farther (issue 14's margin). Since the wider augmentation
    # of issue 14 this stranger (sample person 40) is 0.46 away, no longer over 0.6
    assert distances[0, 1] < 0.6 and distances[0, 2] > 1.5 * distances[0, 1], distances[0]
    meta = face_client.get("/v1/models/disttrain/metadata").get_json()["metadata"]["disttrain"]
    assert meta["task"] == "faces" and meta["embedding_size"] == 64 and meta["labels"] == []


def test_search_needs_a_faces_model(image_client, empty_client):
    photo = b64(lfw_photos()[0])
    assert "face search needs a faces model" in error_of(image_client.post(SEARCH, json={"image": photo}), 409)
    assert "model not available" in error_of(empty_client.post(SEARCH, json={"image": photo}), 503)


def test_faces_enrolled_before_any_model_are_embedded_by_the_first_search(face_model, tmp_path):
    client = make_client(None, tmp_path, RELOAD_INTERVAL=0)
    for name, i in PEOPLE.items():
        enrol(client, name, lfw_photos()[i])
    assert gallery_of(client).embedded == 0
    publish(face_model, tmp_path)
    assert search(client, other_view(lfw_photos()[21]))["matches"][0]["name"] == "person 21"
    assert gallery_of(client).embedded == 5


def test_seed_folder_enrols_once(face_model, tmp_path):
    photos = lfw_photos()
    seed = write_seed(
        tmp_path / "seed",
        {
            "Eileen_Collins": [astronaut()],
            "lfw-003": [photos[3]],
            "lfw-009": [photos[9], other_view(photos[9], shift=(-4, 3), brightness=-10)],
            "nobody": [blank()],  # no face: skipped with a warning
        },
    )
    publish(face_model, tmp_path)
    config = {
        "MODEL_PATH": str(tmp_path / "final" / "model.keras"),
        "GALLERY_DIR": str(tmp_path / "gallery"),
        "GALLERY_SEED": str(seed),
        "TESTING": True,
    }
    client = create_app(config).test_client()
    entries = client.get("/v1/gallery").get_json()["entries"]
    assert sorted(e["name"] for e in entries) == ["Eileen Collins", "lfw-003", "lfw-009", "lfw-009"]
    assert {e["source"] for e in entries} == {
        "seed:Eileen_Collins.png",
        "seed:lfw-003.png",
        "seed:lfw-009/0.png",
        "seed:lfw-009/1.png",
    }
    again = create_app(config).test_client()  # a restart, or the second worker: nothing added
    assert again.get("/v1/gallery").get_json()["entries"] == entries

    shifted = np.roll(astronaut(), (20, -30), axis=(0, 1))
    assert search(again, shifted)["matches"][0]["name"] == "Eileen Collins"
    assert [m["name"] for m in search(again, other_view(photos[9]))["matches"][:2]] == ["lfw-009", "lfw-009"]


json_values = fuzz.json_values(["b64", "image", "name", "k"], max_leaves=30, max_list=5)
photo_bodies = st.one_of(
    json_values.map(lambda value: json.dumps(value).encode()),
    st.fixed_dictionaries(
        {
            "image": json_values
            | st.fixed_dictionaries({"b64": st.text(max_size=40) | st.just(b64(blank(40, 40))["b64"])})
        },
        optional={"k": json_values, "name": json_values},
    ).map(lambda value: json.dumps(value).encode()),
    st.binary(max_size=64),
)


@pytest.mark.parametrize("path, method", [(SEARCH, "post"), ("/v1/gallery", "post")])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=photo_bodies)
def test_any_body_gets_json_and_a_documented_status(face_client, path, method, body):
    spec_path = path.replace("disttrain", "{model_name}")
    documented = face_client.get("/openapi.json").get_json()["paths"][spec_path][method]["responses"]
    response = face_client.open(path, method=method.upper(), data=body, content_type="application/json")
    assert response.status_code < 500, response.get_data(as_text=True)
    assert str(response.status_code) in documented and response.get_json()["error"]


def test_unwritable_gallery_is_503_and_reads_still_work(face_model, tmp_path):
    (tmp_path / "a-file").write_text("not a folder")  # root ignores permissions; a file in the path stops anyone
    client = make_client(face_model, tmp_path, GALLERY_DIR=str(tmp_path / "a-file" / "gallery"))
    assert "cannot store the entry" in error_of(
        client.post("/v1/gallery", json={"name": "Ada", "image": b64(lfw_photos()[0])}), 503
    )
    assert client.get("/v1/gallery").get_json() == {"count": 0, "entries": []}
    assert search(client, lfw_photos()[0])["matches"] == []
