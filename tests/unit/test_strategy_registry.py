"""The strategy registry (disttrain_contract.strategies) is the one place that knows what a strategy is: no code
outside it and the strategy's own module compares a strategy's name, and every table that cannot import it (the
trainer's flags, the Kubeflow launcher, the chart's schema) agrees with it."""

import argparse
import ast
import json
import pathlib
import sys

import pytest

from disttrain_contract import strategies as registry
from disttrain_contract.strategies import NAMES, STRATEGIES, names_where, settings_of, users_of_flag

ROOT = pathlib.Path(__file__).resolve().parents[2]
# where a strategy's name may be compared: the registry, and each strategy's own package in the trainer (its
# training code, its techniques' modules, its cost model)
OWN_MODULES = {
    ROOT / "components/contract/disttrain_contract/strategies.py",
    *(
        path
        for name in NAMES
        for path in (ROOT / f"components/trainer/disttrain_trainer/strategies/{name}").rglob("*.py")
    ),
}
# tables of files that must run on the standard library alone, checked against the registry below
CHECKED_TABLES = {(ROOT / "pipelines/kfp/trainer_job.py", "PARAMETER_SERVER_STRATEGIES")}
# the registry's constants that are a strategy's name
REGISTRY_CONSTANTS = {"DEFAULT", "NAMES"}


def _names_a_strategy(node, constants):
    """Whether an expression is a strategy's name: a literal (or a tuple, list or set of them), a module constant
    defined as one, or one of the registry's constants (DEFAULT, NAMES[i])."""
    if isinstance(node, ast.Constant):
        return node.value in STRATEGIES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_strategy(e, constants) for e in node.elts)
    if isinstance(node, ast.Subscript):
        return _names_a_strategy(node.value, constants)
    if isinstance(node, ast.Name):
        return node.id in constants
    if isinstance(node, ast.Attribute):
        return node.attr in REGISTRY_CONSTANTS
    return False


def _all_strategy_names(node):
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and all(_all_strategy_names(e) for e in node.elts)
    return isinstance(node, ast.Constant) and node.value in STRATEGIES


def comparisons_with_strategy_names(path):
    """(line, source) of every comparison with a strategy's name in a Python file."""
    tree = ast.parse(path.read_text(), str(path))
    constants = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("strategies")
        for alias in node.names
        if alias.name in REGISTRY_CONSTANTS
    }
    for node in ast.walk(tree):  # constants defined as a strategy's name (or names only: --combine's MODES is not)
        if isinstance(node, ast.Assign) and _all_strategy_names(node.value):
            constants |= {t.id for t in node.targets if isinstance(t, ast.Name) and (path, t.id) not in CHECKED_TABLES}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(
            _names_a_strategy(x, constants) for x in [node.left, *node.comparators]
        ):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.match_case) and _names_a_strategy(getattr(node.pattern, "value", None), constants):
            found.append((node.pattern.lineno, ast.unparse(node.pattern)))
    return found


def test_no_code_outside_the_registry_compares_a_strategy_name():
    """components/, pipelines/ and scripts/ ask the registry (bench/ may name strategies to choose what to run)."""
    found = [
        f"{path.relative_to(ROOT)}:{line}: {source}"
        for top in ("components", "pipelines", "scripts")
        for path in sorted((ROOT / top).rglob("*.py"))
        if path not in OWN_MODULES
        for line, source in comparisons_with_strategy_names(path)
    ]
    assert not found, "compare the registry's facts (disttrain_contract.strategies), not names:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        'x == "localsgd"',
        'x in ("average", "multiworker")',
        'x != strategies.DEFAULT',
        'from disttrain_contract.strategies import NAMES\nx == NAMES[0]',
        'AVERAGE = "average"\nx == AVERAGE',
        'match x:\n    case "parameterserver":\n        pass',
    ],
)
def test_the_walk_finds_each_form_of_comparison(tmp_path, source):
    path = tmp_path / "example.py"
    path.write_text(source + "\n")
    assert comparisons_with_strategy_names(path)


def test_the_walk_lets_other_comparisons_pass(tmp_path):
    path = tmp_path / "example.py"
    # (a --combine mode named like a strategy is compared through its own constant; a registry fact is no name)
    path.write_text(
        'WEIGHT_AVERAGE = MODES[0]\nmode == WEIGHT_AVERAGE\nstrategy_of(x).connected == True\n'
        'x in STRATEGIES\nx == "single"\n'
    )
    assert comparisons_with_strategy_names(path) == []


def test_the_registry_imports_only_the_standard_library():
    for module in (registry.__file__, ROOT / "components/contract/disttrain_contract/registry.py"):
        tree = ast.parse(pathlib.Path(module).read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert {name.split(".")[0] for name in imported - {"disttrain_contract.registry"}} <= set(
            sys.stdlib_module_names
        )


def test_facts_hang_together():
    for strategy in STRATEGIES.values():
        assert strategy.one_model == (strategy.promoted_as is not None), strategy.name
        assert not (strategy.model_per_worker and strategy.connected), "a group that talks ends with one model"
        assert not (strategy.all_reduce and strategy.parameter_servers), strategy.name
        assert strategy.connected or not (strategy.all_reduce or strategy.parameter_servers), strategy.name
        # a step that is one worker's alone runs on its own variables: never on parameter servers
        assert not (strategy.steps_alone and strategy.parameter_servers), strategy.name
    assert not STRATEGIES[registry.DEFAULT].connected  # a run of one worker is the default strategy's
    assert len({s.flag for s in sum((settings_of(s) for s in STRATEGIES.values()), ())}) == len(
        {(s.flag, s.chart_value) for s in sum((settings_of(s) for s in STRATEGIES.values()), ())}
    )


def test_the_strategies_whose_workers_step_alone():
    """A model's own train_step runs as the step where a step is one worker's: average's workers train alone,
    localsgd's between syncs (the syncs are outside the step); multiworker all-reduces inside the step."""
    assert names_where(lambda s: s.steps_alone) == ("average", "localsgd")


def _trainer_flags_by_strategy():
    """flag -> the strategies whose option classes define it, for the flags not every strategy takes."""
    from disttrain_trainer.strategies import options, options_base

    taken = {}
    for cls in options.families():
        if cls is options_base.Connected:  # (addresses, ports, the peers' deadline: every strategy takes them, the
            continue  # registry says, and an unconnected worker ignores them)
        probe = argparse.ArgumentParser(add_help=False)
        cls.add_flags(probe)
        users = tuple(name for name, o in options.REGISTRY.items() if isinstance(o, cls))
        for action in probe._actions:  # (a parser of this test's own making)
            for flag in action.option_strings:
                taken[flag] = users
    return {flag: users for flag, users in taken.items() if users != NAMES}


def test_the_trainers_strategy_flags_are_the_registrys_settings():
    """Each flag that the trainer's option classes give to some strategies only is a setting of exactly those in
    the registry, and the other way round: a flag added to one strategy's options must be named in the registry,
    which the chart and the Kubeflow launcher are checked against."""
    from disttrain_trainer.strategies import options

    assert tuple(options.REGISTRY) == NAMES
    for name, o in options.REGISTRY.items():
        assert o.facts is STRATEGIES[name] and o.connected == STRATEGIES[name].connected
    by_flag = _trainer_flags_by_strategy()
    settings = {s.flag for strategy in STRATEGIES.values() for s in settings_of(strategy)}
    assert set(by_flag) == settings
    for flag, users in by_flag.items():
        assert users_of_flag(flag) == users, flag


def test_the_kubeflow_launchers_tables_are_the_registrys():
    sys.path.insert(0, str(ROOT / "pipelines/kfp"))
    try:
        import trainer_job
    finally:
        sys.path.pop(0)
    assert trainer_job.PARAMETER_SERVER_STRATEGIES == names_where(lambda s: s.parameter_servers)
    charted = {s.flag for strategy in STRATEGIES.values() for s in settings_of(strategy) if s.chart_value}
    assert set(trainer_job.STRATEGY_OPTIONS) == charted  # the pipeline passes every value the chart passes
    for flag, users in trainer_job.STRATEGY_OPTIONS.items():
        assert tuple(users) == users_of_flag(flag), flag


def test_the_charts_schema_and_validation_take_the_registrys_strategies():
    schema = json.loads((ROOT / "charts/disttrain/values.schema.json").read_text())
    assert tuple(schema["properties"]["strategy"]["enum"]) == NAMES
    helpers = (ROOT / "charts/disttrain/templates/_helpers.tpl").read_text()
    assert f'(list {" ".join(json.dumps(n) for n in NAMES)})' in helpers  # the unknown-strategy check


def test_command_line_choices_come_from_the_registry():
    from disttrain_sweep.main import SWEPT
    from disttrain_trainer import perfmodel

    assert SWEPT == names_where(lambda s: s.sweep_dimensions is not None)
    assert tuple(perfmodel.COST_MODELS)[1:] == NAMES
