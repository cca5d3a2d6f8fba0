"""The chart against the strategy registry (disttrain_contract.strategies): each strategy's settings reach the
trainer, from the chart value the registry names, for that strategy only (the trainer refuses another strategy's
flags). A setting added to the registry without its chart value fails here, naming it."""

import pytest
from chartlib import main_container, render, render_error

from disttrain_contract.strategies import NAMES, STRATEGIES, settings_of

# a value other than the default for each chart value of a setting, and what else it needs to be taken
EXAMPLE = {
    "trainer.validationFraction": ("0.1", ()),
    "allreduceDtype": ("float16", ()),
    "trainer.heartbeatTimeoutSeconds": ("60", ()),
    "syncEvery": ("50", ()),
    "outerOptimizer": ("nesterov", ()),
    "outerLearningRate": ("0.5", ("outerOptimizer=nesterov",)),
    "outerMomentum": ("0.8", ("outerOptimizer=nesterov",)),
    "outerOverlap": ("eager", ("outerOptimizer=nesterov",)),
    "syncAtEpochEnd": ("true", ()),
    "syncBatchNormBatches": ("4", ()),
    "parameterServers": ("2", ()),
}
CHARTED = [
    (strategy, setting) for strategy in STRATEGIES.values() for setting in settings_of(strategy) if setting.chart_value
]


def trainer_args(sets):
    return main_container(render(sets=tuple(sets)), "trainer")["args"]


def test_every_setting_of_the_registry_has_an_example_here():
    assert {setting.chart_value for _, setting in CHARTED} == set(EXAMPLE)


# values that refuse to go with another of their strategy's examples: rendered on their own
ALONE = {"outerOverlap"}  # (an overlapped sync does not go with syncAtEpochEnd)


def groups(strategy):
    own = [s for s in settings_of(STRATEGIES[strategy]) if s.chart_value]
    return [[s for s in own if s.chart_value not in ALONE], *([s] for s in own if s.chart_value in ALONE)]


@pytest.mark.parametrize("strategy,group", [(name, i) for name in NAMES for i in range(len(groups(name)))])
def test_a_strategys_settings_reach_its_trainer_from_the_values_the_registry_names(strategy, group):
    own = groups(strategy)[group]
    sets = [f"strategy={strategy}", "workers=2"]
    for setting in own:
        value, needs = EXAMPLE[setting.chart_value]
        sets += [f"{setting.chart_value}={value}", *needs]
    args = trainer_args(sorted(set(sets)))
    for setting in own:
        value = EXAMPLE[setting.chart_value][0]
        assert setting.flag in args, f"chart value {setting.chart_value} does not reach the trainer's {setting.flag}"
        if value != "true":  # (a switch has no value)
            assert args[args.index(setting.flag) + 1] == value, setting.flag
    others = {s.flag for other in STRATEGIES.values() for s in settings_of(other)} - {
        s.flag for s in settings_of(STRATEGIES[strategy])
    }
    assert not others & set(args), f"the chart passes another strategy's flags to {strategy}: {others & set(args)}"


@pytest.mark.parametrize(
    "strategy,setting",
    [
        (other, setting)
        for owner, setting in CHARTED
        for other in NAMES
        if setting.flag not in {s.flag for s in settings_of(STRATEGIES[other])}
    ][::3],
    ids=lambda x: getattr(x, "chart_value", x),
)
def test_another_strategys_setting_is_refused_or_left_out(strategy, setting):
    """(every third pair: each setting against another strategy, within the chart tests' time)"""
    sets = (f"strategy={strategy}", "workers=2", f"{setting.chart_value}={EXAMPLE[setting.chart_value][0]}")
    try:
        args = trainer_args(sets)
    except AssertionError:  # refused: the message names the value
        assert setting.chart_value.split(".")[-1] in render_error("defaults", sets=sets)
        return
    assert setting.flag not in args
