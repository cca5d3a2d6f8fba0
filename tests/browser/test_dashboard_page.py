"""The run dashboard in a real browser (issue 13 point 4): Debian's chromium against a real gunicorn
server on a volume of two real pipeline runs (copier, 2 trainers, aggregator on the digits sample).

The volume: run-2 the served run (a run of 12 epochs: its final/ with the model, and its workers'
progress files), run-1 a run the quality gate refused (3 epochs, more than a point below run-2's model,
kept by the aggregator in rejected/<time>/), run-3 a run still training (run-2's progress files only).
The demo page links the served run's dashboard; that page links the list; the list's rows link each run;
the progress card links the run it shows (the newest, run-3)."""

import os
import pathlib
import shutil
import tempfile
import time

import pytest

from browser.chromium import chromium_page, needs_chromium, screenshot
from server.serving import pipeline_run, refused_run, running_server
from stages import read_report

# two real runs (~30-60 s on 2 busy cores, the 12-epoch one shared with tests/server/test_server_dashboard.py)
pytestmark = [needs_chromium, pytest.mark.long]


def wait_until(condition, what, timeout=30):
    """Poll from Python: the page's CSP (no 'unsafe-eval') refuses wait_for_function's strings."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def copy_progress(real_run, run_dir):
    for worker in sorted(os.listdir(real_run / "train")):
        if worker.startswith("worker-"):
            os.makedirs(run_dir / "train" / worker)
            shutil.copy2(real_run / "train" / worker / "progress.json", run_dir / "train" / worker / "progress.json")


@pytest.fixture(scope="module")
def volume(tmp_path_factory):
    good = pipeline_run(tmp_path_factory)
    refused = refused_run(tmp_path_factory, good / "final" / "model.keras")
    runs = tmp_path_factory.mktemp("volume")
    shutil.copytree(good / "final", runs / "run-2" / "final")
    copy_progress(good, runs / "run-2")
    shutil.copytree(refused / "rejected", runs / "run-1" / "rejected")
    copy_progress(refused, runs / "run-1")
    copy_progress(good, runs / "run-3")
    (rejected,) = os.listdir(runs / "run-1" / "rejected")
    return runs, read_report(good / "final"), read_report(runs / "run-1" / "rejected" / rejected)


def natural_width(page, selector):
    return page.locator(selector).evaluate("img => img.complete ? img.naturalWidth : 0")


def test_demo_page_to_the_dashboard_and_the_runs(volume, tmp_path_factory):
    runs, report, refused = volume
    assert (
        refused["gate"]["passed"] is False
        and refused["final"]["test_accuracy"] < report["final"]["test_accuracy"] - 0.01
    )
    # kept after the run (pytest removes a passing test's tmp dirs): the README's screenshot comes from here
    shots = pathlib.Path(
        os.environ.get("DISTTRAIN_SCREENSHOT_DIR", os.path.join(tempfile.gettempdir(), "disttrain-screenshots"))
    )
    shots.mkdir(parents=True, exist_ok=True)
    with (
        running_server(runs / "run-2", "--runs-dir", runs, "--workers", "1") as (base, _proc, _log),
        chromium_page(width=1200, height=900) as page,
    ):
        outside, csp_refusals = [], []  # offline: nothing from another origin; nothing the CSP refuses
        page.on("request", lambda request: None if request.url.startswith(base) else outside.append(request.url))
        page.on(
            "console",
            lambda message: csp_refusals.append(message.text) if "Content Security Policy" in message.text else None,
        )

        page.goto(base + "/")
        assert page.title() == "disttrain · image classifier"
        page.click("#dashboard-link")
        page.wait_for_url(base + "/runs/run-2")
        assert page.title() == "disttrain · run-2"
        assert page.inner_text("#run-status") == "finished" and page.is_visible("h1 .badge")
        rows = page.locator("#metrics-table tbody tr")
        assert rows.count() == 3  # two workers and the final model
        assert rows.nth(2).locator("td").nth(2).inner_text() == f"{report['final']['test_accuracy']:.4f}"
        assert rows.nth(0).locator("td").nth(2).inner_text() == f"{report['workers'][0]['test_accuracy']:.4f}"
        for selector in ("#report-png", "#analysis-png"):
            wait_until(lambda: natural_width(page, selector) > 500, f"{selector} to load")
        assert (
            page.locator("#curves svg polyline.curve").count() == 3 * 2
        )  # loss, accuracy, held-out accuracy; 2 workers
        screenshot(page, shots, "dashboard-run.png")

        page.click("text=all runs")
        page.wait_for_url(base + "/runs")
        table = page.locator("#runs-table tbody tr")
        assert [table.nth(i).get_attribute("data-run") for i in range(table.count())] == ["run-3", "run-2", "run-1"]
        assert [table.nth(i).get_attribute("data-status") for i in range(3)] == ["training", "finished", "rejected"]
        assert table.nth(1).get_attribute("class") == "served" and "served" in table.nth(1).inner_text()
        values = [
            float(v)
            for v in page.locator("#runs-table td.metric").evaluate_all("cells => cells.map(c => c.dataset.value)")
        ]
        assert values == [report["final"]["test_accuracy"], refused["final"]["test_accuracy"]]
        assert "refused by the quality gate" in table.nth(2).inner_text()
        screenshot(page, shots, "dashboard-runs.png")
        page.click("#runs-table tr[data-run=run-1] a")
        page.wait_for_url(base + "/runs/run-1")
        assert page.inner_text("#run-status") == "refused by the quality gate"
        assert refused["gate"]["reasons"][0] in page.inner_text("#gate")
        wait_until(lambda: natural_width(page, "#report-png") > 500, "the refused run's report.png")

        # the demo page's progress card shows the newest run (run-3, training) and links its dashboard
        page.goto(base + "/")
        page.wait_for_selector("#progress-dashboard:not([hidden])")
        page.click("#progress-dashboard")
        page.wait_for_url(base + "/runs/run-3")
        assert page.inner_text("#run-status") == "training"
        assert page.locator("#curves svg polyline.curve").count() == 3 * 2
        assert outside == [] and csp_refusals == []
