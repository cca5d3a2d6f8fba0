"""The run dashboard (issue 13 point 4): GET /runs, /runs.json, /runs/<run>, /runs/<run>/<file>.

The reports are real: one real 2-worker run (copier, trainers, aggregator on the digits sample,
serving.pipeline_run) gives report.json, report.png, analysis.png and the workers' progress.json, which
the tests copy into run-N directories. The other states are made from those files: a refused run is the
real report with its gate verdict set to refused, moved to rejected/<time>/ the way the aggregator keeps
it; a broken and an oversized report.json are written by hand; a training run is the progress files alone.
"""

import json
import os
import re
import shutil
import sys
import threading

import pytest
from markupsafe import escape as html_escape  # as Jinja escapes the page

from disttrain_contract import atomic_write_json
from disttrain_server import runs_data as dashboard
from disttrain_server.app import create_app
from server.serving import error_of, pipeline_run

TOKEN = b"t" * 43


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    return pipeline_run(tmp_path_factory)


@pytest.fixture(scope="module")
def real_report(real_run):
    with open(real_run / "final" / "report.json") as fh:
        return json.load(fh)


def copy_finished(real_run, run_dir, with_model=False):
    """A finished run: the real final/ (report files, marker; the model only if asked) and progress files."""
    os.makedirs(run_dir / "final")
    for name in ("report.json", "report.png", "analysis.png", "_SUCCESS") + (("model.keras",) if with_model else ()):
        shutil.copy2(real_run / "final" / name, run_dir / "final" / name)
    copy_progress(real_run, run_dir)


def copy_progress(real_run, run_dir):
    for worker in sorted(os.listdir(real_run / "train")):
        if worker.startswith("worker-"):
            os.makedirs(run_dir / "train" / worker)
            shutil.copy2(real_run / "train" / worker / "progress.json", run_dir / "train" / worker / "progress.json")


REJECTED_AT = "20261124T010203.000000001Z"
REFUSAL = (
    "held-out accuracy 0.1000 is 80.00 points below worker 1's 0.9000 (at most 2 allowed: --max-drop-vs-best-worker)"
)


def make_runs(real_run, real_report, runs):
    """run-1 refused, run-2 training, run-3 no report, run-5 broken, run-6 oversized, run-10 finished
    (served), run-12 finished; and names that are not runs."""
    # refused: the aggregator keeps the model with its report in rejected/<time>/, final/ untouched
    rejected = runs / "run-1" / "rejected" / REJECTED_AT
    os.makedirs(rejected)
    refused = dict(
        real_report,
        final=dict(real_report["final"], test_accuracy=0.1),
        gate=dict(real_report["gate"], passed=False, reasons=[REFUSAL]),
    )
    atomic_write_json(str(rejected / "report.json"), refused)
    for name in ("report.png", "analysis.png"):
        shutil.copy2(real_run / "final" / name, rejected / name)
    copy_progress(real_run, runs / "run-1")
    copy_progress(real_run, runs / "run-2")  # training: progress files only
    os.makedirs(runs / "run-3" / "data")  # the copier's data, nothing else yet ...
    # ... and a refused model the aggregator is still writing (atomic_path's temporary name): not a report yet
    writing = runs / "run-3" / "rejected" / f".{REJECTED_AT}.tmp-abc123"
    os.makedirs(writing)
    shutil.copy2(real_run / "final" / "report.json", writing / "report.json")
    os.makedirs(runs / "run-5" / "final")
    (runs / "run-5" / "final" / "report.json").write_text('{"strategy": "average", "work')
    (runs / "run-5" / "final" / "_SUCCESS").write_text("{}")
    os.makedirs(runs / "run-6" / "final")
    with open(runs / "run-6" / "final" / "report.json", "w") as fh:  # valid JSON, but past the bound
        fh.write('{"pad": "' + "x" * (dashboard.MAX_REPORT_BYTES + 10) + '"}')
    (runs / "run-6" / "final" / "_SUCCESS").write_text("{}")
    copy_finished(real_run, runs / "run-10", with_model=True)
    copy_finished(real_run, runs / "run-12")
    # not runs: a temporary name, a file, a symbolic link to a run elsewhere
    os.makedirs(runs / "run-13.tmp")
    (runs / "run-14").write_text("a file")
    os.symlink(real_run, runs / "run-15")
    os.makedirs(runs / "run-x")


@pytest.fixture(scope="module")
def runs(real_run, real_report, tmp_path_factory):
    root = tmp_path_factory.mktemp("volume")
    make_runs(real_run, real_report, root)
    return root


def client(runs_dir, served="run-10", **config):
    workdir = runs_dir / served if runs_dir else served
    app = create_app(
        {
            "MODEL_PATH": os.path.join(workdir, "final", "model.keras"),
            "RUNS_DIR": runs_dir and str(runs_dir),
            "GALLERY_DIR": os.path.join(os.path.dirname(workdir), "gallery"),
            "TESTING": True,
            **config,
        }
    )
    return app.test_client()


def listing(c):
    response = c.get("/runs.json")
    assert response.status_code == 200 and response.headers["Cache-Control"] == "no-store"
    return response.get_json()


def test_the_list_shows_every_run_newest_first_with_its_status(runs, real_report):
    body = listing(client(runs))
    assert body["runs_dir"] is True and body["not_listed"] == 0
    rows = {row["run"]: row for row in body["runs"]}
    assert [row["run"] for row in body["runs"]] == ["run-12", "run-10", "run-6", "run-5", "run-3", "run-2", "run-1"]
    assert {name: row["status"] for name, row in rows.items()} == {
        "run-12": "finished",
        "run-10": "finished",
        "run-6": "finished",
        "run-5": "finished",
        "run-3": "none",
        "run-2": "training",
        "run-1": "rejected",
    }
    assert [name for name, row in rows.items() if row["served"]] == ["run-10"]
    # the real report's numbers, as the aggregator wrote them
    served = rows["run-10"]["report"]
    assert (served["strategy"], served["task"], served["workers"], served["epochs"]) == ("average", "image", 2, 12)
    assert served["final_value"] == real_report["final"]["test_accuracy"] > 0.5
    assert [r["metrics"] for r in served["rows"]] == [
        [w["test_accuracy"], w["test_loss"]] for w in real_report["workers"]
    ]
    assert served["parameters"]["batch"] == 32 and served["parameters_from"] == "the trainer's flags"
    assert served["created_at"] == real_report["created_at"] and served["gate"]["passed"] is True
    assert rows["run-1"]["report"]["final_value"] == 0.1 and rows["run-1"]["report"]["gate"]["reasons"] == [REFUSAL]
    # broken and oversized reports are rows that say so
    assert rows["run-5"]["report"] == {"error": "unreadable report: not JSON"}
    assert rows["run-6"]["report"] == {
        "error": f"unreadable report: larger than {dashboard.MAX_REPORT_BYTES} bytes, not read"
    }
    assert rows["run-2"]["report"] is None and rows["run-3"]["report"] is None


def test_the_list_page_compares_the_runs(runs, real_report):
    response = client(runs).get("/runs")
    assert response.status_code == 200 and response.mimetype == "text/html"
    html = response.get_data(as_text=True)
    assert re.findall(r'<tr data-run="(run-\d+)"', html) == [
        "run-12",
        "run-10",
        "run-6",
        "run-5",
        "run-3",
        "run-2",
        "run-1",
    ]
    accuracy = real_report["final"]["test_accuracy"]
    # the final held-out accuracies side by side: a bar (<meter>) and the number for each run with a report
    assert re.findall(r'<meter min="0" max="1" value="([0-9.e-]+)"', html) == [str(accuracy), str(accuracy), "0.1"]
    assert html.count(f"{accuracy:.4f}") == 2 and "0.1000" in html
    assert re.search(r'<tr data-run="run-10" data-status="finished" class="served">', html)
    assert "unreadable report: not JSON" in html and "refused by the quality gate" in html
    assert "<script" not in html  # nothing for the CSP to refuse: the page draws itself


def test_one_run_shows_parameters_metrics_plots_and_curves(runs, real_report):
    c = client(runs)
    html = c.get("/runs/run-12").get_data(as_text=True)
    facts = dict(re.findall(r"<dt>([^<]+)</dt><dd>([^<]+)", html))
    assert facts["strategy"].strip() == "average," and facts["workers"].strip() == "2" and facts["epochs"] == "12"
    assert facts["batch"] == "32" and facts["task"].strip() == "image"
    table = re.search(r'<table class="runs-table" id="metrics-table">(.*?)</table>', html, re.S).group(1)
    cells = [re.findall(r"<td[^>]*>([^<]*)</td>", row) for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S)[1:]]
    expected = [
        [w["name"], str(w["examples"]), f"{w['test_accuracy']:.4f}", f"{w['test_loss']:.4f}"]
        for w in real_report["workers"]
    ]
    final = real_report["final"]
    expected.append(
        ["final (average)", str(final["examples"]), f"{final['test_accuracy']:.4f}", f"{final['test_loss']:.4f}"]
    )
    assert cells == expected
    # the aggregator's two plots, served from the run, their mtime in the URL
    for name in ("report.png", "analysis.png"):
        url = re.search(rf'src="(/runs/run-12/{re.escape(name)}\?v=\d+)"', html).group(1)
        response = c.get(url)
        assert response.status_code == 200 and response.mimetype == "image/png"
        assert response.get_data() == (runs / "run-12" / "final" / name).read_bytes()
    # one curve per worker in each chart (training loss, training accuracy, held-out accuracy)
    assert html.count('<polyline class="curve"') == 3 * 2
    assert len(re.findall(r"<svg viewBox", html)) == 3


def test_a_refused_run_shows_the_gate_and_the_kept_plots(runs):
    c = client(runs)
    html = c.get("/runs/run-1").get_data(as_text=True)
    assert "refused by the quality gate" in html and str(html_escape(REFUSAL)) in html and "refused the model" in html
    response = c.get("/runs/run-1/report.json")
    assert response.status_code == 200 and response.get_json()["gate"]["passed"] is False
    assert (
        c.get("/runs/run-1/report.png").get_data()
        == (runs / "run-1" / "rejected" / REJECTED_AT / "report.png").read_bytes()
    )


def test_runs_without_a_report(runs):
    c = client(runs)
    for run, words in (
        ("run-2", "The workers are training"),
        ("run-3", "This run has no report"),
        ("run-5", "unreadable report: not JSON"),
        ("run-6", "unreadable report: larger than"),
    ):
        response = c.get(f"/runs/{run}")
        assert response.status_code == 200 and words in response.get_data(as_text=True), run
    assert "has no report.png" in error_of(c.get("/runs/run-3/report.png"), 404)
    assert "has no report.png" in error_of(c.get("/runs/run-2/report.png"), 404)


@pytest.mark.parametrize(
    "path",
    [
        "/runs/..",
        "/runs/../run-10",
        "/runs/run-10/../../etc/passwd",
        "/runs/run-10%2F..%2F..%2Fetc%2Fpasswd",
        "/runs/%2e%2e/run-10/report.png",
        "/runs/run-99",
        "/runs/run-99/report.png",
        "/runs/run-x",
        "/runs/run-13.tmp",
        "/runs/run-14",
        "/runs/run-15",
        "/runs/run-15/report.json",
        "/runs/run-010",
        "/runs/run-10/model.keras",
        "/runs/run-10/_SUCCESS",
        "/runs/run-10/..",
        "/runs/run-10/report.json.tmp",
        "/runs/served/model.keras",
        "/runs/run--1",
        "/runs/RUN-10",
        "/runs/run-10/final",
        "/runs/run-10/%2e%2e",
    ],
)
def test_paths_outside_the_runs_and_their_files_are_404(runs, path):
    response = client(runs).get(path)
    assert response.status_code == 404, (path, response.get_data(as_text=True)[:200])
    assert response.is_json  # our JSON error, never a file's bytes


def test_served_names_the_served_run_and_the_files_are_read_only(runs):
    c = client(runs)
    assert c.get("/runs/served").status_code == 200
    assert c.get("/runs/served/report.png").get_data() == (runs / "run-10" / "final" / "report.png").read_bytes()
    for method in ("post", "put", "delete"):
        assert getattr(c, method)("/runs/run-10/report.json").status_code == 405


def test_without_runs_dir_the_served_run_only(runs):
    c = client(None, served=runs / "run-12")
    body = listing(c)
    assert body["runs_dir"] is False and [(r["run"], r["status"], r["served"]) for r in body["runs"]] == [
        ("served", "finished", True)
    ]
    html = c.get("/runs").get_data(as_text=True)
    assert "--runs-dir" in html and "server.dashboard.enabled" in html
    assert c.get("/runs/served").status_code == 200
    assert "no --runs-dir" in error_of(c.get("/runs/run-10"), 404)  # the directory exists; it is not listed
    # the demo page links the served run's dashboard; with --runs-dir, by its run-N
    assert re.search(r'id="dashboard-link" href="/runs/served"', c.get("/").get_data(as_text=True))
    # (run-12: no model there, so the page renders without loading one)
    assert re.search(
        r'id="dashboard-link" href="/runs/run-12"', client(runs, served="run-12").get("/").get_data(as_text=True)
    )


def test_token_and_host_rules(runs):
    """The dashboard is read-only like the demo page: open whatever --token-required-for says; the Host
    allowlist applies; the security headers are on every page and file."""
    c = client(runs, API_TOKEN=TOKEN, TOKEN_REQUIRED_FOR="all", ALLOWED_HOSTS=["demo.example"])
    for path in ("/runs", "/runs.json", "/runs/run-10", "/runs/run-10/report.png", "/runs/run-10/report.json"):
        response = c.get(path, headers={"Host": "demo.example"})
        assert response.status_code == 200, path
        assert "default-src 'self'" in response.headers["Content-Security-Policy"]
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert "not served here" in error_of(c.get(path, headers={"Host": "evil.example"}), 400)
    assert c.get("/v1/models/disttrain", headers={"Host": "demo.example"}).status_code == 401  # the API is not


def test_progress_links_to_the_runs_dashboard_and_analysis(runs):
    body = client(runs, served="run-10").get("/progress.json").get_json()
    assert body["run"] == "run-12" and body["state"] == "finished"  # the newest run-N
    assert body["dashboard"] == "/runs/run-12"
    mtime = int((runs / "run-12" / "final" / "analysis.png").stat().st_mtime)
    assert body["analysis"] == f"/runs/run-12/analysis.png?v={mtime}"
    # --progress-run served: the served run's progress, even with --runs-dir
    body = client(runs, served="run-10", PROGRESS_RUN="served").get("/progress.json").get_json()
    assert (body["run"], body["dashboard"]) == ("run-10", "/runs/run-10")


# ------------------------------------------------------------------------------------ the cache


def test_listing_reads_each_report_once_until_it_changes(runs, real_report, tmp_path):
    c = client(runs)
    cache = c.application.extensions[dashboard.CACHE_KEY]
    listing(c)
    report_sizes = sum(os.path.getsize(runs / run / "final" / "report.json") for run in ("run-10", "run-12", "run-5"))
    report_sizes += os.path.getsize(runs / "run-1" / "rejected" / REJECTED_AT / "report.json")
    assert cache.bytes_read == report_sizes  # the oversized one is not read at all
    assert (cache.misses, cache.hits) == (5, 0)
    listing(c)
    c.get("/runs")
    assert cache.bytes_read == report_sizes and (cache.misses, cache.hits) == (5, 10)
    # a new report (the aggregator renames it into place) is read again, once
    target = runs / "run-12" / "final" / "report.json"
    saved = target.read_bytes()
    try:
        atomic_write_json(str(target), dict(real_report, strategy="localsgd"))
        rows = {row["run"]: row for row in listing(c)["runs"]}
        assert rows["run-12"]["report"]["strategy"] == "localsgd" and cache.misses == 6
    finally:
        tmp = tmp_path / "report.json"
        tmp.write_bytes(saved)
        os.replace(tmp, target)


def test_two_hundred_runs_are_cheap_to_list(real_run, tmp_path):
    """200 runs: each report is read once (a few tens of KB each, not 200 MB), then not at all."""
    runs = tmp_path / "volume"
    report = (real_run / "final" / "report.json").read_bytes()
    for n in range(1, 201):
        os.makedirs(runs / f"run-{n}" / "final")
        (runs / f"run-{n}" / "final" / "report.json").write_bytes(report)
        (runs / f"run-{n}" / "final" / "_SUCCESS").write_text("{}")
    c = client(runs, served="run-200")
    cache = c.application.extensions[dashboard.CACHE_KEY]
    body = listing(c)
    assert [row["run"] for row in body["runs"]][:3] == ["run-200", "run-199", "run-198"] and len(body["runs"]) == 200
    assert cache.bytes_read == 200 * len(report) < 20 * 1024 * 1024
    print(f"200 runs: {cache.bytes_read} bytes read once ({len(report)} per report)")
    listing(c)
    assert cache.bytes_read == 200 * len(report) and cache.hits == 200


def test_the_cache_evicts_the_least_recently_used(runs):
    cache = dashboard.ReportCache(max_entries=2)
    paths = [str(runs / run / "final" / "report.json") for run in ("run-10", "run-12", "run-5")]
    cache.get(paths[0])
    cache.get(paths[1])
    cache.get(paths[0])  # now the most recent
    cache.get(paths[2])  # evicts paths[1]
    assert len(cache) == 2 and (cache.hits, cache.misses) == (1, 3)
    cache.get(paths[0])
    assert cache.hits == 2
    cache.get(paths[1])
    assert cache.misses == 4


def test_the_cache_under_many_threads(runs, real_report, tmp_path):
    """gunicorn --threads: many threads hit, miss and evict at once while reports are replaced. With
    thread switches forced every microsecond, every answer must be one of the report's versions, the
    cache never holds more than its bound, no hit or miss is lost (hits + misses == calls), and no report
    is cached under the identity of another version of its file (then it would stay stale)."""
    files = []
    for i in range(6):
        path = tmp_path / f"report-{i}.json"
        atomic_write_json(str(path), dict(real_report, strategy="average"))
        files.append(str(path))
    versions = {"average", "localsgd"}
    cache = dashboard.ReportCache(max_entries=4)  # fewer than the files: evictions all the time
    threads_n, rounds = 16, 300
    barrier = threading.Barrier(threads_n + 1)
    errors, seen = [], set()

    calls = [0] * threads_n
    written = threading.Event()

    def reader(k):
        barrier.wait()
        try:
            r = 0
            while r < rounds or not written.is_set():  # (also while the writer still writes)
                summary = cache.get(files[(k + r) % len(files)])
                calls[k] += 1
                r += 1
                seen.add(summary.get("strategy"))
                if summary.get("strategy") not in versions:
                    errors.append(summary)
        except Exception as err:  # noqa: BLE001 (the test reports any)
            errors.append(repr(err))

    last = {}

    def writer():
        barrier.wait()
        for r in range(120):
            strategy = "localsgd" if (r // len(files)) % 2 else "average"
            atomic_write_json(files[r % len(files)], dict(real_report, strategy=strategy))
            last[files[r % len(files)]] = strategy
        written.set()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=reader, args=(k,)) for k in range(threads_n)] + [
            threading.Thread(target=writer)
        ]
        for t in threads[:-1]:
            t.start()
        threads[-1].start()
        for t in threads:
            t.join(timeout=120)
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[:3]
    assert len(cache) <= 4 and cache.hits + cache.misses == sum(calls) >= threads_n * rounds
    assert seen == versions and cache.misses >= len(files)
    # no stale entry: a summary is cached under the identity of the file it was read from (fstat of the
    # open file), so once the writes stop every file answers with its last version
    assert {path: cache.get(path)["strategy"] for path in files} == last


def test_regression_runs_are_compared_by_rmse_lowest_first(real_report, tmp_path):
    """A regression run's report (the aggregator's keys: problem, test_rmse ...) lists RMSE, MAE, R² and MSE, and
    the best of two regression runs is the lower RMSE; no 0..1 bar for a metric in the target's unit."""
    runs_dir = tmp_path / "runs"
    for n, rmse in ((1, 61.5), (2, 54.2)):
        final = runs_dir / f"run-{n}" / "final"
        final.mkdir(parents=True)
        report = {
            **real_report,
            "task": "table",
            "problem": "regression",
            "target": "progression",
            "labels": [],
            "primary_metric": {"name": "rmse", "direction": "min", "label": "RMSE"},
            "workers": [
                {
                    "name": "worker 0",
                    "examples": 178,
                    "test_rmse": rmse + 1,
                    "test_mae": 44.0,
                    "test_r2": 0.4,
                    "test_loss": (rmse + 1) ** 2,
                }
            ],
            "final": {"examples": 355, "test_rmse": rmse, "test_mae": 43.0, "test_r2": 0.45, "test_loss": rmse**2},
        }
        (final / "report.json").write_text(json.dumps(report))
        (final / "_SUCCESS").write_text("{}")
    c = client(runs_dir, served="run-2")
    rows = {row["run"]: row["report"] for row in c.get("/runs.json").get_json()["runs"]}
    assert (rows["run-1"]["final_value"], rows["run-2"]["final_value"]) == (61.5, 54.2)
    assert rows["run-2"]["metric"] == "RMSE" and rows["run-2"]["direction"] == "min"
    html = c.get("/runs").get_data(as_text=True)
    assert "<meter" not in html and html.count('<span class="badge">best</span>') == 1
    assert re.search(r'data-run="run-2".*?badge">best</span>', html, re.S)
    page = c.get("/runs/run-2").get_data(as_text=True)
    for title in ("RMSE", "MAE", "R²", "MSE"):
        assert f"<th>{title}</th>" in page or f">{title}<" in page, title


def test_a_private_run_shows_epsilon_beside_its_accuracy(real_report, tmp_path):
    """A differentially private run's report has a privacy section (the trainer's privacy.summary, as the aggregator
    copies it): the list and the run's page show ε and δ beside the held-out accuracy; a run without one shows none."""
    import argparse

    from disttrain_trainer import privacy

    args = argparse.Namespace(dp_l2_clip=1.0, dp_noise_multiplier=1.1, dp_delta=1e-5, batch=32)
    epsilons = [privacy.epsilon(1.1, 32 / 700, 22 * e, 1e-5) for e in (1, 2)]
    section = privacy.summary(
        args,
        q=32 / 700,
        steps_per_epoch=22,
        epochs=2,
        epsilon_by_epoch=epsilons,
        strategy="multiworker",
        workers=2,
        training_examples=1400,
        epoch_examples=700,
    )
    runs_dir = tmp_path / "runs"
    for n, extra in ((1, {}), (2, {"privacy": section})):
        final = runs_dir / f"run-{n}" / "final"
        final.mkdir(parents=True)
        (final / "report.json").write_text(json.dumps({**real_report, **extra}))
        (final / "_SUCCESS").write_text("{}")
    c = client(runs_dir, served="run-2")
    rows = {row["run"]: row["report"] for row in c.get("/runs.json").get_json()["runs"]}
    assert rows["run-1"]["privacy"] is None
    assert rows["run-2"]["privacy"]["epsilon"] == epsilons[-1] and rows["run-2"]["privacy"]["delta"] == 1e-5
    html = c.get("/runs").get_data(as_text=True)
    accuracy = f"{real_report['final']['test_accuracy']:.4f}"
    private_row = re.search(r'<tr data-run="run-2".*?</tr>', html, re.S).group(0)
    assert re.search(
        rf"{accuracy}</span>.*ε = {epsilons[-1]:.2f}</span> <span class=\"muted\">\(δ = 1e-05\)", private_row, re.S
    )
    assert "ε =" not in re.search(r'<tr data-run="run-1".*?</tr>', html, re.S).group(0)
    page = c.get("/runs/run-2").get_data(as_text=True)
    assert re.search(rf'<dd id="privacy">ε = {epsilons[-1]:.2f} at δ = 1e-05 <span class="muted">\(RDP', page)
    assert "differentially private, ε =" in page


def test_a_private_vocabulary_run_shows_the_total_epsilon_and_its_parts(real_report, tmp_path):
    """With a vocabulary the copier built privately, the privacy section's ε is the total (training plus vocabulary,
    added): the list shows that total, and the run's page shows the two parts beside it."""
    import argparse

    from disttrain_trainer import privacy

    args = argparse.Namespace(dp_l2_clip=1.0, dp_noise_multiplier=1.1, dp_delta=1e-5, batch=32)
    vocabulary = {
        "file": "vocab.txt",
        "sha256": "0" * 64,
        "size": 233,
        "private": {"epsilon": 1.0, "delta": 1e-6, "mechanism": "DP partition selection", "released": 233},
    }
    section = privacy.summary(
        args,
        q=32 / 700,
        steps_per_epoch=22,
        epochs=1,
        epsilon_by_epoch=[0.42],
        strategy="average",
        workers=2,
        training_examples=1400,
        epoch_examples=700,
        vocabulary=vocabulary,
    )
    final = tmp_path / "runs" / "run-1" / "final"
    final.mkdir(parents=True)
    (final / "report.json").write_text(json.dumps({**real_report, "privacy": section}))
    (final / "_SUCCESS").write_text("{}")
    c = client(tmp_path / "runs", served="run-1")
    row = c.get("/runs.json").get_json()["runs"][0]["report"]["privacy"]
    assert row["epsilon"] == pytest.approx(1.42) and row["delta"] == pytest.approx(1.1e-5)
    assert (row["training_epsilon"], row["vocabulary_epsilon"]) == (0.42, 1.0)
    assert "ε = 1.42</span>" in c.get("/runs").get_data(as_text=True)
    page = c.get("/runs/run-1").get_data(as_text=True)
    assert re.search(
        r'<dd id="privacy">ε = 1.42 at δ = 1.1e-05 \(training 0.42 \+ private vocabulary 1.00, added\)', page
    )


def test_only_ascii_digits_number_a_run_or_a_worker(tmp_path):
    # int() reads other scripts' digits too: "run-\u0663" would list as a second run 3
    for name in ("run-3", "run-\u0663", "run-\uff14"):
        os.mkdir(tmp_path / name)
    assert dashboard.numbered_runs(str(tmp_path)) == [(3, "run-3")]
    assert dashboard.WORKER_DIR.fullmatch("worker-00001") and not dashboard.WORKER_DIR.fullmatch("worker-0000\u0661")
    assert dashboard.REJECTED_DIR.fullmatch("20261127T101010.000000000Z")
    assert not dashboard.REJECTED_DIR.fullmatch("2026112\u0667T101010.000000000Z")
