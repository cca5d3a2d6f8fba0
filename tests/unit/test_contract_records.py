"""report.json and progress.json as typed records (disttrain_contract.report, .progress): a record written and
read back is the same record; a report of an older aggregator (no problem, primary_metric, privacy,
published ...) loads; a field of the wrong type is one line naming it; the contract modules import no
TensorFlow (the server and the copier read them without it)."""

import json
import os
import subprocess
import sys

import pytest

from disttrain_contract.metrics import RMSE
from disttrain_contract.progress import MAX_HISTORY, Progress, history_entry
from disttrain_contract.records import RecordError
from disttrain_contract.report import (
    MetricSummary,
    ModelRow,
    Privacy,
    Publication,
    Report,
    metric_columns,
    write_report,
)


def full_report():
    return Report(
        strategy="parameterserver",
        task="table",
        problem="regression",
        target="price",
        primary_metric=MetricSummary.of(RMSE),
        workers=[
            ModelRow(
                100,
                {"test_rmse": 1.5, "test_mae": 1.0, "test_r2": 0.4, "test_loss": 2.25},
                "chief (parameter servers)",
                0,
            )
        ],
        final=ModelRow(300, {"test_rmse": 1.4, "test_mae": 0.9, "test_r2": 0.5, "test_loss": 1.96}),
        labels=[],
        metrics=["rmse", "mae", "r2", "loss"],
        source="table:houses.csv",
        seed=42,
        split_seed=42,
        init_weights_sha256="ab" * 32,
        test_examples=50,
        epochs=3,
        training_parameters={"batch": 64.0},
        parameters_origin={"source": "flags"},
        training_wall_time_sec=12.5,
        ps_facts={
            "tasks": [{"index": 0, "role": "chief", "examples": 300}],
            "steps_scheduled": 30,
            "steps_started_by_worker": [16, 14],
            "steps_retried": 0,
        },
        data={"passed": True},
        created_at=1.8e9,
        analysis={"order": ["final"]},
        gate={"passed": True, "reasons": []},
        exports={"requested": []},
        privacy=Privacy(2.0, 1e-5, "DP-SGD", {"noise_multiplier": 1.1}),
        published=[Publication("s3://models/houses/", 3, 1.8e9), Publication("gs://b/m/", "v7")],
        extra={"a_key_from_a_newer_aggregator": {"kept": True}},
    )


def test_a_report_written_and_read_back_is_the_same(tmp_path):
    report = full_report()
    path = tmp_path / "report.json"
    write_report(str(path), report)
    again = Report.read(str(path))
    assert again == report
    obj = json.loads(path.read_text())
    # the JSON keeps its long-standing form: rows flat, the parameter-server facts at the top level
    assert obj["final"] == {"examples": 300, "test_rmse": 1.4, "test_mae": 0.9, "test_r2": 0.5, "test_loss": 1.96}
    assert obj["workers"][0]["name"] == "chief (parameter servers)" and obj["steps_retried"] == 0
    assert obj["privacy"] == {"epsilon": 2.0, "delta": 1e-5, "mechanism": "DP-SGD", "noise_multiplier": 1.1}
    assert obj["published"] == [
        {"url": "s3://models/houses/", "version": 3, "published_at": 1.8e9},
        {"url": "gs://b/m/", "version": "v7"},
    ]
    assert obj["a_key_from_a_newer_aggregator"] == {"kept": True}
    assert obj["primary_metric"] == {"name": "rmse", "direction": "min", "label": "RMSE"}
    assert again.metric.name == "rmse" and again.metric.direction == "min"  # contract metrics.Metric


def test_an_older_report_without_the_newer_fields_loads():
    """A report of an early aggregator: no problem, target, primary_metric, metrics, data, analysis, gate,
    exports, privacy or published; rows without worker_index."""
    old = {
        "strategy": "average",
        "task": "text",
        "labels": ["neg", "pos"],
        "seed": 42,
        "epochs": 2,
        "workers": [{"name": "worker 0", "examples": 500, "test_accuracy": 0.71, "test_loss": 0.6}],
        "final": {"examples": 1000, "test_accuracy": 0.74, "test_loss": 0.55},
        "test_examples": 200,
    }
    report = Report.from_json(old)
    assert (report.problem, report.primary_metric, report.privacy, report.published, report.gate) == (
        "classification",
        None,
        None,
        [],
        None,
    )
    assert report.metric.key == "test_accuracy" and report.final["test_accuracy"] == 0.74
    assert report.workers[0].worker_index is None
    written = report.to_json()
    for key in ("privacy", "published", "gate", "exports", "analysis", "combine", "missing_workers", "steps_retried"):
        assert key not in written  # an optional section nobody filled is not written
    assert Report.from_json(written) == report


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda r: r.pop("task"), "report.json: task is missing"),
        (lambda r: r.update(workers="two"), 'report.json: workers must be a list, got "two"'),
        (
            lambda r: r["workers"][0].update(examples="many"),
            'report.json: workers[0].examples must be a number, got "many"',
        ),
        (lambda r: r["workers"][0].pop("name"), "report.json: workers[0].name is missing"),
        (
            lambda r: r["final"].update(test_accuracy="high"),
            'report.json: final.test_accuracy must be a number, got "high"',
        ),
        (
            lambda r: r.update(primary_metric={"name": "accuracy", "direction": "up"}),
            'report.json: primary_metric.direction must be one of max, min, got "up"',
        ),
        (lambda r: r.update(privacy={"epsilon": 1.0}), "report.json: privacy.delta is missing"),
        (
            lambda r: r.update(privacy={"epsilon": "1", "delta": 0}),
            'report.json: privacy.epsilon must be a number, got "1"',
        ),
        (
            lambda r: r.update(published=[{"url": "s3://x/"}, {"version": 2}]),
            "report.json: published[1].url is missing",
        ),
        (
            lambda r: r.update(published=[{"url": "s3://x/", "version": True}]),
            "report.json: published[0].version must be a string or an integer, got true",
        ),
        (lambda r: r.update(gate=[]), "report.json: gate must be a JSON object, got []"),
        (lambda r: r.update(seed=4.5), "report.json: seed must be an integer, got 4.5"),
    ],
)
def test_a_bad_field_is_one_line_naming_it(change, message):
    obj = {
        "strategy": "average",
        "task": "image",
        "workers": [{"name": "worker 0", "examples": 5, "test_accuracy": 0.5}],
        "final": {"examples": 5, "test_accuracy": 0.5},
    }
    change(obj)
    with pytest.raises(RecordError) as err:
        Report.from_json(obj)
    assert str(err.value) == message and "\n" not in str(err.value)


def test_not_a_report_at_all():
    with pytest.raises(RecordError, match=r"^report.json: the file must be a JSON object, got \[1, 2\]$"):
        Report.from_json([1, 2])


def test_the_metric_columns_are_one_definition():
    assert [c.key for c in metric_columns("table", "regression")] == ["test_rmse", "test_mae", "test_r2", "test_loss"]
    assert [c.title for c in metric_columns("faces")][0] == "top-1 retrieval"
    assert [c.short for c in metric_columns("text")] == ["test acc", "test loss"]
    assert all(
        len(c.short) <= 11
        for task in ("text", "faces", "table")
        for problem in ("classification", "regression")
        for c in metric_columns(task, problem)
    )  # the aggregator's printed table: 12 characters a column


# ------------------------------------------------------------------------------------ progress.json
def progress():
    p = Progress(worker=1, tag="worker 1/2", strategy="average", epochs=3, steps_per_epoch=10, score="mae")
    p.state, p.epoch, p.step, p.global_step, p.loss, p.score_value = "training", 2, 4, 14, 0.3, 1.25
    p.history = [
        history_entry({"epoch": 1, "loss": 0.4, "mae": 1.5, "test_rmse": 2.0, "examples": 640, "cycle_sec": 1.0})
    ]
    p.time, p.writes = 1.8e9, 7
    return p


def test_progress_round_trip_and_the_score_under_its_own_name():
    p = progress()
    obj = json.loads(json.dumps(p.to_json()))
    assert obj["score"] == "mae" and obj["mae"] == 1.25 and "accuracy" not in obj
    assert obj["history"] == [{"epoch": 1, "loss": 0.4, "mae": 1.5, "test_rmse": 2.0}]  # the HISTORY_KEYS only
    assert obj["total_steps"] == 30 and "error" not in obj
    assert Progress.from_json(obj) == p
    p.state, p.error = "failed", "out of memory"
    assert Progress.from_json(p.to_json()).error == "out of memory"
    assert MAX_HISTORY == 500


def test_an_older_progress_file_without_a_score_loads_as_accuracy():
    obj = progress().to_json()
    del obj["score"], obj["mae"], obj["writes"]
    obj["accuracy"] = 0.9
    loaded = Progress.from_json(obj)
    assert (loaded.score, loaded.score_value, loaded.writes) == ("accuracy", 0.9, None)


def test_a_state_of_a_newer_trainer_loads_as_it_is():
    obj = dict(progress().to_json(), state="preempted")
    assert Progress.from_json(obj).state == "preempted"


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda p: p.update(state=3), "progress.json: state must be a string, got 3"),
        (lambda p: p.update(step="4"), 'progress.json: step must be an integer, got "4"'),
        (lambda p: p.pop("tag"), "progress.json: tag is missing"),
        (lambda p: p.update(history=[{"loss": 1}]), "progress.json: history[0].epoch is missing"),
        (lambda p: p.update(mae=[1]), "progress.json: mae must be a number, got [1]"),
    ],
)
def test_a_bad_progress_field_is_one_line_naming_it(change, message):
    obj = progress().to_json()
    change(obj)
    with pytest.raises(RecordError) as err:
        Progress.from_json(obj)
    assert str(err.value) == message


def test_the_contract_modules_import_no_tensorflow():
    code = (
        "import sys, disttrain_contract.report, disttrain_contract.progress, disttrain_contract.records, "
        "disttrain_contract.trainer_records; "
        "print('tensorflow' in sys.modules, 'keras' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, PYTHONWARNINGS="ignore"),
    ).stdout
    assert out.split() == ["False", "False"]
