"""What lives where in the shared working directory.

WORKDIR/
  data/                      written by the copier
    manifest.json            task, source, shards (count + sha256), labels, test split, seed
    vocab.txt                text tasks: the shared vocabulary, one token per line
    shard-00000.jsonl        text shard: one {"text", "label"} object per line
    shard-00000.x.npy/.y.npy array shard (images): pixels uint8 [n,h,w,c], labels int64 [n]
    test.jsonl | test.x.npy/.y.npy   the held-out split, same formats
    _SUCCESS                 marker: the copier finished
  train/                     written by the trainers
    worker-00000/
      checkpoints/           one checkpoint per epoch (resume after a restart)
      tensorboard/           TensorBoard event files
      metrics.json           per-epoch loss, accuracy, examples/s, wall time (validation_* with --validation-fraction)
      progress.json          live progress (epoch, step, loss, examples/s, ETA, per-epoch history), rewritten
                             at most once per --progress-interval; the server's page polls it
      model.keras            the worker's model (multiworker: chief only)
      _SUCCESS               marker: this worker finished (JSON: init hash, example count ...)
  final/                     written by the aggregator
    model.keras              the model the server serves
    saved_model/<version>/   the same model as a TensorFlow SavedModel (TF Serving, KServe; aggregator --exports)
    model.tflite             the same model for TensorFlow Lite (aggregator --exports)
    report.json              per-worker and final held-out metrics; average: the three --combine candidates
    report.png               the same as bar and curve plots
    _SUCCESS                 marker: the aggregator published a model
  sweep/                     written by the sweep (optional stage between copier and trainer)
    data/                    the training shards split again: shard-00000 (train) and validation
    study.journal            the Optuna study (JournalFileBackend), shared by every sweep process
    heartbeats/trial-N       each running trial's heartbeat (a counter its process rewrites)
    trials/trial-N/          each trial's trainer output (metrics.json, log)
    best.json                the best parameters and their validation accuracy (--params-from)
    trials.csv, *.png        every trial; optimisation history, importances, parallel coordinates
    _SUCCESS                 marker: the study has its trials
  rejected/<time>/           a final model the aggregator's quality gate refused, with its report
"""

import os
import re

MARKER = "_SUCCESS"
PROGRESS_FILE = "progress.json"  # in each worker directory (disttrain_contract.progress: its fields)
METRICS_FILE = "metrics.json"  # in each worker directory (disttrain_contract.trainer_records.EpochRecord: its records)
REPORT_FILE = "report.json"  # in final/ and in rejected/<time>/ (disttrain_contract.report: its fields)
WORKDIR_ENV = "DISTTRAIN_WORKDIR"


def default_workdir():
    return os.environ.get(WORKDIR_ENV, "workdir")


def whole_number(text, signed=False):
    """`text` as an int if it is ASCII decimal digits (after one "-" when `signed`), else None.

    Not str.isdigit(): it also accepts "³" and "٣", which int() refuses or reads as 3; a version
    directory, a URL's version or a form field spelled so is not a number here."""
    return int(text) if isinstance(text, str) and re.fullmatch(r"-?[0-9]+" if signed else r"[0-9]+", text) else None


def job_completion_index(default):
    """This pod's index in an Indexed Job ($JOB_COMPLETION_INDEX, set by Kubernetes), else `default`."""
    value = whole_number(os.environ.get("JOB_COMPLETION_INDEX"))
    return default if value is None else value


class Workdir:
    """Paths inside one working directory. Pure path arithmetic, no I/O."""

    def __init__(self, root):
        self.root = os.path.abspath(os.fspath(root))

    # copier
    @property
    def data(self):
        return os.path.join(self.root, "data")

    # trainer
    @property
    def train(self):
        return os.path.join(self.root, "train")

    def worker(self, index, train_dir=None):
        return os.path.join(train_dir or self.train, worker_dirname(index))

    # sweep
    @property
    def sweep(self):
        return os.path.join(self.root, "sweep")

    @property
    def best_params(self):
        return os.path.join(self.sweep, "best.json")

    # aggregator
    @property
    def final(self):
        return os.path.join(self.root, "final")

    @property
    def final_model(self):
        return os.path.join(self.final, "model.keras")


def worker_dirname(index):
    return f"worker-{int(index):05d}"


def marker_path(directory):
    return os.path.join(directory, MARKER)
