"""own: the user's Keras model (--model-file, --model-module) on the copier's data (table, array,
image or text; not faces, whose training is triplet mining of the built-in embedding).

Where the model comes from:
  --model-file PATH      a .keras archive (or s3://bucket/key), loaded in safe mode (contract user_model). Its weights are
                         every worker's starting point: a freshly initialised file trains from scratch,
                         a trained one is fine-tuned, and no seed is needed to share the start.
  --model-module M[:F]   F(spec) (default `build`) returns the model; the seed (--seed) makes every
                         worker's initialisation the same. With --model-file too, the module is only
                         imported, for the custom layers the file uses.

What is trained: the model's single output against the labels. The loss is the one the model was
compiled with, else the problem's: a softmax (or logits) classifier -> sparse categorical
cross-entropy, one sigmoid unit (or logit) for two labels -> binary cross-entropy, regression ->
mean squared error. The optimizer is the one the model was compiled with (optimizers.Recipe: its class,
learning rate or schedule, weight decay, clipping, EMA, loss scale factor, gradient accumulation), rebuilt
by every worker under the strategy's scope with a fresh state; --optimizer and --learning-rate replace only
what they name. A model compiled without an optimizer trains with the trainer's (Adam, 1e-3 by default).

A model whose class overrides keras.Model's `train_step` or `compute_loss` (a registered subclass) is trained
through its own train_step, as `model.fit` would, inside the trainer's compiled call (step.py): where each worker
steps alone (the registry's steps_alone: average, localsgd). Under the other strategies a step is not one
worker's (multiworker sums the gradients inside it, parameterserver runs it on the servers' variables), and the
model is refused, as it is with differential privacy, whose step clips each example's gradient itself.

Everything that can be checked before a step is checked when the task is created, in the trainer's
own process and before it joins any peer: a file that does not load, a module without the function
or a function that returns no keras.Model, inputs of another shape or dtype than the data (both
named), more labels than output units, a regression target with a softmax model. Each is one line
and exit 2, and nothing has been written.
"""

import hashlib

import keras
import numpy as np
import tensorflow as tf

from disttrain_contract.errors import ContractError
from disttrain_contract.layout import Workdir
from disttrain_contract.user_model import ModelSpec, code_info, import_model_module, load_model_file, local_model_file
from disttrain_trainer.optimizers import Recipe
from disttrain_trainer.tasks import base

# string and numeric inputs never mix; numeric data goes into a float input of any width (cast in the
# input pipeline), and into an integer input only from integers
FLOAT_KINDS = "fc"


class Task(base.Task):
    name = "own"

    def __init__(self, manifest, config):
        super().__init__(manifest, config)
        if manifest.task == "faces":
            raise ContractError(
                "--model-file and --model-module train the table, array, image and text tasks; faces "
                "trains the built-in embedding with triplet mining"
            )
        self.module = self.function = None
        # an s3:// model file is downloaded once, to the shared volume (the root file system is read-only)
        self.model_path = (
            local_model_file(config.model_file, Workdir(config.workdir).root) if config.model_file else None
        )
        if config.model_module:
            self.module, self.function = import_model_module(config.model_module)
            if not config.model_file and not callable(getattr(self.module, self.function, None)):
                raise ContractError(
                    f"--model-module {config.model_module}: the module {self.module.__name__} has no "
                    f"function {self.function}(spec) that returns the model"
                )
        self.model_source = "file" if config.model_file else "module"
        self.spec = ModelSpec.of(manifest)
        probe = self._model()  # checked here, before any peer is joined and anything is written
        self.recipe = Recipe.of(probe)
        self.own_step = own_step_methods(probe)  # (train_step, compute_loss): trained through its train_step
        self.model_class = type(probe).__name__
        if self.own_step and not getattr(probe, "compiled", False):  # (model.fit refuses it too)
            raise ContractError(
                f"the model's class {self.model_class} overrides {' and '.join(self.own_step)} but was not "
                "compiled: compile it (its loss and optimizer), as model.fit needs"
            )
        self.head_kind, self.loss_fn = self._head_and_loss(probe)
        self.input_names = [t.name.split(":")[0] for t in probe.inputs]
        self._check_inputs(probe)
        self.dtype = str(probe.inputs[0].dtype) if len(probe.inputs) == 1 else "float32"
        self._probe = probe  # the model build() returns when no distribution strategy asks for its own

    # ------------------------------------------------------------------ flags
    @property
    def optimizer(self):
        """--optimizer's default: the compiled optimizer's recipe (None: not replaced), else the trainer's."""
        return None if self.recipe is not None else base.Task.optimizer

    @property
    def learning_rate(self):
        return None if self.recipe is not None else base.Task.learning_rate

    def check_flags(self, config):
        if config.model != "cnn":
            raise ContractError(
                "--model chooses a built-in image network; it does not apply with --model-file/--model-module"
            )
        refusal = self.recipe.refusal(config.strategy) if self.recipe is not None else None
        if refusal:
            raise ContractError(refusal)
        if self.own_step:
            self._check_own_step(config)

    def _check_own_step(self, config):
        """A model's own train_step runs where a step is one worker's alone, and not with DP-SGD's step."""
        from disttrain_contract.strategies import names_where, strategy_of
        from disttrain_trainer import privacy

        overrides = f"the model's class {self.model_class} overrides {' and '.join(self.own_step)}"
        takes = " or ".join(names_where(lambda s: s.steps_alone))
        if not strategy_of(config.strategy).steps_alone:
            raise ContractError(
                f"{overrides}: disttrain runs a model's own step only where each worker steps alone, and under "
                f"--strategy {config.strategy} a step is not one worker's: train with --strategy {takes}, or "
                "without the override"
            )
        if privacy.enabled(config):
            raise ContractError(
                f"{overrides}, but differential privacy's step computes and clips each example's gradient itself: "
                "train without --dp-l2-clip, --dp-noise-multiplier and --dp-delta, or without the override"
            )

    def build_optimizer(self, config):
        if self.recipe is None:
            return super().build_optimizer(config)
        return self.recipe.build(config.optimizer, config.learning_rate)

    def optimizer_source(self, config):
        if self.recipe is None:
            return "the model was compiled without one: --optimizer and --learning-rate, or their defaults"
        replaced = [
            flag
            for flag, value in (("--optimizer", config.optimizer), ("--learning-rate", config.learning_rate))
            if value is not None
        ]
        return "the model's compiled optimizer" + (
            f", {' and '.join(replaced)} in place of what they name" if replaced else ""
        )

    # ------------------------------------------------------------------ model
    def _model(self):
        if self.config.model_file:
            model = load_model_file(self.model_path, compile=True, name=self.config.model_file)
        else:
            keras.utils.set_random_seed(self.config.seed)
            name = f"{self.module.__name__}.{self.function}"
            try:
                model = getattr(self.module, self.function)(self.spec)
            except ContractError:
                raise
            except Exception as err:  # the user's code may raise anything
                raise ContractError(f"--model-module {name}(spec) failed: {type(err).__name__}: {err}") from None
            if not isinstance(model, keras.Model):
                raise ContractError(f"--model-module {name}(spec) returned {type(model).__name__}, not a keras.Model")
        if len(model.outputs) != 1:
            raise ContractError(
                f"the model has {len(model.outputs)} outputs; disttrain trains a model with one output "
                "(class scores or the regression's value)"
            )
        return model

    def build(self):
        """The model to train: the one checked at start-up (a file is read and a module's function run once),
        unless a distribution strategy is in scope, whose variables must be created under it: then built
        again (the same weights: the file's, or the module's under the same seed)."""
        probe, self._probe = self._probe, None
        if probe is not None and not tf.distribute.has_strategy():
            return probe
        return self._model()

    @property
    def head(self):
        return self.head_kind

    def _head_and_loss(self, model):
        """How the output reads (evaluation.HEADS) and the per-example loss function."""
        output = model.outputs[0]
        units = int(np.prod([d for d in output.shape[1:] if d is not None])) if len(output.shape) > 1 else 1
        activation = output_activation(output)
        compiled = getattr(model, "loss", None) if getattr(model, "compiled", False) else None
        if isinstance(compiled, (dict, list, tuple)):
            raise ContractError("the model was compiled with several losses; disttrain trains one output")
        loss_config = compiled_loss_config(compiled)
        from_logits = bool(loss_config.get("from_logits"))
        where = f"the model's output {output.name.split('/')[0]!r} ({units} unit(s), activation {activation})"
        if self.problem == "regression":
            if activation in ("softmax", "sigmoid"):
                raise ContractError(
                    f"{where} is a classifier's, but the target {self.manifest.target!r} is a regression "
                    "target: end the model in Dense(1) with no activation"
                )
            if units != 1:
                raise ContractError(f"{where}: a regression predicts one value per example; end the model in Dense(1)")
            head = "value"
        else:
            n_labels = len(self.manifest.labels)
            if units == 1:
                if n_labels > 2:
                    raise ContractError(
                        f"{where}: the data has {n_labels} labels, more than the output's 1 unit; end "
                        f"the model in Dense({n_labels}, activation='softmax')"
                    )
                if activation == "sigmoid":
                    head = "sigmoid"
                elif activation == "linear" and from_logits:
                    head = "sigmoid_logits"
                else:
                    raise ContractError(
                        f"{where}: one output unit classifies two labels only with activation "
                        "'sigmoid' (or compiled with BinaryCrossentropy(from_logits=True))"
                    )
            else:
                if units < n_labels:
                    raise ContractError(
                        f"{where}: the data has {n_labels} labels, more than the output's {units} units"
                    )
                if activation == "softmax":
                    head = "softmax"
                elif activation == "linear":
                    head = "logits"  # (a model compiled without from_logits=True would train on wrong numbers)
                    if compiled is not None and not from_logits:
                        raise ContractError(
                            f"{where} outputs logits but was compiled with a loss that expects "
                            "probabilities: compile it with from_logits=True or end it in a softmax"
                        )
                else:
                    raise ContractError(f"{where}: a classifier ends in a softmax (or no activation: logits)")
        if compiled is None:
            return head, default_loss(head)
        loss = keras.losses.get(compiled)
        # a Loss object's __call__ reduces over the batch; its call() gives the per-example values
        return head, (loss.call if isinstance(loss, keras.losses.Loss) else loss)

    def _check_inputs(self, model):
        data = self.spec.input
        if len(model.inputs) > 1:
            features = list(self.spec.features or [])
            if self.manifest.task != "table":
                raise ContractError(
                    f"the model has {len(model.inputs)} inputs; a {self.manifest.task} dataset has one "
                    f"({data.name} {list(data.shape)} {data.dtype}); several named inputs work for tables"
                )
            for t in model.inputs:
                name = t.name.split(":")[0]
                if name not in features:
                    raise ContractError(
                        f"the model's input {name!r} is not a column of the table (columns: "
                        f"{', '.join(features[:12])}{', ...' if len(features) > 12 else ''}): name each "
                        "input after the feature column it takes"
                    )
                if tuple(d for d in t.shape[1:]) not in ((), (1,), (None,)):
                    raise ContractError(
                        f"the model's input {name!r} has shape {list(t.shape[1:])}; an input named "
                        "after a column takes one value per example (shape [] or [1])"
                    )
            self.columns = {
                t.name.split(":")[0]: (features.index(t.name.split(":")[0]), len(t.shape) > 1) for t in model.inputs
            }
            return
        t = model.inputs[0]
        shape = tuple(t.shape[1:])
        model_dtype, data_dtype = str(t.dtype), data.dtype
        fits = len(shape) == len(data.shape) and all(m is None or m == d for m, d in zip(shape, data.shape))
        if not fits:
            raise ContractError(
                f"the model's input {t.name.split(':')[0]!r} has shape {list(shape)} and dtype "
                f"{model_dtype}, the data's {data.name!r} has shape {list(data.shape)} and dtype "
                f"{data_dtype}: make the model's input keras.Input(shape={tuple(data.shape)})"
            )
        if not dtype_fits(data_dtype, model_dtype):
            raise ContractError(
                f"the model's input {t.name.split(':')[0]!r} has dtype {model_dtype}, the data's "
                f"{data.name!r} is {data_dtype} (shape {list(data.shape)}): they do not convert"
            )

    # ------------------------------------------------------------------- data
    def model_input(self, x):
        x = super().model_input(x)
        if len(self.input_names) > 1:
            return {
                name: (x[:, [j]] if keep_axis else x[:, j]).astype(np.float32)
                for name, (j, keep_axis) in self.columns.items()
            }
        if self.dtype != "string" and np.asarray(x).dtype != np.dtype(self.dtype):
            return np.asarray(x).astype(self.dtype)
        return x

    def dataset(self, x, y, batch, seed, index):
        ds = super().dataset(
            self.model_input(x) if len(self.input_names) == 1 else np.asarray(x, np.float32), y, batch, seed, index
        )
        if len(self.input_names) > 1:
            columns = dict(self.columns)

            def to_inputs(features, labels):
                return {
                    name: (features[:, j : j + 1] if keep_axis else features[:, j])
                    for name, (j, keep_axis) in columns.items()
                }, labels

            ds = ds.map(to_inputs)
        return ds

    def loss_and_score(self, y, outputs):
        head = self.head_kind
        if head == "value":
            predicted = tf.reshape(outputs, [tf.shape(outputs)[0]])
            target = tf.cast(y, predicted.dtype)
            per_example = self.loss_fn(tf.reshape(target, tf.shape(outputs)), outputs)
            return flat(per_example), tf.abs(predicted - target)
        if head in ("sigmoid", "sigmoid_logits"):
            per_example = self.loss_fn(tf.reshape(tf.cast(y, outputs.dtype), tf.shape(outputs)), outputs)
            positive = tf.reshape(outputs, [-1]) > (0.5 if head == "sigmoid" else 0.0)
            return flat(per_example), tf.cast(tf.equal(tf.cast(positive, y.dtype), y), tf.float32)
        per_example = self.loss_fn(y, outputs)
        return flat(per_example), tf.cast(tf.equal(tf.argmax(outputs, axis=-1), y), tf.float32)

    def evaluate_before_training(self):
        return self.model_source == "file"  # a pre-trained file: what fine-tuning starts from

    # --------------------------------------------------------------- artifacts
    def run_config(self):
        config = {"model_source": self.model_source}
        if self.recipe is not None:  # (only then: the checkpoints of a model without one still resume)
            config["optimizer_recipe"] = self.recipe.config
        if self.config.model_file:
            config["model_file_sha256"] = file_sha256(self.model_path)
        if self.module is not None:
            config["model_code_sha256"] = code_info(self.module)["sha256"]
        return config

    def metadata(self, published):
        meta = super().metadata(published)
        if self.module is not None:
            meta["model_code"] = code_info(self.module, None if self.config.model_file else self.function)
        if self.config.model_file:
            meta["model_file_sha256"] = file_sha256(self.model_path)
        return meta

    def describe(self):
        source = self.config.model_file or f"{self.module.__name__}.{self.function}"
        return f"{self.manifest.task}, own model {source} ({self.head_kind} head)"


OWN_STEP_METHODS = ("train_step", "compute_loss")


def own_step_methods(model):
    """The methods of keras.Model's training step that the model's class overrides: those whose definition, found
    through its MRO, is not keras.Model's own (a Functional or Sequential model overrides neither)."""
    return tuple(name for name in OWN_STEP_METHODS if getattr(type(model), name) is not getattr(keras.Model, name))


def default_loss(head):
    return {
        "softmax": keras.losses.sparse_categorical_crossentropy,
        "logits": lambda y, out: keras.losses.sparse_categorical_crossentropy(y, out, from_logits=True),
        "sigmoid": keras.losses.binary_crossentropy,
        "sigmoid_logits": lambda y, out: keras.losses.binary_crossentropy(y, out, from_logits=True),
        "value": keras.losses.mean_squared_error,
    }[head]


def compiled_loss_config(loss):
    """The compiled loss's config ({} for a function or a name)."""
    if isinstance(loss, keras.losses.Loss):
        return loss.get_config()
    return {}


def output_activation(output):
    """The activation that produces a model's output: a Dense's, or an Activation/Softmax layer's."""
    layer = output._keras_history[0]
    if isinstance(layer, keras.layers.Softmax):
        return "softmax"
    activation = getattr(layer, "activation", None)
    if activation is None:
        return "linear"
    name = getattr(activation, "__name__", None) or str(activation)
    return {"softmax_v2": "softmax"}.get(name, name)


def dtype_fits(data, model):
    if data == "string" or model == "string":
        return data == model
    data_kind, model_kind = np.dtype(data).kind, np.dtype(model).kind
    return model_kind in FLOAT_KINDS or (data_kind in "iub" and model_kind in "iu")


def flat(per_example):
    """A loss function's per-example values as [batch] (some return [batch, 1])."""
    return (
        tf.reshape(per_example, [tf.shape(per_example)[0], -1])[:, 0]
        if per_example.shape.rank and per_example.shape.rank > 1
        else per_example
    )


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
