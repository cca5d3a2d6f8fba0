"""disttrain-trainer: train one worker on its shard.

    disttrain-trainer --worker-index 0 --workers 2 --epochs 5 --workdir workdir
    disttrain-trainer --strategy multiworker --workers 2 --worker-index 1 ...
    disttrain-trainer --strategy localsgd --sync-every 32 --workers 2 --worker-index 1 ...
    disttrain-trainer --strategy parameterserver --ps 1 --workers 2 --worker-index 0 ...  (0 = chief, 1 = ps, 2-3 workers)

Four strategies, one package each (disttrain_trainer/strategies/):
  average      each worker trains alone on its shard, starting from the same
               initial weights (drawn from --seed); the aggregator averages them.
  multiworker  synchronous data parallelism with MultiWorkerMirroredStrategy:
               gradients are summed across workers every step; the chief (index 0)
               writes the model.
  localsgd     each worker trains alone for --sync-every steps, then the workers
               average their weights (one all-reduce), or take DiLoCo's outer step
               (--outer-optimizer nesterov); the chief writes the model.
  parameterserver  asynchronous training with ParameterServerStrategy: a chief (the
               coordinator) schedules steps on --workers workers, the variables live on --ps
               parameter servers; the chief writes the model, the others serve until it has.

The command line is a thin layer over the Python API: the flags become a TrainConfig (config.py), which
train(config) runs (training.py).

Why a custom training loop: Keras 3's model.fit fails under
MultiWorkerMirroredStrategy (keras-team/keras#20585, "PerReplica ... to a
Tensor"). A loop around strategy.run works with Keras 3, keeps one code path
for every strategy (step.py), and makes checkpoint/resume explicit.
"""

from disttrain_contract import run_cli
from disttrain_trainer.config import parse_config
from disttrain_trainer.training import train

parse_args = parse_config  # (every stage's CLI module has its parse_args: the chart's tests parse its args with it)


def main(argv=None):
    return train(parse_config(argv))


def cli():
    run_cli(main)


if __name__ == "__main__":
    cli()
