"""localsgd's flags (--sync-every, the outer optimizer, the overlap, the statistics' refresh) and its part of a
TrainConfig, without TensorFlow."""

from dataclasses import dataclass

from disttrain_trainer.strategies.options_base import BLOCK_WIRES, LOSSY_WIRES, AllReduce, AllReduceSettings


DEFAULT_SYNC_EVERY = 32  # chosen by measurement: bench/README.md, "local SGD: choosing H"
OUTER_OPTIMIZERS = ("none", "nesterov")
OUTER_OVERLAPS = ("none", "delayed", "eager")  # overlap.py says what each does
DEFAULT_OUTER_LR, DEFAULT_OUTER_MOMENTUM = 0.7, 0.9  # DiLoCo's (Douillard et al. 2023)
# batches of a worker's shard that re-estimate the batch-norm statistics after a sync (statistics.py)
DEFAULT_SYNC_BATCH_NORM_BATCHES = 8


@dataclass(frozen=True)
class LocalSGDSettings(AllReduceSettings):
    sync_every: int = DEFAULT_SYNC_EVERY
    outer_optimizer: str = "none"
    outer_lr: float = DEFAULT_OUTER_LR
    outer_momentum: float = DEFAULT_OUTER_MOMENTUM
    outer_overlap: str = "none"
    sync_at_epoch_end: bool = False
    sync_batch_norm_batches: int = DEFAULT_SYNC_BATCH_NORM_BATCHES


class LocalSGD(AllReduce):
    name = "localsgd"
    title = "strategy localsgd"
    settings = LocalSGDSettings

    @classmethod
    def add_flags(cls, group):
        group.add_argument(
            "--sync-every",
            type=int,
            default=None,
            help=f"localsgd: optimizer steps between two syncs of the weights (default {DEFAULT_SYNC_EVERY})",
        )
        group.add_argument(
            "--outer-optimizer",
            choices=OUTER_OPTIMIZERS,
            default=None,
            help="localsgd: what a sync does with the workers' mean change of the weights since the last "
            "sync. none (default): add it, i.e. average the weights; nesterov: take a Nesterov-momentum "
            "step along it, scaled by --outer-lr (DiLoCo). Each worker keeps its own inner optimizer "
            "state across syncs; batch-norm statistics are averaged either way",
        )
        group.add_argument(
            "--outer-lr",
            type=float,
            default=None,
            help=f"localsgd --outer-optimizer nesterov: the outer learning rate (> 0, default {DEFAULT_OUTER_LR})",
        )
        group.add_argument(
            "--outer-momentum",
            type=float,
            default=None,
            help=f"localsgd --outer-optimizer nesterov: the outer momentum (>= 0 and < 1, default "
            f"{DEFAULT_OUTER_MOMENTUM})",
        )
        group.add_argument(
            "--outer-overlap",
            choices=OUTER_OVERLAPS,
            default=None,
            help="localsgd: run each sync's collective beside the next --sync-every inner steps instead of "
            "waiting for it, the outer step then one sync late. none (default): wait; delayed: apply "
            "the previous sync's mean change (the workers stay identical); eager: with this worker's "
            "own new change in place of its stale one (DiLoCo's eager updates; the workers differ "
            "by their own changes until the run ends with their average). For slow links, where a "
            "sync's collective takes a good part of H steps",
        )
        group.add_argument(
            "--sync-at-epoch-end",
            action="store_true",
            default=None,
            help="localsgd: sync at each epoch's end as well, counting --sync-every from each epoch's start, "
            "so that each epoch's held-out evaluation and checkpoint are the group's model (the one "
            "the run would publish), the same on every worker, not the chief's own model of up to "
            "H steps past the last sync. Costs one sync an epoch more where H does not divide the "
            "epoch; H of an epoch or more then syncs once an epoch. Not with --outer-overlap",
        )
        group.add_argument(
            "--sync-batch-norm-batches",
            type=int,
            default=None,
            metavar="N",
            help="localsgd, a model with batch normalization: after a sync whose statistics are read (the "
            "last sync before an epoch's end, where the held-out evaluation and the checkpoint read "
            "them, and the run's last), re-estimate its moving "
            "statistics for the synced weights from N batches of the worker's shard (forward passes "
            "in training mode, the mean of their batch statistics, averaged over the workers): "
            "statistics averaged across workers do not fit weights averaged or moved by the outer "
            f"optimizer. 0: keep the averaged statistics (default {DEFAULT_SYNC_BATCH_NORM_BATCHES})",
        )

    @classmethod
    def check(cls, args, error):
        if args.sync_every is not None and args.sync_every < 1:
            error("--sync-every must be >= 1")
        if args.sync_batch_norm_batches is not None and args.sync_batch_norm_batches < 0:
            error("--sync-batch-norm-batches must be >= 0")
        if args.outer_lr is not None and not args.outer_lr > 0:  # (also refuses nan)
            error("--outer-lr must be > 0")
        if args.outer_momentum is not None and not 0 <= args.outer_momentum < 1:
            error("--outer-momentum must be >= 0 and < 1")

    @classmethod
    def misplaced(cls, args, strategy):
        if args.sync_every is not None:
            return f"--sync-every applies to --strategy localsgd, not {strategy}"
        if (args.outer_optimizer, args.outer_lr, args.outer_momentum) != (None, None, None):
            return f"--outer-optimizer, --outer-lr and --outer-momentum apply to --strategy localsgd, not {strategy}"
        if args.sync_batch_norm_batches is not None:
            return f"--sync-batch-norm-batches applies to --strategy localsgd, not {strategy}"
        if args.outer_overlap is not None:
            return f"--outer-overlap applies to --strategy localsgd, not {strategy}"
        if args.sync_at_epoch_end is not None:
            return f"--sync-at-epoch-end applies to --strategy localsgd, not {strategy}"
        if args.allreduce_dtype in BLOCK_WIRES:
            return (
                f"--allreduce-dtype {args.allreduce_dtype} applies to --strategy localsgd, not {strategy} "
                "(TensorFlow's all-reduce refuses int8; use float16)"
            )
        return None

    def resolve(self, args, error):
        if args.outer_optimizer in (None, "none") and (args.outer_lr, args.outer_momentum) != (None, None):
            error("--outer-lr and --outer-momentum apply to --outer-optimizer nesterov, not none")
        if args.sync_at_epoch_end and args.outer_overlap not in (None, "none"):
            # (an overlapped sync's outer step lands one sync late, and under eager the workers differ until the end:
            # an epoch's end would still not hold the group's model)
            error(
                f"--sync-at-epoch-end does not go with --outer-overlap {args.outer_overlap}: an overlapped sync "
                "applies its exchange one sync late, so an epoch's end would not hold the group's model"
            )
        given = {name: getattr(args, name) for name in self.settings.__dataclass_fields__}
        return self.settings(**{name: value for name, value in given.items() if value is not None})

    def model_meta(self, settings):
        """H, and what differs from plain averaging over a float32 wire (a default run records what it did)."""
        return {"sync_every": settings.sync_every, **outer_settings(settings)}


def outer_settings(settings):
    """localsgd's settings beyond H that change what a sync computes, only where they differ from plain
    averaging over a float32 wire: the model's metadata and the checkpoints' run.json record them, so a run
    with the defaults records (and resumes) what it did before these options existed."""
    differs = {}
    if settings.outer_optimizer != "none":
        differs.update(
            outer_optimizer=settings.outer_optimizer, outer_lr=settings.outer_lr, outer_momentum=settings.outer_momentum
        )
    if settings.allreduce_dtype in LOSSY_WIRES:
        differs["allreduce_dtype"] = settings.allreduce_dtype  # (with error feedback: always, on these wires)
    if settings.outer_overlap != "none":
        differs["outer_overlap"] = settings.outer_overlap
    if settings.sync_at_epoch_end:
        differs["sync_at_epoch_end"] = True
    return differs


OPTIONS = LocalSGD
