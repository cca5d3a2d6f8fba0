"""One module per training strategy, all of one shape, composed in main.py:

  set up   Strategy(config, placement): join the other workers (TF_CONFIG) and create
           the tf.distribute strategy the steps run under (`tf_strategy`, `scope()`);
  step     `reduce_gradients`: None, or how a synchronous step sums the gradients
           across workers (step.make_train_call runs the step itself);
  sync     `steps_to_sync(step)`, `after_steps(step)`, `finish()`: periodic model
           averaging (localsgd); `epoch_metrics(sums)`: the epoch's metrics over all workers;
  data     `train_shards()`, `examples_per_epoch()`, `shuffle_seed()`, `iterator()`: what a task
           reads and how its steps get their batches;
  loop     `train_epoch()`, `run_call`: how an epoch's train calls run (here, or scheduled
           on parameter-server workers); `serves`/`serve()`: a task that only serves;
  stop     `agree_to_stop()`: where the workers stop together on SIGTERM (preemption.py);
  save     `checkpoint_dirs()`, `resume_checkpoint()`, `evaluates`, `writes_model`,
           `cleanup()`: which worker keeps, restores, evaluates and publishes what.

A strategy is this module and its entry in options.REGISTRY: its flags, their checks, whether its tasks
talk (TF_CONFIG), how a task names itself and what its models record, all without TensorFlow.
Importing this package does not import TensorFlow (the CLI validates its flags first);
`create` imports the chosen module.
"""

import importlib

from disttrain_trainer.strategies.options import CONNECTED, NAMES  # noqa: F401  (the strategies' names, in one place)


def create(config, placement):
    """The strategy `config` names (a TrainConfig), for this task's `placement` (cluster.Placement)."""
    if config.strategy not in NAMES:
        raise ValueError(f"unknown strategy {config.strategy!r}")
    return importlib.import_module(f"disttrain_trainer.strategies.{config.strategy}").Strategy(config, placement)
