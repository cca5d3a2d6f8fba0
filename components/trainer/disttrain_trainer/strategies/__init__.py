"""One package per training strategy (strategies/<name>/), all of one shape:

  strategy.py  the training code, `Strategy` (imports TensorFlow), composed in main.py:
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
             `cleanup()`: which worker keeps, restores, evaluates and publishes what;
  cost.py      its cost model for the advisor, `COST_MODEL` (a cost_base.CostModel; no TensorFlow), which
               perfmodel.COST_MODELS collects in the registry's order;
  and modules of its own techniques (localsgd: schedule, wire, outer, overlap, statistics).

Shared bases: base.py (the training code's), cost_base.py (the cost models'). A strategy is its package and its
entry in options.REGISTRY: its flags, their checks, whether its tasks talk (TF_CONFIG), how a task names itself
and what its models record, all without TensorFlow.
Importing this package, or a strategy's package, does not import TensorFlow (the CLI validates its flags first,
and the advisor's model reads the cost models): a package's `Strategy` is imported from its strategy.py when
first asked for (`training_class`); `create` asks for the chosen one.
"""

import importlib


def create(config, placement):
    """The strategy `config` names (a TrainConfig), for this task's `placement` (cluster.Placement)."""
    from disttrain_contract.strategies import strategy_of

    name = strategy_of(config.strategy).name  # (KeyError: not a strategy of the registry)
    return importlib.import_module(f"disttrain_trainer.strategies.{name}").Strategy(config, placement)


def training_class(package):
    """The module __getattr__ of a strategy's package (`package`: its __name__): its `Strategy`, imported from its
    strategy.py when first asked for, so that the package's other modules import without TensorFlow."""

    def __getattr__(name):
        if name != "Strategy":
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return importlib.import_module(f"{package}.strategy").Strategy

    return __getattr__
