"""A trainer's records: its marker (WORKER_DIR/_SUCCESS) and its metrics.json, each a typed record.

The trainer (disttrain_trainer.main) writes both. The aggregator reads the markers (checks.py: do the
workers belong together; combine.py: their validation values; report_builder.py: what the report
repeats) and every worker's metrics.json (the report's training time and curves); the sweep reads its
trial's worker 0's metrics.json each time the trainer replaces it (the values its pruner gets). All of
them go through `TrainerMarker` and `EpochRecord`: `to_json()` to write, `from_json(obj, what)` to
read, and read_trainer_marker / write_trainer_marker / read_epoch_records / write_epoch_records for
the files. A field of the wrong type is a RecordError naming the file and the field in one line; an
optional field an older trainer's file does not have loads as None; a key this version does not know
is kept (`extra`) and written back as it was.

The marker, one JSON object (markers.write_marker adds stage, finished_at and host):
    worker_index, workers, strategy, epochs, init_weights_sha256, examples
                              every trainer's (REQUIRED_MARKER_FIELDS)
    model                     the model file in the worker's directory; null: it saved none
    final_weights_sha256, problem, final_test_accuracy, final_test_metric
                              a trainer that trained (not a parameter-server group's ps or worker task,
                              which serves): final_test_accuracy null without a held-out accuracy
                              (regression, a worker that does not evaluate); final_test_metric the primary
                              metric's {"name", "value", "direction"} (its value null likewise)
    initial_test_metric       the same before training (where a model file's fine-tuning starts), if measured
    validation_fraction, validation_examples, validation_accuracy, validation_metric
                              --validation-fraction: the last epoch's values on the carve
    privacy                   a differentially private run's budget (disttrain_trainer.privacy.summary), in
                              report.Privacy's form
    wire_bytes_per_sync       localsgd: what each worker sends per sync
    role                      parameterserver: chief, ps or worker; the chief's marker also has ps, tasks,
                              steps_scheduled, steps_started_by_worker, steps_retried, examples_by_worker

metrics.json, a JSON list of one record per finished epoch, oldest first (rewritten whole, atomically,
after each epoch):
    epoch, loss, examples, examples_per_sec, wall_time_sec
                              every trainer's (wall_time_sec: the epoch's training alone)
    <score>, test_<metric>, validation_<metric>
                              `metrics`: the training score's mean over the epoch ("accuracy"; regression
                              "mae"), the held-out metrics when the worker evaluates, the validation carve's
                              with --validation-fraction (faces: the retrieval's figures too)
    cycle_sec                 the epoch's whole cycle: training, evaluation, checkpoint
    epsilon                   a differentially private run's ε spent so far
    training_metrics_of, last_sync_step, synced_weights_checksum, syncs, sync_sec
                              localsgd (strategy.epoch_facts), in every record (last_sync_step and the
                              checksum null before the first sync); sync_wait_sec with overlapped syncs,
                              batch_norm_re_estimations with the statistics' refresh
    steps_started_by_worker   parameterserver: per worker, this run's so far

Which optional keys a file has is part of its form: a field is written when it is set, and a group of
fields (`group` below: what a trainer that trained writes, what --validation-fraction adds, localsgd's
facts) is written whole, nulls included, when one of its fields is set -- the JSON the trainer has
always written.

No TensorFlow here: the server and the copier import the contract without it.
"""

import dataclasses
import os

from disttrain_contract.atomic import atomic_write_json, read_json
from disttrain_contract.layout import METRICS_FILE, marker_path
from disttrain_contract.markers import write_marker
from disttrain_contract.metrics import TRAINING_SCORE, Metric
from disttrain_contract.records import Fields, RecordError, describe
from disttrain_contract.report import Privacy

TRAINER_STAGE = "trainer"  # the marker's "stage"
# the names an epoch's training score has: accuracy, mae (metrics.TRAINING_SCORE)
SCORE_NAMES = tuple(sorted({metric.name for metric in TRAINING_SCORE.values()}))

# the groups of optional fields written whole (see the module's docstring)
EVERY_TRAINER = "every trainer's"
TRAINED = "a trainer that trained"
VALIDATION = "--validation-fraction"
LOCAL_SGD = "localsgd's facts"


def _field(kind, group=None, required=False):
    """A field of a flat record: read with Fields' `kind` reader; written when set, or with its group."""
    metadata = {"kind": kind, "group": group}
    return dataclasses.field(metadata=metadata) if required else dataclasses.field(default=None, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class MetricValue:
    """One metric's value as a marker records it: {"name", "value", "direction"}; value None: not measured."""

    name: str
    value: float | None
    direction: str | None = None  # "max" or "min" (metrics.Metric.direction); every trainer has written it

    @classmethod
    def of(cls, metric: Metric, value):
        return cls(metric.name, value, metric.direction)

    def to_json(self):
        direction = {} if self.direction is None else {"direction": self.direction}
        return {"name": self.name, "value": self.value, **direction}

    @classmethod
    def from_fields(cls, f: Fields):
        return cls(
            f.string("name", required=True, nullable=False),
            f.number("value"),
            f.string("direction", choices=("max", "min")),
        )


def _nested(record_class):
    def read(f, key, required):
        return (
            None
            if f.json_object(key, required=required, nullable=not required) is None
            else record_class.from_fields(f.nested(key))
        )

    return read


_READERS = {
    "integer": lambda f, key, required: f.integer(key, required=required, nullable=not required),
    "number": lambda f, key, required: f.number(key, required=required, nullable=not required),
    "string": lambda f, key, required: f.string(key, required=required, nullable=not required),
    "integers": lambda f, key, required: f.integer_list(key, required=required, nullable=not required),
    "metric": _nested(MetricValue),
    "privacy": _nested(Privacy),
}


def _declared(record_class):
    return [field for field in dataclasses.fields(record_class) if "kind" in field.metadata]


def _read_declared(record_class, f: Fields):
    """{name: value} of the record's declared fields, each read with its kind's reader."""
    return {
        field.name: _READERS[field.metadata["kind"]](f, field.name, field.default is dataclasses.MISSING)
        for field in _declared(record_class)
    }


def _write_declared(record):
    """The declared fields' JSON: each one set, and each group of which one field is set, whole."""
    fields = _declared(type(record))
    groups = {field.metadata["group"] for field in fields if getattr(record, field.name) is not None}
    out = {}
    for field in fields:
        value = getattr(record, field.name)
        if value is not None or (field.metadata["group"] is not None and field.metadata["group"] in groups):
            out[field.name] = value.to_json() if hasattr(value, "to_json") else value
    return out


@dataclasses.dataclass(frozen=True)
class TrainerMarker:
    """A trainer's marker: that this worker finished, and what it trained. The fields the module's docstring lists."""

    worker_index: int = _field("integer", EVERY_TRAINER, required=True)
    workers: int = _field("integer", EVERY_TRAINER, required=True)
    strategy: str = _field("string", EVERY_TRAINER, required=True)
    epochs: int = _field("integer", EVERY_TRAINER, required=True)
    init_weights_sha256: str = _field("string", EVERY_TRAINER, required=True)
    examples: int = _field("integer", EVERY_TRAINER, required=True)
    model: str | None = _field("string", EVERY_TRAINER)
    final_weights_sha256: str | None = _field("string", TRAINED)
    problem: str | None = _field("string", TRAINED)
    final_test_accuracy: float | None = _field("number", TRAINED)
    final_test_metric: MetricValue | None = _field("metric", TRAINED)
    initial_test_metric: MetricValue | None = _field("metric")
    validation_fraction: float | None = _field("number", VALIDATION)
    validation_examples: int | None = _field("integer", VALIDATION)
    validation_accuracy: float | None = _field("number", VALIDATION)
    validation_metric: MetricValue | None = _field("metric", VALIDATION)
    privacy: Privacy | None = _field("privacy")
    wire_bytes_per_sync: int | None = _field("integer")
    role: str | None = _field("string")
    ps: int | None = _field("integer")
    tasks: int | None = _field("integer")
    steps_scheduled: int | None = _field("integer")
    steps_started_by_worker: list[int] | None = _field("integers")
    steps_retried: int | None = _field("integer")
    examples_by_worker: list[int] | None = _field("integers")
    finished_at: float | None = _field("number")  # Unix seconds; write_marker sets it (and host) when None
    host: str | None = _field("string")
    extra: dict = dataclasses.field(default_factory=dict)  # keys this version does not know, kept as they are

    def to_json(self):
        """The marker's JSON object (a new dict)."""
        return {**self.extra, "stage": TRAINER_STAGE, **_write_declared(self)}

    @classmethod
    def from_json(cls, obj, what="the trainer's marker"):
        """A TrainerMarker from a marker's object; RecordError (a ContractError) naming the first bad field."""
        f = Fields(obj, what)
        f.string("stage")  # (not checked against TRAINER_STAGE: older aggregators never did)
        return cls(**_read_declared(cls, f), extra=f.rest())


REQUIRED_MARKER_FIELDS = tuple(field.name for field in _declared(TrainerMarker) if field.default is dataclasses.MISSING)


def read_trainer_marker(directory):
    """The trainer's marker in `directory`, None when there is none; ContractError if it is unreadable or not one."""
    path = marker_path(directory)
    obj = read_json(path, None, what=f"marker {path}")
    return None if obj is None else TrainerMarker.from_json(obj, path)


def write_trainer_marker(directory, marker: TrainerMarker):
    """The marker in `directory`, atomically (markers.write_marker: the stage, and when and where it finished
    unless `marker` says)."""
    info = marker.to_json()
    del info["stage"]
    write_marker(directory, TRAINER_STAGE, **info)


def is_metric_key(key):
    """Whether an epoch record's key is one of its `metrics`: the training score, a held-out or validation metric."""
    return key in SCORE_NAMES or key.startswith(("test_", "validation_"))


@dataclasses.dataclass(frozen=True)
class EpochRecord:
    """One finished epoch of one worker, as metrics.json records it. The fields the module's docstring lists."""

    epoch: int = _field("integer", EVERY_TRAINER, required=True)
    loss: float = _field("number", EVERY_TRAINER, required=True)
    examples: int = _field("integer", EVERY_TRAINER, required=True)
    examples_per_sec: float = _field("number", EVERY_TRAINER, required=True)
    wall_time_sec: float = _field("number", EVERY_TRAINER, required=True)
    # the training score, test_<metric> and validation_<metric> (is_metric_key) -> a number (nan included)
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    cycle_sec: float | None = _field("number")
    epsilon: float | None = _field("number")
    training_metrics_of: str | None = _field("string", LOCAL_SGD)
    last_sync_step: int | None = _field("integer", LOCAL_SGD)
    synced_weights_checksum: int | None = _field("integer", LOCAL_SGD)
    syncs: int | None = _field("integer", LOCAL_SGD)
    sync_sec: float | None = _field("number", LOCAL_SGD)
    sync_wait_sec: float | None = _field("number")
    batch_norm_re_estimations: int | None = _field("integer")
    steps_started_by_worker: list[int] | None = _field("integers")
    extra: dict = dataclasses.field(default_factory=dict)  # keys this version does not know, kept as they are

    def __post_init__(self):
        # a key outside is_metric_key would be read back into `extra`: the record would not round-trip
        wrong = [key for key in self.metrics if not is_metric_key(key)]
        if wrong:
            raise ValueError(f"not metric names (a training score, test_* or validation_*): {', '.join(wrong)}")

    def get(self, key, default=None):
        """A metric by its key ("test_accuracy"), `default` when the epoch has none."""
        return self.metrics.get(key, default)

    def to_json(self):
        """The record's JSON object (a new dict)."""
        return {**self.extra, **_write_declared(self), **self.metrics}

    @classmethod
    def from_json(cls, obj, what=METRICS_FILE, path=""):
        """An EpochRecord from one of metrics.json's objects; RecordError naming the first bad field."""
        f = Fields(obj, what, path)
        declared = _read_declared(cls, f)
        metrics = {key: f.number(key, nullable=False) for key in obj if is_metric_key(key)}
        return cls(**declared, metrics=metrics, extra=f.rest())


def read_epoch_records(path, what=None):
    """The records of the metrics.json at `path`, oldest first; [] when there is none; ContractError if it is
    unreadable, RecordError naming the record and field that is not of the form."""
    what = what or path
    records = read_json(path, [], what=what)
    if not isinstance(records, list):
        raise RecordError(f"{what}: the file must be a JSON list of epoch records, got {describe(records)}")
    return [EpochRecord.from_json(obj, what, f"[{i}]") for i, obj in enumerate(records)]


def write_epoch_records(path, records):
    """metrics.json at `path`, atomically: the records, oldest first."""
    atomic_write_json(path, [record.to_json() for record in records])


def metrics_path(worker_dir):
    return os.path.join(worker_dir, METRICS_FILE)


__all__ = [
    "METRICS_FILE",
    "REQUIRED_MARKER_FIELDS",
    "SCORE_NAMES",
    "TRAINER_STAGE",
    "EpochRecord",
    "MetricValue",
    "RecordError",
    "TrainerMarker",
    "is_metric_key",
    "metrics_path",
    "read_epoch_records",
    "read_trainer_marker",
    "write_epoch_records",
    "write_trainer_marker",
]
