"""The demo page in a real browser (Debian's chromium via Playwright) against a real gunicorn server."""

import os
import re

import pytest

from server.serving import NEGATIVE, POSITIVE, publish, running_server, train_sample_model

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is not installed (apt-get install chromium)")


@pytest.fixture(scope="module")
def demo_url(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("demo")
    publish(train_sample_model(workdir, "sample:movie-reviews", epochs=2), workdir)
    with running_server(workdir, "--workers", "1") as (base, _proc, _log):
        yield base


@pytest.fixture(scope="module")
def page(demo_url):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 900, "height": 700})
            page.set_default_timeout(30_000)
            yield page
        finally:
            browser.close()


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

    shot = tmp_path_factory.mktemp("screenshots") / "demo-page.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")
    assert shot.stat().st_size > 10_000

    assert predicted_percent(page, NEGATIVE)[0] == "negative"
    assert outside == []


def test_empty_review_shows_the_servers_error(page, demo_url):
    page.goto(demo_url + "/")
    page.fill("#review", "   ")
    page.click("#predict")
    page.wait_for_selector("#result .error")
    assert "empty or only whitespace" in page.inner_text("#result .error")
