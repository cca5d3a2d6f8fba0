"""progress.json: a worker's live progress, as one typed record.

Each trainer rewrites WORKER_DIR/progress.json while it trains (disttrain_trainer.progress.ProgressFile
is the writer: at most once per --progress-interval, atomically, not fsynced); the server's page
polls every worker's (disttrain_server.progress, runs_data) and draws a bar per worker and the
per-epoch curves (static/progress.js). Both go through `Progress`: `progress.to_json()` to write,
`Progress.from_json(obj)` to read; a field of the wrong type is a RecordError naming it in one line,
an optional field a file does not have (an older trainer's) loads as its default.

The JSON object:
    worker, tag, strategy     which worker this is ("worker 1/2", "chief (task 0)")
    state                     starting | training | evaluating | done | failed (error: the message) |
                              preempted (stopped on SIGTERM after saving what its strategy allows, exit
                              code 75; the replacement resumes); a reader takes any other name as it is
                              (a newer trainer's state)
    score                     the name of the step's running score: "accuracy", or "mae" (regression)
    epoch, epochs             the epoch under way (1-based; 0 before the first) and the last one
    step, steps_per_epoch     steps done in this epoch, and in a whole epoch
    global_step, total_steps  steps done over the whole run (all epochs), and at the end
    loss, <score>             running means over this epoch's steps so far (null when not known yet:
                              parameterserver's chief learns them when the epoch's calls return)
    examples_per_sec          this epoch's examples so far / its seconds so far
    eta_sec                   seconds to the end of training at this run's pace so far (evaluations
                              and checkpoints included), null before the first step
    time                      wall-clock time of this write (Unix seconds): how fresh it is
    writes                    this write's number, counted from the process's first
    history                   one entry per finished epoch: "epoch" and the HISTORY_KEYS it has (loss,
                              accuracy, held-out and validation accuracy, examples/s: the page's curves;
                              a differentially private run's epsilon spent so far)
    error                     (failed) the message

No TensorFlow here: the server imports the contract without it.
"""

import dataclasses

from disttrain_contract.layout import PROGRESS_FILE
from disttrain_contract.records import Fields, RecordError

STATES = ("starting", "training", "evaluating", "done", "failed", "preempted")  # the ones this trainer writes
# An epoch's record keys the page draws, when the worker has them (faces: no accuracy on the held-out split).
# Regression: the training MAE and the held-out RMSE in place of the accuracies ("score" names the running one).
HISTORY_KEYS = (
    "loss",
    "accuracy",
    "test_accuracy",
    "validation_accuracy",
    "mae",
    "test_rmse",
    "validation_rmse",
    "examples_per_sec",
    "epsilon",
)  # (epsilon: a differentially private run's privacy budget so far)
# The newest epochs a file keeps, so that it stays small (the server reads at most 256 KiB of it).
MAX_HISTORY = 500


def history_entry(record):
    """An epoch's record (metrics.json's) as the history keeps it: its epoch and the HISTORY_KEYS it has."""
    return {"epoch": record["epoch"], **{key: record[key] for key in HISTORY_KEYS if key in record}}


@dataclasses.dataclass
class Progress:
    worker: int
    tag: str
    strategy: str
    epochs: int
    steps_per_epoch: int
    state: str = "starting"
    score: str = "accuracy"
    epoch: int = 0
    step: int = 0
    global_step: int = 0
    total_steps: int | None = None
    loss: float | None = None
    score_value: float | None = None  # the running score, under the key `score` names
    examples_per_sec: float | None = None
    eta_sec: float | None = None
    time: float | None = None
    writes: int | None = None
    history: list[dict] = dataclasses.field(default_factory=list)
    error: str | None = None
    extra: dict = dataclasses.field(default_factory=dict)  # keys this version does not know, kept as they are

    def __post_init__(self):
        if self.total_steps is None:
            self.total_steps = self.epochs * self.steps_per_epoch

    def to_json(self):
        out = {
            **self.extra,
            "worker": self.worker,
            "tag": self.tag,
            "strategy": self.strategy,
            "state": self.state,
            "score": self.score,
            "epoch": self.epoch,
            "epochs": self.epochs,
            "step": self.step,
            "steps_per_epoch": self.steps_per_epoch,
            "global_step": self.global_step,
            "total_steps": self.total_steps,
            "loss": self.loss,
            self.score: self.score_value,
            "examples_per_sec": self.examples_per_sec,
            "eta_sec": self.eta_sec,
            "time": self.time,
            "history": list(self.history),
        }
        if self.writes is not None:
            out["writes"] = self.writes
        if self.error is not None:
            out["error"] = self.error
        return out

    @classmethod
    def from_json(cls, obj, what=PROGRESS_FILE):
        """A Progress from progress.json's object; RecordError (a ContractError) naming the first bad field."""
        f = Fields(obj, what)
        score = f.string("score", default="accuracy", nullable=False)
        history = f.array("history", default=[], nullable=False)
        for i in range(len(history)):
            f.nested("history", i).number("epoch", required=True, nullable=False)
        progress = cls(
            worker=f.integer("worker", required=True, nullable=False),
            tag=f.string("tag", required=True, nullable=False),
            strategy=f.string("strategy", required=True, nullable=False),
            epochs=f.integer("epochs", required=True, nullable=False),
            steps_per_epoch=f.integer("steps_per_epoch", required=True, nullable=False),
            # (not checked against STATES: the server reads the files of trainers newer than itself)
            state=f.string("state", required=True, nullable=False),
            score=score,
            epoch=f.integer("epoch", default=0, nullable=False),
            step=f.integer("step", default=0, nullable=False),
            global_step=f.integer("global_step", default=0, nullable=False),
            total_steps=f.integer("total_steps"),
            loss=f.number("loss"),
            score_value=f.number(score),
            examples_per_sec=f.number("examples_per_sec"),
            eta_sec=f.number("eta_sec"),
            time=f.number("time"),
            writes=f.integer("writes"),
            history=history,
            error=f.string("error"),
        )
        progress.extra = f.rest()
        return progress


__all__ = ["HISTORY_KEYS", "MAX_HISTORY", "PROGRESS_FILE", "STATES", "Progress", "RecordError", "history_entry"]
