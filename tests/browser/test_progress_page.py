"""The page's live progress view during a real run (issue 18): real trainer processes, real gunicorn,
real chromium. Before the model exists the page shows each worker's bar and the curves, refreshed
from the trainers' progress.json files within 2 s; once the aggregator publishes, the run's
report.png, and the page reloads itself into the demo of the new model."""

import json
import os
import time

import pytest

from browser.chromium import chromium_page, needs_chromium, screenshot
from server.serving import running_server
from stages import free_port_block, stage, start_stage

pytestmark = [needs_chromium, pytest.mark.long]

WORKERS = 2
# Long enough to watch (about 20-30 s of training on 2 busy cores), with progress inside each epoch:
# 45 steps an epoch at batch 16, 8 steps per compiled call.
EPOCHS, BATCH, STEPS_PER_CALL = 60, 16, 8
# Issue 18's goal is a lag of at most 2 s; measured here it was 0.6-1.8 s with other engineers' tests on
# the 2 cores (the test prints it). Speed goals live in measurements, not in timed tests (one busy
# second on a shared runner must not fail CI), so this asserts what a broken page would miss: that it
# follows the files at all, within a few of its half-second polls.
MAX_LAG_SEC = 5.0


def file_progress(workdir, index):
    with open(os.path.join(workdir, "train", f"worker-{index:05d}", "progress.json")) as fh:
        return json.load(fh)


def page_progress(page, index):
    """What the page shows of a worker: the file's time and global step it last drew, and its bar."""
    row = page.locator(f'#progress-workers .worker[data-worker="{index}"]')
    return {
        "time": float(row.get_attribute("data-time")),
        "global_step": int(row.get_attribute("data-global-step")),
        "bar": float(row.locator(".track").get_attribute("aria-valuenow")),
    }


def wait_until(condition, what, timeout=60):
    """Poll `condition()` from Python: the page's CSP (no 'unsafe-eval') refuses wait_for_function's strings."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


def test_the_page_follows_a_real_run_then_shows_its_report(tmp_path, tmp_path_factory):
    workdir = tmp_path / "run"
    shots = tmp_path_factory.mktemp("screenshots")
    stage("copier", "--source", "sample:digits", "--n-shards", WORKERS, "--workdir", workdir)
    with (
        running_server(workdir, "--workers", "1", "--reload-interval", "1", ready_path="/healthz") as (
            base,
            _proc,
            _log,
        ),
        chromium_page(width=900, height=1100) as page,
    ):
        outside = []  # the page must work offline: nothing from another origin
        page.on("request", lambda request: None if request.url.startswith(base) else outside.append(request.url))
        page.goto(base + "/")
        assert page.title() == "disttrain · no model yet"
        page.wait_for_selector("#progress-card:not([hidden])")  # the copier's data: the run has begun
        assert page.get_attribute("#progress-card", "data-state") == "starting"

        port = free_port_block(WORKERS)
        trainers = [
            start_stage(
                "trainer",
                "--workdir",
                workdir,
                "--worker-index",
                i,
                "--workers",
                WORKERS,
                "--epochs",
                EPOCHS,
                "--batch",
                BATCH,
                "--steps-per-call",
                STEPS_PER_CALL,
                "--port",
                port,
                log=tmp_path / f"worker-{i}.log",
            )
            for i in range(WORKERS)
        ]
        try:
            page.wait_for_selector('#progress-workers .worker[data-worker="1"]', timeout=120_000)
            page.wait_for_selector('#progress-workers .worker[data-worker="0"]', timeout=30_000)
            lags, seen = [], {i: [] for i in range(WORKERS)}
            while any(t.poll() is None for t in trainers) and len(lags) < 2 * WORKERS * 12:
                for index in range(WORKERS):
                    shown = page_progress(page, index)
                    now_in_file = file_progress(workdir, index)  # the same moment: read right after the page
                    if now_in_file["state"] in ("training", "evaluating"):
                        lags.append(now_in_file["time"] - shown["time"])
                    seen[index].append(shown)
                if len(seen[0]) == 6 and all(t.poll() is None for t in trainers):
                    screenshot(page, shots, "progress-training.png")  # mid-run
                page.wait_for_timeout(700)
            assert lags, "the trainers finished before the page was sampled"
            print(
                f"lag of the page behind the files: max {max(lags):.2f} s, mean {sum(lags) / len(lags):.2f} s, "
                f"{len(lags)} samples"
            )
            assert max(lags) <= MAX_LAG_SEC, lags
            for index, shown in seen.items():  # each worker's bar moved, forward only
                steps = [s["global_step"] for s in shown]
                assert steps == sorted(steps) and steps[-1] > steps[0], (index, steps)
                assert shown[-1]["bar"] == steps[-1]
            # the curves: one line per worker on each chart, once an epoch is done
            assert page.locator("#progress-curves svg.curve").count() == 2
            assert page.locator('#progress-curves svg[data-metric="loss"] polyline').count() == WORKERS
            text = page.inner_text('#progress-workers .worker[data-worker="0"]')
            assert "epoch" in text and "loss" in text and "examples/s" in text and "ETA" in text
            for i, trainer in enumerate(trainers):
                assert trainer.wait(timeout=600) == 0, (tmp_path / f"worker-{i}.log").read_text()[-3000:]
        finally:
            for trainer in trainers:
                if trainer.poll() is None:
                    trainer.kill()
                    trainer.wait()

        # every worker done: the bars are full, then the aggregator publishes
        wait_until(lambda: page.locator("#progress-workers .worker-state.done").count() == WORKERS, "both bars done")
        screenshot(page, shots, "progress-done.png")
        stage("aggregator", "--workdir", workdir, "--expect", WORKERS, "--timeout", 60)
        # the page reloads itself once the server has loaded the model, and shows the run's plots
        wait_until(lambda: page.title() == "disttrain · image classifier", "the page to reload with the model")
        page.wait_for_selector("#progress-report:not([hidden])")
        wait_until(lambda: page.locator("#report-plot").evaluate("img => img.naturalWidth") > 500, "report.png to load")
        # issue 13: analysis.png under it, and the link to the run's dashboard (no --runs-dir: the served run)
        wait_until(
            lambda: page.locator("#analysis-plot").evaluate("img => img.naturalWidth") > 500, "analysis.png to load"
        )
        assert page.get_attribute("#progress-dashboard", "href") == "/runs/served" and page.is_visible(
            "#progress-dashboard"
        )
        assert page.get_attribute("#progress-card", "data-state") == "finished"
        assert page.locator("#progress-workers .worker").count() == 0  # the plots replace the bars
        assert page.locator("#predict").is_visible()  # and the demo works
        screenshot(page, shots, "progress-finished.png")
        assert outside == []
    for index in range(WORKERS):
        assert file_progress(workdir, index)["state"] == "done"
