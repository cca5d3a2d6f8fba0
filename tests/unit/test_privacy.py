"""Differentially private training's parts on their own: the flags' refusals, ε against dp-accounting and
against published numbers, the per-example clipping and the noise (real TensorFlow, no training run)."""

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import RdpAccountant

from disttrain_contract.privacy import delta_problem
from disttrain_trainer import privacy
from disttrain_trainer import parse_config as parse_args

DP = ["--dp-l2-clip", "1.0", "--dp-noise-multiplier", "1.1", "--dp-delta", "1e-5"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--dp-noise-multiplier", "1.1", "--dp-delta", "1e-5"], "without --dp-l2-clip"),
        (["--dp-l2-clip", "1.0"], "--dp-l2-clip without --dp-noise-multiplier and --dp-delta"),
        (
            ["--dp-l2-clip", "0", "--dp-noise-multiplier", "1.1", "--dp-delta", "1e-5"],
            "--dp-l2-clip must be a positive number",
        ),
        (
            ["--dp-l2-clip", "1", "--dp-noise-multiplier", "-1", "--dp-delta", "1e-5"],
            "--dp-noise-multiplier must be a positive number",
        ),
        (
            ["--dp-l2-clip", "1", "--dp-noise-multiplier", "1", "--dp-delta", "nan"],
            "--dp-delta must be a positive number",
        ),
        (
            ["--dp-l2-clip", "inf", "--dp-noise-multiplier", "1", "--dp-delta", "1e-5"],
            "--dp-l2-clip must be a positive number",
        ),
        (
            ["--strategy", "parameterserver", *DP],
            "--strategy parameterserver does not support differential privacy: its "
            "workers apply their steps asynchronously",
        ),
    ],
)
def test_bad_privacy_flags_are_refused_in_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_args(argv)
    assert exit_.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in error


def test_privacy_flags_parse_for_the_supported_strategies():
    for strategy in privacy.SUPPORTED_STRATEGIES:
        args = parse_args(["--strategy", strategy, *DP])
        assert privacy.enabled(args) and (args.dp_l2_clip, args.dp_noise_multiplier, args.dp_delta) == (1.0, 1.1, 1e-5)
    assert not privacy.enabled(parse_args([]))


def test_delta_must_be_below_one_over_n():
    assert delta_problem("--dp-delta 0.001", 1e-3, 1000) is not None and "below 1/n" in delta_problem(
        "--dp-delta 0.001", 1e-3, 1000
    )
    assert delta_problem("--dp-delta 0.0001", 1e-4, 1000) is None


@pytest.mark.parametrize(
    "sigma, q, steps, delta", [(1.1, 256 / 60000, 14062, 1e-5), (0.8, 0.05, 300, 1e-6), (4.0, 0.01, 10, 1e-5)]
)
def test_epsilon_is_dp_accountings_own(sigma, q, steps, delta):
    accountant = RdpAccountant()
    accountant.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
    assert privacy.epsilon(sigma, q, steps, delta) == accountant.get_epsilon(delta)


def test_epsilon_matches_tensorflow_privacys_published_numbers():
    """TensorFlow Privacy's compute_dp_sgd_privacy_lib (tensorflow_privacy/privacy/analysis/
    compute_dp_sgd_privacy_test.py) computes example-level ε of DP-SGD with Poisson sampling with the same
    accountant (dp-accounting's RdpAccountant). Its published figures:
      * 1.2 epochs at q = 0.01 (120 steps), noise multiplier 0.7, δ = 1e-5, no microbatching: ε = 3.2392676;
      * 10,000 examples, batch 64 (q = 0.0064), 5 epochs (782 steps), noise multiplier 2.0 with microbatching,
        which that library accounts as noise multiplier 1.0 (its sensitivity is doubled), δ = 1e-6: ε = 1.616."""
    assert round(privacy.epsilon(0.7, 0.01, 120, 1e-5), 2) == round(3.2392676, 2)
    assert abs(privacy.epsilon(0.7, 0.01, 120, 1e-5) - 3.2392676) < 1e-6
    assert round(privacy.epsilon(1.0, 64 / 10000, math.ceil(5 * 10000 / 64), 1e-6), 2) == 1.62
    assert abs(privacy.epsilon(1.0, 64 / 10000, 782, 1e-6) - 1.616) < 5e-4


def test_epsilon_keeps_the_accountants_dropped_order_warnings_out_of_the_log(caplog):
    from absl import logging as absl_logging

    before = absl_logging.get_verbosity()
    with caplog.at_level("WARNING"):
        ours = privacy.epsilon(0.5, 0.02, 500, 1e-5)  # (its orders 1.1-1.3 do not converge)
    assert not [r for r in caplog.records if "Excluding this order" in r.getMessage()]
    assert absl_logging.get_verbosity() == before
    with caplog.at_level("WARNING"):  # absl's other warnings, the accountant's own included, still get through
        absl_logging.warning("Negative Renyi divergence of %s, probably caused by numerical instability", -1.0)
    assert [r.getMessage() for r in caplog.records if "Renyi" in r.getMessage()] == [
        "Negative Renyi divergence of -1.0, probably caused by numerical instability"
    ]
    # the same ε as the accountant's own, warnings and all
    accountant = RdpAccountant()
    accountant.compose(
        dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(0.02, dp_accounting.GaussianDpEvent(0.5)), 500
        )
    )
    assert ours == accountant.get_epsilon(1e-5)


def test_epsilon_grows_with_steps_and_falls_with_noise():
    q, delta = 0.01, 1e-5
    assert privacy.epsilon(1.0, q, 0, delta) == 0.0
    assert privacy.epsilon(1.0, q, 100, delta) < privacy.epsilon(1.0, q, 1000, delta)
    assert privacy.epsilon(2.0, q, 1000, delta) < privacy.epsilon(1.0, q, 1000, delta)


def test_clipping_bounds_every_per_example_gradient():
    import tensorflow as tf

    from disttrain_trainer.dp_step import clipped_sum

    rng = np.random.default_rng(0)
    # 16 examples' gradients of two weights, norms from tiny to huge
    a = rng.normal(size=(16, 5, 3)).astype(np.float32) * np.logspace(-3, 3, 16, dtype=np.float32)[:, None, None]
    b = rng.normal(size=(16, 4)).astype(np.float32) * np.logspace(-3, 3, 16, dtype=np.float32)[:, None]
    clip = 1.5
    for i in range(16):  # each example alone: the clipped gradient's norm over both weights is at most C
        ga, gb = clipped_sum([tf.constant(a[i : i + 1]), tf.constant(b[i : i + 1])], clip)
        norm = math.sqrt(float(tf.reduce_sum(ga**2) + tf.reduce_sum(gb**2)))
        original = math.sqrt(float((a[i] ** 2).sum() + (b[i] ** 2).sum()))
        assert norm <= clip * (1 + 1e-5)
        assert norm == pytest.approx(min(original, clip), rel=1e-4)  # small ones are kept as they are
    ga, gb = clipped_sum([tf.constant(a), tf.constant(b)], clip)
    assert math.sqrt(float(tf.reduce_sum(ga**2) + tf.reduce_sum(gb**2))) <= 16 * clip * (1 + 1e-5)


def test_the_noise_has_the_standard_deviation_of_its_share():
    """Over many draws the noise added to a zero sum has std SIGMA*C/sqrt(N); N workers' shares add up to SIGMA*C."""
    import tensorflow as tf

    from disttrain_trainer.dp_step import DpGradient

    sigma, clip = 1.3, 0.7
    zero = [tf.zeros([200, 50])]
    for shares in (1, 4):  # (an expected batch of 1: the average is the noisy sum itself)
        private = DpGradient(clip, sigma, shares, 1, secret_key=12345)
        draws = np.stack([private.noisy_average(zero, step)[0].numpy() for step in range(20)])  # 200,000 draws
        assert draws.std() == pytest.approx(sigma * clip / math.sqrt(shares), rel=0.01)
        assert abs(draws.mean()) < 0.01 * sigma * clip
    # four workers' shares, each from its own secret key, add up to the noise of one batch
    total = sum(DpGradient(clip, sigma, 4, 1, secret_key=key).noisy_average(zero, 0)[0].numpy() for key in (1, 2, 3, 4))
    assert total.std() == pytest.approx(sigma * clip, rel=0.02)
    # the average divides by the expected batch; another step draws other noise, the same step the same
    private = DpGradient(clip, sigma, 1, 10, secret_key=7)
    first, again, other = (private.noisy_average(zero, step)[0].numpy() for step in (0, 0, 1))
    assert np.array_equal(first, again) and not np.array_equal(first, other)
    assert first.std() == pytest.approx(sigma * clip / 10, rel=0.02)


def test_per_example_gradients_are_each_examples_own():
    """The vectorised per-example gradients equal the gradients of each example's loss taken alone."""
    import keras
    import tensorflow as tf

    from disttrain_trainer.dp_step import per_example_gradients
    from disttrain_trainer.models import build_image_model

    keras.utils.set_random_seed(1)
    model = build_image_model(8, 8, 1, 10, dropout=0.0)
    x = tf.constant(np.random.default_rng(0).integers(0, 255, (5, 8, 8, 1), dtype=np.uint8))
    y = tf.constant(np.arange(5, dtype=np.int64))

    def loss_and_hits(labels, outputs):
        return keras.losses.sparse_categorical_crossentropy(labels, outputs), tf.zeros_like(labels, tf.float32)

    grads, losses, _ = per_example_gradients(model, loss_and_hits, x, y, model.trainable_variables)
    for i in range(5):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(loss_and_hits(y[i : i + 1], model(x[i : i + 1], training=True))[0])
        for alone, batched in zip(tape.gradient(loss, model.trainable_variables), grads):
            np.testing.assert_allclose(batched[i].numpy(), alone.numpy(), rtol=1e-4, atol=1e-6)
        assert losses[i].numpy() == pytest.approx(float(loss), rel=1e-5)


def test_poisson_batches_take_each_example_with_probability_q():
    from disttrain_trainer.data import poisson_batches

    n, q = 500, 0.1
    features = np.arange(n, dtype=np.float32)[:, None]
    batches = list(poisson_batches(features, np.arange(n), q, secret_seed=99).take(400).as_numpy_iterator())
    sizes = np.array([len(y) for _, y in batches])
    assert sizes.mean() == pytest.approx(n * q, rel=0.03)
    counts = np.bincount(np.concatenate([y for _, y in batches]), minlength=n)
    assert counts.mean() == pytest.approx(400 * q, rel=0.03)
    assert all(len(set(y)) == len(y) for _, y in batches)  # an example at most once per batch
    # the same draws again from the same seed (a resumed epoch skips what it already took), others from another
    again = list(poisson_batches(features, np.arange(n), q, secret_seed=99).skip(3).take(1).as_numpy_iterator())
    assert np.array_equal(again[0][1], batches[3][1])
    other = list(poisson_batches(features, np.arange(n), q, secret_seed=100).take(1).as_numpy_iterator())
    assert not np.array_equal(other[0][1], batches[0][1])


def test_an_embeddings_per_example_gradients_stay_sparse_and_are_right():
    """Text: the embedding's per-example gradients are the looked-up rows (SparseRows, tokens repeating within a
    review add up); their norms and clipped sum equal those of each example's dense gradient taken alone."""
    import keras
    import tensorflow as tf

    from disttrain_trainer.dp_step import SparseRows, clipped_sum, per_example_gradients
    from disttrain_trainer.models import build_text_core

    keras.utils.set_random_seed(2)
    model = build_text_core(50, 2, width=8, dropout=0.0)
    ids = tf.constant([[3, 7, 3, 3, 0, 0], [5, 5, 9, 12, 40, 1], [2, 0, 0, 0, 0, 0]], tf.int64)  # 0: padding
    y = tf.constant([0, 1, 1], tf.int64)

    def loss_and_hits(labels, outputs):
        return keras.losses.sparse_categorical_crossentropy(labels, outputs), tf.zeros_like(labels, tf.float32)

    variables = model.trainable_variables
    grads, _, _ = per_example_gradients(model, loss_and_hits, ids, y, variables)
    assert isinstance(grads[0], SparseRows) and grads[0].values.shape[0] == 3
    alone = []
    for i in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(loss_and_hits(y[i : i + 1], model(ids[i : i + 1], training=True))[0])
        alone.append([tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, variables)])
    norms = [math.sqrt(sum(float((g**2).sum()) for g in example)) for example in alone]
    for clip in (1e6, min(norms) / 2):  # no clipping, then every example clipped
        expected = [
            sum(min(1.0, clip / n) * example[k] for n, example in zip(norms, alone)) for k in range(len(variables))
        ]
        for got, want in zip(clipped_sum(grads, clip), expected):
            np.testing.assert_allclose(tf.convert_to_tensor(got).numpy(), want, rtol=1e-4, atol=1e-7)


def test_an_empty_poisson_batch_gets_the_noise_alone():
    """Poisson sampling can draw no example at all (likely with a small --batch): the step's clipped sum is
    zero, the noise is added as for any batch, and nothing fails."""
    import keras
    import tensorflow as tf

    from disttrain_trainer.dp_step import DpGradient
    from disttrain_trainer.models import build_image_model

    model = build_image_model(8, 8, 1, 10)

    def loss_and_hits(labels, outputs):
        return keras.losses.sparse_categorical_crossentropy(labels, outputs), tf.zeros_like(labels, tf.float32)

    private = DpGradient(1.0, 2.0, 1, 1, secret_key=3)
    grads, loss_sum, hits = tf.function(
        lambda x, y: private.step(model, loss_and_hits, x, y, model.trainable_variables, 0)
    )(tf.zeros([0, 8, 8, 1], tf.uint8), tf.zeros([0], tf.int64))
    assert float(loss_sum) == 0.0 and float(hits) == 0.0
    assert [g.shape for g in grads] == [v.shape for v in model.trainable_variables]
    assert float(tf.math.reduce_std(grads[4])) == pytest.approx(2.0, rel=0.05)  # the 512 x 64 weight: noise only


def test_private_text_training_defaults_to_sgd_and_explicit_flags_win():
    from disttrain_trainer.tasks import image, text

    def defaults(task_class, argv):
        args = parse_args(argv).with_task_defaults(task_class)  # (the defaults come from the class alone)
        return args.optimizer, args.learning_rate, args.width, args.dropout

    # without DP: the ordinary defaults, so ordinary runs are unchanged
    assert defaults(text.Task, []) == ("adam", 3e-3, 64, 0.5)
    # private text: SGD, whose steps do not blow the noise on untouched embedding rows up to full size as Adam's do
    assert defaults(text.Task, DP) == ("sgd", 1.0, 16, 0.0)
    assert defaults(text.Task, [*DP, "--optimizer", "adam", "--learning-rate", "0.003", "--width", "64"]) == (
        "adam",
        0.003,
        64,
        0.0,
    )
    assert defaults(image.Task, DP) == ("adam", 1e-3, 64, 0.3)  # other tasks keep theirs


PRIVATE_VOCABULARY = {
    "file": "vocab.txt",
    "sha256": "0" * 64,
    "size": 233,
    "private": {
        "mechanism": "DP partition selection, weighted Gaussian",
        "epsilon": 1.0,
        "delta": 1e-6,
        "max_tokens_per_example": 32,
        "noise_stddev": 4.3,
        "threshold": 22.0,
        "released": 233,
        "accountant": "analytic Gaussian mechanism",
    },
}


def private_summary(vocabulary):
    import argparse

    args = argparse.Namespace(dp_l2_clip=1.0, dp_noise_multiplier=1.1, dp_delta=1e-5, batch=32)
    return privacy.summary(
        args,
        q=0.01,
        steps_per_epoch=100,
        epochs=2,
        epsilon_by_epoch=[0.5, 0.8],
        strategy="average",
        workers=2,
        training_examples=10000,
        epoch_examples=3200,
        vocabulary=vocabulary,
    )


def test_a_private_vocabulary_composes_with_training_by_adding_epsilon_and_delta():
    section = private_summary(PRIVATE_VOCABULARY)
    assert section["training"] == {"epsilon": 0.8, "delta": 1e-5}
    assert section["vocabulary"]["epsilon"] == 1.0 and section["vocabulary"]["delta"] == 1e-6
    assert section["vocabulary"]["released"] == 233 and section["vocabulary"]["max_tokens_per_example"] == 32
    assert section["epsilon"] == pytest.approx(1.8) and section["delta"] == pytest.approx(1.1e-5)
    assert "ε add and their δ add" in section["composition"]
    assert section["epsilon_by_epoch"] == [0.5, 0.8]  # (the training's alone)
    assert not any("vocabulary" in line for line in section["not_covered"])
    assert any(line.startswith("the text vocabulary (233 tokens)") for line in section["covered"])


def test_a_vocabulary_that_is_not_private_stays_not_covered_and_the_trainer_warns(capsys):
    import argparse

    public = {key: value for key, value in PRIVATE_VOCABULARY.items() if key != "private"}
    section = private_summary(public)
    assert section["epsilon"] == 0.8 and section["delta"] == 1e-5 and "training" not in section
    assert privacy.VOCABULARY_NOT_COVERED in section["not_covered"]
    assert "--dp-vocab-epsilon and --dp-vocab-delta" in privacy.VOCABULARY_NOT_COVERED
    args = argparse.Namespace(dp_l2_clip=1.0, dp_noise_multiplier=1.1, dp_delta=1e-5, batch=32)
    plan = dict(
        strategy="average",
        workers=2,
        synchronous_replicas=1,
        training_examples=10000,
        epoch_examples=5000,
        steps_per_epoch=100,
    )
    privacy.Plan(args, **plan, vocabulary=public)
    warning = capsys.readouterr().err.strip().splitlines()
    assert len(warning) == 1 and warning[0].startswith("trainer: warning: differentially private training on a text")
    assert "--dp-vocab-epsilon and --dp-vocab-delta" in warning[0]
    for quiet in (PRIVATE_VOCABULARY, None):  # a private vocabulary, or none at all (not text): no warning
        privacy.Plan(args, **plan, vocabulary=quiet)
        assert capsys.readouterr().err == ""
    # a dataset without a vocabulary has nothing of the kind to list
    assert not any("vocabulary" in line for line in private_summary(None)["not_covered"])


def test_the_training_and_vocabulary_deltas_together_must_stay_below_one_over_n():
    import argparse

    from disttrain_contract.errors import ContractError

    plan = dict(
        strategy="average",
        workers=2,
        synchronous_replicas=1,
        training_examples=10000,
        epoch_examples=5000,
        steps_per_epoch=100,
    )
    vocabulary = {**PRIVATE_VOCABULARY, "private": {**PRIVATE_VOCABULARY["private"], "delta": 5e-5}}
    privacy.Plan(
        argparse.Namespace(dp_l2_clip=1.0, dp_noise_multiplier=1.1, dp_delta=4e-5, batch=32),
        **plan,
        vocabulary=vocabulary,
    )  # 9e-5 < 1e-4
    with pytest.raises(ContractError, match=r"plus the private vocabulary's δ 5e-05 must be below 1/n = 0.0001"):
        privacy.Plan(
            argparse.Namespace(dp_l2_clip=1.0, dp_noise_multiplier=1.1, dp_delta=6e-5, batch=32),
            **plan,
            vocabulary=vocabulary,
        )
