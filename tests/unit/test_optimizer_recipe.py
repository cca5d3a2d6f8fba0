"""The compiled optimizer as the recipe (optimizers.Recipe): rebuilt from its configuration with every setting,
--optimizer and --learning-rate replacing only what they name, and what a strategy cannot honour refused in one
line that names the strategies that take it."""

import keras
import pytest

from disttrain_trainer.optimizers import Recipe, describe


def compiled(optimizer):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="softmax")])
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")
    return model


def test_an_uncompiled_model_has_no_recipe():
    assert Recipe.of(keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])) is None


def test_the_recipe_rebuilds_the_compiled_optimizer_with_every_setting():
    schedule = keras.optimizers.schedules.CosineDecay(1e-3, decay_steps=1000, warmup_steps=10, warmup_target=2e-3)
    recipe = Recipe.of(compiled(keras.optimizers.AdamW(schedule, weight_decay=0.004, clipnorm=1.0, beta_2=0.98)))
    optimizer = recipe.build()
    assert type(optimizer) is keras.optimizers.AdamW
    assert (optimizer.weight_decay, optimizer.clipnorm, optimizer.beta_2) == (0.004, 1.0, 0.98)
    rate = optimizer.get_config()["learning_rate"]
    assert rate["class_name"] == "CosineDecay" and rate["config"]["warmup_steps"] == 10
    assert describe(optimizer).startswith(
        "AdamW (learning_rate CosineDecay(initial_learning_rate=0.001, decay_steps=1000"
    )
    assert "weight_decay 0.004" in describe(optimizer) and "clipnorm 1" in describe(optimizer)
    # each build is a new optimizer (every worker builds its own, under its strategy's scope)
    assert recipe.build() is not optimizer


def test_the_flags_replace_only_what_they_name():
    recipe = Recipe.of(
        compiled(
            keras.optimizers.AdamW(
                keras.optimizers.schedules.ExponentialDecay(0.01, 100, 0.5), weight_decay=0.01, clipvalue=0.5
            )
        )
    )
    faster = recipe.build(learning_rate=0.05)  # --learning-rate: the rate, the rest kept
    assert type(faster) is keras.optimizers.AdamW and float(faster.learning_rate) == pytest.approx(0.05)
    assert (faster.weight_decay, faster.clipvalue) == (0.01, 0.5)
    sgd = recipe.build(optimizer="sgd")  # --optimizer: the trainer's, with the file's schedule
    assert type(sgd) is keras.optimizers.SGD
    assert sgd.get_config()["learning_rate"]["class_name"] == "ExponentialDecay"
    assert float(recipe.build(optimizer="adam", learning_rate=0.002).learning_rate) == pytest.approx(0.002)


@pytest.mark.parametrize(
    "options, strategy, message",
    [
        ({"use_ema": True}, "localsgd", "sets use_ema=True, which --strategy localsgd cannot honour"),
        ({"use_ema": True}, "parameterserver", "or train with --strategy average or multiworker"),
        (
            {"gradient_accumulation_steps": 4},
            "parameterserver",
            "or train with --strategy average or multiworker or localsgd",
        ),
    ],
)
def test_what_a_strategy_cannot_honour_is_refused_in_one_line(options, strategy, message):
    recipe = Recipe.of(compiled(keras.optimizers.Adam(1e-3, **options)))
    refusal = recipe.refusal(strategy)
    assert message in refusal and "\n" not in refusal and f"compile it without {next(iter(options))}" in refusal


@pytest.mark.parametrize(
    "options, strategy",
    [
        ({"use_ema": True}, "average"),
        ({"use_ema": True}, "multiworker"),
        ({"gradient_accumulation_steps": 4}, "localsgd"),
        ({"clipnorm": 1.0}, "parameterserver"),
    ],
)
def test_the_strategies_that_take_an_option_are_not_refused(options, strategy):
    assert Recipe.of(compiled(keras.optimizers.Adam(1e-3, **options))).refusal(strategy) is None


def test_a_loss_scale_optimizer_is_refused():
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-3))
    refusal = Recipe.of(compiled(optimizer)).refusal("average")
    assert "LossScaleOptimizer" in refusal and "compile it with the inner optimizer" in refusal
