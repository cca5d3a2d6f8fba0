"""The real pipeline, stage by stage in separate processes: copier -> 2 trainers -> aggregator.

Every strategy (multiworker and localsgd really run two TensorFlow processes talking
over loopback), on movie reviews and on digits, compared with one worker trained on
all the data."""

import json
import os

import pytest

from disttrain_contract.progress import Progress
from stages import run_pipeline, stage

pytestmark = pytest.mark.slow

# source -> (epochs, batch, the accuracy of always predicting the majority class + a clear margin)
TASKS = {
    "sample:movie-reviews": (4, 64, 0.58 + 0.10),
    "sample:digits": (20, 32, 0.10 + 0.70),
}
_baselines = {}


def aggregator_scalars(workdir):
    """{run: {tag: (step, value)}} of the aggregator's TensorBoard event files (WORKDIR/tensorboard), read with TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    out = {}
    for run in sorted(os.listdir(os.path.join(workdir, "tensorboard"))):
        events = EventAccumulator(os.path.join(workdir, "tensorboard", run), size_guidance={"tensors": 0}).Reload()
        out[run] = {
            tag: [(e.step, float(make_ndarray(e.tensor_proto))) for e in events.Tensors(tag)]
            for tag in events.Tags()["tensors"]
        }
    return out


def baseline(source, tmp_path_factory):
    """Held-out accuracy of 1 worker on all the training data, and its report.json (computed once per source)."""
    if source not in _baselines:
        epochs, batch, _ = TASKS[source]
        work = tmp_path_factory.mktemp("baseline")
        report = run_pipeline(str(work), source, 1, "average", epochs, batch)
        _baselines[source] = report["final"]["test_accuracy"], str(work / "final" / "report.json")
    return _baselines[source]


def two_workers_against_one(tmp_path, tmp_path_factory, source, strategy, ps=0):
    """Train 2 workers (and `ps` parameter servers) and check the held-out accuracy against 1 worker's."""
    epochs, batch, well_above_chance = TASKS[source]
    one_worker, baseline_report = baseline(source, tmp_path_factory)
    report = run_pipeline(
        str(tmp_path), source, 2, strategy, epochs, batch, ps=ps, aggregator_args=("--baseline", baseline_report)
    )
    final = report["final"]["test_accuracy"]
    print(
        f"{source} {strategy}: final {final:.4f}, 1-worker baseline {one_worker:.4f}, "
        f"workers {[round(w['test_accuracy'], 4) for w in report['workers']]}"
    )
    assert final > well_above_chance
    assert abs(final - one_worker) <= 0.02, f"final {final:.4f} vs 1-worker {one_worker:.4f}"
    return report


def check_final_progress(worker_dir, metrics, index):
    """A finished worker's live progress file (issue 18): done, at the last step, its history = metrics.json's."""
    progress = Progress.from_json(json.load(open(worker_dir / "progress.json"))).to_json()  # (the contract's form)
    steps = progress["steps_per_epoch"]
    assert progress["worker"] == index and progress["state"] == "done" and progress["eta_sec"] == 0
    assert (progress["epoch"], progress["step"], progress["global_step"]) == (len(metrics), steps, len(metrics) * steps)
    assert [(h["epoch"], h["loss"], h["accuracy"]) for h in progress["history"]] == [
        (m["epoch"], m["loss"], m["accuracy"]) for m in metrics
    ]
    assert progress["writes"] >= len(metrics) + 1  # at least each epoch's end and the end


# movie reviews with average in make test-long (make test's budget): the other average runs of make test
# (digits here, the gate, the exact resume, the demo) cover that path
@pytest.mark.parametrize(
    "source, strategy",
    [
        pytest.param(
            source,
            strategy,
            marks=[pytest.mark.long] if (source, strategy) == ("sample:movie-reviews", "average") else [],
        )
        for source in TASKS
        for strategy in ("average", "multiworker", "localsgd")
    ],
)
def test_two_workers_match_one_worker(tmp_path, tmp_path_factory, source, strategy):
    epochs = TASKS[source][0]
    report = two_workers_against_one(tmp_path, tmp_path_factory, source, strategy)
    assert report["strategy"] == strategy and report["epochs"] == epochs
    # the published directory holds the published files only (no library's cache beside them)
    assert sorted(os.listdir(tmp_path / "final")) == [
        "_SUCCESS",
        "analysis.png",
        "model.keras",
        "model.tflite",
        "report.json",
        "report.png",
        "saved_model",
    ]
    manifest = json.load(open(tmp_path / "data" / "manifest.json"))
    assert report["final"]["examples"] == manifest["train_examples"]
    assert report["test_examples"] == manifest["test"]["examples"]
    # the copier's data validation reaches the report (issue 18)
    assert report["data"]["passed"] and report["data"]["checks"] == {
        name: result["status"] for name, result in manifest["validation"]["checks"].items()
    }
    assert report["data"]["splits"]["test"]["examples"] == manifest["test"]["examples"]
    if strategy == "average":
        assert [w["examples"] for w in report["workers"]] == [s["examples"] for s in manifest["shards"]]
    else:  # one model, the same on every worker, written by the chief only
        assert len(report["workers"]) == 1
        assert not (tmp_path / "train" / "worker-00001" / "model.keras").exists()
        markers = [json.load(open(tmp_path / "train" / f"worker-{i:05d}" / "_SUCCESS")) for i in range(2)]
        assert (
            markers[0]["final_weights_sha256"] == markers[1]["final_weights_sha256"]
        )  # in sync after the last average
    for i in range(2):
        metrics = json.load(open(tmp_path / "train" / f"worker-{i:05d}" / "metrics.json"))
        assert [m["epoch"] for m in metrics] == list(range(1, epochs + 1))
        assert metrics[-1]["loss"] < metrics[0]["loss"]
        assert all(m["examples_per_sec"] > 0 and m["wall_time_sec"] > 0 for m in metrics)
        assert os.listdir(tmp_path / "train" / f"worker-{i:05d}" / "tensorboard")
        check_final_progress(tmp_path / "train" / f"worker-{i:05d}", metrics, i)
    # the aggregator's held-out metrics for TensorBoard (issue 13): one point each, at the last epoch
    scalars = aggregator_scalars(tmp_path)
    assert sorted(scalars) == ["final"] + [f"worker-{w['worker_index']:05d}" for w in report["workers"]]
    for run, metrics in [("final", report["final"])] + [
        (f"worker-{w['worker_index']:05d}", w) for w in report["workers"]
    ]:
        assert scalars[run]["test_accuracy"] == [(epochs, pytest.approx(metrics["test_accuracy"], abs=1e-6))]
        assert scalars[run]["test_loss"] == [(epochs, pytest.approx(metrics["test_loss"], rel=1e-6))]
    assert (tmp_path / "final" / "report.png").stat().st_size > 10_000
    assert (tmp_path / "final" / "_SUCCESS").exists()
    check_analysis(report, tmp_path, source, strategy)


def check_analysis(report, work, source, strategy):
    """The model analysis (issue 18) agrees with the held-out figures it reuses, and compares the
    final model with the best worker and the 1-worker baseline given by --baseline."""
    section = report["analysis"]
    models = section["models"]
    candidates = [
        name for name, c in report.get("combine", {}).get("candidates", {}).items() if c.get("available") is not False
    ]
    assert candidates == (["average", "ensemble"] if strategy == "average" else [])  # no validation split: no best
    assert section["order"] == [w["name"] for w in report["workers"]] + candidates + ["final"]
    for row in report["workers"]:  # the same predictions as the held-out evaluation's, not a second run
        assert models[row["name"]]["accuracy"] == pytest.approx(row["test_accuracy"])
    assert models["final"]["accuracy"] == pytest.approx(report["final"]["test_accuracy"])
    for name in candidates:
        assert models[name]["accuracy"] == pytest.approx(report["combine"]["candidates"][name]["test_accuracy"])
    final = models["final"]
    labels = report["labels"]
    assert len(final["confusion_matrix"]) == len(labels)
    assert sum(map(sum, final["confusion_matrix"])) == report["test_examples"]
    assert sum(c["support"] for c in final["per_class"]) == report["test_examples"]
    assert 0 < final["macro_f1"] <= 1 and 0 <= final["ece"] < 0.5
    assert sum(b["examples"] for b in final["reliability"]) == report["test_examples"]
    assert sum(s["examples"] for s in final["slices"]) == report["test_examples"]
    if source == "sample:movie-reviews":
        assert len(final["slices"]) >= 3 and all(s["slice"].endswith("tokens") for s in final["slices"])
    else:
        assert [s["slice"] for s in final["slices"]] == labels
    rows = section["compare"]["rows"]
    assert [r["model"] for r in rows][1:] == [
        f"best worker ({section['compare']['best_worker']}, by held-out accuracy)",
        "1-worker baseline",
    ]
    baseline_report = json.load(open(section["compare"]["baseline"]["report"]))
    assert rows[2]["accuracy"] == baseline_report["final"]["test_accuracy"]
    assert rows[2]["macro_f1"] == baseline_report["analysis"]["models"]["final"]["macro_f1"]
    assert baseline_report["analysis"]["compare"]["baseline"]["available"] is False  # a plain run has none
    assert (work / "final" / "analysis.png").stat().st_size > 20_000


def test_workers_from_different_seeds_are_refused(tmp_path):
    stage("copier", "--source", "sample:digits", "--n-shards", "2", "--workdir", tmp_path)
    for index, seed in ((0, 1), (1, 2)):
        stage("trainer", "--workdir", tmp_path, "--worker-index", index, "--epochs", 1, "--seed", seed)
    result = stage("aggregator", "--workdir", tmp_path, "--expect", 2, "--timeout", 5, check=False)
    assert result.returncode != 0
    assert "did not start from the same initial weights" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "final" / "model.keras").exists()


def test_aggregator_times_out_naming_the_missing_worker(tmp_path):
    stage("copier", "--source", "sample:digits", "--n-shards", "2", "--workdir", tmp_path)
    stage("trainer", "--workdir", tmp_path, "--worker-index", 0, "--epochs", 1)
    result = stage("aggregator", "--workdir", tmp_path, "--timeout", 2, check=False)
    assert result.returncode == 3
    assert "1 of 2 workers did not finish" in result.stderr and "worker-00001/_SUCCESS" in result.stderr
    assert not (tmp_path / "final").exists()


def test_trainer_without_a_dataset_times_out_clearly(tmp_path):
    result = stage("trainer", "--workdir", tmp_path, "--wait-timeout", 1, check=False)
    assert result.returncode == 3
    assert "waiting for the copier's dataset" in result.stderr and "Traceback" not in result.stderr


def test_trainer_refuses_a_worker_index_without_a_shard(tmp_path):
    stage("copier", "--source", "sample:digits", "--n-shards", "2", "--workdir", tmp_path)
    result = stage("trainer", "--workdir", tmp_path, "--worker-index", 2, "--epochs", 1, check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "worker index 2 has no shard" in result.stderr


# movie reviews' run (sparse gradients through the parameter server) in make test-long: make test's budget
@pytest.mark.parametrize(
    "source", [pytest.param(s, marks=pytest.mark.long) if s == "sample:movie-reviews" else s for s in TASKS]
)
def test_parameter_servers_match_one_worker(tmp_path, tmp_path_factory, source):
    """chief + 1 parameter server + 2 workers, four processes over loopback: the chief's model
    is published, every task exits 0 with its own marker, each worker drew from every example."""
    epochs, batch = TASKS[source][:2]
    report = two_workers_against_one(tmp_path, tmp_path_factory, source, "parameterserver", ps=1)
    print(f"steps started by worker {report['steps_started_by_worker']}")
    manifest = json.load(open(tmp_path / "data" / "manifest.json"))
    assert report["strategy"] == "parameterserver" and report["epochs"] == epochs
    assert [(t["index"], t["role"], t["examples"]) for t in report["tasks"]] == [
        (0, "chief", manifest["train_examples"]),
        (1, "ps", 0),
        (2, "worker", manifest["train_examples"]),
        (3, "worker", manifest["train_examples"]),
    ]
    steps_per_epoch = -(-manifest["train_examples"] // batch)
    assert report["steps_scheduled"] == epochs * steps_per_epoch and report["steps_retried"] == 0
    assert sum(report["steps_started_by_worker"]) == epochs * steps_per_epoch
    assert len(report["workers"]) == 1 and (tmp_path / "train" / "worker-00000" / "model.keras").exists()
    for i in (1, 2, 3):  # the serving tasks write a marker, no model, no metrics
        assert sorted(os.listdir(tmp_path / "train" / f"worker-{i:05d}")) == ["_SUCCESS"]
    metrics = json.load(open(tmp_path / "train" / "worker-00000" / "metrics.json"))
    assert [m["epoch"] for m in metrics] == list(range(1, epochs + 1)) and metrics[-1]["loss"] < metrics[0]["loss"]
    check_final_progress(tmp_path / "train" / "worker-00000", metrics, 0)  # the chief's: it drives the steps
