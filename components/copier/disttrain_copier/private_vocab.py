"""A differentially private text vocabulary: which tokens of the training split the published model may hold.

    --dp-vocab-epsilon E  --dp-vocab-delta D  [--dp-vocab-max-tokens-per-example K]

The ordinary vocabulary is every token of the training split, most frequent first: a word that one
review alone contains (a name, an address) ends up in the published model. The private one is DP
partition selection (differentially private set union) with the weighted Gaussian mechanism of Gopi,
Gulhane, Kulkarni, Shen, Shokouhi and Yekhanin, "Differentially Private Set Union" (ICML 2020,
arXiv 2002.09745), the same Gaussian thresholding that Google's differential-privacy library uses for
partition selection (GaussianPartitionSelection), with each example's contribution normalised to L2
norm 1 rather than 1 per token:

1. Bounded contribution. An example contributes its first K distinct tokens (in the order they occur:
   a rule that looks at the example alone, never at the other examples), t = min(K, distinct tokens),
   each with weight 1/sqrt(t): the example's weight vector has L2 norm at most 1 whatever its length.
2. Noise. Every token that some training example contributed gets its summed weight plus N(0, σ²),
   σ being the Gaussian mechanism's for L2 sensitivity 1 at (ε, δ/2), as dp-accounting calibrates it
   (get_sigma_gaussian: the analytic Gaussian mechanism of Balle and Wang 2018, exact, not the classical
   sqrt(2 ln(1.25/δ))/ε bound).
3. Threshold. A token is released when its noisy weight exceeds

       ρ = max over t = 1..K of ( 1/sqrt(t) + σ · Φ⁻¹((1 − δ/2)^(1/t)) )

   (Φ⁻¹: the standard normal quantile; Gopi et al.'s threshold for Gaussian noise, with their Δ0 = K).
4. Order. The released tokens by noisy weight, highest first (ties alphabetical), at most --max-tokens:
   post-processing of released values, free.

Why (ε, δ): take neighbouring training splits D and D' = D plus one example x, which contributes the
token set W (|W| <= K). Split W into the tokens some example of D also contributed (S) and the new
ones (N). (a) The noisy weights of the tokens of D's support move by a vector of L2 norm at most 1
(x's weights on S): the Gaussian mechanism makes them (ε, δ/2)-indistinguishable, and the threshold,
the order and the cap are post-processing. (b) A new token has weight 1/sqrt(|W|) <= 1/sqrt(t) with
t = |N| <= K, and exists only in D': with ρ as above, none of the t is released except with
probability 1 − Φ((ρ − 1/sqrt(t))/σ)^t <= δ/2, whatever t is (hence the max over t). Together:
(ε, δ/2 + δ/2) = (ε, δ) for adding or removing one example, the unit DP-SGD's accounting uses too.
Training on the published vocabulary afterwards composes with it (basic composition: ε and δ add).

Not released: the true counts, the candidate tokens and their number (they are not private); the
manifest records only the parameters, σ, ρ and how many tokens came out.

The noise is drawn from the operating system's randomness, not from --seed: --seed is in the manifest,
and noise that anyone can regenerate can be subtracted again, which would leave the exact counts.
"""

import math
import secrets
import statistics

import numpy as np

MECHANISM = (
    "DP partition selection, weighted Gaussian (Gopi et al. 2020, Differentially Private Set Union): "
    "each example's first K distinct tokens at weight 1/sqrt(t), Gaussian noise, threshold"
)
NEIGHBOURING = "add or remove one example"
DEFAULT_MAX_TOKENS_PER_EXAMPLE = 32
FLAGS = ("--dp-vocab-epsilon", "--dp-vocab-delta", "--dp-vocab-max-tokens-per-example")


def add_flags(parser):
    group = parser.add_argument_group(
        "differentially private vocabulary (text sources; --dp-vocab-epsilon and --dp-vocab-delta together, or "
        "neither)",
        "the vocabulary keeps only tokens that enough training examples share (DP partition selection: each "
        "example's first K distinct tokens, Gaussian noise, a threshold), so that the published model holds no word "
        "of one example alone; the manifest records (ε, δ), and DP training adds them to its own",
    )
    group.add_argument(
        "--dp-vocab-epsilon", type=float, default=None, metavar="E", help="the vocabulary's privacy budget ε (> 0)"
    )
    group.add_argument(
        "--dp-vocab-delta",
        type=float,
        default=None,
        metavar="D",
        help="the vocabulary's δ (> 0, below 1/training examples); half goes to the noise, half to the threshold",
    )
    group.add_argument(
        "--dp-vocab-max-tokens-per-example",
        type=int,
        default=None,
        metavar="K",
        help=f"distinct tokens one example contributes: its first K (default {DEFAULT_MAX_TOKENS_PER_EXAMPLE})",
    )


def enabled(args):
    return args.dp_vocab_epsilon is not None


def check(args, error):
    """Both of ε and δ or neither, positive finite values, K only with them (error: parser.error, exit 2)."""
    epsilon, delta, k = args.dp_vocab_epsilon, args.dp_vocab_delta, args.dp_vocab_max_tokens_per_example
    if epsilon is None and delta is None:
        if k is not None:
            error(
                "--dp-vocab-max-tokens-per-example without --dp-vocab-epsilon and --dp-vocab-delta: it bounds the "
                "private vocabulary's contributions, which needs both"
            )
        return
    if delta is None:
        error("--dp-vocab-epsilon without --dp-vocab-delta: a private vocabulary needs both (ε and δ)")
    if epsilon is None:
        error("--dp-vocab-delta without --dp-vocab-epsilon: a private vocabulary needs both (ε and δ)")
    for flag, value in (("--dp-vocab-epsilon", epsilon), ("--dp-vocab-delta", delta)):
        if not (value > 0 and math.isfinite(value)):  # (also refuses nan)
            error(f"{flag} must be a positive number, got {value}")
    if delta >= 1:
        error(f"--dp-vocab-delta must be below 1 (and below 1/training examples), got {delta}")
    if k is None:
        args.dp_vocab_max_tokens_per_example = DEFAULT_MAX_TOKENS_PER_EXAMPLE
    elif k < 1:
        error(f"--dp-vocab-max-tokens-per-example must be a positive integer, got {k}")


def noise_stddev(epsilon, delta):
    """σ of the Gaussian mechanism of L2 sensitivity 1 that is (ε, δ)-DP (dp-accounting's analytic calibration)."""
    import dp_accounting

    return float(dp_accounting.get_sigma_gaussian(epsilon, delta))


def release_probability_bound(sigma, threshold, t):
    """The chance that any of t tokens of weight 1/sqrt(t) each, held by one example alone, is released."""
    return 1 - statistics.NormalDist().cdf((threshold - 1 / math.sqrt(t)) / sigma) ** t


def threshold(sigma, delta, max_tokens_per_example):
    """ρ: above it a token held by one example alone (of weight 1/sqrt(t), t <= K of them) shows with
    probability at most delta in all. Φ⁻¹((1 − δ)^(1/t)) is computed as −Φ⁻¹(1 − (1 − δ)^(1/t)) with
    expm1/log1p: (1 − δ)^(1/t) is 1 to within 1e-8 at the usual δ."""
    normal = statistics.NormalDist()
    return max(
        1 / math.sqrt(t) - sigma * normal.inv_cdf(-math.expm1(math.log1p(-delta) / t))
        for t in range(1, max_tokens_per_example + 1)
    )


class Selection:
    """The mechanism's parameters for (ε, δ, K): δ split in half between the noise and the threshold."""

    def __init__(self, epsilon, delta, max_tokens_per_example):
        self.epsilon, self.delta, self.max_tokens_per_example = epsilon, delta, max_tokens_per_example
        self.noise_delta = self.threshold_delta = delta / 2
        self.sigma = noise_stddev(epsilon, self.noise_delta)
        self.threshold = threshold(self.sigma, self.threshold_delta, max_tokens_per_example)

    def contribution(self, tokens):
        """An example's weights: its first K distinct tokens at 1/sqrt(t) each (L2 norm 1)."""
        chosen = list(dict.fromkeys(tokens))[: self.max_tokens_per_example]
        weight = 1 / math.sqrt(len(chosen)) if chosen else 0.0
        return {token: weight for token in chosen}

    def select(self, weights, max_tokens, rng=None):
        """The released tokens, highest noisy weight first (ties alphabetical), at most max_tokens.

        weights: token -> summed weight over the training examples. rng: numpy Generator; None draws a
        seed from the operating system (tests pass a seeded one to measure the release probability)."""
        rng = rng if rng is not None else np.random.default_rng(secrets.randbits(128))
        tokens = sorted(weights)  # a fixed order, so that a seeded generator gives the same draw for the same data
        noisy = np.fromiter((weights[t] for t in tokens), dtype=np.float64, count=len(tokens))
        noisy += rng.normal(0.0, self.sigma, size=len(tokens))
        kept = [(-float(value), token) for value, token in zip(noisy, tokens) if value > self.threshold]
        return [token for _, token in sorted(kept)[:max_tokens]]

    def record(self, released):
        """What the manifest's vocab record says was done (no count of the candidates: that is not private)."""
        return {
            "mechanism": MECHANISM,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "noise_delta": self.noise_delta,
            "threshold_delta": self.threshold_delta,
            "max_tokens_per_example": self.max_tokens_per_example,
            "noise_stddev": self.sigma,
            "threshold": self.threshold,
            "neighbouring": NEIGHBOURING,
            "accountant": f"analytic Gaussian mechanism (dp-accounting {accounting_version()})",
            "released": released,
        }


def accounting_version():
    from importlib.metadata import version

    return version("dp-accounting")
