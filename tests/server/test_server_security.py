"""Issue 11, the server half: API token, read-only gallery, gallery caps, cross-site refusal, security
headers, upload formats and the per-request pixel budget, Host allowlist. Flask test client on real
models (the text model; enrolment needs no model, only the real face detector)."""

import base64
import hmac
import io
import json
import struct
import threading

import cv2
import numpy as np
import pytest

from disttrain_server import security
from disttrain_server.gallery import Gallery, GalleryFull, read_face
from disttrain_server.main import app_config, parse_args
from disttrain_server.uploads import PixelBudget, image_format, image_size
from server.face_photos import astronaut, b64, lfw_photos, png
from server.serving import POSITIVE, error_of, make_client, predict_url

TOKEN = "s3cret-token_0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
FORM = {"X-Requested-With": "pytest"}  # what the page and a scripted multipart client send
SEARCH = "/v1/models/disttrain:search"
EVIL = "https://evil.example"


def photo_form(name="Ada", image=None):
    fields = {"image": (io.BytesIO(png(lfw_photos()[3] if image is None else image)), "photo.png")}
    return {**fields, "name": name} if name is not None else fields


def enrol_json(name="Ada"):
    return {"name": name, "image": b64(lfw_photos()[3])}


def count(client, headers=None):
    return client.get("/v1/gallery", headers=headers).get_json()["count"]


@pytest.fixture
def writes_client(tmp_path):
    """A token guarding gallery writes (the default scope); no model: enrolment stores the face only."""
    return make_client(None, tmp_path, API_TOKEN=TOKEN.encode())


@pytest.fixture
def all_client(text_model, tmp_path):
    return make_client(text_model, tmp_path, API_TOKEN=TOKEN.encode(), TOKEN_REQUIRED_FOR="all")


# -- 1. the API token


def test_gallery_writes_need_the_token(writes_client):
    client = writes_client
    for headers, words, error in [
        (None, "needs the API token", None),
        ({"Authorization": "Bearer wrong"}, "wrong API token", "invalid_token"),
        ({"Authorization": f"Basic {TOKEN}"}, "needs the API token", None),
        ({"Authorization": "Bearer "}, "needs the API token", None),
        ({"X-API-Token": TOKEN}, "needs the API token", None),
    ]:  # only the Bearer header counts
        response = client.post("/v1/gallery", json=enrol_json(), headers=headers)
        assert words in error_of(response, 401)
        challenge = response.headers["WWW-Authenticate"]
        assert challenge.startswith("Bearer ") and (f'error="{error}"' in challenge) == bool(error)
    assert count(client, BEARER) == 0
    entry = client.post("/v1/gallery", json=enrol_json(), headers=BEARER)
    assert entry.status_code == 201, entry.get_data(as_text=True)
    entry_id = entry.get_json()["id"]
    assert (
        client.post("/v1/gallery", data=photo_form("Grace"), headers={**BEARER, **FORM}).status_code == 201
    )  # multipart too
    assert client.get(f"/v1/gallery/{entry_id}/thumbnail.png", headers=BEARER).status_code == 200
    assert "wrong API token" in error_of(
        client.delete(f"/v1/gallery/{entry_id}", headers={"Authorization": "Bearer x" + TOKEN}), 401
    )
    error_of(client.delete(f"/v1/gallery/{entry_id}"), 401)
    assert count(client, BEARER) == 2
    assert client.delete(f"/v1/gallery/{entry_id}", headers=BEARER).status_code == 200 and count(client, BEARER) == 1


def test_face_data_needs_the_token_unless_face_search_is_public(face_model, tmp_path):
    """The "writes" scope guards every read of the gallery too: its list, thumbnails and :search
    (which answers the names a photo matches); --public-face-search opens the reads, never the writes."""
    private = make_client(face_model, tmp_path / "private", API_TOKEN=TOKEN.encode())
    entry = private.post("/v1/gallery", json=enrol_json("Ada"), headers=BEARER).get_json()
    search = {"image": b64(lfw_photos()[3])}
    reads = [
        ("get", "/v1/gallery", {}),
        ("get", entry["thumbnail"], {}),
        ("get", f"/v1/gallery/{entry['id']}/thumbnail.png", {}),
        ("post", SEARCH, {"json": search}),
        ("post", "/v1/models/disttrain/versions/1:search", {"json": search}),
    ]
    for method, path, kwargs in reads:
        response = getattr(private, method)(path, **kwargs)
        assert "needs the API token" in error_of(response, 401), path
        assert "Ada" not in response.get_data(as_text=True)
    assert private.get("/v1/gallery", headers=BEARER).get_json()["entries"][0]["name"] == "Ada"
    found = private.post(SEARCH, json=search, headers=BEARER).get_json()
    assert found["matches"][0]["name"] == "Ada" and found["matches"][0]["distance"] < 0.01  # the enrolled photo itself
    assert private.get("/v1/models/disttrain/metadata").status_code == 200  # the model's other reads stay open
    page = private.get("/").get_data(as_text=True)
    assert 'data-token-for-face-reads="true"' in page  # the page fetches thumbnails with the token

    public = make_client(face_model, tmp_path / "public", API_TOKEN=TOKEN.encode(), PUBLIC_FACE_SEARCH=True)
    error_of(public.post("/v1/gallery", json=enrol_json("Ada")), 401)  # writes keep the token
    entry = public.post("/v1/gallery", json=enrol_json("Ada"), headers=BEARER).get_json()
    assert public.get("/v1/gallery").get_json()["count"] == 1
    assert public.get(entry["thumbnail"]).status_code == 200
    assert public.post(SEARCH, json=search).get_json()["matches"][0]["name"] == "Ada"
    assert 'data-token-for-face-reads="false"' in public.get("/").get_data(as_text=True)
    assert parse_args(["--public-face-search"]).public_face_search and not parse_args([]).public_face_search


def test_all_scope_guards_every_v1_call_and_leaves_probes_and_page_open(all_client):
    client = all_client
    body = {"instances": [POSITIVE]}
    assert "needs the API token" in error_of(client.post(predict_url(), json=body), 401)
    assert "wrong API token" in error_of(
        client.post(predict_url(), json=body, headers={"Authorization": "Bearer nope"}), 401
    )
    assert len(client.post(predict_url(), json=body, headers=BEARER).get_json()["predictions"]) == 1
    for path in (
        "/v1/models/disttrain",
        "/v1/models/disttrain/metadata",
        "/v1/gallery",
        "/v1/gallery/0123456789abcdef/thumbnail.png",
    ):
        error_of(client.get(path), 401)
        assert client.get(path, headers=BEARER).status_code in (200, 404)  # the thumbnail's entry does not exist
    for path in ("/healthz", "/readyz", "/", "/openapi.json", "/static/api.js", "/favicon.ico"):
        assert client.get(path).status_code == 200, path
    assert 'data-token-required-for="all"' in client.get("/").get_data(as_text=True)  # the page knows to send it


def test_token_is_compared_in_constant_time(writes_client, monkeypatch):
    compared, real_compare = [], hmac.compare_digest

    def compare_digest(a, b):  # the real comparison, recorded
        compared.append((a, b))
        return real_compare(a, b)

    monkeypatch.setattr(security.hmac, "compare_digest", compare_digest)
    error_of(writes_client.post("/v1/gallery", json=enrol_json(), headers={"Authorization": "Bearer guess"}), 401)
    assert compared == [(b"guess", TOKEN.encode())]


def test_token_file_flags(tmp_path, capsys):
    token_file = tmp_path / "token"
    token_file.write_text(f"  {TOKEN}\n")
    config = app_config(
        parse_args(
            [
                "--api-token-file",
                str(token_file),
                "--token-required-for",
                "all",
                "--read-only-gallery",
                "--gallery-max-entries",
                "5",
                "--gallery-max-mb",
                "1.5",
                "--allowed-hosts",
                "Demo.example, .lan",
                "--max-request-pixels",
                "1000",
            ]
        )
    )
    assert (
        config["API_TOKEN"] == TOKEN.encode() and config["TOKEN_REQUIRED_FOR"] == "all" and config["READ_ONLY_GALLERY"]
    )
    assert (config["GALLERY_MAX_ENTRIES"], config["GALLERY_MAX_BYTES"]) == (5, int(1.5 * 1024 * 1024))
    assert config["ALLOWED_HOSTS"] == ["demo.example", ".lan"] and config["MAX_REQUEST_PIXELS"] == 1000
    defaults = app_config(parse_args([]))
    assert (
        defaults["API_TOKEN"] is None
        and defaults["TOKEN_REQUIRED_FOR"] == "writes"
        and not defaults["READ_ONLY_GALLERY"]
    )
    assert (defaults["GALLERY_MAX_ENTRIES"], defaults["GALLERY_MAX_BYTES"]) == (1000, 200 * 1024 * 1024)
    assert defaults["ALLOWED_HOSTS"] == [] and defaults["MAX_REQUEST_PIXELS"] == 16_000_000

    (tmp_path / "empty").write_text(" \n")
    (tmp_path / "spaced").write_text("two words")
    for argv, words in [
        (["--api-token-file", str(tmp_path / "empty")], "is empty"),
        (["--api-token-file", str(tmp_path / "missing")], "cannot read it (No such file or directory)"),
        (["--api-token-file", str(tmp_path)], "cannot read it (Is a directory)"),
        (["--api-token-file", str(tmp_path / "spaced")], "printable ASCII without spaces"),
        (["--token-required-for", "some"], "invalid choice"),
        (["--gallery-max-entries", "0"], "--gallery-max-entries must be at least 1"),
        (["--gallery-max-mb", "0"], "--gallery-max-mb must be positive"),
        (["--max-request-pixels", "0"], "--max-request-pixels must be at least 1"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            parse_args(argv)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and words in err, err
        assert TOKEN not in err


# -- read-only gallery and caps


def test_read_only_gallery_refuses_writes_and_still_searches(face_model, tmp_path):
    client = make_client(face_model, tmp_path, READ_ONLY_GALLERY=True)
    assert "read-only" in error_of(client.post("/v1/gallery", json=enrol_json()), 403)
    assert "read-only" in error_of(client.post("/v1/gallery", data=photo_form(), headers=FORM), 403)
    assert "read-only" in error_of(client.delete("/v1/gallery/0123456789abcdef"), 403)
    search = client.post(SEARCH, json={"image": b64(astronaut())})
    assert search.status_code == 200 and search.get_json()["faces_found"] == 1
    assert count(client) == 0
    assert 'id="enrol"' not in client.get("/").get_data(as_text=True)  # the page offers no enrolment


def test_gallery_entry_cap_is_507(tmp_path):
    client = make_client(None, tmp_path, GALLERY_MAX_ENTRIES=2)
    for name in ("Ada", "Grace"):
        assert client.post("/v1/gallery", json=enrol_json(name)).status_code == 201
    message = error_of(client.post("/v1/gallery", json=enrol_json("Alan")), 507)
    assert "2 entries, the cap is 2 (--gallery-max-entries)" in message
    assert count(client) == 2
    entry_id = client.get("/v1/gallery").get_json()["entries"][0]["id"]
    assert client.delete(f"/v1/gallery/{entry_id}").status_code == 200  # deleting makes room again
    assert client.post("/v1/gallery", json=enrol_json("Alan")).status_code == 201


def test_gallery_byte_cap_is_507(tmp_path):
    client = make_client(None, tmp_path)
    assert client.post("/v1/gallery", json=enrol_json("Ada")).status_code == 201
    used = sum(f.stat().st_size for f in (tmp_path / "gallery").rglob("*") if f.is_file())
    capped = make_client(None, tmp_path, GALLERY_MAX_BYTES=used + 1000)  # room for less than one more entry
    message = error_of(capped.post("/v1/gallery", json=enrol_json("Grace")), 507)
    assert "the gallery is full" in message and "--gallery-max-mb" in message
    assert count(capped) == 1
    assert (
        sum(f.stat().st_size for f in (tmp_path / "gallery").rglob("*") if f.is_file()) == used
    )  # nothing half-written


def test_entry_cap_holds_under_concurrent_enrolments(tmp_path):
    """16 threads enrol at once through a barrier into a gallery capped at 5, 10 times: always exactly 5 get in."""
    data = png(lfw_photos()[3])
    face = read_face(data)
    for repetition in range(10):
        gallery = Gallery(tmp_path / f"g{repetition}", max_entries=5)
        barrier, results = threading.Barrier(16), []

        def enrol(i):
            barrier.wait()
            try:
                gallery.enrol(f"person {i}", data, face=face)
                results.append("ok")
            except GalleryFull:
                results.append("full")

        threads = [threading.Thread(target=enrol, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == ["full"] * 11 + ["ok"] * 5
        assert len(gallery.entries()) == 5


# -- 4. cross-site requests and headers


def test_cross_site_form_posts_are_refused(face_model, tmp_path):
    client = make_client(face_model, tmp_path)
    raw_json = '{"name": "Ada", "image": {"b64": "%s"}, "instances": ["%s"]}' % (b64(lfw_photos()[3])["b64"], POSITIVE)
    for path in ("/v1/gallery", SEARCH, predict_url()):
        # What an HTML form on another site (or a no-cors fetch) can send without asking the browser first
        # (the prediction calls read it as JSON when no other site sent it: the test below):
        if path != predict_url():
            assert "got Content-Type text/plain" in error_of(
                client.post(path, data=raw_json, content_type="text/plain"), 415
            )
            assert "got Content-Type application/x-www-form-urlencoded" in error_of(
                client.post(path, data={"name": "Ada", "k": "3"}, content_type="application/x-www-form-urlencoded"), 415
            )
            # A browser always names a Content-Type; without one it is refused, from a script it is read as JSON.
            assert "got no Content-Type" in error_of(
                client.post(path, data=raw_json, headers={"Origin": "http://localhost"}), 415
            )
        assert "needs an X-Requested-With header" in error_of(client.post(path, data=photo_form()), 403)
        for headers in (
            {"Origin": EVIL},
            {"Origin": EVIL, **FORM},
            {"Sec-Fetch-Site": "cross-site", **FORM},
            {"Sec-Fetch-Site": "same-site", **FORM},
        ):
            assert "cross-site request refused" in error_of(client.post(path, data=photo_form(), headers=headers), 403)
            assert "cross-site request refused" in error_of(
                client.post(path, data=raw_json, content_type="application/json", headers=headers), 403
            )
    assert "cross-site request refused" in error_of(
        client.delete("/v1/gallery/0123456789abcdef", headers={"Origin": EVIL}), 403
    )
    assert count(client) == 0  # none of it enrolled anyone

    # The page itself: same origin by Origin or by Sec-Fetch-Site, with or without the header.
    for headers in ({"Origin": "http://localhost"}, {"Sec-Fetch-Site": "same-origin"}, FORM):
        assert client.post("/v1/gallery", data=photo_form(), headers=headers).status_code == 201
    assert (
        client.post(
            SEARCH, data=photo_form(name=None), headers={"Origin": "http://localhost", "Sec-Fetch-Site": "same-origin"}
        ).status_code
        == 200
    )
    assert (
        client.post(predict_url(), data=raw_json, headers={"X-Anything": "1"}).status_code == 422
    )  # a script without Content-Type: JSON, a faces model
    assert count(client) == 3


PREDICTION_CALLS = {  # each read-only prediction call, a body for the text model, and the answer's key
    predict_url(): ({"instances": [POSITIVE]}, "predictions"),
    "/v1/models/disttrain:classify": ({"examples": [{"text": POSITIVE}]}, "result"),
    "/v1/models/disttrain/versions/{version}:predict": ({"instances": [POSITIVE]}, "predictions"),
    "/v2/models/disttrain/infer": (
        {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": [POSITIVE]}]},
        "outputs",
    ),
}
AS_JSON = ("application/x-www-form-urlencoded", "text/plain;charset=UTF-8", None)  # None: no Content-Type


def test_prediction_endpoints_are_routes(tmp_path):
    """security.PREDICTION_ENDPOINTS names views by endpoint: a renamed view must not silently drop out of it."""
    app = make_client(None, tmp_path).application
    endpoints = {rule.endpoint for rule in app.url_map.iter_rules() if "POST" in rule.methods}
    assert set(security.PREDICTION_ENDPOINTS) <= endpoints
    assert {"faces.search", "faces.enrol"} & endpoints and not {"faces.search", "faces.enrol"} & set(
        security.PREDICTION_ENDPOINTS
    )


def test_prediction_calls_read_json_sent_as_a_form_unless_another_site_sent_it(text_client):
    """TF Serving's docs call :predict with `curl -d` (a form-urlencoded body); a page on another site can send
    the same content type from an HTML form, so such a request is refused when a browser says another site
    sent it (the real curl: test_server_tf_serving.py)."""
    version = text_client.get("/v1/models/disttrain").get_json()["model_version_status"][0]["version"]
    for path, (body, key) in PREDICTION_CALLS.items():
        path = path.format(version=version)
        raw = json.dumps(body)
        expected = text_client.post(path, json=body)
        assert expected.status_code == 200, expected.get_data(as_text=True)
        for kind in AS_JSON:
            # a script or curl (no browser headers), and this server's own page
            for headers in (
                {},
                {"Origin": "http://localhost"},
                {"Sec-Fetch-Site": "same-origin"},
                {"Origin": "http://localhost", "Sec-Fetch-Site": "same-origin"},
            ):
                response = text_client.post(path, data=raw, content_type=kind, headers=headers)
                assert response.status_code == 200, (path, kind, headers, response.get_data(as_text=True))
                assert response.get_json()[key] == expected.get_json()[key]
            # another site's page: another origin, or the browser's word for it (same-site: a sibling origin)
            for headers, named in [
                ({"Origin": EVIL}, EVIL),
                ({"Origin": "null"}, "null"),
                ({"Origin": "http://localhost:8081"}, "localhost:8081"),
                ({"Sec-Fetch-Site": "cross-site"}, "cross-site"),
                ({"Sec-Fetch-Site": "same-site"}, "same-site"),
                ({"Origin": "http://localhost", "Sec-Fetch-Site": "cross-site"}, "cross-site"),
            ]:
                response = text_client.post(path, data=raw, content_type=kind, headers=headers)
                message = error_of(response, 403)
                assert "cross-site request refused" in message and named in message, message
                assert response.get_data(as_text=True).strip().count("\n") == 0  # one JSON line
        # Other declared types stay refused, with a message that says what is read
        for kind in ("application/xml", "application/octet-stream", "image/png"):
            message = error_of(text_client.post(path, data=raw, content_type=kind), 415)
            assert (
                f"got Content-Type {kind}" in message
                and "must be application/json" in message
                and "x-www-form-urlencoded" in message
            )
    # Writes keep the JSON-only rule whoever sends them (test_cross_site_form_posts_are_refused)
    assert "got Content-Type application/x-www-form-urlencoded" in error_of(
        text_client.post(
            "/v1/gallery", data=json.dumps(enrol_json()), content_type="application/x-www-form-urlencoded"
        ),
        415,
    )


def check_security_headers(response):
    headers = response.headers
    assert (
        "frame-ancestors 'none'" in headers["Content-Security-Policy"]
        and "default-src 'self'" in headers["Content-Security-Policy"]
    )
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "no-referrer"
    assert headers["Cross-Origin-Resource-Policy"] == "same-origin"


def test_security_headers_on_every_response(writes_client, text_client):
    responses = {
        "html": text_client.get("/"),
        "json": text_client.get("/v1/models/disttrain"),
        "predict": text_client.post(predict_url(), json={"instances": [POSITIVE]}),
        "probe": text_client.get("/healthz"),
        "404": text_client.get("/nowhere"),
        "405": text_client.get(predict_url()),
        "415": text_client.post(predict_url(), data="x", content_type="application/xml"),
        "401": writes_client.post("/v1/gallery", json=enrol_json()),
        "static": text_client.get("/static/demo.js"),
        "icon": text_client.get("/favicon.ico"),
        "openapi": text_client.get("/openapi.json"),
    }
    for response in responses.values():
        check_security_headers(response)
    assert [r.status_code for r in responses.values()] == [200, 200, 200, 200, 404, 405, 415, 401, 200, 200, 200]
    assert (
        responses["json"].headers["Cache-Control"] == "no-store"
        and responses["predict"].headers["Cache-Control"] == "no-store"
    )


def test_thumbnails_are_private(tmp_path):
    client = make_client(None, tmp_path)
    entry = client.post("/v1/gallery", json=enrol_json()).get_json()
    response = client.get(entry["thumbnail"])
    assert response.status_code == 200 and response.content_type == "image/png"
    assert (
        response.cache_control.private and not response.cache_control.public and response.cache_control.max_age == 3600
    )
    check_security_headers(response)


# -- 5. upload formats and the pixel budget


def encoded(ext, image=None):
    ok, data = cv2.imencode(ext, np.full((40, 30, 3), 128, np.uint8) if image is None else image)
    assert ok
    return data.tobytes()


NOT_ALLOWED = {
    "GIF": encoded(".gif"),
    "BMP": encoded(".bmp"),
    "TIFF": encoded(".tiff"),
    "RIFF/WebP": encoded(".webp"),
    "text": b"I am a text file called photo.png\n",
}


@pytest.mark.parametrize("kind", list(NOT_ALLOWED))
def test_only_png_and_jpeg_reach_the_decoder(kind, face_model, image_client, tmp_path):
    data = NOT_ALLOWED[kind]
    got = f"got a {kind} file" if kind != "text" else "not a PNG or JPEG file"
    client = make_client(face_model, tmp_path)
    as_b64 = {"b64": base64.b64encode(data).decode()}
    for response in (
        client.post("/v1/gallery", data={"name": "Ada", "image": (io.BytesIO(data), "photo.png")}, headers=FORM),
        client.post("/v1/gallery", json={"name": "Ada", "image": as_b64}),
        client.post(SEARCH, data={"image": (io.BytesIO(data), "photo.png")}, headers=FORM),
        client.post(SEARCH, json={"image": as_b64}),
    ):
        message = error_of(response, 415)
        assert message.startswith("image: only PNG or JPEG images are accepted") and got in message
    message = error_of(image_client.post(predict_url(), json={"instances": [np.zeros((8, 8)).tolist(), as_b64]}), 415)
    assert message.startswith("instance 1: only PNG or JPEG") and got in message
    assert count(client) == 0


def test_png_and_jpeg_sizes_are_read_from_their_headers():
    rng = np.random.default_rng(0)
    for height, width in [(1, 1), (37, 211), (480, 640), (3000, 17)]:
        image = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        for ext, params in [(".png", []), (".jpg", []), (".jpg", [cv2.IMWRITE_JPEG_PROGRESSIVE, 1])]:
            data = encoded(ext, image) if not params else cv2.imencode(ext, image, params)[1].tobytes()
            assert image_size(data, image_format(data)) == (width, height)
    assert image_format(png(astronaut())) == "PNG"


def test_pixel_budget_is_per_request_and_checked_before_decoding(image_client, digits_test, face_model, tmp_path):
    image = cv2.resize(digits_test[0][0], (50, 50))  # 2,500 pixels
    instance = {"b64": base64.b64encode(png(image)).decode()}
    client = make_client(image_client.application.config["MODEL_PATH"], tmp_path / "digits", MAX_REQUEST_PIXELS=10_000)
    assert client.post(predict_url(), json={"instances": [instance] * 4}).status_code == 200  # exactly the budget
    message = error_of(client.post(predict_url(), json={"instances": [instance] * 5}), 413)
    assert (
        message.startswith("instance 4: images of this request add up to 12,500 pixels")
        and "--max-request-pixels" in message
    )
    assert (
        client.post(predict_url(), json={"instances": [instance] * 4}).status_code == 200
    )  # the next request has its own budget

    # A PNG whose header claims 100,000 x 100,000 pixels in 100 bytes: refused by its header, never decoded.
    bomb = (
        b"\x89PNG\r\n\x1a\n"
        + struct.pack(">I", 13)
        + b"IHDR"
        + struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)
        + b"\x00" * 60
    )
    faces = make_client(face_model, tmp_path / "faces")
    assert "10,000,000,000 pixels" in error_of(
        faces.post(SEARCH, json={"image": {"b64": base64.b64encode(bomb).decode()}}), 413
    )
    assert "10,000,000,000 pixels" in error_of(
        image_client.post(predict_url(), json={"instances": [{"b64": base64.b64encode(bomb).decode()}]}), 413
    )
    small = make_client(face_model, tmp_path / "small-faces", MAX_REQUEST_PIXELS=100 * 100)
    assert "--max-request-pixels" in error_of(
        small.post("/v1/gallery", data=photo_form(), headers=FORM), 413
    )  # 150x150
    assert count(small) == 0
    budget = PixelBudget(100)
    budget.admit(png(np.zeros((10, 10), np.uint8)))
    assert budget.used == 100


# -- Host allowlist


def test_host_allowlist(text_model, tmp_path):
    client = make_client(text_model, tmp_path, ALLOWED_HOSTS=["demo.example", ".lan"])
    for host in ("demo.example", "demo.example:8080", "box.lan", "a.b.lan:80"):
        assert client.get("/", headers={"Host": host}).status_code == 200, host
    for host in ("evil.example", "demo.example.evil", "127.0.0.1:8080", "lan.evil"):
        assert "is not served here (--allowed-hosts" in error_of(client.get("/", headers={"Host": host}), 400)
        error_of(client.post(predict_url(), json={"instances": [POSITIVE]}, headers={"Host": host}), 400)
    for probe in ("/healthz", "/readyz"):  # the kubelet sends the pod's IP as Host
        assert client.get(probe, headers={"Host": "10.1.2.3:8080"}).status_code == 200
    # DNS rebinding: a page on evil.example whose name now resolves to this server. Its requests are
    # same-origin to the browser (Host and Origin both evil.example), so the cross-site check passes them;
    # the host allowlist is what refuses them.
    rebound = {"Host": "evil.example", "Origin": "http://evil.example", "Sec-Fetch-Site": "same-origin"}
    assert "host 'evil.example' is not served here" in error_of(
        client.post(predict_url(), json={"instances": [POSITIVE]}, headers=rebound), 400
    )
    error_of(client.get("/v1/models/disttrain/metadata", headers=rebound), 400)
    open_client = make_client(text_model, tmp_path)  # default: any host
    assert (
        open_client.post(predict_url(), json={"instances": [POSITIVE]}, headers=rebound).status_code == 200
    )  # why hosts matter
    assert open_client.get("/", headers={"Host": "anything.example"}).status_code == 200
