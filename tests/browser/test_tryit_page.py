"""The try-it form of a user's own table model in a real browser (Debian's chromium via Playwright)
against a real gunicorn server run with --show-heldout-examples: prefilled with held-out examples, its
answer the API's."""

import re
import shutil
import time

import pytest

from browser.chromium import chromium_page, needs_chromium, screenshot
from server import own_models
from server.own_models import CANCER_FEATURES, held_out
from server.serving import http, predict_url, publish, running_server

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(base URL, workdir) of the cancer classifier served from a copy of its run (data/ included)."""
    workdir = tmp_path_factory.mktemp("tryit")
    source = own_models.cancer(tmp_path_factory)
    shutil.copytree(source / "data", workdir / "data")
    publish(str(source / "final" / "model.keras"), workdir)
    with running_server(workdir, "--workers", "1", "--reload-interval", "1", "--show-heldout-examples") as (
        base,
        _proc,
        _log,
    ):
        yield base, workdir


@pytest.fixture(scope="module")
def page(served):
    with chromium_page() as page:
        yield page


def form_values(page, count):
    return [float(page.input_value(f"#field-features-{i}")) for i in range(count)]


def test_form_is_prefilled_and_answers_what_the_api_answers(page, served, tmp_path_factory):
    base, _ = served
    outside = []
    page.on("request", lambda request: None if request.url.startswith(base) else outside.append(request.url))
    page.goto(base + "/")
    assert page.title() == "disttrain · table classifier"
    x, y = held_out(own_models.cancer(tmp_path_factory))
    for index, feature in enumerate(CANCER_FEATURES):
        assert page.inner_text(f"label[for=field-features-{index}]") == feature
    values = form_values(page, 5)
    assert values == pytest.approx(x[0].tolist(), rel=1e-6)  # the first held-out example
    truth = ["benign", "malignant"][int(y[0])]
    assert page.inner_text("#example-note") == f"Prefilled with held-out example 1 of 20 (its true label {truth})."

    page.click("#predict")
    page.wait_for_selector("#result .headline")
    api = http("POST", base + predict_url(), {"instances": [values]})[1]["predictions"][0]
    best = max(range(2), key=lambda i: api[i])
    assert page.inner_text("#result .headline") == f"{['benign', 'malignant'][best]}: {100 * api[best]:.1f}%"
    shown = {row.split("\n")[0]: row.split("\n")[-1] for row in page.locator("#result .row").all_inner_texts()}
    assert shown == {"benign": f"{100 * api[0]:.1f}%", "malignant": f"{100 * api[1]:.1f}%"}
    screenshot(page, tmp_path_factory.mktemp("screenshots"), "tryit-table-classifier.png")

    page.click("#example")  # the next held-out example, and the old answer goes
    assert form_values(page, 5) == pytest.approx(x[1].tolist(), rel=1e-6)
    assert page.locator("#result .headline").count() == 0

    page.fill("#field-features-2", "")
    page.click("#predict")
    page.wait_for_selector("#result .error")
    assert page.inner_text("#result .error") == "enter a number for perimeter"
    assert outside == []


def test_regression_model_shows_the_predicted_value(page, served, tmp_path_factory):
    """Published over the classifier (hot reload): the page becomes the regression's form and shows the value."""
    base, workdir = served
    diabetes = own_models.diabetes(tmp_path_factory)
    version = int(http("GET", base + "/readyz")[1]["version"])
    shutil.rmtree(workdir / "data")
    shutil.copytree(diabetes / "data", workdir / "data")
    publish(str(diabetes / "final" / "model.keras"), workdir, mtime=version + 10)
    deadline = time.monotonic() + 60
    while http("GET", base + "/readyz")[1].get("version") != str(version + 10):
        assert time.monotonic() < deadline, "the server did not load the regression model"
        time.sleep(0.5)

    page.goto(base + "/")
    assert page.title() == "disttrain · table regression"
    x, y = held_out(diabetes)
    values = [float(page.input_value(f"#field-features-{i}")) for i in range(4)]
    assert values == pytest.approx(x[0].tolist(), rel=1e-6)
    assert re.fullmatch(
        r"Prefilled with held-out example 1 of 20 \(its true progression [\d.]+\)\.", page.inner_text("#example-note")
    )
    page.click("#predict")
    page.wait_for_selector("#result .headline")
    api = http("POST", base + predict_url(), {"instances": [values]})[1]["predictions"][0]
    assert float(page.get_attribute("#result .headline", "data-value")) == api
    assert page.inner_text("#result .headline") == f"progression: {float(f'{api:.6g}'):g}"
    screenshot(page, tmp_path_factory.mktemp("screenshots"), "tryit-table-regression.png")
