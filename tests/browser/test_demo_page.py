"""The demo page in a real browser (Debian's chromium via Playwright) against a real gunicorn server."""

import re
import time
from datetime import datetime, timezone

import cv2
import numpy as np
import pytest

from browser.chromium import chromium_page, needs_chromium, screenshot
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


def check_publication_time(page, version):
    """#version reads as the UTC time the model was published; the API's raw version is its tooltip."""
    published = datetime.fromtimestamp(version, timezone.utc)
    assert page.inner_text("#version") == published.strftime("%Y-%m-%d %H:%M UTC")
    assert page.get_attribute("#version", "title") == f"version {version}"
    assert page.get_attribute("#version", "datetime") == published.strftime("%Y-%m-%dT%H:%M:%SZ")


def wait_for_version(base, version):
    deadline = time.monotonic() + 60
    while http("GET", base + "/readyz")[1].get("version") != str(version):
        assert time.monotonic() < deadline, f"the server did not pick up version {version}"
        time.sleep(0.5)


def predicted(page):
    """Click Predict; (label, percent) from the headline it shows."""
    page.click("#predict")
    page.wait_for_selector("#result .headline")
    headline = page.inner_text("#result .headline")
    match = re.fullmatch(r"(negative|positive): (\d+(?:\.\d+)?)%", headline.strip())
    assert match, headline
    return match.group(1), float(match.group(2))


def predicted_percent(page, review):
    page.fill("#review", review)
    return predicted(page)


def test_review_gets_a_probability(page, demo_url, tmp_path_factory):
    outside = []  # the page must not fetch anything from another origin
    page.on("request", lambda request: None if request.url.startswith(demo_url) else outside.append(request.url))
    page.goto(demo_url + "/")
    assert page.title() == "disttrain · text classifier"
    check_publication_time(page, int(http("GET", demo_url + "/readyz")[1]["version"]))
    assert page.get_attribute("#report-link", "href") == "/report"

    label, percent = predicted_percent(page, POSITIVE)
    assert 0.0 <= percent <= 100.0
    assert label == "positive" and percent > 50.0
    assert page.locator("#result .row").count() == 2  # one bar per label

    screenshot(page, tmp_path_factory.mktemp("screenshots"), "text-demo.png")

    assert predicted_percent(page, NEGATIVE)[0] == "negative"
    assert outside == []


def test_try_an_example_fills_the_empty_box_and_predicts(page, demo_url):
    page.goto(demo_url + "/")
    assert page.input_value("#review") == ""  # the grey placeholder is not text in the box
    assert page.get_attribute("#review", "placeholder") == "Type a movie review…"

    page.click("#example")
    first = page.input_value("#review")
    assert len(first) > 20
    label, percent = predicted(page)
    assert label in ("negative", "positive") and 0.0 <= percent <= 100.0

    page.click("#example")  # another example, and the result of the first one is cleared
    assert page.input_value("#review") not in ("", first)
    assert page.locator("#result .headline").count() == 0
    assert predicted(page)[0] in ("negative", "positive")


def test_icon_is_served(page, demo_url):
    """The page's SVG icon and /favicon.ico, which browsers ask for on pages that link none."""
    page.goto(demo_url + "/")
    icon = page.get_attribute("link[rel=icon]", "href")
    for path in (icon, "/favicon.ico"):
        response = page.request.get(demo_url + path)
        assert response.status == 200 and response.headers["content-type"].startswith("image/"), path


def test_empty_review_shows_the_servers_error(page, demo_url):
    page.goto(demo_url + "/")
    page.fill("#review", "   ")
    page.click("#predict")
    page.wait_for_selector("#result .error")
    assert "empty or only whitespace" in page.inner_text("#result .error")


def test_page_shows_the_training_data_summary(page, demo, tmp_path_factory):
    """Issue 18: with a report.json carrying the copier's statistics beside the model, the page's Data line
    shows the split sizes, the checks and the movie-review sample's duplicate warning."""
    import os

    from disttrain_aggregator.data_summary import data_summary
    from disttrain_contract import Manifest
    from disttrain_contract.report import ModelRow, Report, write_report

    base, workdir = demo
    data_dir = os.path.join(sample_model(tmp_path_factory, "sample:movie-reviews"), "data")
    report = os.path.join(workdir, "final", "report.json")
    write_report(
        report,
        Report(
            strategy="average",
            task="text",
            workers=[],
            final=ModelRow(1, {"test_accuracy": 0.8}),
            data=data_summary(data_dir, Manifest.read(data_dir)),
        ),
    )
    try:
        page.goto(base + "/")
        text = " ".join(page.inner_text("#training-data").split())
        assert re.search(r"Data: \d+ training examples in 1 shard\(s\) \(\d+\), \d+ held out", text), text
        assert "validation passed (label skew passed, leakage warning, missing class passed, schema skipped)" in text
        assert page.locator("#data-warnings li").count() == 1 and page.is_visible("#data-warnings")
        screenshot(page, tmp_path_factory.mktemp("screenshots"), "demo-page-training-data.png")
    finally:
        os.remove(report)


def test_open_page_shows_a_newer_version_after_a_prediction(page, demo, tmp_path_factory):
    """demo.js writes the time the way the server does when a prediction finds a newer model."""
    base, workdir = demo
    page.goto(base + "/")
    version = int(page.get_attribute("#version", "data-version"))
    check_publication_time(page, version)
    newer = version + 3600 + 7  # another hour and minute: the text changes, not only the tooltip
    publish(worker_model(sample_model(tmp_path_factory, "sample:movie-reviews")), workdir, mtime=newer)
    wait_for_version(base, newer)
    predicted_percent(page, POSITIVE)
    page.wait_for_function("v => document.getElementById('version').dataset.version === v", arg=str(newer))
    check_publication_time(page, newer)


def test_image_page_after_an_image_model_is_published(page, demo, tmp_path_factory):
    """Hot reload in the real server turns the page into an upload form; the file goes through as b64."""
    base, workdir = demo
    digits = sample_model(tmp_path_factory, "sample:digits")
    version = int(http("GET", base + "/readyz")[1]["version"])
    publish(worker_model(digits), workdir, mtime=version + 10)
    wait_for_version(base, version + 10)

    image, label = np.load(digits / "data" / "test.x.npy")[0], int(np.load(digits / "data" / "test.y.npy")[0])
    png = tmp_path_factory.mktemp("upload") / f"digit-{label}.png"
    cv2.imwrite(str(png), cv2.resize(image, (64, 64), interpolation=cv2.INTER_NEAREST))

    page.goto(base + "/")
    assert page.title() == "disttrain · image classifier"
    check_publication_time(page, version + 10)
    assert page.locator("#example").count() == 0  # an upload form: no example reviews
    page.set_input_files("#image", str(png))
    page.click("#predict")
    page.wait_for_selector("#result .headline")
    headline = page.inner_text("#result .headline")
    assert re.fullmatch(r"\d: \d+(\.\d+)?%", headline.strip()), headline
    assert page.locator("#result .row").count() == 10
    screenshot(page, tmp_path_factory.mktemp("screenshots"), "image-demo.png")

    page.set_input_files(
        "#image", {"name": "broken.png", "mimeType": "image/png", "buffer": b"\x89PNG\r\n\x1a\n broken"}
    )
    page.click("#predict")
    page.wait_for_selector("#result .error")
    assert "not a decodable image" in page.inner_text("#result .error")
