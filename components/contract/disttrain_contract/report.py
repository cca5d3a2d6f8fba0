"""report.json: what the aggregator says of a run, as one typed record.

The aggregator writes it (next to final/model.keras, or in rejected/<time>/ when the quality gate
refuses the model: disttrain_aggregator.report_builder builds it); the server's dashboard and page
read it (disttrain_server.runs_data, web), as do the aggregator's --baseline, the scripts and the
tests. All of them go through `Report`: `Report.read(path)` / `Report.from_json(obj)` to read,
`report.to_json()` / `write_report(path, report)` to write.

The JSON stays what it always was (a reader of an older run's report on the volume finds every
key where it was): top-level facts of the run, a row per worker model ("workers") and the final
model ("final") with its held-out metrics flat in the row ("test_accuracy", "test_rmse" ...), and
sections whose form their own modules define (analysis, combine, gate, exports, data: kept as
JSON objects here). A field a report does not have loads as its default (reports of older
aggregators lack problem, primary_metric, privacy, published ...); a field of the wrong type is
a RecordError naming it in one line; a key this version does not know is kept (`extra`) and
written back as it was.

`privacy`: the privacy budget a differentially private run spent (epsilon, delta, ...; the aggregator
copies the trainers' sections, disttrain_trainer.privacy.summary). A field no writer fills yet, for the
stage that will: `published` (where the model was published beyond the volume: [{"url", "version"}, ...]).

No TensorFlow here: the server and the copier import the contract without it.
"""

import dataclasses
import json
from typing import Any

from disttrain_contract.atomic import atomic_write_json, read_json
from disttrain_contract.layout import REPORT_FILE
from disttrain_contract.metrics import Metric, primary_metric
from disttrain_contract.records import Fields, RecordError
from disttrain_contract.strategies import STRATEGIES
from disttrain_contract.tasks import TASKS

# what parameter-server training adds at the top level (the chief's marker's counts)
PS_FACTS = ("tasks", "steps_scheduled", "steps_started_by_worker", "steps_retried")


@dataclasses.dataclass(frozen=True)
class Column:
    """One held-out metric as the tables show it: the row key, the page's title, the console's (<= 11 characters)."""

    key: str
    title: str
    short: str


def metric_columns(task=None, problem="classification"):
    """The held-out metric columns of a run's tables, the primary metric first: the aggregator's printed
    table and the server's dashboard show these."""
    if problem == "regression":
        return [
            Column("test_rmse", "RMSE", "RMSE"),
            Column("test_mae", "MAE", "MAE"),
            Column("test_r2", "R²", "R²"),
            Column("test_loss", "MSE", "MSE"),
        ]
    if task in TASKS and TASKS[task].retrieval:
        return [
            Column("test_accuracy", "top-1 retrieval", "top-1"),
            Column("test_same_person_distance", "same-person distance", "same dist"),
            Column("test_different_person_distance", "other-person distance", "other dist"),
        ]
    return [Column("test_accuracy", "accuracy", "test acc"), Column("test_loss", "loss", "test loss")]


@dataclasses.dataclass
class MetricSummary:
    """The metric a run's models are ranked and gated by, as the report names it."""

    name: str
    direction: str  # "max" or "min" (metrics.Metric.direction)
    label: str

    @classmethod
    def of(cls, metric: Metric):
        return cls(metric.name, metric.direction, metric.label)

    def to_json(self):
        return {"name": self.name, "direction": self.direction, "label": self.label}

    @classmethod
    def from_fields(cls, f: Fields):
        return cls(
            f.string("name", required=True, nullable=False),
            f.string("direction", required=True, nullable=False, choices=("max", "min")),
            f.string("label", default=None) or f.obj["name"],
        )


@dataclasses.dataclass
class ModelRow:
    """One evaluated model: a worker's (name "worker 0"), the promoted chief's, or the final one (no name).
    `metrics`: its held-out numbers, "test_<metric>" -> value (faces add their retrieval figures), flat in
    the JSON row beside name, worker_index and examples."""

    examples: int | float | None
    metrics: dict = dataclasses.field(default_factory=dict)
    name: str | None = None
    worker_index: int | None = None

    def __getitem__(self, key):
        """A held-out metric by its row key (KeyError if the model has none)."""
        return self.metrics[key]

    def get(self, key, default=None):
        return self.metrics.get(key, default)

    def to_json(self):
        head = {} if self.name is None else {"name": self.name}
        if self.worker_index is not None:
            head["worker_index"] = self.worker_index
        return {**head, "examples": self.examples, **self.metrics}

    @classmethod
    def from_json(cls, obj, task=None, problem="classification", named=False, what=REPORT_FILE):
        """A row from its JSON object (the aggregator builds its rows as such); RecordError naming a bad field."""
        return cls.from_fields(
            Fields(obj, what, "workers[]" if named else "final"), metric_columns(task, problem), named
        )

    @classmethod
    def from_fields(cls, f: Fields, columns, named=False):
        """named: a worker's row, which has a name (the final one has none)."""
        row = cls(
            examples=f.number("examples"),
            name=f.string("name", required=named, nullable=not named),
            worker_index=f.integer("worker_index"),
        )
        for column in columns:  # the numbers the tables show: a number (or null: not measured)
            f.number(column.key)
        row.metrics = {key: f.obj[key] for key in f.obj if key not in ("name", "worker_index", "examples")}
        return row


@dataclasses.dataclass
class Privacy:
    """The privacy budget a differentially private run spent; absent for a run without one."""

    epsilon: float
    delta: float
    mechanism: str | None = None  # e.g. "DP-SGD"
    details: dict = dataclasses.field(default_factory=dict)  # the accountant's other figures (noise, clip norm ...)

    def to_json(self):
        return {
            **self.details,
            "epsilon": self.epsilon,
            "delta": self.delta,
            **({"mechanism": self.mechanism} if self.mechanism is not None else {}),
        }

    @classmethod
    def from_json(cls, obj, what="the privacy section"):
        """A Privacy from its JSON object (a trainer's disttrain_trainer.privacy.summary, a marker's section)."""
        return cls.from_fields(Fields(obj, what))

    @classmethod
    def from_fields(cls, f: Fields):
        privacy = cls(
            f.number("epsilon", required=True, nullable=False),
            f.number("delta", required=True, nullable=False),
            f.string("mechanism"),
        )
        privacy.details = f.rest()
        return privacy


@dataclasses.dataclass
class Publication:
    """One place the final model was published beyond the volume (object storage ...)."""

    url: str
    version: str | int | None = None
    published_at: float | None = None  # Unix seconds
    details: dict = dataclasses.field(default_factory=dict)

    def to_json(self):
        return {
            **self.details,
            "url": self.url,
            **({"version": self.version} if self.version is not None else {}),
            **({"published_at": self.published_at} if self.published_at is not None else {}),
        }

    @classmethod
    def from_fields(cls, f: Fields):
        url = f.string("url", required=True, nullable=False)
        version = f.any("version")
        if version is not None and (isinstance(version, bool) or not isinstance(version, (str, int))):
            raise f.error("version", "a string or an integer")
        publication = cls(url, version, f.number("published_at"))
        publication.details = f.rest()
        return publication


# Written even when None (readers of every version expect the key) vs. written only when set.
_ALWAYS = (
    "problem",
    "target",
    "primary_metric",
    "metrics",
    "labels",
    "source",
    "seed",
    "split_seed",
    "init_weights_sha256",
    "test_examples",
    "epochs",
    "training_parameters",
    "parameters_origin",
    "training_wall_time_sec",
    "data",
    "created_at",
)
_WHEN_SET = ("missing_workers", "combine", "analysis", "gate", "exports", "privacy")


@dataclasses.dataclass
class Report:
    """report.json. Required: strategy, task, workers, final; everything else loads as its default when absent."""

    strategy: str
    task: str
    workers: list[ModelRow]
    final: ModelRow
    problem: str = "classification"
    target: str | None = None  # regression: the target's name
    primary_metric: MetricSummary | None = None
    metrics: list[str] | None = None  # every held-out metric's name (metrics.metrics_of)
    labels: list | None = None
    source: str | None = None
    seed: int | None = None
    split_seed: int | None = None
    init_weights_sha256: str | None = None
    missing_workers: list[dict] | None = None  # average with --min-workers: the workers left out
    combine: dict | None = None  # average: the candidates (combine.py)
    test_examples: int | None = None
    epochs: int | None = None
    training_parameters: dict | None = None
    parameters_origin: dict | None = None
    training_wall_time_sec: float | None = None
    ps_facts: dict | None = None  # parameterserver: PS_FACTS, at the top level of the JSON
    data: dict | None = None  # the copier's statistics and validation (data_summary.py)
    created_at: float | None = None
    analysis: dict | None = None  # analysis.py
    gate: dict | None = None  # gate.py's verdict, forced, published
    exports: dict | None = None  # exports.py (absent in a refused model's report)
    privacy: Privacy | None = None
    published: list[Publication] = dataclasses.field(default_factory=list)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)  # keys this version does not know

    # ------------------------------------------------------------------ what it means
    @property
    def metric(self) -> Metric:
        """The primary metric (metrics.primary_metric) of this run's task and problem."""
        return primary_metric(self.task, self.problem)

    @property
    def columns(self):
        return metric_columns(self.task, self.problem)

    @property
    def retrieval(self):
        return self.task in TASKS and TASKS[self.task].retrieval

    @property
    def final_label(self):
        """The final model's row name: how a run of one model per worker combined them ("final (ensemble)"), or
        "final (promoted)" for the group's one model (also for a strategy this version does not know)."""
        strategy = STRATEGIES.get(self.strategy)
        if strategy is not None and strategy.model_per_worker:
            return f"final ({(self.combine or {}).get('published', 'average')})"
        return "final (promoted)"

    # ------------------------------------------------------------------ JSON
    def to_json(self):
        """The JSON object (a new dict: the caller may change it)."""
        out = dict(self.extra)
        out.update(
            strategy=self.strategy,
            task=self.task,
            workers=[row.to_json() for row in self.workers],
            final=self.final.to_json(),
        )
        for key in _ALWAYS + _WHEN_SET:
            value = getattr(self, key)
            if key in _WHEN_SET and value is None:
                continue
            out[key] = value.to_json() if hasattr(value, "to_json") else value
        out.update(self.ps_facts or {})
        if self.published:
            out["published"] = [p.to_json() for p in self.published]
        return json.loads(json.dumps(out))  # a deep copy: changing it changes no section of this report

    @classmethod
    def from_json(cls, obj, what=REPORT_FILE):
        """A Report from report.json's object; RecordError (a ContractError) naming the first bad field."""
        f = Fields(obj, what)
        task = f.string("task", required=True, nullable=False)
        problem = f.string("problem", default="classification", nullable=False)
        columns = metric_columns(task, problem)
        workers = f.array("workers", required=True, nullable=False)
        rows = [ModelRow.from_fields(f.nested("workers", i), columns, named=True) for i in range(len(workers))]
        f.json_object("final", required=True, nullable=False)
        primary = f.json_object("primary_metric")
        privacy = f.json_object("privacy")
        published = f.array("published", default=[], nullable=False)
        missing = f.array("missing_workers")
        if missing is not None:
            for i in range(len(missing)):
                f.nested("missing_workers", i)  # each one an object
        metric_names = f.array("metrics")
        if metric_names is not None and not all(isinstance(name, str) for name in metric_names):
            raise f.error("metrics", "a list of metric names")
        ps_facts = {key: f.any(key) for key in PS_FACTS if key in obj} or None
        report = cls(
            strategy=f.string("strategy", required=True, nullable=False),
            task=task,
            workers=rows,
            final=ModelRow.from_fields(f.nested("final"), columns),
            problem=problem,
            target=f.string("target"),
            primary_metric=MetricSummary.from_fields(f.nested("primary_metric")) if primary is not None else None,
            metrics=metric_names,
            labels=f.array("labels"),
            source=f.string("source"),
            seed=f.integer("seed"),
            split_seed=f.integer("split_seed"),
            init_weights_sha256=f.string("init_weights_sha256"),
            missing_workers=missing,
            combine=f.json_object("combine"),
            test_examples=f.integer("test_examples"),
            epochs=f.integer("epochs"),
            training_parameters=f.json_object("training_parameters"),
            parameters_origin=f.json_object("parameters_origin"),
            training_wall_time_sec=f.number("training_wall_time_sec"),
            ps_facts=ps_facts,
            data=f.json_object("data"),
            created_at=f.number("created_at"),
            analysis=f.json_object("analysis"),
            gate=f.json_object("gate"),
            exports=f.json_object("exports"),
            privacy=Privacy.from_fields(f.nested("privacy")) if privacy is not None else None,
            published=[Publication.from_fields(f.nested("published", i)) for i in range(len(published))],
        )
        report.extra = f.rest()
        return report

    @classmethod
    def read(cls, path, what=None):
        """The report at `path`; ContractError (one line) if it cannot be read or is not a report."""
        obj = read_json(path, default=FileNotFoundError, what=what or path)
        if obj is FileNotFoundError:
            raise RecordError(f"{what or path}: no such file")
        return cls.from_json(obj, what or path)


def write_report(path, report: Report):
    """report.json at `path`, atomically (a temporary name, then a rename)."""
    atomic_write_json(path, report.to_json())


__all__ = [
    "REPORT_FILE",
    "Column",
    "MetricSummary",
    "ModelRow",
    "Privacy",
    "Publication",
    "RecordError",
    "Report",
    "metric_columns",
    "write_report",
]
