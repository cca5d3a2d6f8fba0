"""The try-it form of a typed table's model (server.own_models.homes) in a real browser (Debian's
chromium via Playwright) against the real gunicorn server: a field per column, a choice of the
vocabulary for the text column, an empty field sent as a missing value, and the answer the model's own."""

import numpy as np
import pytest

from browser.chromium import chromium_page, needs_chromium, screenshot
from server import own_models
from server.serving import http, predict_url, running_server

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = own_models.homes(tmp_path_factory)
    with running_server(root, "--workers", "1") as (base, _proc, _log):
        yield base, root


def test_form_with_a_vocabulary_choice_and_an_empty_field_answers_the_models_prediction(served, tmp_path_factory):
    base, root = served
    with chromium_page() as page:
        outside = []
        page.on("request", lambda request: None if request.url.startswith(base) else outside.append(request.url))
        page.goto(base + "/")
        assert page.title() == "disttrain · table classifier"
        assert [page.inner_text(f"label[for=column-{i}]") for i in range(5)] == [
            "city",
            "age",
            "income",
            "rooms",
            "owner",
        ]
        assert page.locator("#column-0 option").all_inner_texts() == ["(missing)", "paris", "lyon", "nice"]
        assert page.input_value("#column-0") == "paris"  # prefilled: the most frequent value, the means
        assert (page.input_value("#column-1"), page.input_value("#column-3")) == ("44", "3")

        page.select_option("#column-0", "lyon")
        page.fill("#column-1", "")  # the age left empty: a missing value
        page.fill("#column-2", "75.5")
        page.fill("#column-3", "2")
        page.select_option("#column-4", "false")
        page.click("#predict")
        page.wait_for_selector("#result .headline")

        row = {"city": "lyon", "age": None, "income": 75.5, "rooms": 2, "owner": False}
        api = http("POST", base + predict_url(), {"instances": [row]})[1]["predictions"][0]
        model = own_outputs(root, row)
        np.testing.assert_allclose(api, model, atol=1e-5)
        best = int(np.argmax(api))
        labels = own_models.HOMES_LABELS
        assert page.inner_text("#result .headline") == f"{labels[best]}: {100 * api[best]:.1f}%"
        shown = {r.split("\n")[0]: r.split("\n")[-1] for r in page.locator("#result .row").all_inner_texts()}
        assert shown == {label: f"{100 * p:.1f}%" for label, p in zip(labels, api)}
        screenshot(page, tmp_path_factory.mktemp("screenshots"), "tryit-typed-table.png")

        # the rooms may not be left empty (int64: no missing value in training); the page says so
        page.fill("#column-3", "")
        page.click("#predict")
        page.wait_for_selector("#result .error")
        assert page.inner_text("#result .error") == "enter a number for rooms (this column has no missing values)"
        # a value the server refuses is its one line, naming the column
        page.fill("#column-3", "2.5")
        page.click("#predict")
        page.wait_for_selector("#result .error")
        assert "column rooms: expected a whole number" in page.inner_text("#result .error")
        assert outside == []


def own_outputs(root, row):
    """The model's own prediction for one row, its inputs written out here."""
    import tensorflow as tf

    from disttrain_contract.artifact import load_model

    model, _ = load_model(str(root / "final" / "model.keras"))
    x = {
        "city": tf.constant([[row["city"] or ""]]),
        "age": tf.constant([[np.nan if row["age"] is None else row["age"]]], dtype=tf.float32),
        "income": tf.constant([[row["income"]]], dtype=tf.float32),
        "rooms": tf.constant([[row["rooms"]]], dtype=tf.int64),
        "owner": tf.constant([[float(row["owner"])]], dtype=tf.float32),
    }
    return np.asarray(model.predict(x, verbose=0), dtype=np.float64)[0]
