"""Differentially private training (DP-SGD): its flags, their checks, and the privacy budget ε.

    --dp-l2-clip C  --dp-noise-multiplier SIGMA  --dp-delta DELTA

The mechanism (dp_step.py runs it): every step, each example's gradient is clipped to L2 norm C, the
clipped gradients are summed, and Gaussian noise of standard deviation SIGMA*C is added to the sum
once per (global) batch; the sum is divided by the expected batch size. In a synchronous step
(multiworker) the N workers' sums are added by the all-reduce, so each worker adds a share of the
noise, N(0, (SIGMA*C)^2 / N): independent Gaussians add their variances, and the N shares total
N(0, (SIGMA*C)^2), the noise of one batch. Workers that train alone (average, localsgd between
syncs) each add the whole N(0, (SIGMA*C)^2) to their own sum.

The sampler (data.poisson_batches): each step takes every example of the worker's shard
independently with probability q = batch / (examples per epoch), a batch of random size with mean
`batch` (Poisson sampling), from a secret seed. That is the sampling the accountant's
PoissonSampledDpEvent describes; the shuffle-and-batch input of non-private training is not (a batch
spanning two epochs can hold an example twice, and its amplification is not what the accountant
computes).

The accountant: dp-accounting's RDP accountant (Rényi DP, the moments accountant of Abadi et al.
2016 and of TensorFlow Privacy's `compute_dp_sgd_privacy`) of `steps` compositions of the Poisson
subsampled Gaussian mechanism, converted to (ε, δ). No TensorFlow here: the CLI checks the flags first.

The text vocabulary: the copier builds it from the training split, and the published model holds it. When
the copier built it privately (--dp-vocab-epsilon, --dp-vocab-delta: the manifest's vocab record has a
"private" part, disttrain_copier.private_vocab), the published model's guarantee is the two mechanisms
together on the same data, by basic composition: ε and δ add (the report gives both parts and the sum).
Otherwise the vocabulary is not covered, the report says so, and the trainer warns.
"""

import logging
import math
import sys

from disttrain_contract.privacy import delta_problem
from disttrain_contract.strategies import names_where, strategy_of

MECHANISM = "DP-SGD (per-example clipping, Gaussian noise, Poisson sampling)"
ACCOUNTANT = "RDP"  # dp_accounting.rdp.RdpAccountant
NEIGHBOURING = "add or remove one example"
# strategies that can train privately (each batch's noise added once, at a known sampling rate), and why the
# asynchronous one cannot
SUPPORTED_STRATEGIES = names_where(lambda s: not s.asynchronous)
PARAMETERSERVER_REASON = (
    "--strategy parameterserver does not support differential privacy: its workers apply their steps "
    "asynchronously to shared variables, so the noise cannot be added once per batch of a known sampling "
    "rate, and its coordinator draws the batches of several shards; use average, multiworker or localsgd"
)

VOCABULARY_NOT_COVERED = (
    "the text vocabulary: the copier builds it from the training split and the published model "
    "holds it (the copier's --dp-vocab-epsilon and --dp-vocab-delta build a private one)"
)
COMPOSITION = (
    "basic composition: the private vocabulary and DP-SGD run on the same training examples, so their "
    "ε add and their δ add"
)
VOCABULARY_WARNING = (
    "warning: differentially private training on a text dataset whose vocabulary is not private: "
    "the published model holds the training split's words, which ε does not cover; the copier's "
    "--dp-vocab-epsilon and --dp-vocab-delta build a private vocabulary"
)

# what ε does not cover: computed from the private data, shipped or shown without noise
NOT_COVERED = (
    VOCABULARY_NOT_COVERED,
    "normalisation statistics in your own model (a Normalization layer adapted on the private data); the built-in "
    "table model leaves the copier's statistics out when training privately (features and target unscaled)",
    "the copier's statistics and validation result (the report's data section)",
    "per-epoch training metrics (training loss and accuracy on the private shard, in metrics.json, progress.json "
    "and the dashboard)",
    "--combine best: ranking worker models by their accuracy on a validation carve of the private shard",
    "the sweep: choosing hyperparameters by training on the private data (each trial spends its own ε)",
    "the held-out (test) split is assumed public: its accuracy is reported without noise",
)


def add_flags(parser):
    group = parser.add_argument_group(
        "differential privacy (DP-SGD; all three flags together, or none)",
        "each example's gradient clipped to L2 norm C, Gaussian noise of standard deviation SIGMA*C added once per "
        "batch, batches Poisson-sampled; ε is computed per epoch and in total (RDP accountant) and reported",
    )
    group.add_argument(
        "--dp-l2-clip", type=float, default=None, metavar="C", help="clip each example's gradient to this L2 norm (> 0)"
    )
    group.add_argument(
        "--dp-noise-multiplier",
        type=float,
        default=None,
        metavar="SIGMA",
        help="noise standard deviation as a multiple of the clip norm (> 0)",
    )
    group.add_argument(
        "--dp-delta",
        type=float,
        default=None,
        metavar="DELTA",
        help="the δ of the reported (ε, δ) guarantee (> 0, and below 1/training examples)",
    )


def enabled(args):
    return args.dp_l2_clip is not None


def check(args, error):
    """The flags together and positive, and a strategy that supports them (error: parser.error, exit 2)."""
    given = [
        f"--dp-{name.replace('_', '-')}"
        for name in ("l2_clip", "noise_multiplier", "delta")
        if getattr(args, f"dp_{name}") is not None
    ]
    if not given:
        return
    if len(given) < 3:
        missing = [f for f in ("--dp-l2-clip", "--dp-noise-multiplier", "--dp-delta") if f not in given]
        error(
            f"{' and '.join(given)} without {' and '.join(missing)}: differential privacy needs all three "
            "(clip norm, noise multiplier, δ)"
        )
    for flag in given:
        value = getattr(args, flag[2:].replace("-", "_"))
        if not (value > 0 and math.isfinite(value)):  # (also refuses nan)
            error(f"{flag} must be a positive number, got {value}")
    if strategy_of(args.strategy).asynchronous:
        error(PARAMETERSERVER_REASON)


def sampling_probability(batch, epoch_examples):
    """Each example's chance to be in a step's batch: the expected batch over the examples an epoch goes through."""
    return min(1.0, batch / epoch_examples)


def _not_a_dropped_order_note(record):
    """absl's logger's filter: keeps dp-accounting's "Excluding this order from the epsilon computation"
    lines out of the log.

    The accountant writes one for every RDP order whose series does not converge (small noise
    multipliers: a few lines per epoch in the trainer's log). ε is the minimum over the orders that
    remain, which is what it is meant to be. Its other warnings (a negative divergence, an ε of zero)
    still get through: they mean something. A filter, not a lowered verbosity around the call, so
    that nothing else's warnings are hidden meanwhile."""
    return "Excluding this order from the epsilon computation" not in str(record.msg)


def epsilon(noise_multiplier, sampling_probability, steps, delta):
    """ε of `steps` Poisson subsampled Gaussian steps at this δ (dp-accounting's RDP accountant)."""
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

    if steps == 0:
        return 0.0
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(sampling_probability, dp_accounting.GaussianDpEvent(noise_multiplier)),
        steps,
    )
    logging.getLogger("absl").addFilter(_not_a_dropped_order_note)  # (once: a filter already there is not added again)
    accountant = RdpAccountant()
    accountant.compose(event)
    return float(accountant.get_epsilon(delta))


def private_vocabulary(vocabulary):
    """The manifest's record of a privately built vocabulary (its "private" part), or None."""
    return (vocabulary or {}).get("private")


def not_covered(vocabulary):
    """NOT_COVERED for this dataset: the vocabulary only when there is one and it is not private."""
    keep_vocabulary = vocabulary is not None and private_vocabulary(vocabulary) is None
    return [line for line in NOT_COVERED if line != VOCABULARY_NOT_COVERED or keep_vocabulary]


def summary(
    args,
    *,
    q,
    steps_per_epoch,
    epochs,
    epsilon_by_epoch,
    strategy,
    workers,
    training_examples,
    epoch_examples,
    vocabulary=None,
):
    """The report's privacy section: ε, δ, the mechanism's parameters and what the number rests on
    (the reporting advice of "How to DP-fy ML", Ponomareva et al. 2023, section 5.3).

    vocabulary: the manifest's vocab record (None: the dataset has none). Built privately, `epsilon` and
    `delta` are the published model's total (training plus vocabulary, added), and `training` and
    `vocabulary` give the parts; otherwise they are the training's alone."""
    training = {"epsilon": epsilon_by_epoch[-1] if epsilon_by_epoch else 0.0, "delta": args.dp_delta}
    vocab = private_vocabulary(vocabulary)
    total = (
        training
        if vocab is None
        else {"epsilon": training["epsilon"] + vocab["epsilon"], "delta": training["delta"] + vocab["delta"]}
    )
    covered = ["every noisy training step: every checkpoint and worker model as well as the final model"]
    parts = {}
    if vocab is not None:
        covered.append(
            f"the text vocabulary ({vocabulary.get('size')} tokens): built by the copier with DP "
            "partition selection at the vocabulary's (ε, δ)"
        )
        parts = {
            "training": training,
            "composition": COMPOSITION,
            "vocabulary": {
                key: vocab.get(key)
                for key in (
                    "epsilon",
                    "delta",
                    "mechanism",
                    "accountant",
                    "max_tokens_per_example",
                    "noise_stddev",
                    "threshold",
                    "released",
                )
            },
        }
    return {
        **total,
        **parts,
        "mechanism": MECHANISM,
        "accountant": f"{ACCOUNTANT} (dp-accounting {accounting_version()})",
        "l2_clip": args.dp_l2_clip,
        "noise_multiplier": args.dp_noise_multiplier,
        "sampling_probability": q,
        "expected_batch": args.batch,
        "steps": steps_per_epoch * epochs,
        "steps_per_epoch": steps_per_epoch,
        "epsilon_by_epoch": epsilon_by_epoch,
        "assumptions": assumptions(strategy, workers, training_examples, epoch_examples),
        "covered": covered,
        "not_covered": not_covered(vocabulary),
    }


def assumptions(strategy, workers, training_examples, epoch_examples):
    per_worker = {
        "average": "each worker trains alone on its own shard and the aggregator averages the models: every example "
        "is in one shard only, so one example changes one worker's training (parallel composition) and "
        "the reported ε is the largest over the workers",
        "localsgd": "each worker takes its own noisy steps on its own shard (the whole noise per step) and the "
        "workers average their weights: one example changes one worker's steps, the averaging is "
        "post-processing, and the reported ε is the largest over the workers",
        "multiworker": f"the {workers} workers' clipped sums are added every step, each worker adding a 1/{workers} "
        "share of the noise variance, so every global batch carries the whole noise once; the "
        "workers and the network between them are trusted (one worker's share alone is less noisy)",
    }[strategy]
    return [
        f"unit of privacy: one training example (one row of the copier's training split; {training_examples} in "
        f"all); neighbouring datasets differ by {NEIGHBOURING}; a person with "
        "several examples is covered only to ε times their number of examples",
        f"sampling: Poisson; each step takes every example of a worker's shard independently with probability "
        f"q = batch / {epoch_examples} (the examples an epoch goes through); the seed is secret (drawn from the "
        "operating system, not --seed), so a resumed run draws other batches",
        "shards: disjoint (the copier gives each example to one worker), " + per_worker,
        f"accountant: {ACCOUNTANT} of dp-accounting, composing the Poisson subsampled Gaussian mechanism over "
        "every step taken, converted to (ε, δ) at the given δ; δ below 1/n",
        "noise: drawn from a secret seed (the operating system's randomness), independently on every worker",
        "what is covered: every noisy step, so every checkpoint and worker model as well as the final model (the "
        "accounting composes all the steps); the held-out metrics are computed on the test split, assumed public",
    ]


def accounting_version():
    from importlib.metadata import version

    return version("dp-accounting")


def secret_seed():
    """A seed nobody can guess (not --seed, which the model's metadata records): 62 bits from the OS."""
    import os

    return int.from_bytes(os.urandom(8), "little") >> 2


def refusal(task_name, model):
    """Why per-example clipping does not hold for this task or model (one line), or None."""
    import keras

    if task_name == "faces":
        return (
            "differential privacy does not support the faces task: its triplet loss mines negatives within the "
            "batch, so one example's loss depends on the others and clipping each example's gradient does not "
            "bound one person's influence"
        )
    from disttrain_trainer.models import find_layer

    layer = find_layer(model, keras.layers.BatchNormalization)
    if layer is not None:
        return (
            f"differential privacy does not support the model's batch normalisation (layer {layer.name!r}): "
            "it normalises each example by statistics of the whole batch, so one example's gradient depends on "
            "the others and per-example clipping does not bound its influence; use a model without it "
            "(e.g. --model cnn, or layer or group normalisation in your own)"
        )
    return None


class Plan:
    """A private run's parameters, as the trainer uses them: the sampler's q and secret seed, the step's
    DpGradient, and ε after each epoch."""

    def __init__(
        self,
        args,
        *,
        strategy,
        workers,
        synchronous_replicas,
        training_examples,
        epoch_examples,
        steps_per_epoch,
        vocabulary=None,
    ):
        from disttrain_contract.errors import ContractError

        private_vocab = private_vocabulary(vocabulary)
        # with a private vocabulary the run's δ is the sum of both, and that sum is what must stay below 1/n
        problem = delta_problem(f"--dp-delta {args.dp_delta:g}", args.dp_delta, training_examples)
        if not problem and private_vocab is not None:
            problem = delta_problem(
                f"--dp-delta {args.dp_delta:g} plus the private vocabulary's δ {private_vocab['delta']:g}",
                args.dp_delta + private_vocab["delta"],
                training_examples,
            )
        if problem:
            raise ContractError(problem)
        self.vocabulary = vocabulary  # the manifest's vocab record (text), or None
        if vocabulary is not None and private_vocab is None:
            print(f"trainer: {VOCABULARY_WARNING}", file=sys.stderr, flush=True)
        self.args, self.strategy, self.workers = args, strategy, workers
        self.training_examples, self.epoch_examples = training_examples, epoch_examples
        self.steps_per_epoch = steps_per_epoch
        self.q = sampling_probability(args.batch, epoch_examples)
        self.sampling = (self.q, secret_seed())  # (data.poisson_batches)
        self.synchronous_replicas = synchronous_replicas  # workers whose sums one all-reduce adds (multiworker)
        self.epsilons = {}

    @staticmethod
    def probe_gradient(args):
        """The private step's gradient for timing it alone (disttrain-advise): one worker's whole noise."""
        from disttrain_trainer.dp_step import DpGradient

        return DpGradient(args.dp_l2_clip, args.dp_noise_multiplier, 1, args.batch, secret_seed())

    def gradient(self):
        from disttrain_trainer.dp_step import DpGradient

        return DpGradient(
            self.args.dp_l2_clip,
            self.args.dp_noise_multiplier,
            self.synchronous_replicas,
            self.args.batch * self.synchronous_replicas,
            secret_seed(),
        )

    def epsilon_after(self, epoch):
        if epoch not in self.epsilons:
            self.epsilons[epoch] = epsilon(
                self.args.dp_noise_multiplier, self.q, epoch * self.steps_per_epoch, self.args.dp_delta
            )
        return self.epsilons[epoch]

    def run_config(self):
        """What a checkpoint must agree on to be resumed (the budget's parameters)."""
        return {"dp": [self.args.dp_l2_clip, self.args.dp_noise_multiplier, self.args.dp_delta]}

    def summary(self, epochs):
        return summary(
            self.args,
            q=self.q,
            steps_per_epoch=self.steps_per_epoch,
            epochs=epochs,
            epsilon_by_epoch=[self.epsilon_after(e) for e in range(1, epochs + 1)],
            strategy=self.strategy,
            workers=self.workers,
            training_examples=self.training_examples,
            epoch_examples=self.epoch_examples,
            vocabulary=self.vocabulary,
        )
