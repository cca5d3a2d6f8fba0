"""The demo page as the Flask test client sees it: its title, the published time, the text box, the icon."""

import os
import re
from datetime import datetime, timezone

from server.serving import make_client


def page_of(client):
    response = client.get("/")
    assert response.status_code == 200 and response.content_type.startswith("text/html")
    return response.get_data(as_text=True)


def title_of(html):
    return re.search(r"<title>(.*?)</title>", html).group(1)


def test_title_names_the_task_once(text_client, image_client, empty_client, text_model, tmp_path):
    assert title_of(page_of(text_client)) == "disttrain · text classifier"
    assert title_of(page_of(image_client)) == "disttrain · image classifier"
    assert title_of(page_of(empty_client)) == "disttrain · no model yet"
    # A --model-name other than the default is worth naming too.
    assert (
        title_of(page_of(make_client(text_model, tmp_path, MODEL_NAME="reviews")))
        == "disttrain · reviews · text classifier"
    )


def test_version_reads_as_the_publication_time_with_the_raw_version_in_the_tooltip(text_client):
    version = text_client.get("/v1/models/disttrain").get_json()["model_version_status"][0]["version"]
    assert version.isdigit()  # the API keeps TF Serving's shape: the version as a string of digits
    published = datetime.fromtimestamp(int(version), timezone.utc)
    element = re.search(r'<time id="version"([^>]*)>([^<]*)</time>', page_of(text_client))
    assert element, "no <time id=version> on the page"
    attributes, text = element.groups()
    assert text == published.strftime("%Y-%m-%d %H:%M UTC")
    assert f'title="version {version}"' in attributes
    assert f'datetime="{published.strftime("%Y-%m-%dT%H:%M:%SZ")}"' in attributes


def test_text_box_is_empty_with_a_short_placeholder_and_an_example_button(text_client, image_client):
    html = page_of(text_client)
    textarea = re.search(r'<textarea id="review"([^>]*)>([^<]*)</textarea>', html)
    assert textarea.group(2) == ""
    placeholder = re.search(r'placeholder="([^"]*)"', textarea.group(1)).group(1)
    assert placeholder == "Type a movie review…"
    assert '<button id="example"' in html and "Try an example" in html
    assert '<button id="example"' not in page_of(image_client)  # image pages upload a file instead


def test_favicon_is_a_small_cached_icon(text_client, empty_client):
    for client in (text_client, empty_client):  # served with or without a model
        response = client.get("/favicon.ico")
        assert response.status_code == 200
        assert response.content_type.startswith("image/")
        assert response.data[:4] == b"\x00\x00\x01\x00"  # an ICO header: reserved 0, type 1 (icon)
        assert 0 < len(response.data) < 4096
        assert response.cache_control.max_age == 86400 and response.cache_control.public
        assert not response.cache_control.no_cache
    svg = text_client.get("/static/favicon.svg")  # what the page links
    assert svg.status_code == 200 and svg.content_type.startswith("image/svg+xml")
    assert '<link rel="icon" href="/static/favicon.svg"' in page_of(text_client)


def test_page_keeps_its_content_security_policy(text_client, image_client, empty_client):
    for client in (text_client, image_client, empty_client):
        policy = client.get("/").headers["Content-Security-Policy"]
        assert "default-src 'self'" in policy and "object-src 'none'" in policy


def test_page_shows_the_training_parameters_and_their_origin(text_client):
    """The trainer records them in the model (flags here; the sweep's best.json with --params-from)."""
    line = re.search(r'<p class="meta" id="training-parameters">(.*?)</p>', page_of(text_client), re.S)
    assert line, "no training parameters on the page"
    text = " ".join(line.group(1).split())
    assert re.search(
        r"Trained with batch \d+, dropout 0\.5, epochs \d+, learning_rate 0\.003, "
        r"optimizer Adam \(learning_rate 0\.003\), width 64",
        text,
    ), text
    assert "the trainer's flags" in text


def test_page_loads_the_api_helper_first_and_says_no_token_is_needed(text_client, empty_client):
    for client, script in ((text_client, "demo.js"), (empty_client, "demo.js")):
        html = page_of(client)
        assert html.index('src="/static/api.js"') < html.index(
            f'src="/static/{script}"'
        )  # disttrainApi exists when demo.js runs
        assert 'data-token-required-for=""' in html and 'data-read-only-gallery="false"' in html


def test_page_shows_the_training_data_statistics_of_the_report(text_model, tmp_path):
    """Issue 18: the report's "data" (the aggregator's summary of the real copier's stats.json) on the page;
    the movie-review sample's known duplicates show as the warning they are."""
    from disttrain_aggregator.data_summary import data_summary
    from disttrain_contract import Manifest
    from disttrain_contract.report import ModelRow, Report, write_report

    data_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(text_model))), "data")
    summary = data_summary(data_dir, Manifest.read(data_dir))
    client = make_client(text_model, tmp_path)
    final_dir = os.path.dirname(client.application.config["MODEL_PATH"])
    write_report(
        os.path.join(final_dir, "report.json"),
        Report(
            strategy="average",
            task="text",
            workers=[],
            final=ModelRow(examples=1, metrics={"test_accuracy": 0.8}),
            data=summary,
        ),
    )
    html = page_of(client)
    block = re.search(r'<div class="meta" id="training-data">(.*?)</div>', html, re.S)
    assert block, "no training data on the page"
    text = " ".join(re.sub(r"<[^>]+>", " ", block.group(1)).split())
    shards = summary["splits"]["shard-00000"]["examples"]
    assert (
        f"Data: {shards} training examples in 1 shard(s) ({shards}), {summary['splits']['test']['examples']} held out"
        in text
    )
    assert "validation passed (label skew passed, leakage warning, missing class passed, schema skipped)" in text
    assert "leakage: 21 training example(s)" in text and "Rotten Tomatoes sample repeats some snippets" in text
    with open(os.path.join(final_dir, "report.json"), "w") as fh:
        fh.write("{broken")
    assert 'id="training-data"' not in page_of(client)  # an unreadable report leaves the line out, the page works
