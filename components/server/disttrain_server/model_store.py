"""The model this process serves, loaded lazily and reloaded when a new one is published.

The aggregator publishes WORKDIR/final/model.keras with os.replace, so a new
model is a new inode at the same path. Each request may ask the store for the
model; at most every `reload_interval` seconds that costs one os.stat, and only
a changed (inode, mtime_ns, size) triggers a load. Everything else is a plain
attribute read, so the request path stays cheap.

A loaded model is served through one compiled TensorFlow graph (a tf.function
over any batch size): an eager Keras call spends most of its time in Python,
the graph does not (bench/README.md). Concurrent requests of one process are
answered by shared model calls (see batching).

TensorFlow is imported only when a model is loaded: gunicorn forks its workers
from a master that must never have touched TensorFlow (it is not fork-safe).
"""

import logging
import os
import threading
import time
from dataclasses import dataclass


from disttrain_contract import ContractError
from disttrain_contract.artifact import load_model
from disttrain_contract.evaluation import call_in_chunks
from disttrain_server.batching import MicroBatcher
from disttrain_server.errors import ModelUnavailable

log = logging.getLogger(__name__)

INPUT_KINDS = ("text", "image")
# Classifiers (softmax over meta["labels"]) and the faces task's embedding
# model (L2-normalised vectors of meta["embedding_size"], compared by distance).
CLASSIFIER_TASKS = ("text", "image")
EMBEDDING_TASKS = ("faces",)
SERVED_TASKS = CLASSIFIER_TASKS + EMBEDDING_TASKS
CALL_CHUNK = 512  # most instances per model call: bounds memory when the gallery embeds many faces at once


@dataclass(frozen=True)
class LoadedModel:
    """Shared by all request threads: frozen, and nothing in it changes after the load (the Keras
    model's variables are only read by serving), so threads need no lock to use it."""

    model: object
    meta: dict
    path: str
    key: tuple  # (st_ino, st_mtime_ns, st_size) of the file it was loaded from
    serve: object = None  # batch -> float64 outputs: the compiled model (see compiled_call)
    batcher: object = None  # the MicroBatcher in front of it, if batching is on

    @property
    def version(self):
        """The API version: the file's mtime in whole seconds (grows with each publication)."""
        return self.key[1] // 1_000_000_000

    @property
    def task(self):
        return self.meta.get("task", self.input_spec["kind"])

    @property
    def is_faces(self):
        return self.task in EMBEDDING_TASKS

    @property
    def cache_key(self):
        """Names this model's gallery embeddings (see gallery): mtime_ns and size, which every
        process and NFS client sees the same, unlike a version in whole seconds."""
        return f"{self.key[1]}-{self.key[2]}"

    @property
    def labels(self):
        # A faces model's meta lists the training people, but its outputs are not over them.
        return [] if self.is_faces else self.meta["labels"]

    @property
    def input_spec(self):
        return self.meta["input"]

    @property
    def face_preprocessing(self):
        """A faces model's preprocessing version (disttrain_contract.faces; 1 for a model
        saved before the field existed), checked at load; None for classifiers."""
        from disttrain_contract.faces import preprocessing_of

        return preprocessing_of(self.meta) if self.is_faces else None

    def predict(self, batch):
        """Softmax probabilities [n, n_labels] (faces: embeddings [n, embedding_size]) as float64
        for a batch built by instances.to_batch. A faces model gets its crops preprocessed the
        way it was trained (gallery faces, search queries and :predict alike)."""
        if self.is_faces:
            from disttrain_contract.faces import preprocess

            batch = preprocess(batch, self.face_preprocessing)
        return self.batcher.predict(batch) if self.batcher else self.serve(batch)


def compiled_call(model):
    """batch -> float64 outputs through one tf.function traced once for any batch size.

    Calling the model (not model.predict, which fails on string inputs in Keras 3 and
    costs ~60 ms a call) inside a graph: a single text costs ~0.4 ms instead of ~3.4 ms
    eagerly. autograph is off: the Keras call needs no conversion, and it would write
    generated files to a temp dir that a read-only container may not have."""
    import tensorflow as tf

    spec = model.inputs[0]
    graph = tf.function(lambda x: model(x, training=False), input_signature=[tf.TensorSpec(spec.shape, spec.dtype)], autograph=False)
    graph.get_concrete_function()  # trace now, at load, instead of in the first request

    # Thread-safe: a traced tf.function can run from many threads at once (each call has
    # its own execution state; the variables are only read), which the batcher's direct
    # path for full batches and --max-batch-size 1 both rely on.
    return lambda batch: call_in_chunks(graph, batch, CALL_CHUNK)


def _check_artifact(model, meta, path):
    """Refuse a model the API could not describe, at load time instead of on every request."""
    if not isinstance(meta, dict):
        raise ContractError(f"{path}: disttrain.json is not a JSON object")
    spec, labels = meta.get("input"), meta.get("labels")
    if meta.get("task") not in SERVED_TASKS:
        raise ContractError(f"{path}: task {meta.get('task')!r} is not served; this server serves classifiers ({', '.join(SERVED_TASKS)})")
    if not isinstance(spec, dict) or spec.get("kind") not in INPUT_KINDS:
        raise ContractError(f"{path}: disttrain.json has no usable input spec (kind must be one of {INPUT_KINDS})")
    if spec["kind"] == "image" and not all(isinstance(spec.get(k), int) and spec[k] > 0 for k in ("height", "width", "channels")):
        raise ContractError(f"{path}: image input spec needs positive integer height, width and channels")
    outputs = getattr(model, "output_shape", (None,))[-1]
    if meta["task"] in EMBEDDING_TASKS:
        _check_face_model(meta, spec, outputs, path)
        return
    if not isinstance(labels, list) or not labels:
        raise ContractError(f"{path}: disttrain.json has no label names")
    if outputs != len(labels):
        raise ContractError(f"{path}: the model has {outputs} outputs but disttrain.json names {len(labels)} labels")


def _check_face_model(meta, spec, outputs, path):
    """The gallery crops faces with disttrain_contract.faces, so the model must take exactly those crops."""
    from disttrain_contract.faces import FACE_SIZE, preprocessing_of

    if spec["kind"] != "image" or (spec["height"], spec["width"], spec["channels"]) != (FACE_SIZE, FACE_SIZE, 1):
        raise ContractError(f"{path}: a faces model must take {FACE_SIZE}x{FACE_SIZE}x1 face crops, its input is {spec}")
    size = meta.get("embedding_size")
    if not isinstance(size, int) or size < 1:
        raise ContractError(f"{path}: a faces model's disttrain.json needs a positive integer embedding_size")
    if outputs != size:
        raise ContractError(f"{path}: the model has {outputs} outputs but disttrain.json says embedding_size {size}")
    try:
        preprocessing_of(meta)
    except ContractError as err:
        raise ContractError(f"{path}: {err}") from None


class ModelStore:
    """Holds one LoadedModel per process; thread-safe (gunicorn --threads).

    max_batch_size > 1 answers concurrent predict calls with shared model calls
    (see batching; batch_timeout seconds is how long a batch may wait for more).
    observer: metrics.ServerMetrics (told of each load, counts each model call's instances) or None."""

    def __init__(self, path, reload_interval=5.0, clock=time.monotonic, max_batch_size=1, batch_timeout=0.0, observer=None):
        self.path = os.path.abspath(os.fspath(path))
        # What callers are told (503 reasons, /readyz, the page) names the file by its last two
        # parts ("final/model.keras"): the server's own paths stay in its log, not in public answers.
        self.public_name = os.path.join(os.path.basename(os.path.dirname(self.path)), os.path.basename(self.path))
        self.reload_interval = float(reload_interval)
        self.max_batch_size = int(max_batch_size)
        self.batch_timeout = float(batch_timeout)
        self.observer = observer
        self._clock = clock
        self._lock = threading.Lock()  # one thread checks and loads at a time
        self._current = None
        self._error = "not loaded yet"
        self._failed_key = None  # a broken file is reported once, not reloaded every interval
        self._next_check = float("-inf")

    def get(self):
        """The current model, after checking for a newly published one if it is time to.

        Raises ModelUnavailable (-> 503) while no model could be loaded."""
        if self._clock() >= self._next_check:
            # While one thread reloads, the others keep answering with the model
            # they have; only when there is none yet do they wait for the load.
            if self._lock.acquire(blocking=self._current is None):
                try:
                    if self._clock() >= self._next_check:
                        self._refresh()
                        self._next_check = self._clock() + self.reload_interval
                finally:
                    self._lock.release()
        current = self._current
        if current is None:
            raise ModelUnavailable(self._error)
        return current

    def _refresh(self):
        try:
            st = os.stat(self.path)
        except OSError as err:
            # Keep serving what is loaded: a model in memory stays valid even if
            # its file went away; the aggregator never deletes, it replaces.
            self._error = f"no model at {self.public_name} ({err.strerror})"
            return
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        current = self._current
        if (current is not None and current.key == key) or key == self._failed_key:
            return
        started = time.monotonic()
        try:
            model, meta = load_model(self.path)
            _check_artifact(model, meta, self.path)
            serve = compiled_call(model)
        except ContractError as err:
            # A half-copied or foreign file: report it, keep the previous model.
            self._failed_key, self._error = key, str(err).replace(self.path, self.public_name)
            log.warning("cannot load %s: %s%s", self.path, err, "; still serving the previous model" if current else "")
            return
        # If the file was replaced again between stat and load we loaded the newer
        # one under the older key; the next check then just loads it once more.
        if self.observer:
            serve = self.observer.count_instances(serve)  # every model call: batched, direct and the gallery's
        # Each model gets its own batcher: a batch never mixes two model versions.
        batcher = MicroBatcher(serve, self.max_batch_size, self.batch_timeout) if self.max_batch_size > 1 else None
        self._current = LoadedModel(model=model, meta=meta, path=self.path, key=key, serve=serve, batcher=batcher)
        self._failed_key, self._error = None, None
        seconds = time.monotonic() - started
        if self.observer:
            self.observer.model_loaded(self._current, seconds)
        log.info("loaded %s (version %d, %s task) in %.1fs", self.path, self._current.version, meta["task"], seconds)
