"""A trainer's marker and metrics.json as typed records (disttrain_contract.trainer_records): the JSON the types
write is the JSON the trainer has been writing (the same keys, nulls where it wrote nulls, no key it left out);
a record written and read back is the same record; an older trainer's marker without the optional keys loads;
a field of the wrong type is one line naming the file and the field."""

import json

import pytest

from disttrain_contract.layout import marker_path
from disttrain_contract.metrics import ACCURACY, RMSE
from disttrain_contract.records import RecordError
from disttrain_contract.report import Privacy
from disttrain_contract.trainer_records import (
    REQUIRED_MARKER_FIELDS,
    EpochRecord,
    MetricValue,
    TrainerMarker,
    read_epoch_records,
    read_trainer_marker,
    write_epoch_records,
    write_trainer_marker,
)

PRIVACY = {
    "epsilon": 2.5,
    "delta": 1e-5,
    "mechanism": "DP-SGD",
    "accountant": "RDP",
    "l2_clip": 1.0,
    "noise_multiplier": 1.1,
    "steps": 30,
}
PS_CHIEF = {
    "role": "chief",
    "ps": 1,
    "tasks": 4,
    "steps_scheduled": 60,
    "steps_started_by_worker": [31, 30],
    "steps_retried": 1,
    "examples_by_worker": [500, 500],
}


def trainers_marker_info(primary=ACCURACY, last=None, initial=None, validation=None, private=False, facts=None):
    """The keyword arguments disttrain_trainer.main gives write_marker today, built the way it builds them."""
    last = last or {}
    return dict(
        worker_index=0,
        workers=2,
        strategy="average",
        epochs=3,
        init_weights_sha256="ab" * 32,
        examples=500,
        model="model.keras",
        final_weights_sha256="cd" * 32,
        problem="regression" if primary is RMSE else "classification",
        final_test_accuracy=last.get("test_accuracy"),
        **(facts or {}),
        **({"privacy": PRIVACY} if private else {}),
        final_test_metric={"name": primary.name, "value": last.get(primary.key), "direction": primary.direction},
        **(
            {"initial_test_metric": {"name": primary.name, "value": initial, "direction": primary.direction}}
            if initial is not None
            else {}
        ),
        **(
            {
                "validation_fraction": 0.1,
                "validation_examples": 50,
                "validation_accuracy": last.get("validation_accuracy"),
                "validation_metric": {
                    "name": primary.name,
                    "value": last.get(f"validation_{primary.name}"),
                    "direction": primary.direction,
                },
            }
            if validation
            else {}
        ),
    )


def typed_marker(primary=ACCURACY, last=None, initial=None, validation=None, private=False, facts=None):
    """The same marker through the types: what the trainer would construct."""
    last = last or {}
    return TrainerMarker(
        worker_index=0,
        workers=2,
        strategy="average",
        epochs=3,
        init_weights_sha256="ab" * 32,
        examples=500,
        model="model.keras",
        final_weights_sha256="cd" * 32,
        problem="regression" if primary is RMSE else "classification",
        final_test_accuracy=last.get("test_accuracy"),
        **(facts or {}),
        privacy=Privacy.from_json(PRIVACY) if private else None,
        final_test_metric=MetricValue.of(primary, last.get(primary.key)),
        initial_test_metric=MetricValue.of(primary, initial) if initial is not None else None,
        **(
            {
                "validation_fraction": 0.1,
                "validation_examples": 50,
                "validation_accuracy": last.get("validation_accuracy"),
                "validation_metric": MetricValue.of(primary, last.get(f"validation_{primary.name}")),
            }
            if validation
            else {}
        ),
    )


MARKER_CASES = {
    "classifier": {},
    "regression, nothing evaluated": {"primary": RMSE},
    "validated, pre-trained, private": {
        "last": {"test_accuracy": 0.9, "validation_accuracy": 0.8},
        "initial": 0.4,
        "validation": True,
        "private": True,
    },
    "regression validated": {"primary": RMSE, "last": {"test_rmse": 1.5, "validation_rmse": 1.7}, "validation": True},
    "localsgd": {"facts": {"wire_bytes_per_sync": 4096}},
    "parameter-server chief": {"facts": PS_CHIEF},
}


@pytest.mark.parametrize("case", MARKER_CASES)
def test_the_marker_the_types_write_is_the_one_the_trainer_writes(case, tmp_path):
    info = trainers_marker_info(**MARKER_CASES[case])
    marker = typed_marker(**MARKER_CASES[case])
    assert marker.to_json() == {"stage": "trainer", **json.loads(json.dumps(info))}
    write_trainer_marker(str(tmp_path), marker)
    written = json.loads(open(marker_path(str(tmp_path))).read())
    assert set(written) == {"stage", "finished_at", "host", *info}
    again = read_trainer_marker(str(tmp_path))
    assert again.to_json() == written  # (read back: when and where it finished, as written)
    assert again == TrainerMarker(**{**marker.__dict__, "finished_at": written["finished_at"], "host": written["host"]})


def test_a_parameter_servers_serving_task_writes_no_training_result():
    """strategies/parameterserver.py's ps and worker tasks: no final weights, problem or held-out metric keys."""
    marker = TrainerMarker(
        worker_index=1,
        workers=2,
        strategy="parameterserver",
        role="ps",
        epochs=3,
        init_weights_sha256="ab",
        model=None,
        examples=0,
    )
    assert marker.to_json() == {
        "stage": "trainer",
        "worker_index": 1,
        "workers": 2,
        "strategy": "parameterserver",
        "role": "ps",
        "epochs": 3,
        "init_weights_sha256": "ab",
        "model": None,
        "examples": 0,
    }


def test_an_older_marker_without_the_optional_keys_loads():
    """The first trainers' marker: the REQUIRED_MARKER_FIELDS, model and final_test_accuracy."""
    old = {
        "stage": "trainer",
        "finished_at": 1.7e9,
        "host": "pod-0",
        "worker_index": 1,
        "workers": 2,
        "strategy": "average",
        "epochs": 2,
        "init_weights_sha256": "ab",
        "examples": 700,
        "model": "model.keras",
        "final_test_accuracy": 0.81,
    }
    marker = TrainerMarker.from_json(old)
    assert (
        marker.final_test_accuracy,
        marker.final_test_metric,
        marker.problem,
        marker.validation_metric,
        marker.privacy,
        marker.role,
        marker.extra,
    ) == (0.81, None, None, None, None, None, {})
    assert set(REQUIRED_MARKER_FIELDS) == {
        "worker_index",
        "workers",
        "strategy",
        "epochs",
        "init_weights_sha256",
        "examples",
    }
    newer = dict(old, a_key_of_a_newer_trainer=[1])
    assert TrainerMarker.from_json(newer).to_json()["a_key_of_a_newer_trainer"] == [1]  # kept as it was


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda m: m.pop("examples"), "w/_SUCCESS: examples is missing"),
        (lambda m: m.update(examples="many"), 'w/_SUCCESS: examples must be an integer, got "many"'),
        (lambda m: m.update(workers=None), "w/_SUCCESS: workers must be an integer, got null"),
        (lambda m: m.update(model=3), "w/_SUCCESS: model must be a string, got 3"),
        (lambda m: m.update(validation_metric={"value": 0.5}), "w/_SUCCESS: validation_metric.name is missing"),
        (
            lambda m: m.update(final_test_metric={"name": "rmse", "value": "low"}),
            'w/_SUCCESS: final_test_metric.value must be a number, got "low"',
        ),
        (
            lambda m: m.update(final_test_metric={"name": "rmse", "direction": "down"}),
            'w/_SUCCESS: final_test_metric.direction must be one of max, min, got "down"',
        ),
        (
            lambda m: m.update(examples_by_worker=[500, "500"]),
            'w/_SUCCESS: examples_by_worker must be a list of integers, got [500, "500"]',
        ),
        (lambda m: m.update(privacy={"epsilon": 1.0}), "w/_SUCCESS: privacy.delta is missing"),
    ],
)
def test_a_bad_marker_field_is_one_line_naming_the_file_and_the_field(change, message):
    obj = typed_marker().to_json()
    change(obj)
    with pytest.raises(RecordError) as err:
        TrainerMarker.from_json(obj, "w/_SUCCESS")
    assert str(err.value) == message


# ------------------------------------------------------------------------------------ metrics.json
def trainers_record(epoch=1, score="accuracy", held_out=None, validation=None, epsilon=None, facts=None):
    """An epoch's record built the way disttrain_trainer.main builds it today (cycle_sec added after its print)."""
    record = {
        "epoch": epoch,
        "loss": 0.5,
        score: 0.75,
        "examples": 640,
        "examples_per_sec": 1280.0,
        "wall_time_sec": 0.5,
        **(facts or {}),
        **({"epsilon": epsilon} if epsilon is not None else {}),
    }
    record.update({f"test_{key}": value for key, value in (held_out or {}).items()})
    record.update({f"validation_{key}": value for key, value in (validation or {}).items()})
    record["cycle_sec"] = 0.75
    return record


def typed_record(epoch=1, score="accuracy", held_out=None, validation=None, epsilon=None, facts=None):
    return EpochRecord(
        epoch=epoch,
        loss=0.5,
        examples=640,
        examples_per_sec=1280.0,
        wall_time_sec=0.5,
        metrics={
            score: 0.75,
            **{f"test_{key}": value for key, value in (held_out or {}).items()},
            **{f"validation_{key}": value for key, value in (validation or {}).items()},
        },
        epsilon=epsilon,
        **(facts or {}),
        cycle_sec=0.75,
    )


LOCAL_SGD = {
    "training_metrics_of": "this worker",
    "last_sync_step": None,
    "synced_weights_checksum": None,
    "syncs": 0,
    "sync_sec": 0.0,
}
RECORD_CASES = {
    "a worker that does not evaluate": {},
    "classifier": {"held_out": {"accuracy": 0.8, "loss": 0.6}},
    "regression validated": {
        "score": "mae",
        "held_out": {"rmse": 1.2, "mae": 1.0, "r2": float("nan"), "loss": 1.44},
        "validation": {"rmse": 1.3, "mae": 1.1, "r2": 0.2, "loss": 1.69},
    },
    "faces": {"held_out": {"accuracy": 0.5, "same_person_distance": 0.4, "people": 12, "darker_top1_accuracy": 0.4}},
    "private": {"epsilon": 1.25},
    "localsgd before its first sync": {"facts": LOCAL_SGD},
    "localsgd overlapped, refreshing": {
        "facts": dict(
            LOCAL_SGD,
            last_sync_step=32,
            synced_weights_checksum=123456789,
            syncs=2,
            sync_sec=0.125,
            sync_wait_sec=0.01,
            batch_norm_re_estimations=1,
        )
    },
    "parameterserver": {"facts": {"steps_started_by_worker": [11, 9]}},
}


def canonical(obj):
    """The bytes atomic_write_json writes (sorted keys): nan compares equal to nan here."""
    return json.dumps(obj, indent=2, sort_keys=True)


@pytest.mark.parametrize("case", RECORD_CASES)
def test_the_epoch_record_the_types_write_is_the_one_the_trainer_writes(case, tmp_path):
    record = typed_record(**RECORD_CASES[case])
    assert canonical(record.to_json()) == canonical(trainers_record(**RECORD_CASES[case]))
    path = str(tmp_path / "metrics.json")
    records = [record, typed_record(**dict(RECORD_CASES[case], epoch=2))]
    write_epoch_records(path, records)
    again = read_epoch_records(path)
    assert [canonical(r.to_json()) for r in again] == [canonical(r.to_json()) for r in records]
    if case != "regression validated":  # (nan is not equal to itself)
        assert again == records
    assert again[1].epoch == 2 and again[1].get("test_missing") is None


def test_an_older_record_without_cycle_sec_loads_and_a_newer_key_is_kept():
    old = {
        "epoch": 1,
        "loss": 0.5,
        "accuracy": 0.7,
        "examples": 640,
        "examples_per_sec": 900.0,
        "wall_time_sec": 0.7,
        "test_loss": 0.6,
        "test_accuracy": 0.72,
    }
    record = EpochRecord.from_json(old)
    assert (record.cycle_sec, record.epsilon, record.get("test_accuracy")) == (None, None, 0.72)
    assert record.to_json() == old
    assert EpochRecord.from_json(dict(old, a_newer_fact="x")).extra == {"a_newer_fact": "x"}


RECORD = trainers_record()


@pytest.mark.parametrize(
    "records, message",
    [
        ({"epoch": 1}, 'm.json: the file must be a JSON list of epoch records, got {"epoch": 1}'),
        ([{"epoch": 1}], "m.json: [0].loss is missing"),
        ([RECORD, dict(RECORD, epoch="2")], 'm.json: [1].epoch must be an integer, got "2"'),
        ([dict(RECORD, test_accuracy=None)], "m.json: [0].test_accuracy must be a number, got null"),
        ([dict(RECORD, validation_rmse="1.2")], 'm.json: [0].validation_rmse must be a number, got "1.2"'),
        (
            [dict(RECORD, steps_started_by_worker=3)],
            "m.json: [0].steps_started_by_worker must be a list of integers, got 3",
        ),
        ([3], "m.json: [0] must be a JSON object, got 3"),
    ],
)
def test_a_bad_epoch_record_is_one_line_naming_the_record_and_the_field(records, message, tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(records))
    with pytest.raises(RecordError) as err:
        read_epoch_records(str(path), "m.json")
    assert str(err.value) == message


def test_no_metrics_json_is_no_records_and_a_metric_needs_a_metric_name(tmp_path):
    assert read_epoch_records(str(tmp_path / "none.json")) == []
    with pytest.raises(ValueError, match="not metric names .*: wall_clock"):
        EpochRecord(epoch=1, loss=0.5, examples=1, examples_per_sec=1.0, wall_time_sec=1.0, metrics={"wall_clock": 1.0})
