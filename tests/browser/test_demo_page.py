"""The demo page in a real browser (Debian's chromium via Playwright) against a real gunicorn server."""

import re
import time

import cv2
import numpy as np
import pytest

from browser.chromium import chromium_page, needs_chromium
from server.serving import NEGATIVE, POSITIVE, http, publish, running_server, sample_model, worker_model


pytestmark = needs_chromium


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """(base URL, workdir) of a gunicorn-served movie-review model; one server for the whole module."""
    workdir = tmp_path_factory.mktemp("demo")
    publish(worker_model(sample_model(tmp_path_factory, "sample:movie-reviews")), workdir)
    with running_server(workdir, "--workers", "1", "--reload-interval", "1") as (base, _proc, _log):
        yield base, workdir


@pytest.fixture(scope="module")
def demo_url(demo):
    return demo[0]


@pytest.fixture(scope="module")
def page(demo_url):
    with chromium_page() as page:
        yield page


def screenshot(page, tmp_path_factory, name):
    """Saved for a human to look at (the path is printed; run pytest -s to see it)."""
    shot = tmp_path_factory.mktemp("screenshots") / name
    page.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")
    assert shot.stat().st_size > 10_000


def predicted_percent(page, review):
    page.fill("#review", review)
    page.click("#predict")
    page.wait_for_selector("#result .headline")
    headline = page.inner_text("#result .headline")
    match = re.fullmatch(r"(negative|positive): (\d+(?:\.\d+)?)%", headline.strip())
    assert match, headline
    return match.group(1), float(match.group(2))


def test_review_gets_a_probability(page, demo_url, tmp_path_factory):
    outside = []  # the page must not fetch anything from another origin
    page.on("request", lambda request: None if request.url.startswith(demo_url) else outside.append(request.url))
    page.goto(demo_url + "/")
    assert page.title().startswith("disttrain")
    assert page.inner_text("#version").isdigit()
    assert page.get_attribute("#report-link", "href") == "/report"

    label, percent = predicted_percent(page, POSITIVE)
    assert 0.0 <= percent <= 100.0
    assert label == "positive" and percent > 50.0
    assert page.locator("#result .row").count() == 2  # one bar per label

    screenshot(page, tmp_path_factory, "text-demo.png")

    assert predicted_percent(page, NEGATIVE)[0] == "negative"
    assert outside == []


def test_empty_review_shows_the_servers_error(page, demo_url):
    page.goto(demo_url + "/")
    page.fill("#review", "   ")
    page.click("#predict")
    page.wait_for_selector("#result .error")
    assert "empty or only whitespace" in page.inner_text("#result .error")


def test_image_page_after_an_image_model_is_published(page, demo, tmp_path_factory):
    """Hot reload in the real server turns the page into an upload form; the file goes through as b64."""
    base, workdir = demo
    digits = sample_model(tmp_path_factory, "sample:digits")
    version = int(http("GET", base + "/readyz")[1]["version"])
    publish(worker_model(digits), workdir, mtime=version + 10)
    deadline = time.monotonic() + 60
    while http("GET", base + "/readyz")[1].get("version") != str(version + 10):
        assert time.monotonic() < deadline, "the server did not pick up the image model"
        time.sleep(0.5)

    image, label = np.load(digits / "data" / "test.x.npy")[0], int(np.load(digits / "data" / "test.y.npy")[0])
    png = tmp_path_factory.mktemp("upload") / f"digit-{label}.png"
    cv2.imwrite(str(png), cv2.resize(image, (64, 64), interpolation=cv2.INTER_NEAREST))

    page.goto(base + "/")
    assert page.inner_text("#version") == str(version + 10)
    page.set_input_files("#image", str(png))
    page.click("#predict")
    page.wait_for_selector("#result .headline")
    headline = page.inner_text("#result .headline")
    assert re.fullmatch(r"\d: \d+(\.\d+)?%", headline.strip()), headline
    assert page.locator("#result .row").count() == 10
    screenshot(page, tmp_path_factory, "image-demo.png")

    page.set_input_files("#image", {"name": "broken.png", "mimeType": "image/png", "buffer": b"\x89PNG\r\n\x1a\n broken"})
    page.click("#predict")
    page.wait_for_selector("#result .error")
    assert "not a decodable image" in page.inner_text("#result .error")
