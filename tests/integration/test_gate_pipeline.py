"""The quality gate through the real programs: a degraded rerun never replaces a good published model."""

import hashlib
import os
import shutil
import time

import numpy as np
import pytest

from server.serving import http, pipeline_run, running_server  # the server tests' real-gunicorn helpers
from stages import read_report, stage, start_stage

pytestmark = pytest.mark.slow


def final_state(final):
    """Every published file's bytes (the exports' directories too: a refused run must not touch
    the SavedModel TF Serving serves), and the model file's (inode, mtime_ns, size): what the
    server's ModelStore compares to decide on a reload."""
    files = {
        str(path.relative_to(final)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(final.rglob("*"))
        if path.is_file()
    }
    assert any(name.startswith("saved_model/") for name in files), sorted(files)  # the exports are published
    st = (final / "model.keras").stat()
    return files, (st.st_ino, st.st_mtime_ns, st.st_size)


def train_degraded(work):
    """Both workers again into a fresh train/, with a learning rate of 10 (the copier's data stays)."""
    shutil.rmtree(work / "train")
    procs = [
        start_stage(
            "trainer",
            "--workdir",
            work,
            "--worker-index",
            i,
            "--epochs",
            2,
            "--batch",
            32,
            "--learning-rate",
            10,
            log=work / f"degraded-{i}.log",
        )
        for i in range(2)
    ]
    assert [p.wait(timeout=600) for p in procs] == [0, 0]


def served_accuracy(base, work):
    """The running server's accuracy on 100 held-out digits, through :predict."""
    x = np.load(work / "data" / "test.x.npy", allow_pickle=False)[:100]
    y = np.load(work / "data" / "test.y.npy", allow_pickle=False)[:100]
    status, body = http("POST", f"{base}/v1/models/disttrain:predict", {"instances": x.tolist()})
    assert status == 200, body
    return float((np.array(body["predictions"]).argmax(axis=1) == y).mean())


def test_a_degraded_run_is_refused_and_the_published_model_stays(tmp_path, tmp_path_factory):
    # The good run: the session's finished 2-worker digits run (copier, trainers, aggregator; the dashboard
    # tests read it too), copied, since this test trains again in its workdir.
    work = tmp_path / "work"
    shutil.copytree(pipeline_run(tmp_path_factory), work)
    good = read_report(work / "final")
    assert good["gate"]["passed"] and not good["gate"]["forced"] and good["gate"]["published"] is None
    before = final_state(work / "final")

    with running_server(str(work), "--reload-interval", "0.2") as (base, _, _):
        serving_before = served_accuracy(base, work)
        assert serving_before > 0.9
        refused_then_forced(work, good, before, base)


def refused_then_forced(work, good, before, base):
    """The degraded rerun: refused while the server keeps the good model; then --force, which it serves."""
    train_degraded(work)
    log = work / "termination-log"
    log.write_text("")  # the kubelet creates it before the container starts
    result = stage(
        "aggregator",
        "--workdir",
        work,
        "--timeout",
        5,
        check=False,
        env={**os.environ, "DISTTRAIN_TERMINATION_LOG": str(log)},
    )
    print(result.stdout)
    assert result.returncode == 4, result.stderr
    (line,) = result.stderr.strip().splitlines()  # one line, no traceback
    assert line.startswith("error: refused to publish the final model: held-out accuracy ")
    assert "below the published model's" in line and "--max-regression" in line
    assert log.read_text() == line  # what `kubectl describe` shows

    assert final_state(work / "final") == before  # byte for byte: the server has nothing to reload
    time.sleep(1)  # five of the server's reload intervals
    assert served_accuracy(base, work) > 0.9  # still the good model
    (rejected,) = (work / "rejected").iterdir()
    assert str(rejected) in line
    assert sorted(os.listdir(rejected)) == ["analysis.png", "model.keras", "report.json", "report.png"]
    report = read_report(rejected)
    gate = report["gate"]
    assert not gate["passed"] and not gate["forced"] and gate["reasons"]
    published = next(c for c in gate["checks"] if c["name"] == "published")
    assert published["comparable"] and not published["passed"]
    # the published model was evaluated again, on this run's held-out split: the same split, the same number
    assert published["reference_accuracy"] == pytest.approx(good["final"]["test_accuracy"])
    print(
        f"good {good['final']['test_accuracy']:.4f} (workers {[w['test_accuracy'] for w in good['workers']]}), "
        f"degraded {report['final']['test_accuracy']:.4f} (workers {[w['test_accuracy'] for w in report['workers']]})"
    )

    forced = stage("aggregator", "--workdir", work, "--timeout", 5, "--force")
    assert "quality gate failed, forced" in forced.stdout
    after = read_report(work / "final")
    assert after["gate"]["forced"] and not after["gate"]["passed"]
    assert after["final"]["test_accuracy"] == pytest.approx(report["final"]["test_accuracy"])
    assert final_state(work / "final")[1] != before[1]  # a new file: the server reloads it
    deadline = time.monotonic() + 60
    while served_accuracy(base, work) > 0.5:  # the forced, degraded model is served once reloaded
        assert time.monotonic() < deadline, "the server never loaded the forced model"
        time.sleep(0.3)
