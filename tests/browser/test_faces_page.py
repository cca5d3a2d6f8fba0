"""The face page in a real browser (Debian's chromium via Playwright) against a real gunicorn server."""

import cv2
import pytest

from browser.chromium import chromium_page, needs_chromium
from server.face_photos import astronaut, b64, lfw_photos, other_view
from server.serving import faces_model, http, publish, running_server

ENROLLED = {"Ada": 8, "Grace": 27, "Alan": 44, "Edsger": 61}  # name -> sample photo

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def faces_demo(tmp_path_factory):
    """Base URL of a gunicorn-served faces model whose gallery has the ENROLLED people (enrolled through the API)."""
    workdir = tmp_path_factory.mktemp("faces-demo")
    publish(faces_model(tmp_path_factory), workdir)
    with running_server(workdir, "--workers", "1") as (base, _proc, _log):
        for name, i in ENROLLED.items():
            assert http("POST", base + "/v1/gallery", {"name": name, "image": b64(lfw_photos()[i])})[0] == 201
        yield base


@pytest.fixture(scope="module")
def page(faces_demo):
    with chromium_page(height=900) as page:
        yield page


def photo_file(folder, name, image):
    path = folder / name
    cv2.imwrite(str(path), image)
    return str(path)


def test_enrol_on_the_page_then_find_the_person_in_another_photo(page, faces_demo, tmp_path):
    from playwright.sync_api import expect

    outside = []  # the page must not fetch anything from another origin
    page.on("request", lambda request: None if request.url.startswith(faces_demo) else outside.append(request.url))
    page.goto(faces_demo + "/")
    assert page.title() == "disttrain · face search"
    assert page.get_attribute("#version", "title") == "version " + http("GET", faces_demo + "/readyz")[1]["version"]
    page.wait_for_selector("#gallery .gallery-entry")
    assert page.locator("#gallery .gallery-entry").count() == len(ENROLLED)

    # Enrol through the form: the astronaut, a colour photo.
    page.fill("#enrol-name", "Eileen Collins")
    page.set_input_files("#enrol-photo", photo_file(tmp_path, "eileen.png", astronaut()))
    page.click("#enrol")
    page.wait_for_selector("#enrol-status .ok")
    assert page.inner_text("#enrol-status") == "Enrolled Eileen Collins"
    expect(page.locator("#gallery .gallery-entry")).to_have_count(5)
    assert page.locator("#gallery .entry-name").all_inner_texts()[-1] == "Eileen Collins"
    page.wait_for_function(
        "() => [...document.querySelectorAll('#gallery img')].every((img) => img.complete && img.naturalWidth === 96)"
    )

    # Search with another photo of Grace: the face is boxed and Grace ranks first of 3.
    page.set_input_files("#photo", photo_file(tmp_path, "query.png", other_view(lfw_photos()[ENROLLED["Grace"]])))
    page.click("#search")
    page.wait_for_selector("#matches .match")
    assert page.locator("#matches .match").count() == 3
    names = page.locator("#matches .match-name").all_inner_texts()
    distances = [float(d) for d in page.locator("#matches .match-distance").all_inner_texts()]
    assert names[0] == "Grace" and distances == sorted(distances) and distances[0] < 0.5
    assert page.is_visible("#preview") and page.is_visible("#face-box")
    assert page.inner_text("#face-box").startswith("Face at (")
    assert " · confidence " in page.inner_text("#face-box") and " eye" in page.inner_text(
        "#face-box"
    )  # the API's face object
    # The canvas shows the photo (195x195 at zoom 1.3) with the yellow box drawn on it.
    assert page.evaluate("() => [preview.width, preview.height]") == [195, 195]
    assert page.evaluate("""(() => {
        const data = preview.getContext('2d').getImageData(0, 0, preview.width, preview.height).data;
        for (let i = 0; i < data.length; i += 4) if (data[i] > 240 && data[i + 1] > 190 && data[i + 2] < 40) return true;
        return false;
    })()""")
    page.wait_for_function(
        "() => [...document.querySelectorAll('#matches img')].every((img) => img.complete && img.naturalWidth > 0)"
    )

    shot = tmp_path / "faces-demo.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")
    assert shot.stat().st_size > 20_000
    assert outside == []


def test_no_face_and_delete(page, faces_demo, tmp_path):
    from playwright.sync_api import expect

    page.goto(faces_demo + "/")
    page.set_input_files("#photo", photo_file(tmp_path, "wall.png", cv2.resize(lfw_photos()[0][:20, :20], (200, 200))))
    page.click("#search")
    page.wait_for_selector("#matches .error")
    assert "no face found" in page.inner_text("#matches .error")
    assert not page.is_visible("#face-box")

    page.wait_for_selector("#gallery .gallery-entry")
    before = page.locator("#gallery .gallery-entry").count()
    page.locator("#gallery .gallery-entry", has_text="Alan").locator(".delete").click()
    expect(page.locator("#gallery .gallery-entry")).to_have_count(before - 1)
    assert "Alan" not in page.locator("#gallery .entry-name").all_inner_texts()
    assert "Alan" not in [e["name"] for e in http("GET", faces_demo + "/v1/gallery")[1]["entries"]]


TOKEN = "browser-test-token-5f2c9a"


def test_with_a_token_the_page_asks_once_and_enrols_and_searches(page, tmp_path_factory, tmp_path):
    """--token-required-for all: the page's first API call gets a 401, the page asks for the token (a wrong
    one is not kept: the next call asks again), then enrols, lists, shows thumbnails and searches with it."""
    from playwright.sync_api import expect

    workdir = tmp_path_factory.mktemp("faces-token")
    publish(faces_model(tmp_path_factory), workdir)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    with running_server(
        workdir, "--workers", "1", "--api-token-file", str(token_file), "--token-required-for", "all"
    ) as (base, _proc, log):
        assert http("GET", base + "/v1/gallery")[0] == 401
        answers, prompts = ["not-the-token", TOKEN], []

        def answer(dialog):
            prompts.append(dialog.message)
            dialog.accept(answers[len(prompts) - 1])

        # A new tab of the module's browser (Playwright's sync API runs one browser per thread).
        page = page.context.browser.new_page(viewport={"width": 900, "height": 900})
        try:
            page.set_default_timeout(30_000)
            page.on("dialog", answer)
            page.goto(base + "/")
            page.wait_for_selector("#gallery .error")  # the wrong token: the server's message, shown
            assert "wrong API token" in page.inner_text("#gallery .error")
            assert page.evaluate("() => sessionStorage.getItem('disttrain-api-token')") is None

            page.fill("#enrol-name", "Eileen Collins")
            page.set_input_files("#enrol-photo", photo_file(tmp_path, "eileen.png", astronaut()))
            page.click("#enrol")
            page.wait_for_selector("#enrol-status .ok")
            assert page.inner_text("#enrol-status") == "Enrolled Eileen Collins"
            expect(page.locator("#gallery .gallery-entry")).to_have_count(1)
            # The thumbnail came through fetch with the token (an <img src> cannot send it).
            page.wait_for_function(
                "() => [...document.querySelectorAll('#gallery img')].every((img) => img.complete && img.naturalWidth === 96)"
            )
            assert page.get_attribute("#gallery img", "src").startswith("blob:")

            page.set_input_files("#photo", photo_file(tmp_path, "query.png", cv2.resize(astronaut(), (400, 400))))
            page.click("#search")
            page.wait_for_selector("#matches .match")
            assert page.locator("#matches .match-name").all_inner_texts() == ["Eileen Collins"]
            assert page.evaluate("() => sessionStorage.getItem('disttrain-api-token')") == TOKEN
            assert (
                len(prompts) == 2 and "not accepted" not in prompts[0]
            )  # asked once, and once more after the wrong answer
        finally:
            page.close()

        status, listed = http("GET", base + "/v1/gallery")
        assert status == 401 and "needs the API token" in listed["error"]
    with open(log, errors="replace") as fh:
        assert TOKEN not in fh.read()  # never logged
