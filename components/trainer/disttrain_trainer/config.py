"""The trainer's run configuration: every setting of one training run, typed, frozen, parsed once.

    config = parse_config(["--strategy", "localsgd", "--sync-every", "50"])
    config.strategy_settings.sync_every  # 50: the chosen strategy's own part (strategies/localsgd/options.py)
    parse_config(config.to_argv()) == config  # the command line of a trainer that runs this configuration

Flags become a TrainConfig in one place (`from_flags`): the values checked (one line, exit 2), --params-from's
parameters in place of the flags of the same name, and the defaults that depend on the chosen strategy
resolved (its StrategySettings). Nothing changes a TrainConfig afterwards. The defaults that depend on the
data (the task's learning rate, width, dropout and optimizer: tasks/) are known once the copier's manifest is
read; `with_task_defaults` returns the configuration with them filled in.
"""

import argparse
import dataclasses
import os
from dataclasses import dataclass, field
from types import MappingProxyType

from disttrain_contract import ContractError, default_workdir, job_completion_index, read_json
from disttrain_contract.params import read_params_file
from disttrain_trainer import malloc_settings, privacy
from disttrain_trainer.strategies import options
from disttrain_trainer.strategies.average.options import AverageSettings
from disttrain_trainer.strategies.options_base import StrategySettings

IMAGE_MODELS = ("cnn", "mobilenetv2", "resnet50")  # --model (models.build_image_model)
OPTIMIZERS = ("lazyadam", "adam", "sgd")  # (adam and lazyadam: the same for dense gradients)


@dataclass(frozen=True)
class TrainConfig:
    """One training run's settings, as the trainer's flags name them (field = the flag's dest; `--help` says
    what each does). `strategy_settings` is the chosen strategy's own part; `params_origin` records where the
    training parameters came from (the flags, or the sweep's best.json) for the model's metadata."""

    workdir: str
    data: str | None = None
    out: str | None = None
    strategy: str = "average"
    strategy_settings: StrategySettings = field(default_factory=AverageSettings)
    host_pattern: str | None = None
    port: int = 12345
    peer_wait: float = 600.0
    epochs: int = 5
    batch: int = 64
    learning_rate: float | None = None
    seed: int = 42
    optimizer: str | None = None
    steps_per_call: int = 32
    model_file: str | None = None
    model_module: str | None = None
    model: str = "cnn"
    image_size: int | None = None
    width: int | None = None
    dropout: float | None = None
    params_from: str | None = None
    embedding_size: int = 64
    margin: float = 0.2
    views: int = 2
    workers: int | None = None
    worker_index: int = 0
    job: str = ""
    service: str = ""
    wait_timeout: float = 600.0
    threads: int = 0
    malloc: str = "tuned"
    progress_interval: float = 1.0
    dp_l2_clip: float | None = None
    dp_noise_multiplier: float | None = None
    dp_delta: float | None = None
    params_origin: MappingProxyType = field(default_factory=lambda: MappingProxyType({"source": "flags"}))

    def with_task_defaults(self, task):
        """This configuration with the task's defaults where a flag was not given (--optimizer, --learning-rate,
        --width, --dropout; a private run's own, tasks/text.py)."""
        private = task.private_defaults if privacy.enabled(self) else {}
        return dataclasses.replace(
            self,
            **{
                name: private.get(name, getattr(task, name))
                for name in ("optimizer", "learning_rate", "width", "dropout")
                if getattr(self, name) is None
            },
        )

    def to_argv(self):
        """The trainer's command line for this configuration: every field that is set (not None), and of the
        strategy's part the fields not at their defaults (a default the strategy's checks would refuse in
        combination stays out: --outer-lr without --outer-optimizer nesterov). A flag without a value
        (--sync-at-epoch-end) appears when True."""
        argv = []
        parts = [(name, getattr(self, name)) for name in TRAINER_FLAGS]
        settings = self.strategy_settings
        parts += [
            (f.name, getattr(settings, f.name))
            for f in dataclasses.fields(settings)
            if getattr(settings, f.name) != f.default
        ]
        for name, value in parts:
            flag = "--" + name.replace("_", "-")
            if value is None or value is False:
                continue
            argv += [flag] if value is True else [flag, str(value)]
        return argv


# TrainConfig's fields that are flags of their own (the strategy's part and the origin are not)
TRAINER_FLAGS = tuple(
    f.name for f in dataclasses.fields(TrainConfig) if f.name not in ("strategy_settings", "params_origin")
)


def parse_config(argv=None):
    """The trainer's flags (argv, default sys.argv) as a TrainConfig; a bad flag or value: one line, exit 2."""
    parser = build_parser()
    return from_flags(parser, parser.parse_args(argv))


def from_flags(parser, args):
    """The TrainConfig of `parser`'s parsed `args` (a parser of build_parser, which others extend with flags
    of their own: disttrain-advise). `args` is not changed; --params-from's values replace the flags'."""
    params, origin = params_file(args)
    flags = argparse.Namespace(**{**vars(args), **params})
    settings = check_flags(parser, flags)
    return TrainConfig(
        **{name: getattr(flags, name) for name in TRAINER_FLAGS},
        strategy_settings=settings,
        params_origin=MappingProxyType(origin),
    )


def params_file(args):
    """--params-from: (the sweep's parameters, which replace the flags of the same name; where the training
    parameters came from, for the model's metadata and the report)."""
    if not args.params_from:
        return {}, {"source": "flags"}
    path = os.path.abspath(args.params_from)
    params = read_params_file(path)  # ContractError: run_cli prints it and exits 2
    for name in params:
        users = options.users_of(name)  # a strategy's own parameter (sync_every: localsgd's)
        if users is not None and args.strategy not in users:
            raise ContractError(
                f"--params-from {path}: {name} was searched by {', '.join(users)} trials, but this "
                f"run's --strategy is {args.strategy}: sweep with the strategy you train with"
            )
    best = read_json(path)
    print(
        "trainer: parameters from " + path + ": " + ", ".join(f"{k}={v:g}" for k, v in sorted(params.items())),
        flush=True,
    )
    return params, {
        "source": "sweep",
        "file": path,
        "trial": best.get("trial"),
        "validation_accuracy": best.get("value"),
    }


def build_parser(prog="disttrain-trainer", description="Train one worker on its shard (stage 2 of disttrain)."):
    """The trainer's flags (disttrain-advise adds its own to them: the same flags mean the same things)."""
    p = argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog="Addresses of connected strategies (multiworker, localsgd): TF_CONFIG is used as given when set; "
        "otherwise it is built from --workers, --worker-index and --host-pattern ({job}-{index}.{service}:{port} "
        "when --service is set, else 127.0.0.1:{index_port} = base port + index).",
    )
    add_location_flags(p)
    options.add_flags(p)  # --strategy and each strategy's own flags (strategies/options.py)
    add_training_flags(p)
    add_own_model_flags(p)
    add_model_flags(p)
    add_params_from_flag(p)
    add_faces_flags(p)
    add_cluster_flags(p)
    add_runtime_flags(p)
    privacy.add_flags(p)
    return p


def add_location_flags(p):
    """Where the data is read and the workers' directories are written."""
    p.add_argument(
        "--workdir",
        default=default_workdir(),
        help="shared working directory (default $DISTTRAIN_WORKDIR or ./workdir)",
    )
    p.add_argument("--data", help="the copier's output (default WORKDIR/data)")
    p.add_argument("--out", "--savemodel", dest="out", help="where worker directories go (default WORKDIR/train)")


def add_training_flags(p):
    """The optimisation: epochs, batch, learning rate, seed, optimizer, steps per compiled call."""
    p.add_argument("--epochs", "--epoch", dest="epochs", type=int, default=5, help="default 5")
    p.add_argument("--batch", type=int, default=64, help="examples per step per worker (default 64)")
    p.add_argument(
        "--learning-rate",
        type=float,
        default=None,
        help="the optimizer's learning rate (default: the task's, 0.003 for text, 0.001 otherwise; "
        "1.0 for differentially private text training)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=42,
        help="seed of the shared initial weights, the random layers' draws and the batches' order (default 42; "
        "with --threads 1 the same command trains to the same weights: the docs' Reproducible runs)",
    )
    p.add_argument(
        "--optimizer",
        choices=OPTIMIZERS,
        default=None,
        help="adam (default): Keras' Adam, which updates every embedding row every step; lazyadam: Adam that "
        "updates only the embedding rows a batch touched, 3-5x faster text steps "
        "(disttrain_trainer/optimizers.py, bench/README.md); sgd: SGD with momentum 0.9, the default of "
        "differentially private text training (docs/privacy.md)",
    )
    p.add_argument(
        "--steps-per-call",
        type=int,
        default=32,
        help="training steps per compiled call: Python overhead is paid once per call (default 32)",
    )


def add_own_model_flags(p):
    """The user's own model, instead of the task's built-in one (contract user_model)."""
    own = p.add_argument_group("your own model (instead of the task's built-in one; contract user_model)")
    own.add_argument(
        "--model-file",
        metavar="PATH",
        help="a Keras 3 .keras file (model.save()): its weights are every worker's starting point (fresh: "
        "training from scratch; trained: fine-tuning), its compiled loss is used; loaded in safe mode "
        "(no Lambda layers: register custom layers in a --model-module). An s3://bucket/key is "
        "downloaded once into WORKDIR (the AWS_* variables configure the store)",
    )
    own.add_argument(
        "--model-module",
        metavar="MODULE[:FUNCTION]",
        help="a module on the Python path (a derived image or a mounted directory on PYTHONPATH): its "
        "FUNCTION(spec) (default build) returns the keras.Model; with --model-file it is only imported, "
        "for the custom layers the file uses. The aggregator and the server need the same module",
    )


def add_model_flags(p):
    """The built-in models' architecture and size."""
    p.add_argument(
        "--model",
        choices=IMAGE_MODELS,
        default="cnn",
        help="image task: the small CNN (default) or a keras.applications network trained from scratch",
    )
    p.add_argument(
        "--image-size",
        type=int,
        default=None,
        help="--model mobilenetv2/resnet50: resize images to this size inside the model (default: 32 or the image size)",
    )
    p.add_argument(
        "--width",
        type=int,
        default=None,
        help="text: embedding width; image (--model cnn), table: hidden units (default 64)",
    )
    p.add_argument(
        "--dropout",
        type=float,
        default=None,
        help="the built-in models' dropout rate before the output (default 0.5 text, 0.3 image, 0.1 table)",
    )


def add_params_from_flag(p):
    """--params-from: the sweep's best parameters in place of the flags."""
    p.add_argument(
        "--params-from",
        metavar="BEST_JSON",
        help="take learning_rate, batch, epochs, width and dropout from the sweep's WORKDIR/sweep/best.json "
        "(they replace those flags); an unknown key or a bad value is an error (exit 2)",
    )


def add_faces_flags(p):
    """The faces task's embedding and triplet loss."""
    p.add_argument("--embedding-size", type=int, default=64, help="faces: embedding dimensions (default 64)")
    p.add_argument("--margin", type=float, default=0.2, help="faces: triplet-loss margin (default 0.2)")
    p.add_argument("--views", type=int, default=2, help="faces: views per person in a batch (default 2)")


def add_cluster_flags(p):
    """The worker's place in the job (the number of workers, its index, its Kubernetes names) and its wait for the data."""
    p.add_argument("--workers", type=int, default=None, help="number of workers (default: the dataset's shard count)")
    p.add_argument(
        "--worker-index",
        type=int,
        default=job_completion_index(None),
        help="this worker's index (default $JOB_COMPLETION_INDEX, else 0)",
    )
    p.add_argument("--job", default=os.environ.get("DISTTRAIN_JOB", ""), help="on Kubernetes: the Indexed Job's name")
    p.add_argument(
        "--service", default=os.environ.get("DISTTRAIN_SERVICE", ""), help="on Kubernetes: the headless Service's name"
    )
    p.add_argument(
        "--wait-timeout", type=float, default=600, help="seconds to wait for the copier's marker (default 600)"
    )


def add_runtime_flags(p):
    """The process: TensorFlow's threads, glibc's malloc, the progress file."""
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="TensorFlow intra- and inter-op threads (default 0 = TensorFlow decides); with 1 and --malloc tuned, "
        "glibc's malloc keeps one arena (a multiworker epoch up to 22 %% shorter; MALLOC_ARENA_MAX overrides)",
    )
    p.add_argument(
        "--malloc",
        choices=malloc_settings.MODES,
        default="tuned",
        help="tuned (default): glibc's malloc keeps large blocks in its heap instead of mapping and unmapping "
        "them every step (mmap threshold 32 MiB, trim threshold 64 MiB: a multiworker text epoch 20 %% shorter), "
        "and one arena at --threads 1; the environment's own MALLOC_* or GLIBC_TUNABLES settings win. "
        "glibc: glibc's defaults",
    )
    p.add_argument(
        "--progress-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="rewrite the worker directory's progress.json (epoch, step, loss, examples/s, ETA, the "
        "per-epoch history; the server's page shows it live) at most every SECONDS, and at the end "
        "of each epoch; 0 = never write it (default 1)",
    )


def check_flags(p, args):
    """The checks of the flags' values (p.error: one line, exit 2); returns the chosen strategy's settings."""
    if args.width is not None and args.width < 1:
        p.error("--width must be >= 1")
    if args.dropout is not None and not 0 <= args.dropout < 1:
        p.error("--dropout must be >= 0 and < 1")
    for name in ("epochs", "batch", "embedding_size", "views", "steps_per_call"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if (args.learning_rate is not None and args.learning_rate <= 0) or args.margin <= 0:
        p.error("--learning-rate and --margin must be > 0")
    if args.workers is not None and args.workers < 1:
        p.error("--workers must be >= 1")
    settings = options.check(args, p.error)  # the strategy's flags: their values, and none of another strategy's
    privacy.check(args, p.error)
    if not args.progress_interval >= 0:  # (also refuses nan)
        p.error("--progress-interval must be >= 0 (0: no progress.json)")
    if args.image_size is not None and args.model == "cnn":
        p.error("--image-size applies to --model mobilenetv2 or resnet50")
    if args.image_size is not None and args.image_size < 32:
        p.error("--image-size must be >= 32 (the keras.applications networks need it)")
    return settings
