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
So is the user's --model-module (it registers custom Keras layers, so it imports
Keras): each worker imports it before its first load.

A user's own model (tasks table and array; docs/formats.md) takes the
numeric inputs its disttrain.json lists ("inputs": one, or several named ones)
and answers through its "head": a classifier's raw output becomes class
probabilities (evaluation.probabilities), a regression's one value per instance.
A typed table's model (task typed_table) takes one [n, 1] input per column of the
TableSpec its disttrain.json's input is (typed_table.py), of the column's dtype
(string, float32 or int64), and answers the same way.

A model's one input (text, image) is fed in the dtype the model declares: an image request's
pixels are uint8 0..255 (decoded files, pixel arrays), which the trainer feeds a float input as
they are (cast, no rescaling: the model's own layers scale them), and so does compiled_call.

"Loaded" means it answers: at load the model is called once on a synthetic instance built from its
signature (zeros; a placeholder string for text: no data row, a published model carries no training
data), through the path requests take, and must answer finite outputs of the announced shape. A
model that does not -- or any exception while loading and checking it, not only ContractError -- is
a recorded load failure (LoadFailure): its reason is what /readyz and the model status report, the
file is not loaded again until it changes, and a model loaded earlier keeps serving.
"""

import dataclasses
import logging
import math
import os
import threading
import time
from dataclasses import dataclass

import numpy as np

from disttrain_contract import ContractError
from disttrain_contract.artifact import load_model, read_meta
from disttrain_contract.evaluation import HEADS, call_in_chunks, head_of, probabilities
from disttrain_contract.manifest import NUMERIC_TASKS
from disttrain_contract.tasks import TASKS
from disttrain_contract.typed_table import is_typed
from disttrain_contract.user_model import archive_config, check_archive_classes, check_code_matches, import_model_module
from disttrain_server.batching import MicroBatcher
from disttrain_server.errors import ModelUnavailable

log = logging.getLogger(__name__)

INPUT_KINDS = ("text", "image") + NUMERIC_TASKS
# Classifiers (probabilities over meta["labels"]), the faces task's embedding
# model (L2-normalised vectors of meta["embedding_size"], compared by distance),
# and a user's own models of numeric inputs (classifiers or regressions).
CLASSIFIER_TASKS = ("text", "image")
EMBEDDING_TASKS = ("faces",)
# The tasks whose model takes its own named inputs (its disttrain.json "inputs"): tables, arrays, typed tables.
OWN_INPUT_TASKS = tuple(name for name, task in TASKS.items() if task.input_name is None)
SERVED_TASKS = CLASSIFIER_TASKS + EMBEDDING_TASKS + OWN_INPUT_TASKS
CLASSIFIER_HEADS = tuple(head for head in HEADS if head not in ("value", "embedding"))  # (embedding: the faces task's)
SIGMOID_HEADS = ("sigmoid", "sigmoid_logits")
REASON_CHARS = 500  # a 503 reason is one line of at most this many characters (Keras' messages can be pages)
CALL_CHUNK = 512  # most instances per model call: bounds memory when the gallery embeds many faces at once
SELF_TEST_TEXT = "self-test"  # the text instance of the load's self-test (any non-empty string a request could send)


def version_of(key):
    """The API version of a file whose stat is `key` (inode, mtime in ns, size): its mtime in whole seconds."""
    return key[1] // 1_000_000_000


@dataclass(frozen=True)
class LoadFailure:
    """A published file that could not be served: its version (mtime in whole seconds, as
    LoadedModel.version) and why, in one line."""

    version: int
    reason: str


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
    inputs: tuple = ()  # own-input tasks: the model's inputs, [{"name", "shape", "dtype"}] (see numeric_inputs)
    table: object = None  # a typed table's model: the TableSpec of its input (typed.spec_of)

    @property
    def version(self):
        """The API version: the file's mtime in whole seconds (grows with each publication)."""
        return version_of(self.key)

    @property
    def task(self):
        return self.meta.get("task", self.input_spec["kind"])

    @property
    def is_faces(self):
        return self.task in EMBEDDING_TASKS

    @property
    def is_numeric(self):
        """A table or array model (a user's own, or the built-in MLP): numeric inputs named by its disttrain.json."""
        return self.task in NUMERIC_TASKS

    @property
    def is_typed(self):
        """A typed table's model: one [n, 1] input per column of its TableSpec (`table`), raw values."""
        return self.table is not None

    @property
    def own_inputs(self):
        """A user's own model of the inputs its disttrain.json names: numeric (tables, arrays) or a typed table's columns."""
        return self.is_numeric or self.is_typed

    @property
    def is_regression(self):
        return self.meta.get("problem") == "regression"

    @property
    def head(self):
        return head_of(self.meta)

    @property
    def target(self):
        """What a regression predicts (its training label column), or None."""
        return self.meta.get("target") if self.is_regression else None

    @property
    def features(self):
        """A table's feature column names, in the order of its "features" input ([] otherwise)."""
        return list(self.input_spec.get("features") or []) if self.input_spec.get("kind") == "table" else []

    @property
    def cache_key(self):
        """Names this model's gallery embeddings (see gallery): mtime_ns and size, which every
        process and NFS client sees the same, unlike a version in whole seconds."""
        return f"{self.key[1]}-{self.key[2]}"

    @property
    def labels(self):
        # A faces model's meta lists the training people, but its outputs are not over them; a regression has none.
        return [] if self.is_faces or self.is_regression else self.meta["labels"]

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
        """Class probabilities [n, n_labels] (faces: embeddings [n, embedding_size]; regression: values [n])
        as float64 for a batch built by instances.to_batch (numeric models: numeric.to_batch, a dict of
        arrays for several inputs). A faces model gets its crops preprocessed the way it was trained
        (gallery faces, search queries and :predict alike)."""
        if self.is_faces:
            from disttrain_contract.faces import preprocess

            batch = preprocess(batch, self.face_preprocessing)
        return self.batcher.predict(batch) if self.batcher else self.serve(batch)


def compiled_call(model, inputs=None, finish=None):
    """batch -> float64 outputs through one tf.function traced once for any batch size.

    `inputs`: a numeric model's inputs (numeric_inputs): the batch is one array, or a dict of
    arrays by input name; None: the model's one input (text, image). `finish`: raw outputs ->
    what the server answers (a head's probabilities, a regression's values), per model call.

    Calling the model (not model.predict, which fails on string inputs in Keras 3 and
    costs ~60 ms a call) inside a graph: a single text costs ~0.4 ms instead of ~3.4 ms
    eagerly. autograph is off: the Keras call needs no conversion, and it would write
    generated files to a temp dir that a read-only container may not have."""
    import tensorflow as tf

    if inputs is None:
        spec = model.inputs[0]
        graph = tf.function(
            lambda x: model(x, training=False), input_signature=[tf.TensorSpec(spec.shape, spec.dtype)], autograph=False
        )
        graph.get_concrete_function()  # trace now, at load, instead of in the first request
        declared = str(spec.dtype)
        # Requests bring uint8 pixels (or strings); a float (or other numeric) image input gets
        # them cast, exactly as the trainer feeds it (tasks.own: astype of the model's dtype).
        feed = (
            (lambda batch: batch)
            if declared == "string"
            else (lambda batch: np.asarray(batch).astype(declared, copy=False))
        )
    else:
        graph, feed = (
            _numeric_graph(model, inputs),
            (lambda batch: batch),
        )  # numeric.to_batch casts to each input's dtype

    # Thread-safe: a traced tf.function can run from many threads at once (each call has
    # its own execution state; the variables are only read), which the batcher's direct
    # path for full batches and --max-batch-size 1 both rely on.
    if finish is None:
        return lambda batch: call_in_chunks(graph, feed(batch), CALL_CHUNK)
    return lambda batch: finish(call_in_chunks(graph, feed(batch), CALL_CHUNK))


def _numeric_graph(model, inputs):
    """The tf.function of a numeric model: one tensor in, or a dict of named tensors (passed the way
    the model takes them: a dict, or a list in its inputs' order); refuses a model whose output is not
    one tensor (ContractError, at load)."""
    import tensorflow as tf

    specs = {item["name"]: tf.TensorSpec((None, *item["shape"]), item["dtype"]) for item in inputs}
    if len(inputs) == 1:
        signature, call = [next(iter(specs.values()))], (lambda x: model(x, training=False))
    elif isinstance(model.input, dict):
        signature, call = [specs], (lambda x: model(x, training=False))
    else:
        order = [tensor.name for tensor in model.inputs]
        signature, call = [specs], (lambda x: model([x[name] for name in order], training=False))
    graph = tf.function(call, input_signature=signature, autograph=False)
    try:
        outputs = graph.get_concrete_function().structured_outputs
    except Exception as err:  # a model that cannot take the inputs its disttrain.json describes
        raise ContractError(
            f"the model does not run on the inputs its disttrain.json describes ({_describe(inputs)}): "
            f"{type(err).__name__}: {_one_line(str(err))}"
        ) from None
    if not isinstance(outputs, tf.Tensor):
        raise ContractError(
            f"the model has {len(tf.nest.flatten(outputs))} outputs; this server serves models with one output tensor"
        )
    return graph


def numeric_inputs(model, meta, path):
    """A table or array model's inputs, [{"name", "shape" (per example, None = any size), "dtype"}]:
    disttrain.json's "inputs" (the trainer writes them for every model), checked against the Keras
    model's own; without them, the model's (one input: named as the input spec says). A typed table's
    inputs may be strings too (its text columns)."""
    from disttrain_server.signature import TF_DTYPES, TYPED_DTYPES

    dtypes = TYPED_DTYPES if is_typed(meta["input"]) else TF_DTYPES

    ours = [(tensor.name, list(tensor.shape[1:]), str(tensor.dtype)) for tensor in model.inputs]
    declared = meta.get("inputs")
    if declared is None:
        if len(ours) == 1:
            ours[0] = (meta["input"].get("name") or ours[0][0], *ours[0][1:])
        declared = [{"name": name, "shape": shape, "dtype": dtype} for name, shape, dtype in ours]
    if (
        not isinstance(declared, list)
        or not declared
        or not all(
            isinstance(item, dict)
            and isinstance(item.get("name"), str)
            and item["name"]
            and isinstance(item.get("shape"), list)
            and all(size is None or (type(size) is int and size >= 0) for size in item["shape"])
            for item in declared
        )
    ):
        raise ContractError(
            f'{path}: disttrain.json "inputs" must be a list of {{"name", "shape", "dtype"}} objects, got {declared!r:.200}'
        )
    names = [item["name"] for item in declared]
    if len(set(names)) != len(names):
        raise ContractError(f"{path}: disttrain.json names an input twice: {names}")
    unsupported = [
        f"{item['name']} ({str(item.get('dtype'))[:40]})"
        for item in declared
        if not isinstance(item.get("dtype"), str) or item["dtype"] not in dtypes
    ]  # (a list is unhashable)
    if unsupported:
        raise ContractError(
            f"{path}: inputs of a type this server cannot take: {', '.join(unsupported)}; it serves "
            f"inputs of {', '.join(dtypes)}"
        )
    if len(declared) != len(ours):
        raise ContractError(
            f"{path}: disttrain.json lists {len(declared)} inputs ({', '.join(names)}), the model has {len(ours)}"
        )
    if len(declared) > 1:
        expected = sorted(model.input) if isinstance(model.input, dict) else sorted(name for name, _, _ in ours)
        if sorted(names) != expected:
            raise ContractError(f"{path}: disttrain.json's inputs are {sorted(names)}, the model's are {expected}")
    by_name = {name: (shape, dtype) for name, shape, dtype in ours} if len(ours) > 1 else {names[0]: ours[0][1:]}
    for item in declared:
        shape, dtype = by_name.get(
            item["name"], (item["shape"], item["dtype"])
        )  # (a dict's key may differ from its tensor's name)
        fits = len(shape) == len(item["shape"]) and all(
            a is None or b is None or a == b for a, b in zip(shape, item["shape"])
        )
        if not fits or dtype != item["dtype"]:
            raise ContractError(
                f"{path}: disttrain.json says input {item['name']!r} is {item['dtype']} {item['shape']}, "
                f"the model takes {dtype} {shape}"
            )
    return [{"name": item["name"], "shape": list(item["shape"]), "dtype": item["dtype"]} for item in declared]


def _describe(inputs):
    return ", ".join(f"{item['name']} {item['dtype']} {item['shape']}" for item in inputs)


def _one_line(message):
    """The first non-empty line of an error message, at most REASON_CHARS characters."""
    line = next((part.strip() for part in str(message).splitlines() if part.strip()), "")
    return line if len(line) <= REASON_CHARS else line[: REASON_CHARS - 3] + "..."


def finish_outputs(meta):
    """raw outputs -> what the server answers, or None when they are that already (softmax classifiers, faces)."""
    head = head_of(meta)
    if meta.get("problem") == "regression":
        return lambda raw: raw.reshape(len(raw), -1)[:, 0]
    if head == "softmax" or meta.get("task") in EMBEDDING_TASKS:
        return None
    return lambda raw: probabilities(raw, head)


def _check_head(model, meta, path):
    """A classifier's output width fits its labels and head; a regression answers one value per instance."""
    head, labels = head_of(meta), meta.get("labels")
    shape = tuple(getattr(model, "output_shape", (None,)))
    problem = meta.get("problem", "classification")
    if problem not in ("classification", "regression"):
        raise ContractError(f"{path}: unknown problem {problem!r} in disttrain.json (classification or regression)")
    if problem == "regression":
        if head != "value":
            raise ContractError(f'{path}: a regression model\'s head must be "value", disttrain.json says {head!r}')
        if len(shape) > 2 or (len(shape) == 2 and shape[-1] != 1):
            raise ContractError(
                f"{path}: a regression model must answer one value per instance ([n] or [n, 1]); its output is {list(shape)}"
            )
        return
    if head not in CLASSIFIER_HEADS:
        raise ContractError(
            f"{path}: a classifier's head must be one of {', '.join(CLASSIFIER_HEADS)}; disttrain.json says {head!r}"
        )
    if not isinstance(labels, list) or not labels:
        raise ContractError(f"{path}: disttrain.json has no label names")
    if head in SIGMOID_HEADS:
        if len(labels) != 2 or (len(shape) == 2 and shape[-1] != 1) or len(shape) > 2:
            raise ContractError(
                f"{path}: a {head} head is one unit for two labels; the model's output is {list(shape)}, "
                f"disttrain.json names {len(labels)} labels"
            )
    elif shape[-1] != len(labels):
        raise ContractError(f"{path}: the model has {shape[-1]} outputs but disttrain.json names {len(labels)} labels")


def _check_artifact(model, meta, path):
    """Refuse a model the API could not describe, at load time instead of on every request."""
    if not isinstance(meta, dict):
        raise ContractError(f"{path}: disttrain.json is not a JSON object")
    spec = meta.get("input")
    if meta.get("task") not in SERVED_TASKS:
        raise ContractError(
            f"{path}: task {meta.get('task')!r} is not served; this server serves the tasks {', '.join(SERVED_TASKS)}"
        )
    if meta["task"] != "faces" and meta.get("problem") == "regression" and meta["task"] not in OWN_INPUT_TASKS:
        raise ContractError(
            f"{path}: a {meta['task']} regression is not served; regressions are served for the tasks {', '.join(OWN_INPUT_TASKS)}"
        )
    if not isinstance(spec, dict) or spec.get("kind") not in INPUT_KINDS:
        raise ContractError(f"{path}: disttrain.json has no usable input spec (kind must be one of {INPUT_KINDS})")
    if spec["kind"] == "image" and not all(
        isinstance(spec.get(k), int) and spec[k] > 0 for k in ("height", "width", "channels")
    ):
        raise ContractError(f"{path}: image input spec needs positive integer height, width and channels")
    if spec["kind"] in NUMERIC_TASKS:
        _check_numeric_spec(spec, path)
    if is_typed(spec):
        _table_of(spec, path)
    outputs = getattr(model, "output_shape", (None,))[-1]
    if meta["task"] in EMBEDDING_TASKS:
        _check_face_model(meta, spec, outputs, path)
        return
    _check_head(model, meta, path)


def _check_numeric_spec(spec, path):
    """A table's or array's "features" is a list of names and its "statistics" a mapping of lists of
    numbers, or they are absent: the page, /metadata and the feature-keyed instances read them
    on every request, so a file with others is refused here, once, instead of answering 500 on each."""
    features = spec.get("features")
    if features is not None and not (
        isinstance(features, list) and all(isinstance(name, str) and name for name in features)
    ):
        raise ContractError(
            f'{path}: disttrain.json "input.features" must be a list of column names, got {features!r:.80}'
        )
    statistics = spec.get("statistics")
    if statistics is None:
        return
    if not isinstance(statistics, dict):
        raise ContractError(
            f'{path}: disttrain.json "input.statistics" must be an object of number lists, got {statistics!r:.80}'
        )
    for name, values in statistics.items():
        if not (isinstance(values, list) and all(type(value) in (int, float) for value in values)):
            raise ContractError(
                f'{path}: disttrain.json "input.statistics.{name}" must be a list of numbers, got {values!r:.80}'
            )


def _table_of(spec, path):
    """The TableSpec of a typed table's input, or a ContractError naming the file and the field."""
    from disttrain_server.typed import spec_of

    try:
        return spec_of(spec)
    except ContractError as err:
        raise ContractError(f"{path}: {err}") from None


def check_typed_inputs(inputs, table, path):
    """A typed table's model takes one input per column, named as the column, of shape [1] and the column's
    dtype (typed_table's module docstring): what the server feeds it, so refused at load otherwise."""
    by_name = {item["name"]: item for item in inputs}
    missing = [name for name in table.names if name not in by_name]
    unknown = [item["name"] for item in inputs if item["name"] not in table.names]
    if missing or unknown:
        raise ContractError(
            f"{path}: a typed table's model takes one input per column ({', '.join(table.names[:20])}); "
            f"its inputs differ: missing {missing[:10]}, not a column {unknown[:10]}"
        )
    for column in table.columns:
        item = by_name[column.name]
        if item["shape"] != [1] or item["dtype"] != column.dtype:
            raise ContractError(
                f"{path}: input {column.name!r} is {item['dtype']} {item['shape']}; its column "
                f"({column.type}) is fed as {column.dtype} [1]"
            )


def _check_face_model(meta, spec, outputs, path):
    """The gallery crops faces with disttrain_contract.faces, so the model must take exactly those crops."""
    from disttrain_contract.faces import FACE_SIZE, preprocessing_of

    if spec["kind"] != "image" or (spec["height"], spec["width"], spec["channels"]) != (FACE_SIZE, FACE_SIZE, 1):
        raise ContractError(
            f"{path}: a faces model must take {FACE_SIZE}x{FACE_SIZE}x1 face crops, its input is {spec}"
        )
    size = meta.get("embedding_size")
    if not isinstance(size, int) or size < 1:
        raise ContractError(f"{path}: a faces model's disttrain.json needs a positive integer embedding_size")
    if outputs != size:
        raise ContractError(f"{path}: the model has {outputs} outputs but disttrain.json says embedding_size {size}")
    try:
        preprocessing_of(meta)
    except ContractError as err:
        raise ContractError(f"{path}: {err}") from None


def self_test(loaded):
    """Raise ContractError unless the model answers one synthetic instance built from its signature
    (zeros of each input's dtype and shape, sizes left open taken as 1; text: a placeholder string; a
    typed table: typed.typical_row, its columns' training means and most frequent values) through
    LoadedModel.predict, with finite outputs of the announced shape."""
    from disttrain_contract.evaluation import as_model_input
    from disttrain_server.signature import input_tensors, output_tensor

    tensors = input_tensors(loaded)
    probe = "one instance of zeros shaped as its signature"
    if loaded.is_typed:
        from disttrain_server import typed

        probe = "one row of its columns' typical values"
        batch = typed.model_batch(typed.to_batch([typed.typical_row(loaded.table)], loaded.table, math.inf))
    elif tensors[0].dtype == "DT_STRING" and not loaded.is_numeric:
        batch = as_model_input("text", [SELF_TEST_TEXT])
    else:
        arrays = {
            t.name: np.zeros(
                [1, *(1 if size == -1 else size for size in t.example_shape)],
                dtype="uint8" if not loaded.is_numeric else t.numpy_dtype,
            )
            for t in tensors
        }
        batch = arrays if len(arrays) > 1 else next(iter(arrays.values()))
    expected = [1, *output_tensor(loaded).shape[1:]]
    try:
        outputs = np.asarray(loaded.predict(batch))
    except Exception as err:  # noqa: BLE001 -- any error of the model's call is the reason it is not ready
        raise ContractError(
            f"the model does not answer its self-test ({probe}): {type(err).__name__}: {_one_line(str(err))}"
        ) from None
    if list(outputs.shape) != expected:
        raise ContractError(
            f"the model's self-test answered shape {list(outputs.shape)}, its signature announces {expected}"
        )
    if not np.isfinite(outputs).all():
        raise ContractError(f"the model's self-test ({probe}) answered non-finite values (NaN or infinity)")


class ModelStore:
    """Holds one LoadedModel per process; thread-safe (gunicorn --threads).

    max_batch_size > 1 answers concurrent predict calls with shared model calls
    (see batching; batch_timeout seconds is how long a batch may wait for more).
    observer: metrics.ServerMetrics (told of each load, counts each model call's instances) or None."""

    def __init__(
        self,
        path,
        reload_interval=5.0,
        clock=time.monotonic,
        max_batch_size=1,
        batch_timeout=0.0,
        observer=None,
        model_module=None,
    ):
        self.path = os.path.abspath(os.fspath(path))
        self.model_module = (
            model_module  # --model-module MODULE[:FUNCTION]: imported before each load (its layers register)
        )
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
        self._failure = None  # its LoadFailure
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

    @property
    def load_failure(self):
        """The LoadFailure of the newest published file, if it could not be served (a model loaded
        earlier may be serving meanwhile), else None."""
        return self._failure

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
            loaded = self._loaded(key)
        except Exception as err:  # noqa: BLE001 -- whatever a file or the user's code raises is this file's failure, recorded
            # A half-copied or foreign file, one that needs code this server was not given, one whose
            # disttrain.json is malformed, one that does not answer: report it (one line), keep the
            # previous model, and do not load this file again until it changes.
            reason = _one_line(str(err).replace(self.path, self.public_name))
            if not isinstance(err, ContractError):
                reason = _one_line(f"{type(err).__name__}: {reason}")
            self._failed_key, self._error = key, reason
            self._failure = LoadFailure(version=version_of(key), reason=reason)
            log.warning(
                "cannot load %s: %s%s", self.path, reason, "; still serving the previous model" if current else ""
            )
            return
        # If the file was replaced again between stat and load we loaded the newer
        # one under the older key; the next check then just loads it once more.
        self._current = loaded
        self._failed_key, self._error, self._failure = None, None, None
        seconds = time.monotonic() - started
        if self.observer:
            self.observer.model_loaded(self._current, seconds)
        log.info(
            "loaded %s (version %d, %s task) in %.1fs", self.path, self._current.version, loaded.meta["task"], seconds
        )

    def _loaded(self, key):
        """The LoadedModel of the file (whose stat is `key`), self-tested; raises why it cannot be served."""
        model, meta, inputs = self._load()
        serve = compiled_call(model, inputs, finish_outputs(meta))
        table = _table_of(meta["input"], self.path) if is_typed(meta["input"]) else None
        loaded = LoadedModel(
            model=model, meta=meta, path=self.path, key=key, serve=serve, inputs=tuple(inputs or ()), table=table
        )
        self_test(loaded)  # before the observer counts calls: the self-test is not a request
        if self.observer:
            serve = self.observer.count_instances(serve)  # every model call: batched, direct and the gallery's
        # Each model gets its own batcher: a batch never mixes two model versions.
        batcher = MicroBatcher(serve, self.max_batch_size, self.batch_timeout) if self.max_batch_size > 1 else None
        return dataclasses.replace(loaded, serve=serve, batcher=batcher)

    def _load(self):
        """(model, meta, numeric inputs or None) of the file, refusing with one line what cannot be served:
        code it needs and was not given (--model-module), a class nothing registered, a Lambda layer."""
        from disttrain_contract.tensorflow_import import import_tensorflow

        meta = read_meta(self.path)
        import_tensorflow()  # quietly, before the user's module or the class check imports Keras
        if self.model_module:
            import_model_module(self.model_module)  # registers the module's layers (imported once per process)
        if isinstance(meta, dict):
            check_code_matches(meta, self.model_module, self.public_name)
        try:
            check_archive_classes(self.path, archive_config(self.path))
        except ContractError as err:
            # (its messages name the trainer's flag; here the file is the published model)
            raise ContractError(str(err).replace(f"--model-file {self.path}", self.public_name)) from None
        model, meta = load_model(self.path)
        _check_artifact(model, meta, self.path)
        inputs = numeric_inputs(model, meta, self.path) if meta["task"] in OWN_INPUT_TASKS else None
        if is_typed(meta["input"]):
            check_typed_inputs(inputs, _table_of(meta["input"], self.path), self.path)
        return model, meta, inputs
