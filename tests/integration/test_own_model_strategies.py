"""Your own model with every strategy (make test-long): a classification model file on the breast-cancer table
and a regression model module on the diabetes table, 2 workers each, through copier -> trainers -> aggregator.
(make test runs `average` end to end: test_own_model.py.)"""

import numpy as np
import pytest

from own_models import (
    classifier,
    run_own_pipeline,
    saved,
    table_statistics,
    with_pythonpath,
    workdir_with,
    write_user_module,
)

pytestmark = [pytest.mark.slow, pytest.mark.long]

STRATEGIES = ("average", "multiworker", "localsgd", "parameterserver")
# a mean predictor's RMSE on the diabetes table is ~77 (the targets' standard deviation); a linear model's ~54
RMSE_WELL_BELOW_THE_MEAN = 66.0


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_classifier_file_with_every_strategy(strategy, cancer_data, tmp_path):
    work = workdir_with(cancer_data, tmp_path)
    mean, variance = table_statistics(work / "data" / "manifest.json")
    path = saved(classifier(30, mean, variance, head="softmax", seed=2), tmp_path / "model.keras")
    report = run_own_pipeline(work, 2, strategy, "--model-file", path, epochs=12)
    assert report["final"]["test_accuracy"] > 0.9, report["final"]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_regression_module_with_every_strategy(strategy, diabetes_data, tmp_path):
    work = workdir_with(diabetes_data, tmp_path)
    code = write_user_module(str(tmp_path / "code"))
    report = run_own_pipeline(
        work,
        2,
        strategy,
        "--model-module",
        "tabular_models",
        "--learning-rate",
        3e-3,
        epochs=30,
        env=with_pythonpath(code),
        aggregator_args=("--model-module", "tabular_models"),
    )
    final = report["final"]
    assert report["problem"] == "regression" and np.isfinite(final["test_r2"])
    assert final["test_rmse"] < RMSE_WELL_BELOW_THE_MEAN, final
