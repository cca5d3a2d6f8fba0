"""One module per task, all of one shape (base.Task), chosen in one place (`create`):

  text    movie reviews and other text CSVs: the embedding bag on token ids, published behind its vectorizer
  image   pixels: the small CNN or a keras.applications network (--model)
  faces   face crops: an embedding trained with in-batch triplet mining
  table   numeric feature columns (and `array`, numeric arrays of any shape): a small MLP
  typed_table  a table of typed columns (text, booleans, missing values): the preprocessing block + table's MLP
  own     the user's model (--model-file, --model-module) on any of these inputs but faces

A task owns what differs between them: its flags' defaults and checks, how its data becomes the
model's input and batches, the model, the per-example loss and score, how the held-out split is
evaluated, what is published and what the artifact's metadata says. main.py only composes a
task with a strategy (strategies/). Importing this package does not import TensorFlow.
"""

import importlib

BUILTIN = {
    "text": "text",
    "image": "image",
    "faces": "faces",
    "table": "table",
    "array": "table",
    "typed_table": "typed_table",
}


def task_class(manifest, config):
    """The task for this dataset and this TrainConfig: the user's model when one is given, else the built-in one.
    Its attributes are the defaults of the flags it leaves unset (TrainConfig.with_task_defaults)."""
    module = "own" if config.model_file or config.model_module else BUILTIN[manifest.task]
    return importlib.import_module(f"disttrain_trainer.tasks.{module}").Task


def create(manifest, config):
    """(the task for this dataset, `config` with the task's defaults where a flag was not given). The defaults are
    the task's once it exists: a user's model compiled with an optimizer leaves --optimizer and --learning-rate
    unset (its recipe is the optimizer), one without keeps the trainer's."""
    task = task_class(manifest, config)(manifest, config)
    config = config.with_task_defaults(task)
    task.config = config  # (the task's flags with its defaults: the built-in models' width and dropout)
    return task, config
