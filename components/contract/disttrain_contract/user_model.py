"""A user's own model: a `.keras` file (`--model-file`) and/or a Python module (`--model-module`).

    --model-file PATH                a Keras 3 archive made by model.save(): its architecture and weights
                                     (fresh = training from scratch, trained = fine-tuning), its compile
                                     config (loss) when it was compiled
    --model-module MODULE[:FUNCTION] user code importable in the image (a derived image, or a directory
                                     on PYTHONPATH): importing it registers its custom layers
                                     (keras.saving.register_keras_serializable); without --model-file the
                                     trainer calls FUNCTION(spec) (default `build`) for the model

Files are always loaded in Keras safe mode: a `Lambda` layer (Python bytecode inside the file) is
refused, and so is a class that nothing registered. Both are checked here, from the archive's
config, before Keras deserialises anything, so that the error names the layer and what to do
instead (Keras' own message for an unregistered class is a long dump of the config).

The trainer, the aggregator and the server take the same `--model-module`, so the published model
loads in each; the module's name and a hash of its source travel in the model's disttrain.json
(`code_info`), and a stage that loads the model with another version of the code says so.
Note that `--model-module` runs the user's code in every stage that is given it, the public
server included: it is code the operator chose to install, like the image itself.

`--model-file s3://bucket/model.keras` (an S3 or S3-compatible store, disttrain_contract.objectstore)
is downloaded once to the stage's writable volume (`local_model_file`) and then loaded exactly as a
local file; messages name the URL.
"""

import atexit
import contextlib
import dataclasses
import hashlib
import importlib
import json
import os
import socket
import sys
import zipfile
from typing import Optional

from disttrain_contract import objectstore
from disttrain_contract.errors import ContractError

DEFAULT_FUNCTION = "build"


def parse_module_spec(spec):
    """ "pkg.mod:fn" -> ("pkg.mod", "fn"); "pkg.mod" -> ("pkg.mod", "build")."""
    module, _, function = (spec or "").partition(":")
    module, function = module.strip(), (function.strip() or DEFAULT_FUNCTION)
    if not module or not all(part.isidentifier() for part in module.split(".")) or not function.isidentifier():
        raise ContractError(f"--model-module {spec!r} is not MODULE[:FUNCTION] (e.g. mymodels.tabular:build)")
    return module, function


def import_model_module(spec):
    """Import the user's module (registering its custom layers); returns (module, function name)."""
    name, function = parse_module_spec(spec)
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name and (name == err.name or name.startswith(err.name + ".")):
            raise ContractError(
                f"--model-module {name}: no such module on the Python path (PYTHONPATH="
                f"{os.environ.get('PYTHONPATH', '')!r}); mount its directory and add it to "
                "PYTHONPATH, or install it in a derived image"
            ) from None
        raise ContractError(f"--model-module {name} does not import: {err}") from None
    except Exception as err:  # the user's code may raise anything at import
        raise ContractError(f"--model-module {name} does not import: {type(err).__name__}: {err}") from None
    return module, function


def code_info(module, function=None):
    """{"module", "function", "sha256"} of the user's module: the hash covers its source file, or
    every .py file of its package, in path order."""
    digest = hashlib.sha256()
    path = getattr(module, "__file__", None)
    files = []
    if path and os.path.basename(path) == "__init__.py":
        root = os.path.dirname(path)
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            files += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".py")]
    elif path:
        files = [path]
    for file in files:
        digest.update(os.path.relpath(file, os.path.dirname(files[0])).encode() + b"\0")
        with open(file, "rb") as fh:
            digest.update(fh.read())
    return {"module": module.__name__, **({"function": function} if function else {}), "sha256": digest.hexdigest()}


def check_model_code(recorded, where):
    """disttrain.json's "model_code" is code_info's mapping: {"module", "sha256"[, "function"]}, strings."""
    if not isinstance(recorded, dict):
        raise ContractError(
            f'{where}: disttrain.json "model_code" must be an object {{"module", "sha256"}}, got '
            f"{type(recorded).__name__} {recorded!r:.80}"
        )
    for field in ("module", "sha256") + (("function",) if "function" in recorded else ()):
        value = recorded.get(field)
        if not isinstance(value, str) or not value:
            got = "nothing" if field not in recorded else f"{type(value).__name__} {value!r:.80}"
            raise ContractError(f'{where}: disttrain.json "model_code.{field}" must be a non-empty string, got {got}')


def check_code_matches(meta, module_spec, where):
    """The module given to this stage is the one the model was trained with (same name, same source)."""
    recorded = (meta or {}).get("model_code")
    if recorded is None:
        return
    check_model_code(recorded, where)
    if not module_spec:
        raise ContractError(
            f"{where} was trained with code from the module {recorded['module']}: pass "
            f"--model-module {recorded['module']} so that its layers load"
        )
    module, _ = import_model_module(module_spec)
    current = code_info(module)
    if current["module"] != recorded["module"]:
        raise ContractError(f"{where} was trained with the module {recorded['module']}, not {current['module']}")
    if current["sha256"] != recorded["sha256"]:
        print(
            f"warning: {where} was trained with another version of {recorded['module']} (source sha256 "
            f"{recorded['sha256'][:12]}..., here {current['sha256'][:12]}...)",
            file=sys.stderr,
            flush=True,
        )


def local_model_file(path, directory):
    """--model-file PATH as a local file: PATH itself, or the s3:// object PATH downloaded once into
    `directory` (the stage's writable volume: the images' root file system is read-only and their /tmp
    small) under a hidden name of this host and process, removed when the process exits."""
    if not objectstore.is_url(path):
        return path
    objectstore.require_object(path)
    os.makedirs(directory, exist_ok=True)
    local = os.path.join(directory, f".model-file-{socket.gethostname()}-{os.getpid()}.keras")
    objectstore.download(path, local)
    atexit.register(_remove_quietly, local)
    return local


def _remove_quietly(path):
    with contextlib.suppress(OSError):
        os.remove(path)


def archive_config(path, name=None):
    """The model config (config.json) of a .keras archive, read without Keras. name: what messages
    call the file (the s3:// URL of a downloaded one); default `path`."""
    name = name or path
    try:
        with zipfile.ZipFile(path) as archive:
            return json.loads(archive.read("config.json"))
    except FileNotFoundError:
        raise ContractError(f"--model-file {name}: no such file") from None
    except KeyError:
        raise ContractError(
            f"--model-file {name} is not a Keras 3 model archive (no config.json inside; save it "
            "with model.save('model.keras'))"
        ) from None
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        raise ContractError(
            f"--model-file {name} is not a Keras 3 model archive ({err}); save it with model.save('model.keras')"
        ) from None


def check_archive_classes(path, config):
    """Refuse code in the file and classes nothing registered, naming them (before Keras tries).
    `path` is only named in the messages."""
    import keras

    lambdas, unknown = [], []

    def walk(node):
        if isinstance(node, dict):
            cls = node.get("class_name")
            if cls == "Lambda":
                lambdas.append(node.get("config", {}).get("name", "?"))
            registered = node.get("registered_name")
            module = node.get("module")
            # Keras' own classes name their keras.* module; a user's class its own module (or none)
            if (
                isinstance(cls, str)
                and cls != "__keras_tensor__"
                and registered
                and not str(module or "").startswith("keras")
            ):
                if keras.saving.get_registered_object(registered) is None:
                    unknown.append(registered)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(config)
    if lambdas:
        raise ContractError(
            f"--model-file {path} has a Lambda layer ({', '.join(sorted(set(lambdas)))}): Python code "
            "inside a model file is refused (safe mode); write it as a layer class registered with "
            "keras.saving.register_keras_serializable in a module, and pass --model-module"
        )
    if unknown:
        raise ContractError(
            f"--model-file {path} uses the custom class(es) {', '.join(sorted(set(unknown)))}, which no "
            "module registered: pass --model-module MODULE, the module that defines them with "
            "keras.saving.register_keras_serializable"
        )


def load_model_file(path, compile=True, name=None):
    """A user's .keras file in safe mode, with one-line errors; the compiled loss survives (compile=True).
    name: what messages call the file (the s3:// URL of a downloaded one); default `path`."""
    from disttrain_contract.tensorflow_import import import_tensorflow

    import_tensorflow()
    import keras

    name = name or path
    config = archive_config(path, name)
    check_archive_classes(name, config)
    try:
        model = keras.models.load_model(path, compile=compile, safe_mode=True)
    except Exception as err:  # Keras raises a zoo of types for a bad file
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ContractError(f"--model-file {name} does not load: {type(err).__name__}: {message[:300]}") from None
    if not isinstance(model, keras.Model):
        raise ContractError(f"--model-file {name} holds a {type(model).__name__}, not a keras.Model")
    return model


@dataclasses.dataclass(frozen=True)
class InputSpec:
    name: str  # the dataset's input name: "features" (table), "x" (array), "image", "text"
    shape: tuple  # one example's shape (no batch dimension)
    dtype: str  # "float32", "uint8", "string", ...


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """What `build(spec)` of a --model-module is told about the data.

    def build(spec):
        inputs = keras.Input(shape=spec.input.shape, name=spec.input.name)
        x = keras.layers.Normalization(mean=spec.statistics["mean"], variance=spec.statistics["variance"])(inputs)
        ...
        return keras.Model(inputs, keras.layers.Dense(spec.n_outputs, activation="softmax")(x))
    """

    task: str  # "table", "array", "image", "text" (manifest.TASKS)
    input: InputSpec
    problem: str  # "classification" or "regression"
    labels: tuple  # class names (classification), () for regression
    target: Optional[str]  # regression: the target's name (a table's label column)
    train_examples: int  # over every worker's shard
    features: Optional[tuple] = None  # a table's feature column names, in the order of the input's last axis
    statistics: Optional[dict] = None  # table/array: {"mean", "variance", "min", "max"}: numpy arrays over the
    # training shards, per element of the last axis (keras.layers.Normalization(mean=..., variance=...))
    target_statistics: Optional[dict] = None  # regression: the target's {"mean", "variance", "min", "max"}
    # a typed table (task typed_table): its typed_table.TableSpec, each column's name, type, model dtype and
    # training statistics or vocabulary (for the model's own StringLookup(vocabulary=...) and
    # Normalization(mean=..., variance=...)); `input` is then the one numeric vector disttrain's preprocessing
    # block makes of a row (typed_table.encoded_width), for a model that takes that instead of the columns
    table: Optional[object] = None

    @property
    def n_outputs(self):
        """Output units of a usual head: one per label (softmax), or 1 for a regression."""
        return 1 if self.problem == "regression" else len(self.labels)

    @classmethod
    def of(cls, manifest):
        import numpy as np

        from disttrain_contract.typed_table import TableSpec, encoded_width, is_typed

        spec = manifest.input
        kind = spec.get("kind", manifest.task)
        table = TableSpec.from_json(spec) if is_typed(spec) else None
        if table is not None:  # the preprocessing block's vector (a raw-columns model reads `table`)
            shape, dtype, name = (encoded_width(table),), "float32", "features"
        elif kind == "text":
            shape, dtype, name = (1,), "string", "text"
        elif kind == "image":
            shape, dtype, name = (spec["height"], spec["width"], spec["channels"]), "uint8", "image"
        else:
            shape, dtype, name = tuple(spec["shape"]), spec.get("dtype", "float32"), spec.get("name", "x")
        stats = spec.get("statistics")
        return cls(
            task=manifest.task,
            input=InputSpec(name, shape, dtype),
            problem=manifest.problem,
            labels=tuple(manifest.labels),
            target=manifest.target,
            train_examples=manifest.train_examples,
            features=tuple(spec["features"]) if spec.get("features") else None,
            statistics={k: np.asarray(v, dtype=np.float32) for k, v in stats.items()} if stats else None,
            target_statistics=dict(manifest.target_statistics) if manifest.target_statistics else None,
            table=table,
        )
