"""Exports of the published model for stock serving stacks (TF Serving, KServe, TFLite), next to final/model.keras:

    final/saved_model/<version>/   a TensorFlow SavedModel: TF Serving (--model_base_path=<final>/saved_model)
                                   and KServe's TensorFlow runtime load it as it is
    final/model.tflite             the same serving function for TensorFlow Lite

Signatures (names from disttrain_contract.serving, the server's own: a TF Serving request body that works
against our server works against TF Serving on the SavedModel):
    text   serving_default  text string [n] (raw reviews) -> probabilities float32 [n, labels]
    image  serving_default  image uint8 [n, h, w, c] -> probabilities float32 [n, labels]
           serving_bytes    image_bytes string [n] (encoded files, decoded and resized in the graph:
                            artifact.decode_image_graph) -> probabilities
    faces  serving_default  face uint8 [n, 32, 32, 1] (raw crops, as the server's :predict takes them; the
                            model's face preprocessing runs in the graph: faces.preprocess_graph)
                            -> embedding float32 [n, size]
    table, array, and every own model (--model-file/--model-module; disttrain.json model_source "file"
    or "module"): serving_default takes the model's OWN inputs, named, shaped and typed as its
    disttrain.json's `inputs` records them (several for a multi-input model: one named tensor each)
    -> one output named as its `outputs` records it, else by its head: "probabilities" (softmax,
    sigmoid), "logits" (logits, sigmoid_logits), "predictions" (value: regression)
    (a faces model, own or not, keeps the faces signature: its crops are preprocessed in the graph)
The model.tflite is serving_default's function. For an own model it is skipped, with the reason in
the report and the log, when it cannot be one (string inputs; ops without a TFLite builtin), and only it. A typed
table's model (task typed_table) whose columns are all numbers converts, its preprocessing block too (NaN
imputation, normalisation); one with a text column is skipped: its StringLookup's table converts to TFLite's
builtin hash-table ops, but the variables cannot then be frozen beside it (convert_variables_to_constants_v2
fails on the table's handle), and converted with its variables the interpreter's outputs were wrong (the same
for every row: measured with TF 2.21).

Version: TF Serving loads only numeric version directories and serves the highest. <version> is the
publish time in whole seconds, or one more than the highest version present when that is larger (two
publishes within a second, a clock set back), so a re-publish in the same directory always gets a higher
version. The newest KEEP_VERSIONS versions are kept: a TF Serving still loading the previous one when the
new one appears does not lose its files; older ones are removed once the new one is in place.

Atomic: everything is built in a hidden staging directory inside the final directory (same filesystem),
and checked -- the SavedModel is loaded back and run on the held-out split, and nothing is published
unless its outputs are within TOLERANCE of the Keras model's -- before anything is published.
Staged.publish() then renames the version directory and the .tflite file into place, before
model.keras is: TF Serving polling the base path only ever sees whole versions. Any failure is a
ContractError naming what failed, and nothing is published.

TFLite: serving_default's function with its variables frozen, builtin ops only (convert_tflite). No
SELECT_TF_OPS: the Flex delegate that runs them is not in the tensorflow package's tf.lite.Interpreter
since TF 2.20 (google-ai-edge/LiteRT#6458), so such a model could not be checked here. The text model's
vectorizer is all string ops (no builtins), so its model.tflite is the core on token ids (stage_tflite()); a text
model without one vectorizer before one core (an ensemble) gets no model.tflite, and the report says why.
"""

import argparse
import glob
import os
import shutil
import statistics
import tempfile
import time
import warnings

import numpy as np

from disttrain_contract import ContractError
from disttrain_contract.atomic import describe_os_error
from disttrain_contract.evaluation import call_in_chunks, compiled, evaluate, head_of
from disttrain_contract.layout import whole_number
from disttrain_contract.metrics import ACCURACY
from disttrain_contract.serving import BYTES_SIGNATURE_NAME, IMAGE_BYTES_INPUT, SIGNATURE_NAME
from disttrain_contract.tasks import TASKS
from disttrain_contract.tensorflow_import import import_tensorflow

KINDS = ("saved_model", "tflite")
SAVED_MODEL_DIR = "saved_model"
TFLITE_FILE = "model.tflite"
STAGING_PREFIX = ".exports.tmp-"
KEEP_VERSIONS = 2  # the new version and the one before it
TOLERANCE = 1e-5  # largest difference from the Keras model's outputs a SavedModel may have
LATENCY_CALLS = 50  # single-instance calls timed (after LATENCY_WARMUP untimed ones); the median is reported
LATENCY_WARMUP = 5
CHUNK = 256  # held-out instances per call
TOKEN_IDS = "token_ids"  # the text model.tflite's input


def parse_kinds(text):
    """--exports: a comma-separated subset of KINDS, or "none"."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if names == ["none"]:
        return ()
    unknown = [name for name in names if name not in KINDS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a comma-separated list of {', '.join(KINDS)}, or none")
    return tuple(kind for kind in KINDS if kind in names)


def next_version(base, now=None):
    """The publish time in seconds, or one more than the highest version in `base` if that is larger."""
    present = versions(base)
    return max(int(now if now is not None else time.time()), (present[-1] + 1) if present else 1)


def versions(base):
    """The numeric version directories in `base`, ascending (TF Serving ignores the rest)."""
    try:
        names = os.listdir(base)
    except OSError:  # none yet, or not a directory (check_final_dir refuses that one)
        return []
    numbered = {n: whole_number(n) for n in names}
    return sorted(v for n, v in numbered.items() if v is not None and v > 0 and os.path.isdir(os.path.join(base, n)))


def dtype_name(dtype):
    """TF Serving's name of a dtype (DT_STRING, DT_UINT8, DT_FLOAT)."""
    from tensorflow.core.framework import types_pb2

    return types_pb2.DataType.Name(dtype.as_datatype_enum)


# an own model's output name when its disttrain.json records none, by its head
HEAD_OUTPUT_NAMES = {
    "softmax": "probabilities",
    "sigmoid": "probabilities",
    "logits": "logits",
    "sigmoid_logits": "logits",
    "value": "predictions",
}


def own_signature(task, meta):
    """Whether serving_default takes the model's own inputs: a task without a built-in served input
    (table, array), or an own model of a task that takes them (not faces)."""
    facts = TASKS[task]
    return facts.input_name is None or (facts.own_models and (meta or {}).get("model_source") not in (None, "builtin"))


def output_name(task, meta):
    """serving_default's output name: the built-in models' (serving.OUTPUT_NAMES), else the model's
    recorded one (disttrain.json outputs), else by its head."""
    if not own_signature(task, meta):
        return TASKS[task].output_name
    recorded = ((meta or {}).get("outputs") or [{}])[0].get("name")
    return recorded or HEAD_OUTPUT_NAMES.get(head_of(meta), "outputs")


def input_specs(model, meta):
    """[(name, tf dtype, per-example shape)] of the model's own inputs: its disttrain.json's `inputs`,
    else its Keras inputs."""
    tf = import_tensorflow()
    recorded = (meta or {}).get("inputs")
    if isinstance(recorded, list) and recorded:
        return [
            (
                spec["name"],
                tf.as_dtype(spec.get("dtype") or "float32"),
                tuple(None if d is None else int(d) for d in (spec.get("shape") or [])),
            )
            for spec in recorded
        ]
    return [(tensor.name, tf.as_dtype(tensor.dtype), tuple(tensor.shape[1:])) for tensor in model.inputs]


def own_serving_function(model, task, meta):
    """serving_default of a model that takes its own inputs: one named tensor per input (a dict of
    them for a multi-input model) -> {output_name: the model's output}."""
    tf = import_tensorflow()
    specs = input_specs(model, meta)
    names, out = [name for name, _, _ in specs], output_name(task, meta)
    signature = [tf.TensorSpec([None, *shape], dtype, name=name) for name, dtype, shape in specs]
    if len(specs) > 1:
        fn = lambda *args: {out: model(dict(zip(names, args)), training=False)}  # noqa: E731
    else:
        fn = lambda *args: {out: model(args[0], training=False)}  # noqa: E731
    return tf.function(fn, input_signature=signature, autograph=False)


def serving_functions(model, task, meta):
    """{signature name: tf.function with an input signature} for the task (see the module docstring)."""
    tf = import_tensorflow()
    if own_signature(task, meta):
        return {SIGNATURE_NAME: own_serving_function(model, task, meta)}
    facts = TASKS[task]
    name, out = facts.input_name, facts.output_name
    # autograph off: nothing to convert, and it would write generated code to a temp dir
    function = lambda fn, spec: tf.function(fn, input_signature=[spec], autograph=False)  # noqa: E731
    if facts.input_dtype == "string":  # a flat [n] of strings; the model takes them as a [n, 1] column
        return {
            SIGNATURE_NAME: function(
                lambda text: {out: model(tf.reshape(text, [-1, 1]), training=False)},
                tf.TensorSpec([None], tf.string, name=name),
            )
        }
    shape = tuple(model.inputs[0].shape[1:])
    dtype = tf.as_dtype(facts.input_dtype)
    if facts.face_preprocessing:
        from disttrain_contract.faces import preprocess_graph, preprocessing_of

        version = preprocessing_of(meta)
        return {
            SIGNATURE_NAME: function(
                lambda face: {out: model(preprocess_graph(face, version), training=False)},
                tf.TensorSpec([None, *shape], dtype, name=name),
            )
        }
    functions = {
        SIGNATURE_NAME: function(
            lambda image: {out: model(image, training=False)}, tf.TensorSpec([None, *shape], dtype, name=name)
        )
    }
    if facts.bytes_signature:
        from disttrain_contract.artifact import decode_image_graph

        functions[BYTES_SIGNATURE_NAME] = function(
            lambda image_bytes: {out: model(decode_image_graph(image_bytes, *shape), training=False)},
            tf.TensorSpec([None], tf.string, name=IMAGE_BYTES_INPUT),
        )
    return functions


def save_saved_model(model, task, meta, path):
    """tf.saved_model.save of a tf.Module holding the model (its variables and the vectorizer's lookup
    table are tracked through it) with the task's signatures."""
    tf = import_tensorflow()
    module = tf.Module()
    module.model = model
    functions = serving_functions(model, task, meta)
    tf.saved_model.save(module, path, signatures={key: fn.get_concrete_function() for key, fn in functions.items()})


def describe_signatures(loaded):
    """{signature: {"inputs": {name: {dtype, shape}}, "outputs": {...}}} of a loaded SavedModel (-1: any size)."""

    def tensors(specs):
        return {
            name: {"dtype": dtype_name(spec.dtype), "shape": [-1 if d is None else int(d) for d in spec.shape]}
            for name, spec in sorted(specs.items())
        }

    return {
        key: {"inputs": tensors(fn.structured_input_signature[1]), "outputs": tensors(fn.structured_outputs)}
        for key, fn in sorted(loaded.signatures.items())
    }


def text_parts(model):
    """(vectorizer, core) of a published text model (trainer models.with_vectorizer: strings -> the
    TextVectorization layer -> the core model on token ids), or None for another structure."""
    import keras

    layers = model.layers
    if (
        len(layers) == 3
        and isinstance(layers[1], keras.layers.TextVectorization)
        and isinstance(layers[2], keras.Model)
    ):
        return layers[1], layers[2]
    return None


def convert_tflite(model, task, meta, scratch, core=None):
    """The TFLite flatbuffer of the task's serving_default function (`core`: a text model's core alone,
    token ids in; see stage_tflite()), builtin ops only.

    The function's variables are frozen into constants first (convert_variables_to_constants_v2) and
    the frozen function saved as a SavedModel in `scratch` for the converter: converted with its Keras
    variables, TF 2.21's converter kept them as resource variables the interpreter never initialises
    (READ_VARIABLE fails, or with XNNPACK every output was [1, 0]; measured on the text core)."""
    tf = import_tensorflow()
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    out = output_name(task, meta)
    if core is not None:
        specs = [tf.TensorSpec([None, None], tf.int64, name=TOKEN_IDS)]
        function = tf.function(
            lambda token_ids: {out: core(token_ids, training=False)}, input_signature=specs, autograph=False
        )
    else:
        function = serving_functions(model, task, meta)[SIGNATURE_NAME]
        specs = list(function.input_signature)
    frozen = convert_variables_to_constants_v2(function.get_concrete_function())
    # positional arguments named like the inputs: the TFLite signature's input names
    wrapper = tf.function(lambda *args: {out: frozen(*args)[0]}, input_signature=specs, autograph=False)
    tf.saved_model.save(tf.Module(), scratch, signatures={SIGNATURE_NAME: wrapper.get_concrete_function()})

    converter = tf.lite.TFLiteConverter.from_saved_model(scratch, signature_keys=[SIGNATURE_NAME])
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    try:
        return converter.convert()
    except Exception as err:  # ConverterError: its "TF Select ops: ..." line names what has no builtin
        why = next(
            (line.strip() for line in str(err).splitlines() if line.startswith("TF Select ops")), first_line(err)
        )
        raise ContractError(
            f"the TFLite converter needs ops that are not TFLite builtins ({why}); SELECT_TF_OPS "
            "models cannot run in the tensorflow package's tf.lite.Interpreter since TF 2.20 (no "
            "Flex delegate): publish without it with --exports saved_model"
        ) from None


def signature_dtype(task):
    """The built-in served input's dtype (tasks.Task.input_dtype: tf.string, tf.uint8)."""
    tf = import_tensorflow()
    return tf.as_dtype(TASKS[task].input_dtype)


def first_line(err):
    return next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)


def median_ms(call):
    for _ in range(LATENCY_WARMUP):
        call()
    times = []
    for _ in range(LATENCY_CALLS):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def keras_reference(model, task, meta, x):
    """The Keras model's outputs on the held-out inputs as the server computes them (faces: the crops
    preprocessed with OpenCV first), and a single-instance call the same way, for the latency."""
    tf = import_tensorflow()
    prepare = lambda batch: TASKS[task].preprocess(batch, meta)  # noqa: E731
    outputs = call_in_chunks(lambda chunk: model(chunk, training=False), prepare(x), CHUNK)
    graph = compiled(model)  # the server's call: one tf.function (disttrain_server.model_store.compiled_call)
    one = tf.nest.map_structure(tf.constant, prepare(first_row(x)))
    return outputs, lambda: graph(one).numpy()


def first_row(x):
    """The first instance of x: an array, or a dict of arrays (a model with several named inputs)."""
    return {name: value[:1] for name, value in x.items()} if isinstance(x, dict) else x[:1]


class Staged:
    """Exports built and checked in a staging directory, not yet published."""

    def __init__(self, staging, kinds):
        self.staging, self.kinds = staging, kinds
        self.version = None
        self.report = {"requested": list(kinds)}

    @property
    def saved_model_path(self):
        return os.path.join(self.staging, SAVED_MODEL_DIR, str(self.version))

    @property
    def tflite_path(self):
        return os.path.join(self.staging, TFLITE_FILE)

    def publish(self, final_dir):
        """Rename the exports into place (the version directory, then model.tflite) and remove the
        versions past KEEP_VERSIONS (the report's saved_model.versions_kept lists the others)."""
        try:
            if "saved_model" in self.kinds:
                base = os.path.join(final_dir, SAVED_MODEL_DIR)
                os.makedirs(base, exist_ok=True)
                target = os.path.join(base, str(self.version))
                if os.path.lexists(
                    target
                ):  # next_version() is past every version, unless another process wrote one since
                    raise ContractError(
                        f"{target} appeared while the export was built; is another aggregator publishing here?"
                    )
                os.rename(self.saved_model_path, target)
                kept = versions(base)
                for old in kept[:-KEEP_VERSIONS]:
                    shutil.rmtree(os.path.join(base, str(old)), ignore_errors=True)
                self.report["saved_model"]["versions_kept"] = kept[-KEEP_VERSIONS:]
            if "tflite" in self.kinds and os.path.exists(self.tflite_path):  # (not when skipped)
                os.replace(self.tflite_path, os.path.join(final_dir, TFLITE_FILE))
        except OSError as err:
            raise ContractError(f"cannot publish the exports in {final_dir}: {err}") from None
        finally:
            self.discard()

    def discard(self):
        shutil.rmtree(self.staging, ignore_errors=True)


def stale(final_dir, kinds):
    """Exports of an earlier publish that this one does not replace (kinds left out of --exports):
    left in place -- TF Serving may be serving that version -- and named in the report and the log."""
    left = (
        []
        if "saved_model" in kinds
        else [f"{SAVED_MODEL_DIR}/{v}" for v in versions(os.path.join(final_dir, SAVED_MODEL_DIR))]
    )
    if "tflite" not in kinds and os.path.isfile(os.path.join(final_dir, TFLITE_FILE)):
        left.append(TFLITE_FILE)
    return left


def fsync_tree(path):
    """Flush every file under `path` to disk before it is renamed into place (as atomic.py does for files)."""
    for root, _, files in os.walk(path):
        for name in files:
            with open(os.path.join(root, name), "rb") as fh:
                os.fsync(fh.fileno())


def check_final_dir(final_dir, prefix=""):
    """Refuse a final directory the exports cannot go into, before anything is built."""
    base = os.path.join(final_dir, SAVED_MODEL_DIR)
    if os.path.lexists(base) and not os.path.isdir(base):
        raise ContractError(f"{prefix}cannot export the SavedModel: {base} exists and is not a directory")
    tflite = os.path.join(final_dir, TFLITE_FILE)
    if os.path.isdir(tflite):
        raise ContractError(f"{prefix}cannot export the TFLite model: {tflite} is a directory")


def stage(final_dir, kinds, model, task, meta, x, y, seed, keras_accuracy, metric=ACCURACY, now=None):
    """Build and check the exports `kinds` of `model` in a staging directory inside `final_dir`
    (x, y: the held-out split as the Keras model takes it, a dict of named arrays for a multi-input
    model; keras_accuracy: its held-out value of `metric`, the primary metric, the report's). Returns a Staged whose .report is report.json's "exports"; ContractError if any
    export fails, with nothing left behind."""
    started = time.perf_counter()
    failed = "export failed, nothing was published: "
    check_final_dir(final_dir, failed)
    created = not os.path.isdir(final_dir)
    try:
        os.makedirs(final_dir, exist_ok=True)
        for leftover in glob.glob(os.path.join(final_dir, STAGING_PREFIX + "*")):  # a killed run's
            shutil.rmtree(leftover, ignore_errors=True)
        staging = tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=final_dir)
    except OSError as err:
        raise ContractError(f"{failed}cannot write in {final_dir}: {err}") from None
    staged = Staged(staging, kinds)
    try:
        build(staged, final_dir, model, task, meta, x, y, seed, keras_accuracy, now, metric)
    except BaseException as err:
        staged.discard()
        if created:
            with_suppressed_rmdir(final_dir)
        if isinstance(err, ContractError):
            raise ContractError(f"{failed}{err}") from None
        if isinstance(err, OSError):
            raise ContractError(f"{failed}{describe_os_error(err, final_dir)}") from None
        if isinstance(err, Exception) and "No space left on device" in str(err):
            # TensorFlow's own writers (SaveV2) raise ResourceExhaustedError, not OSError
            raise ContractError(f"{failed}no space left on device while writing the exports in {final_dir}") from None
        if isinstance(err, Exception):  # TensorFlow's: the converter's, a full disk while saving ...
            raise ContractError(f"{failed}{type(err).__name__}: {first_line(err)}") from err
        raise
    staged.report["sec"] = round(time.perf_counter() - started, 3)
    return staged


def with_suppressed_rmdir(path):
    try:
        os.rmdir(path)  # only if empty: the final directory this run created for the exports
    except OSError:
        pass


class ServingInputs:
    """serving_default's inputs: `specs` [(name, tf dtype, per-example shape)], the model's own
    (own_signature: input_specs) or the task's one built-in input (its shape None: the model's)."""

    def __init__(self, model, task, meta):
        facts = TASKS[task]
        self.own = own_signature(task, meta)
        self.specs = input_specs(model, meta) if self.own else [(facts.input_name, signature_dtype(task), None)]
        self.names = [name for name, _, _ in self.specs]
        # the built-in text signature takes a flat [n] of strings, not the model's column
        self.flat_strings = facts.input_dtype == "string" and not self.own

    def arguments(self, chunk):
        """A chunk of x as the signature's keyword arguments, in each input's dtype."""
        tf = import_tensorflow()
        if isinstance(chunk, dict):
            values = chunk
        else:
            values = {self.names[0]: tf.reshape(chunk, [-1]) if self.flat_strings else chunk}
        return {
            name: (tf.cast(values[name], dtype) if dtype != tf.string else values[name])
            for name, dtype, _ in self.specs
        }


class HeldOutReference:
    """The held-out split the exports are checked on (x as the Keras model takes it, y, the evaluation's seed),
    and the Keras model's answers to it (keras_reference)."""

    def __init__(self, model, task, meta, x, y, seed):
        self.x, self.y, self.seed = x, y, seed
        self.keras_outputs, self.keras_one = keras_reference(model, task, meta, x)
        self.n = len(next(iter(x.values()))) if isinstance(x, dict) else len(x)

    def max_abs_diff(self, outputs):
        """The largest difference of `outputs` from the Keras model's on the split (0 when it is empty)."""
        return float(np.abs(outputs - self.keras_outputs).max()) if self.n else 0.0


def build(staged, final_dir, model, task, meta, x, y, seed, keras_value, now, metric=ACCURACY):
    """Build and check in `staged` the SavedModel (whatever staged.kinds asks: loading it back checks the serving
    function against the Keras model; reported only when asked for), then, if asked for, the model.tflite or the
    reason it is skipped (see stage())."""
    inputs = ServingInputs(model, task, meta)
    held_out = HeldOutReference(model, task, meta, x, y, seed)
    stage_saved_model(staged, final_dir, model, task, meta, inputs, held_out, now)
    if "tflite" in staged.kinds:
        stage_tflite(staged, model, task, meta, inputs, held_out, keras_value, metric)


def stage_saved_model(staged, final_dir, model, task, meta, inputs, held_out, now):
    """Save the SavedModel of the next version in `staged`, load it back as TF Serving does and refuse it
    unless its outputs on the held-out split are within TOLERANCE of the Keras model's."""
    tf = import_tensorflow()
    out = output_name(task, meta)
    t0 = time.perf_counter()
    staged.version = next_version(os.path.join(final_dir, SAVED_MODEL_DIR), now)
    save_saved_model(model, task, meta, staged.saved_model_path)
    saved_sec = time.perf_counter() - t0
    loaded = tf.saved_model.load(staged.saved_model_path)  # what TF Serving does, in this process
    signature = loaded.signatures[SIGNATURE_NAME]
    outputs = call_in_chunks(lambda chunk: signature(**inputs.arguments(chunk))[out], held_out.x, CHUNK)
    difference = held_out.max_abs_diff(outputs)
    if not difference <= TOLERANCE:  # also nan
        raise ContractError(
            f"the SavedModel's {SIGNATURE_NAME} outputs differ from the Keras model's by "
            f"{difference:.3g} on the held-out split (at most {TOLERANCE:g} allowed)"
        )
    fsync_tree(staged.saved_model_path)
    if "saved_model" in staged.kinds:
        staged.report["saved_model"] = {
            "base_path": SAVED_MODEL_DIR,  # relative to the final directory: TF Serving's --model_base_path
            "version": staged.version,
            "path": f"{SAVED_MODEL_DIR}/{staged.version}",
            "signatures": describe_signatures(loaded),
            "max_abs_diff_vs_keras": difference,
            "tolerance": TOLERANCE,
            "save_sec": round(saved_sec, 3),
            "keep_versions": KEEP_VERSIONS,
        }


def stage_tflite(staged, model, task, meta, inputs, held_out, keras_value, metric):
    """Convert serving_default to the model.tflite in `staged` and check it on the held-out split, or record
    in the report why it is skipped (an own model's conversion failing is a skip, the built-in models' an error)."""
    tf = import_tensorflow()
    # Text: TFLite has no builtins for the vectorizer's string ops (lower, regex replace, split: the
    # converter names them), and the Flex delegate that would run them as SELECT_TF_OPS is not in
    # the tensorflow pip package's tf.lite.Interpreter since TF 2.20 (google-ai-edge/LiteRT#6458): a
    # strings-in model.tflite would run nowhere here. So the text model.tflite is the core on token
    # ids (TextVectorization's: 0 padding, 1 out of vocabulary, then the vocabulary in order), builtin
    # ops only; the vectorizer runs in TensorFlow before it.
    builtin_text = TASKS[task].vocabulary and not inputs.own
    parts = text_parts(model) if builtin_text else None
    vectorize = parts[0] if parts else None
    if builtin_text and parts is None:  # e.g. --combine ensemble: each member has its own vectorizer
        staged.report["tflite"] = {
            "skipped": "the text model is not one vectorizer before one core (an ensemble?), "
            "and TFLite cannot take its strings (no builtin string ops, no Flex "
            "delegate in the tensorflow package since TF 2.20)"
        }
        return
    strings = [name for name, dtype, _ in inputs.specs if inputs.own and dtype == tf.string]
    if strings:
        staged.report["tflite"] = {
            "skipped": f"the model's input(s) {', '.join(strings)} are strings: a string lookup's table (a "
            "StringLookup's) converts to TFLite's builtin hash-table ops, but then the weights cannot be frozen "
            "into constants beside it, and unfrozen the interpreter answers wrongly; other string ops need the "
            "Flex delegate, which the tensorflow package lacks since TF 2.20; the SavedModel serves it"
        }
        return
    t0 = time.perf_counter()
    try:
        content = convert_tflite(
            model, task, meta, os.path.join(staged.staging, "tflite-source"), parts[1] if parts else None
        )
    except Exception as err:  # an own model's ops are its author's: skip its model.tflite, publish the rest
        if not inputs.own:
            raise
        staged.report["tflite"] = {
            "skipped": f"the model does not convert to TFLite with builtin ops only: {first_line(err)[:400]}"
        }
        return
    convert_sec = time.perf_counter() - t0
    with open(staged.tflite_path, "wb") as fh:
        fh.write(content)
        fh.flush()
        os.fsync(fh.fileno())
    lite_inputs = tflite_inputs(model, task, inputs, vectorize)
    section = staged.report["tflite"] = {
        "path": TFLITE_FILE,
        **({"input": lite_inputs[0]} if len(lite_inputs) == 1 else {}),
        "inputs": lite_inputs,
        "output": output_name(task, meta),
        "size_bytes": len(content),
        "builtin_ops_only": True,
        "select_tf_ops": False,
        "signature": SIGNATURE_NAME,
        "metric": metric.name,
        f"keras_{metric.key}": keras_value,
        "convert_sec": round(convert_sec, 3),
    }
    section.update(check_tflite(content, task, meta, inputs, vectorize, held_out, keras_value, metric))


def tflite_inputs(model, task, inputs, vectorize):
    """The report's description of the model.tflite's inputs: the token ids of a text model's core (`vectorize`:
    its vectorizer), an own model's inputs, or the task's built-in one."""
    if vectorize is not None:
        return [
            {
                "name": TOKEN_IDS,
                "dtype": "int64",
                "shape": [-1, -1],
                "what": "the vectorizer's token ids (0 padding, 1 out of vocabulary, then the model's vocabulary "
                "in order: data/vocab.txt); the strings go through the SavedModel's or the Keras model's "
                "TextVectorization first",
            }
        ]
    if inputs.own:
        return [
            {"name": name, "dtype": dtype_name(dtype), "shape": [-1, *(-1 if d is None else int(d) for d in shape)]}
            for name, dtype, shape in inputs.specs
        ]
    return [
        {
            "name": inputs.names[0],
            "dtype": dtype_name(signature_dtype(task)),
            "shape": [-1] if inputs.flat_strings else [-1, *model.inputs[0].shape[1:]],
        }
    ]


def check_tflite(content, task, meta, inputs, vectorize, held_out, keras_value, metric):
    """The model.tflite `content` run in TFLite's interpreter on the held-out split: its value of `metric`
    against the Keras model's (`keras_value`), its largest output difference, and the single-instance latency
    of both (the medians of LATENCY_CALLS calls), as the report's tflite section records them."""
    tf = import_tensorflow()
    facts = TASKS[task]
    out = output_name(task, meta)
    with warnings.catch_warnings():  # "tf.lite.Interpreter is deprecated ... use ai_edge_litert": not pinned here
        warnings.simplefilter("ignore", UserWarning)
        interpreter = tf.lite.Interpreter(model_content=content)
    runner = interpreter.get_signature_runner(SIGNATURE_NAME)

    def feed(chunk):
        if vectorize is not None:
            return {TOKEN_IDS: vectorize(chunk).numpy().astype(np.int64)}
        return {
            name: np.asarray(value.numpy() if hasattr(value, "numpy") else value)
            for name, value in inputs.arguments(chunk).items()
        }

    def lite(chunk, training=False):  # a tensor in and out, as evaluation.predict calls a model
        return tf.constant(runner(**feed(chunk))[out])

    # faces: the exports take raw crops and preprocess them themselves, so evaluate() must not
    eval_meta = {"face_preprocessing": 1} if facts.face_preprocessing else meta
    kept = {}
    metrics = evaluate(lite, task, held_out.x, held_out.y, held_out.seed, eval_meta, kept)
    lite_outputs = (
        kept["probabilities"]
        if not facts.retrieval and head_of(meta) == "softmax"
        else call_in_chunks(lite, held_out.x, CHUNK)
    )
    difference = held_out.max_abs_diff(lite_outputs.reshape(held_out.keras_outputs.shape))
    one = first_row(held_out.x)
    value = metrics[metric.name]
    return {
        metric.key: value,
        **(
            {"accuracy_points_vs_keras": round(100 * (value - keras_value), 4)}
            if metric.unit == "fraction"
            else {"difference_vs_keras": value - keras_value}
        ),
        "max_abs_diff_vs_keras": difference,
        "latency_ms": {
            "tflite_median": round(median_ms(lambda: runner(**feed(one))), 4),
            "keras_median": round(median_ms(held_out.keras_one), 4),
            "calls": LATENCY_CALLS,
            "warmup": LATENCY_WARMUP,
            "what": "one instance per call, in this process: TFLite's signature runner (default threads)"
            + (", after the Keras vectorizer" if vectorize is not None else "")
            + " vs the Keras model in one tf.function, as the server calls it"
            + (" (with OpenCV's crop preprocessing before it)" if facts.face_preprocessing else ""),
        },
    }
