"""The private vocabulary's parts on their own (disttrain_copier.private_vocab): σ against dp-accounting and a
hand-checked number, the threshold's promise measured over many draws, the per-example contribution bound, the
order of the released tokens, and the flags' refusals; the copier's data-dependent refusals run the real CLI."""

import json
import math
import statistics

import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld, rdp

from disttrain_contract.manifest import Manifest, read_vocab
from disttrain_copier import private_vocab
from disttrain_copier.main import parse_args
from disttrain_copier.private_vocab import Selection
from stages import stage


@pytest.mark.parametrize("epsilon, delta", [(1.0, 1e-5), (3.0, 1e-6), (8.0, 1e-5), (0.5, 0.1)])
def test_sigma_is_the_gaussian_mechanisms_for_epsilon_and_half_delta(epsilon, delta):
    """σ is dp-accounting's calibration of the Gaussian mechanism (sensitivity 1) at (ε, δ/2): its PLD accountant,
    on a GaussianDpEvent of that σ, gives back ε at δ/2 (to its discretisation), and the closed form of the
    analytic Gaussian mechanism (Balle and Wang 2018, Theorem 8) gives back δ/2 at ε."""
    selection = Selection(epsilon, delta, 32)
    assert selection.noise_delta == selection.threshold_delta == delta / 2
    accountant = pld.PLDAccountant(value_discretization_interval=1e-3)
    accountant.compose(dp_accounting.GaussianDpEvent(selection.sigma))
    assert accountant.get_epsilon(delta / 2) == pytest.approx(epsilon, abs=1e-4)
    # the RDP accountant is an upper bound of the same mechanism's ε: never below
    rdp_accountant = rdp.RdpAccountant()
    rdp_accountant.compose(dp_accounting.GaussianDpEvent(selection.sigma))
    assert rdp_accountant.get_epsilon(delta / 2) >= epsilon - 1e-9
    phi, sigma = statistics.NormalDist().cdf, selection.sigma
    exact_delta = phi(1 / (2 * sigma) - epsilon * sigma) - math.exp(epsilon) * phi(-1 / (2 * sigma) - epsilon * sigma)
    assert exact_delta == pytest.approx(delta / 2, rel=1e-6)


def test_sigma_and_threshold_against_a_hand_checked_setting():
    """ε = 1, δ = 1e-5 (5e-6 to the noise, 5e-6 to the threshold), K = 1: σ = 3.88414 solves the analytic
    Gaussian mechanism's Φ(1/(2σ) − σ) − e·Φ(−1/(2σ) − σ) = 5e-6 (checked with mpmath at 40 digits: 5.0000e-6),
    against 4.986 by the classical sqrt(2 ln(1.25/δ))/ε; Φ⁻¹(1 − 5e-6) = 4.417173, so ρ = 1 + 3.88414 · 4.417173
    = 18.15692. With K = 32 the largest term of the max is still the t = 32 end: ρ = 20.04706."""
    one = Selection(1.0, 1e-5, 1)
    assert one.sigma == pytest.approx(3.8841408, abs=1e-6)
    assert one.threshold == pytest.approx(18.1569235, abs=1e-6)
    assert one.threshold == pytest.approx(1 + one.sigma * statistics.NormalDist().inv_cdf(1 - 5e-6), rel=1e-12)
    assert Selection(1.0, 1e-5, 32).threshold == pytest.approx(20.0470606, abs=1e-6)
    assert math.sqrt(2 * math.log(1.25 / 5e-6)) > one.sigma  # (the classical bound is looser)


@pytest.mark.parametrize("k", [1, 4, 32])
def test_the_threshold_bounds_every_contribution_size(k):
    """ρ makes the chance that an example's t <= K tokens of weight 1/sqrt(t), held by it alone, show up at most
    δ/2 for every t, and exactly δ/2 for the t that sets the max."""
    selection = Selection(1.0, 1e-5, k)
    bounds = [private_vocab.release_probability_bound(selection.sigma, selection.threshold, t) for t in range(1, k + 1)]
    assert max(bounds) == pytest.approx(selection.threshold_delta, rel=1e-6)
    assert all(b <= selection.threshold_delta * (1 + 1e-9) for b in bounds)


@pytest.mark.parametrize("t", [1, 2, 4])
def test_a_token_held_by_one_example_is_released_at_most_at_the_threshold_delta(t):
    """Measured: one example alone with t distinct tokens (K = 4), many independent draws from a seeded generator.
    A large δ (0.2, so 0.1 to the threshold) makes the rare event frequent enough to count: the measured chance
    that any of its tokens is released stays at the bound, which is at most δ/2."""
    selection = Selection(1.0, 0.2, 4)
    weights = selection.contribution([f"word{i}" for i in range(t)])
    rng = np.random.default_rng(20260)
    draws = 20000
    released = sum(bool(selection.select(weights, 100, rng=rng)) for _ in range(draws))
    bound = private_vocab.release_probability_bound(selection.sigma, selection.threshold, t)
    assert bound <= selection.threshold_delta * (1 + 1e-9)
    spread = 4 * math.sqrt(bound * (1 - bound) / draws)  # 4 standard deviations of the measured frequency
    assert released / draws <= selection.threshold_delta + spread
    assert released / draws == pytest.approx(bound, abs=spread)


def test_an_example_contributes_at_most_k_distinct_tokens_of_total_norm_one():
    selection = Selection(1.0, 1e-5, 3)
    weights = selection.contribution("the cat and the dog and a bird sang".split())
    assert list(weights) == ["the", "cat", "and"]  # its first K distinct tokens, in order: not chosen by the data
    assert math.sqrt(sum(w * w for w in weights.values())) == pytest.approx(1.0)
    short = selection.contribution(["good", "good"])
    assert short == {"good": 1.0}  # a repeated token counts once; fewer than K: a larger weight each, norm 1
    assert selection.contribution([]) == {}


def test_released_tokens_are_ordered_by_noisy_weight_and_capped():
    """The order is the noisy weights' (the test redraws the same noise from the same seed), not the true counts'."""
    selection = Selection(8.0, 1e-5, 4)
    weights = {f"w{i:02d}": 2.0 * selection.threshold + i * 0.01 for i in range(30)}
    weights["rare"] = 0.5
    chosen = selection.select(weights, 10, rng=np.random.default_rng(7))
    tokens = sorted(weights)
    noisy = dict(
        zip(
            tokens,
            np.array([weights[t] for t in tokens]) + np.random.default_rng(7).normal(0.0, selection.sigma, len(tokens)),
        )
    )
    expected = sorted((t for t in tokens if noisy[t] > selection.threshold), key=lambda t: (-noisy[t], t))[:10]
    assert chosen == expected and len(chosen) == 10 and "rare" not in chosen


def test_without_a_generator_the_noise_comes_from_the_operating_system():
    """No --seed goes in: two selections of the same weights draw different noise."""
    selection = Selection(1.0, 1e-5, 4)
    weights = {f"w{i}": selection.threshold for i in range(200)}  # each released with probability 1/2
    assert selection.select(weights, 1000) != selection.select(weights, 1000)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--dp-vocab-epsilon", "1"], "--dp-vocab-epsilon without --dp-vocab-delta"),
        (["--dp-vocab-delta", "1e-5"], "--dp-vocab-delta without --dp-vocab-epsilon"),
        (
            ["--dp-vocab-epsilon", "0", "--dp-vocab-delta", "1e-5"],
            "--dp-vocab-epsilon must be a positive number, got 0.0",
        ),
        (["--dp-vocab-epsilon", "1", "--dp-vocab-delta=-1e-5"], "--dp-vocab-delta must be a positive number"),
        (["--dp-vocab-epsilon", "nan", "--dp-vocab-delta", "1e-5"], "--dp-vocab-epsilon must be a positive number"),
        (["--dp-vocab-epsilon", "inf", "--dp-vocab-delta", "1e-5"], "--dp-vocab-epsilon must be a positive number"),
        (["--dp-vocab-epsilon", "1", "--dp-vocab-delta", "1"], "--dp-vocab-delta must be below 1"),
        (
            ["--dp-vocab-epsilon", "1", "--dp-vocab-delta", "1e-5", "--dp-vocab-max-tokens-per-example", "0"],
            "--dp-vocab-max-tokens-per-example must be a positive integer",
        ),
        (["--dp-vocab-max-tokens-per-example", "8"], "--dp-vocab-max-tokens-per-example without --dp-vocab-epsilon"),
    ],
)
def test_bad_private_vocabulary_flags_are_refused_in_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--source", "sample:movie-reviews", *argv])
    assert exit_.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in error


def test_flags_parse_with_the_default_bound():
    args = parse_args(["--source", "sample:movie-reviews", "--dp-vocab-epsilon", "2", "--dp-vocab-delta", "1e-6"])
    assert private_vocab.enabled(args)
    assert args.dp_vocab_max_tokens_per_example == private_vocab.DEFAULT_MAX_TOKENS_PER_EXAMPLE
    assert not private_vocab.enabled(parse_args(["--source", "sample:movie-reviews"]))


def write_reviews(path, n):
    """n short reviews, all sharing 'good film' and each with a word of its own."""
    with open(path, "w") as fh:
        fh.write("text,label\n")
        for i in range(n):
            fh.write(f"a good film number{i} unique{i}x,{i % 2}\n")


@pytest.mark.parametrize(
    "source, extra, message",
    [
        ("csv", ("--dp-vocab-delta", "0.05"), "--dp-vocab-delta 0.05 must be below 1/n = "),
        ("csv", ("--dp-vocab-epsilon", "0.01"), "the private vocabulary is empty: no token's noisy weight passed"),
        (
            "sample:digits",
            (),
            "--dp-vocab-epsilon applies to text sources only: sample:digits holds image data, without a vocabulary",
        ),
    ],
)
def test_the_copier_refuses_what_needs_the_data_and_publishes_nothing(tmp_path, source, extra, message):
    if source == "csv":
        write_reviews(tmp_path / "reviews.csv", 60)
        source = f"csv:{tmp_path / 'reviews.csv'}"
    flags = {"--dp-vocab-epsilon": "1", "--dp-vocab-delta": "1e-4", **dict(zip(extra[::2], extra[1::2]))}
    result = stage(
        "copier",
        "--source",
        source,
        "--workdir",
        tmp_path,
        "--no-stats-plot",
        *[x for pair in flags.items() for x in pair],
        check=False,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: " + message), result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "data").exists()


def test_the_copier_releases_the_shared_words_only(tmp_path):
    """Words that every example holds come out; a word of one example alone does not (here: with ε = 8, δ = 1e-8
    and about 3,200 training examples, ρ is about 5.4, 'good' weighs about 3,200/sqrt(5), and each of the 6,400
    words of one example alone weighs 1/sqrt(5) and shows with probability below 1e-10); the manifest records what
    was done."""
    write_reviews(tmp_path / "reviews.csv", 4000)
    stage(
        "copier",
        "--source",
        f"csv:{tmp_path / 'reviews.csv'}",
        "--workdir",
        tmp_path,
        "--no-stats-plot",
        "--dp-vocab-epsilon",
        "8",
        "--dp-vocab-delta",
        "1e-8",
        "--dp-vocab-max-tokens-per-example",
        "5",
    )
    vocab = (tmp_path / "data" / "vocab.txt").read_text().split()
    assert sorted(vocab) == ["a", "film", "good"]
    record = json.load(open(tmp_path / "data" / "manifest.json"))["vocab"]
    private = record["private"]
    assert record["size"] == private["released"] == len(vocab)
    assert (private["epsilon"], private["delta"], private["max_tokens_per_example"]) == (8.0, 1e-8, 5)
    assert private["noise_stddev"] == pytest.approx(Selection(8.0, 1e-8, 5).sigma)
    assert private["threshold"] == pytest.approx(Selection(8.0, 1e-8, 5).threshold)
    assert private["mechanism"].startswith("DP partition selection")
    manifest = Manifest.read(tmp_path / "data")  # the contract reads it (and manifests without the part, as before)
    assert manifest.vocab["private"] == private and read_vocab(tmp_path / "data", manifest) == vocab
