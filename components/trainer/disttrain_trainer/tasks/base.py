"""What every task does unless it says otherwise."""

import keras
import tensorflow as tf

from disttrain_contract.errors import ContractError
from disttrain_contract.evaluation import as_model_input, evaluate
from disttrain_contract.metrics import metrics_of, primary_metric, training_score
from disttrain_contract.strategies import strategy_of
from disttrain_contract.tasks import TASKS, task_of
from disttrain_trainer.data import poisson_batches, shuffled_batches


class Task:
    name = "base"
    learning_rate = 1e-3  # --learning-rate's default (for --optimizer's default)
    dropout = 0.3  # --dropout's default (the built-in models that have one)
    width = 64  # --width's default
    model_source = "builtin"
    own_step = ()  # the keras.Model methods of the step the model overrides (tasks/own.py): trained through them
    views = 1  # examples per epoch = shard examples x views (faces: augmented views of each photo)
    private_sampling = None  # differentially private training: (q, secret seed) of its Poisson sampler (privacy.Plan)

    def __init__(self, manifest, config):
        self.manifest, self.config = manifest, config
        self.problem = manifest.problem
        self.primary = primary_metric(manifest.task, manifest.problem)
        self.score = training_score(manifest.problem)  # what the step's second sum is (accuracy or MAE)
        self.metrics = metrics_of(manifest.task, manifest.problem)

    # ------------------------------------------------------------------ flags
    optimizer = "adam"  # --optimizer's default
    # differentially private training (--dp-*): the defaults that replace the above (text: tasks/text.py);
    # TrainConfig.with_task_defaults applies them
    private_defaults = {}

    def build_optimizer(self, config):
        """The optimizer to train with (under the strategy's scope): --optimizer with --learning-rate."""
        from disttrain_trainer.optimizers import build_optimizer

        return build_optimizer(config.optimizer, config.learning_rate)

    def optimizer_source(self, config):
        """Where the optimizer comes from, for the log's "optimizer: ..." line."""
        return "--optimizer and --learning-rate, or the task's defaults"

    def check(self, config):
        """Refuse a strategy or flags that do not apply to this task (ContractError: one line, exit 2)."""
        task = task_of(self.manifest)
        if strategy_of(config.strategy).parameter_servers and not task.parameter_server:
            takes = [t.name for t in TASKS.values() if t.parameter_server]
            raise ContractError(f"--strategy {config.strategy} trains the {', '.join(takes)} tasks, not {task.name}")
        self.check_flags(config)

    def check_flags(self, config):
        """Refuse flags that do not apply to this task."""
        if config.model != "cnn":
            raise ContractError(f"--model {config.model} is for image datasets; this one is {self.manifest.task}")

    # ------------------------------------------------------------------- data
    def prepare(self, data_dir, x_train):
        """The training inputs as the trained model takes them (once, before training)."""
        return x_train

    def model_input(self, x):
        """A split's x as the published model takes it (the held-out and validation evaluations)."""
        return as_model_input(self.manifest.task, x)

    def dataset(self, x, y, batch, seed, index):
        """An endless tf.data stream of (inputs, labels) batches of this worker's examples."""
        if self.private_sampling is not None:
            return poisson_batches(x, y, *self.private_sampling)
        return shuffled_batches(x, y, batch, seed)

    # ------------------------------------------------------------------ model
    def build(self):
        """The model the trainer trains (under the strategy's scope)."""
        raise NotImplementedError

    def publish(self, model):
        """The model a server runs: raw inputs in (text: the vectorizer in front)."""
        return model

    @property
    def head(self):
        """How the published model's output reads (evaluation.HEADS)."""
        return "value" if self.problem == "regression" else "softmax"

    def loss_and_score(self, y, outputs):
        """Per-example loss and per-example score: 1.0 when right (classification) or the absolute error."""
        if self.problem == "regression":
            predicted = tf.reshape(outputs, [tf.shape(outputs)[0]])
            y = tf.cast(y, predicted.dtype)
            return tf.square(predicted - y), tf.abs(predicted - y)
        per_example = keras.losses.sparse_categorical_crossentropy(y, outputs)
        return per_example, tf.cast(tf.equal(tf.argmax(outputs, axis=-1), y), tf.float32)

    def evaluate(self, inference, x, y):
        return evaluate(inference, self.manifest.task, x, y, seed=self.manifest.seed, head=self.head)

    def evaluate_before_training(self):
        """Whether the held-out metric is worth reporting before the first step (a pre-trained model)."""
        return False

    # --------------------------------------------------------------- artifacts
    def run_config(self):
        """What else a checkpoint must agree on to be resumed."""
        return {}

    def metadata(self, published):
        """What this task adds to the artifact's disttrain.json."""
        return {
            "vocab_sha256": None,
            "problem": self.problem,
            "target": self.manifest.target,
            "head": self.head,
            "model_source": self.model_source,
            "inputs": tensor_specs(published.inputs),
            "outputs": tensor_specs(published.outputs, list(getattr(published, "output_names", None) or [])),
        }

    def describe(self):
        return self.manifest.task


def tensor_specs(tensors, names=None):
    """[{"name", "shape" (no batch dimension; None where any size goes), "dtype"}] of Keras tensors."""
    names = names or [t.name.split(":")[0].split("/")[0] for t in tensors]
    return [
        {"name": name, "shape": [None if d is None else int(d) for d in t.shape[1:]], "dtype": str(t.dtype)}
        for name, t in zip(names, tensors)
    ]
