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
compiled with, else the problem's. How the output reads (probabilities or logits: the head) is the compiled
loss's to say: a binary cross-entropy scores one unit (a sigmoid's probability, or a logit with
from_logits=True), a sparse or categorical one a unit per class (a softmax's probabilities, or logits), and
an activation inside a custom output layer is fine. The last layer's activation only refuses a sure
contradiction (a Keras layer that ends in a sigmoid under from_logits=True, a linear one under a loss that
expects probabilities). A model compiled without a loss, or with one that says nothing of its output, is
read from its last layer's activation: a softmax (or logits) classifier -> sparse categorical
cross-entropy, one sigmoid unit (or logit) for two labels -> binary cross-entropy, regression -> mean
squared error. Before the first step the model runs on a few of the worker's training rows: it must run on
them, and an output out of the range the head reads (probabilities outside [0, 1] or not summing to 1,
logits that look like probabilities) is a warning, never a change of head.

The optimizer is the one the model was compiled with (optimizers.Recipe: its class,
learning rate or schedule, weight decay, clipping, EMA, loss scale factor, gradient accumulation), rebuilt
by every worker under the strategy's scope with a fresh state; --optimizer and --learning-rate replace only
what they name. A model compiled without an optimizer trains with the trainer's (Adam, 1e-3 by default).

A model whose class overrides keras.Model's `train_step` or `compute_loss` (a registered subclass) is trained
through its own train_step, as `model.fit` would, inside the trainer's compiled call (step.py): where each worker
steps alone (the registry's steps_alone: average, localsgd). Under the other strategies a step is not one
worker's (multiworker sums the gradients inside it, parameterserver runs it on the servers' variables), and the
model is refused, as it is with differential privacy, whose step clips each example's gradient itself.

Everything that can be checked before a step is checked when the task is created, in the trainer's
own process and before any step: a file that does not load, a module without the function
or a function that returns no keras.Model, every input against what the data gives it (its name, shape
and dtype, the model's and the data's both named; a table's several named inputs each against its
column), more labels than output units, a loss that does not fit the output, a regression target with a
softmax model; then (prepare) the model on a few training rows. Each is one line and exit 2, and nothing
has been written, so the next start, with the model fixed, starts afresh.
"""

import hashlib
import sys

import keras
import numpy as np
import tensorflow as tf

from disttrain_contract.errors import ContractError
from disttrain_contract.evaluation import compiled as compiled_inference
from disttrain_contract.evaluation import compiled_metrics
from disttrain_contract.layout import Workdir
from disttrain_contract.user_model import ModelSpec, code_info, import_model_module, load_model_file, local_model_file
from disttrain_trainer.optimizers import Recipe
from disttrain_trainer.tasks import base, typed

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
        self.table = self.spec.table  # a typed table's TableSpec (tasks/typed.py: raw columns, or the block)
        self.typed_inputs = None  # its raw-columns model's {input: (dtype, keep_axis)}; None: the block in front
        probe = self._model()  # checked here, before any peer is joined and anything is written
        self.recipe = Recipe.of(probe)
        self._compiled_metrics = (probe.get_compile_config() or {}).get("metrics") if probe.compiled else None
        compiled_metrics(self._compiled_metrics)  # (one that cannot be rebuilt: refused now, not after an epoch)
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
        if self.table is not None:
            typed.check_flags(config, self.typed_inputs is not None)
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
        # Every model this task makes starts from --seed: a module's initial weights, and the random layers'
        # generators of a file or a module (Dropout, GaussianNoise, RandomFlip...: Keras seeds a layer's generator
        # from Python's random when the layer is made, and a file does not store it). So the probe and a rebuild
        # under a strategy's scope are the same model, and a run is reproducible ("Reproducible runs" in
        # docs/pipeline.md).
        keras.utils.set_random_seed(self.config.seed)
        if self.config.model_file:
            model = load_model_file(self.model_path, compile=True, name=self.config.model_file)
        else:
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
        again, the same model (_model seeds each: the same weights and the same random layers' generators)."""
        probe, self._probe = self._probe, None
        if probe is not None and not tf.distribute.has_strategy():
            return probe
        return self._model()

    @property
    def head(self):
        return self.head_kind

    def _head_and_loss(self, model):
        """How the output reads (evaluation.HEADS) and the per-example loss function. The compiled loss says
        whether the output is probabilities or logits (its from_logits); the last layer's activation is read
        only to refuse a sure contradiction (a Keras layer that visibly ends in another function), and decides
        only for a model compiled without a loss or with one that says nothing of its output (today's
        inference). A custom output layer says nothing: whatever its call applies is the loss's to state."""
        output = model.outputs[0]
        units = int(np.prod([d for d in output.shape[1:] if d is not None])) if len(output.shape) > 1 else 1
        activation = output_activation(output)
        compiled = getattr(model, "loss", None) if getattr(model, "compiled", False) else None
        if isinstance(compiled, (dict, list, tuple)):
            raise ContractError("the model was compiled with several losses; disttrain trains one output")
        layer = output._keras_history[0]
        what = f"activation {activation}" if activation else f"the custom layer {type(layer).__name__}"
        where = f"the model's output {layer.name!r} ({units} unit(s), {what})"
        kind, from_logits, loss_name = loss_reading(compiled)
        if self.problem == "regression":
            head = self._regression_head(where, activation, units, kind, loss_name)
        elif kind is None:
            head = self._head_from_activation(where, activation, units, compiled, compiled_loss_config(compiled))
        else:
            head = self._head_from_loss(where, activation, units, kind, from_logits, loss_name)
        self.head_reason = f"the compiled {loss_name}" if kind else f"the last layer's {what}"
        if compiled is None:
            return head, default_loss(head)
        loss = keras.losses.get(compiled)
        # a Loss object's __call__ reduces over the batch; its call() gives the per-example values
        per_example = loss.call if isinstance(loss, keras.losses.Loss) else loss
        if kind == "categorical":  # (it scores one-hot labels; the data's are class indices)
            return head, lambda y, out: per_example(tf.one_hot(tf.cast(y, tf.int32), units, dtype=out.dtype), out)
        return head, per_example

    def _regression_head(self, where, activation, units, kind, loss_name):
        if activation in ("softmax", "sigmoid"):
            raise ContractError(
                f"{where} is a classifier's, but the target {self.manifest.target!r} is a regression "
                "target: end the model in Dense(1) with no activation"
            )
        if units != 1:
            raise ContractError(f"{where}: a regression predicts one value per example; end the model in Dense(1)")
        if kind is not None:
            raise ContractError(
                f"the model was compiled with {loss_name}, a classifier's loss, but the target "
                f"{self.manifest.target!r} is a regression target: compile it with loss='mse'"
            )
        return "value"

    def _head_from_loss(self, where, activation, units, kind, from_logits, loss_name):
        """The head the compiled loss says (loss_reading), once the output's units and last layer fit it."""
        n_labels = len(self.manifest.labels)
        compiled = f"the model was compiled with {loss_name}{'(from_logits=True)' if from_logits else ''}"
        if kind == "binary":
            if n_labels > 2:
                raise ContractError(
                    f"{where}: {compiled}, which scores two labels, and the data has {n_labels}: end the model in "
                    f"Dense({n_labels}, activation='softmax') and compile it with "
                    "loss='sparse_categorical_crossentropy'"
                )
            if units != 1:
                other = {
                    "softmax": " or compile it with loss='sparse_categorical_crossentropy'",
                    "linear": " or compile it with keras.losses.SparseCategoricalCrossentropy(from_logits=True)",
                }.get(activation, "")
                raise ContractError(
                    f"{where}: {compiled}, which scores one unit per example (the probability of "
                    f"{self.manifest.labels[-1]!r}): end the model in {ending(kind, 1, from_logits)},{other}".rstrip(
                        ","
                    )
                )
            head = "sigmoid_logits" if from_logits else "sigmoid"
        else:
            if units < n_labels:
                raise ContractError(
                    f"{where}: the data has {n_labels} labels, more than the output's {units} unit(s); end the "
                    f"model in {ending(kind, n_labels, from_logits)}"
                )
            head = "logits" if from_logits else "softmax"
        squash = SQUASH[kind]
        if from_logits and activation in ("sigmoid", "softmax"):
            raise ContractError(
                f"{where} is already a {activation}, and {compiled}, which applies another: compile it with "
                f"{loss_name}() (from_logits=False), or end the model in {ending(kind, units, True)} with no activation"
            )
        if not from_logits and activation is not None and activation != squash:
            logits = f"compile it with {loss_name}(from_logits=True), or " if activation == "linear" else ""
            raise ContractError(
                f"{where} outputs {activation} values, but {compiled}, which expects probabilities: "
                f"{logits}end the model in {ending(kind, units, False)}"
            )
        return head

    def _head_from_activation(self, where, activation, units, compiled, loss_config):
        """Today's inference: the head from the last layer's activation (a custom layer: as if linear), for a
        model compiled without a loss or with one that says nothing of probabilities or logits."""
        from_logits = bool(loss_config.get("from_logits"))
        custom, activation = activation is None, activation or "linear"
        n_labels = len(self.manifest.labels)
        if units == 1:
            if n_labels > 2:
                raise ContractError(
                    f"{where}: the data has {n_labels} labels, more than the output's 1 unit; end "
                    f"the model in Dense({n_labels}, activation='softmax')"
                )
            if activation == "sigmoid":
                return "sigmoid"
            if activation == "linear" and from_logits:
                return "sigmoid_logits"
            if custom:  # (its call may end in a sigmoid: the loss says so)
                advice = (
                    "compile it with loss='binary_crossentropy' if the layer ends in a sigmoid, or with "
                    "keras.losses.BinaryCrossentropy(from_logits=True) if it outputs a logit"
                )
            else:
                advice = "end the model in Dense(1, activation='sigmoid')" + (
                    ", or compile it with keras.losses.BinaryCrossentropy(from_logits=True)"
                    if activation == "linear"
                    else ""
                )
            raise ContractError(f"{where}: one output unit classifies two labels with a sigmoid: {advice}")
        if units < n_labels:
            raise ContractError(f"{where}: the data has {n_labels} labels, more than the output's {units} units")
        if activation == "softmax":
            return "softmax"
        if activation == "linear":
            if compiled is not None and not from_logits:  # (it would train on wrong numbers)
                raise ContractError(
                    f"{where} outputs logits but was compiled with a loss that expects "
                    "probabilities: compile it with from_logits=True or end it in a softmax"
                )
            return "logits"
        raise ContractError(f"{where}: a classifier ends in a softmax (or no activation: logits)")

    def _check_inputs(self, model):
        """Every input against what the data gives it: its name (a table's several inputs), shape and dtype."""
        if self.table is not None:  # a typed table: raw columns, or one vector for the block (tasks/typed.py)
            self.typed_inputs = typed.check_inputs(model, self.table)
            return
        data = self.spec.input
        if len(model.inputs) > 1:
            features = list(self.spec.features or [])
            if self.manifest.task != "table":
                raise ContractError(
                    f"the model has {len(model.inputs)} inputs; a {self.manifest.task} dataset has one "
                    f"({data.name} {list(data.shape)} {data.dtype}); several named inputs work for tables"
                )
            for t in model.inputs:
                name, shape, dtype = t.name.split(":")[0], tuple(t.shape[1:]), str(t.dtype)
                if name not in features:
                    raise ContractError(
                        f"the model's input {name!r} is not a column of the table (columns: "
                        f"{', '.join(features[:12])}{', ...' if len(features) > 12 else ''}): name each "
                        "input after the feature column it takes"
                    )
                if shape not in ((), (1,), (None,)):
                    raise ContractError(
                        f"the model's input {name!r} has shape {list(shape)}; an input named "
                        "after a column takes one value per example (shape [] or [1])"
                    )
                if not dtype_fits(data.dtype, dtype):
                    raise ContractError(
                        f"the model's input {name!r} takes {dtype}, the table's column {name!r} is {data.dtype}: "
                        f"make it keras.Input(shape={shape if shape != (None,) else (1,)}, name={name!r}) "
                        f"({data.dtype}; {NUMBERS_ONLY})"
                    )
            self.columns = {
                t.name.split(":")[0]: (features.index(t.name.split(":")[0]), len(t.shape) > 1) for t in model.inputs
            }
            return
        t = model.inputs[0]
        name, shape, model_dtype, data_dtype = t.name.split(":")[0], tuple(t.shape[1:]), str(t.dtype), data.dtype
        fits = len(shape) == len(data.shape) and all(m is None or m == d for m, d in zip(shape, data.shape))
        sides = (
            f"the model's input {name!r} has shape {list(shape)} and dtype {model_dtype}, the data's {data.name!r} "
            f"has shape {list(data.shape)} and dtype {data_dtype}"
        )
        if not fits:
            raise ContractError(f"{sides}: make the model's input keras.Input(shape={tuple(data.shape)})")
        if not dtype_fits(data_dtype, model_dtype):
            raise ContractError(f"{sides}: {dtype_advice(data_dtype, data.shape)}")

    def prepare(self, data_dir, x_train):
        """Before any step, and before anything is written: the model on a few of this worker's training rows. It
        must run on them as the data gives them; an output out of the range the loss expects is a warning."""
        if self.table is not None:  # the columns as the trained model takes them (the block's vectors: once)
            x_train = typed.training_input(x_train, self.table, self.typed_inputs)
        self.probe_output(x_train)
        return x_train if self.table is not None else super().prepare(data_dir, x_train)

    def probe_output(self, x_train, rows=64):
        model = self._probe if self._probe is not None else self._model()
        if self.table is not None:  # (prepare made them the trained model's input)
            x, given = typed.first_rows(x_train, rows), typed.describe_input(self.table, self.typed_inputs)
        else:
            x = self.model_input(x_train[:rows])
            given = f"{self.spec.input.name} {list(self.spec.input.shape)} {self.spec.input.dtype}"
        try:
            out = np.asarray(compiled_inference(model)(x), dtype=np.float64)  # (as the step and the evaluation run it)
        except Exception as err:  # the user's layers may raise anything
            message = str(err).strip().splitlines()[0][:300] if str(err).strip() else ""
            raise ContractError(
                f"the model does not run on {min(rows, len(out_rows(x)))} training rows as the data gives them "
                f"({given}): {type(err).__name__}: {message}"
            ) from None
        warning = output_range_warning(self.head_kind, out.reshape(len(out), -1), self.head_reason)
        if warning:
            print(f"warning: {warning}", file=sys.stderr, flush=True)

    # ------------------------------------------------------------------- data
    def model_input(self, x):
        x = super().model_input(x)
        if self.table is not None:  # as the published model takes the columns
            return typed.published_input(x, self.table, self.typed_inputs)
        if len(self.input_names) > 1:
            return {
                name: (x[:, [j]] if keep_axis else x[:, j]).astype(np.float32)
                for name, (j, keep_axis) in self.columns.items()
            }
        if self.dtype != "string" and np.asarray(x).dtype != np.dtype(self.dtype):
            return np.asarray(x).astype(self.dtype)
        return x

    def dataset(self, x, y, batch, seed, index):
        if self.table is not None:  # (prepare made x what the trained model takes)
            return super().dataset(x, y, batch, seed, index)
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

    def publish(self, model):
        """A one-vector model on a typed table is published behind the preprocessing block: raw columns in."""
        if self.table is not None and self.typed_inputs is None:
            from disttrain_trainer.preprocessing import with_block

            return with_block(self.table, model)
        return model

    def evaluate(self, inference, x, y):
        """The held-out metrics of every task, and the model's compiled metrics on the same predictions (a
        compiled AUC as test_auc): each a fresh metric object over the whole split, fed as `fit` feeds it (the
        labels as the data has them, the model's output as it answers). A compiled metric whose name is one of
        the task's own (accuracy, loss, rmse, ...) is left to the task's."""
        from disttrain_contract.evaluation import compiled_metric_values, evaluate

        outputs = {}
        result = evaluate(inference, self.manifest.task, x, y, seed=self.manifest.seed, head=self.head, outputs=outputs)
        return {**result, **compiled_metric_values(self._compiled_metrics, y, outputs["raw"], skip=result)}

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
        if self._compiled_metrics:  # (the aggregator reports them for the final model too)
            meta["compiled_metrics"] = self._compiled_metrics
        if self.module is not None:
            meta["model_code"] = code_info(self.module, None if self.config.model_file else self.function)
        if self.config.model_file:
            meta["model_file_sha256"] = file_sha256(self.model_path)
        if self.table is not None:
            meta["preprocessing"] = typed.preprocessing_meta(self.table, self.typed_inputs)
        return meta

    def describe(self):
        source = self.config.model_file or f"{self.module.__name__}.{self.function}"
        way = ""
        if self.table is not None:
            way = ", raw columns" if self.typed_inputs is not None else ", behind the preprocessing block"
        return f"{self.manifest.task}, own model {source} ({self.head_kind} head{way})"


# the compiled losses that say how the output reads: kind ("binary": one unit, the second label's probability or
# logit; "sparse": one unit per class against class indices; "categorical": the same against one-hot labels, which
# the trainer makes from its indices) and the class the advice names. Another loss says nothing of the output.
LOSS_KINDS = {
    keras.losses.binary_crossentropy: ("binary", "BinaryCrossentropy"),
    keras.losses.binary_focal_crossentropy: ("binary", "BinaryFocalCrossentropy"),
    keras.losses.sparse_categorical_crossentropy: ("sparse", "SparseCategoricalCrossentropy"),
    keras.losses.categorical_crossentropy: ("categorical", "CategoricalCrossentropy"),
    keras.losses.categorical_focal_crossentropy: ("categorical", "CategoricalFocalCrossentropy"),
}
SQUASH = {"binary": "sigmoid", "sparse": "softmax", "categorical": "softmax"}
NUMBERS_ONLY = (
    "this table's columns are all numbers, given as float32: string and integer inputs (a StringLookup, an "
    "IntegerLookup) take a typed table, which the copier makes of a table with text, booleans or missing values"
)


def loss_reading(compiled):
    """(kind, from_logits, "keras.losses.Class") of a compiled loss (LOSS_KINDS); (None, False, None) for no loss or
    one that says nothing of probabilities or logits."""
    if compiled is None:
        return None, False, None
    try:
        loss = keras.losses.get(compiled) if isinstance(compiled, (str, dict)) else compiled
    except (ValueError, TypeError):
        return None, False, None
    kind, cls = LOSS_KINDS.get(getattr(loss, "fn", loss), (None, None))
    if kind is None:
        return None, False, None
    return kind, bool(compiled_loss_config(loss).get("from_logits")), f"keras.losses.{cls}"


def ending(kind, units, from_logits):
    """The last layer that fits a loss of `kind` with this from_logits, as the advice names it."""
    return f"Dense({units})" if from_logits else f"Dense({units}, activation={SQUASH[kind]!r})"


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
    """The activation that produces a model's output, as its last layer says: a Keras Dense's (or any Keras layer's
    `activation`), an Activation or Softmax layer's, "linear" for a Keras layer without one; that of a nested
    functional model's output; None for a layer of the user's own class, whose call may apply anything."""
    layer = output._keras_history[0]
    if isinstance(layer, keras.Model) and getattr(layer, "outputs", None) and len(layer.outputs) == 1:
        return output_activation(layer.outputs[0])
    if not type(layer).__module__.startswith("keras."):
        return None
    if isinstance(layer, keras.layers.Softmax):
        return "softmax"
    if isinstance(layer, keras.layers.ReLU):
        return "relu"
    activation = getattr(layer, "activation", None)
    if activation is None:
        return "linear"
    name = getattr(activation, "__name__", None) or str(activation)
    return {"softmax_v2": "softmax"}.get(name, name)


def output_range_warning(head, out, reads):
    """A warning when the model's output on a few training rows (out: [rows, units]) is not of the kind the
    head reads (probabilities or logits), else None. `reads`: why the head is what it is. It never changes the
    head: a fresh model's outputs may be anything, and the loss says what they are."""
    low, high, rows = float(out.min()), float(out.max()), len(out)
    seen = f"on {rows} training rows the model's output ranges over [{low:.3g}, {high:.3g}]"
    within = low >= 0.0 and high <= 1.0
    sums = out.sum(axis=1)
    normalised = within and bool(np.all(np.abs(sums - 1.0) < 1e-3))
    if head == "sigmoid" and not within:
        return f"{reads} reads it as a probability, but {seen}: if it is a logit, compile it with from_logits=True"
    if head == "softmax" and not normalised:
        return (
            f"{reads} reads it as probabilities, but {seen} and its rows sum to [{sums.min():.3g}, "
            f"{sums.max():.3g}]: if they are logits, compile it with from_logits=True"
        )
    if (head == "sigmoid_logits" and within) or (head == "logits" and normalised and out.shape[1] > 1):
        return (
            f"{reads} reads it as logits (from_logits=True), but {seen}, as probabilities would: if the model "
            "ends in a sigmoid or softmax, compile it without from_logits=True (applied twice, it trains badly)"
        )
    return None


def dtype_fits(data, model):
    if data == "string" or model == "string":
        return data == model
    data_kind, model_kind = np.dtype(data).kind, np.dtype(model).kind
    return model_kind in FLOAT_KINDS or (data_kind in "iub" and model_kind in "iu")


def dtype_advice(data, shape):
    """What a single input whose dtype the data's does not convert to should be."""
    if data == "string":
        return (
            f"make it keras.Input(shape={tuple(shape)}, dtype='string') (a TextVectorization layer in the model "
            "turns the text into numbers)"
        )
    return f"make it keras.Input(shape={tuple(shape)}) (float32, the default; {NUMBERS_ONLY})"


def out_rows(x):
    """x's rows (an array's, or a dict of arrays' first)."""
    return next(iter(x.values())) if isinstance(x, dict) else x


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
