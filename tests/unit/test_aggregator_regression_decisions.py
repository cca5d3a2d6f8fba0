"""The aggregator's decisions in the primary metric's direction (no TensorFlow): --combine best picks the
lowest validation RMSE of a regression run, the gate measures RMSE in percent worse than the reference,
and a marker whose validation metric is another one is refused."""

import pytest

from disttrain_aggregator import combine, gate
from disttrain_aggregator.main import parse_args
from disttrain_contract import ContractError
from disttrain_contract.metrics import ACCURACY, RMSE, primary_metric
from disttrain_contract.trainer_records import MetricValue, TrainerMarker


def marker(index, **fields):
    return TrainerMarker.from_json(
        {
            "worker_index": index,
            "workers": 3,
            "strategy": "average",
            "epochs": 2,
            "init_weights_sha256": "ab",
            "examples": 10,
            **fields,
        }
    )


def test_best_is_the_lowest_validation_rmse_and_a_tie_goes_to_the_lowest_index():
    markers = [
        marker(0, validation_metric={"name": "rmse", "value": 1.2, "direction": "min"}),
        marker(1, validation_metric={"name": "rmse", "value": 0.9, "direction": "min"}),
        marker(2, validation_rmse=0.9),
    ]  # the flat key counts too
    scores = combine.validation_scores(markers, RMSE)
    assert scores == {0: 1.2, 1: 0.9, 2: 0.9}
    assert combine.pick_best(scores, RMSE) == 1
    assert combine.pick_best(scores, ACCURACY) == 0  # the other direction: not what a regression run uses
    assert combine.pick_best({0: float("nan"), 1: 3.0}, RMSE) == 1  # nan is worse than anything


def test_a_marker_ranking_by_another_metric_is_refused_and_none_is_the_flags_advice():
    markers = [marker(0, validation_metric=MetricValue.of(ACCURACY, 0.9).to_json())]
    with pytest.raises(ContractError, match="ranks by validation 'accuracy' .* primary metric is 'rmse'"):
        combine.validation_scores(markers, RMSE)
    with pytest.raises(
        ContractError, match="--combine best ranks the workers by their validation RMSE, .*--validation-fraction"
    ):
        combine.check_mode("best", "average", [marker(0, validation_metric=None)], RMSE)


MEAN = {
    "name": "training mean",
    "value": 2.0,
    "training_mean": 3.0,
    "description": "always the training targets' mean 3",
}


def test_the_regression_gate_is_relative_and_says_so():
    workers = [("worker 0", 1.00), ("worker 1", 0.80)]
    floor = {"trivial": MEAN, "min_gain_vs_trivial": 1.0}
    verdict = gate.decide(0.83, workers, None, 5.0, 5.0, metric=RMSE, **floor)  # 3.75 % worse than worker 1's 0.80
    assert verdict["passed"], verdict
    best = verdict["checks"][0]
    assert best["reference"] == "worker 1" and best["unit"] == "percent" and best["shortfall"] == pytest.approx(3.75)
    assert "drop_points" not in best and verdict["metric"] == {
        "name": "rmse",
        "direction": "min",
        "label": "RMSE",
        "unit": "percent",
    }
    verdict = gate.decide(
        0.90,
        workers,
        {"comparable": True, "test_rmse": 0.5, "path": "/w/final/model.keras"},
        5.0,
        5.0,
        metric=RMSE,
        **floor,
    )
    assert not verdict["passed"]
    assert verdict["reasons"] == [
        "held-out RMSE 0.9 is 12.50 % worse than worker 1's 0.8 (at most 5 % allowed: --max-relative-drop-vs-best-worker)",
        "held-out RMSE 0.9 is 80.00 % worse than the published model's 0.5 on this run's held-out split "
        "(at most 5 % allowed: --max-relative-regression)",
    ]
    line = gate.summary(verdict)
    assert "RMSE 12.50 % worse than the best worker's 0.8 (at most 5 % worse: FAILED)" in line
    # lower is better: a lower RMSE than the published model's passes with a 0 % threshold
    assert gate.decide(0.4, workers, {"comparable": True, "test_rmse": 0.5}, 100.0, 0.0, metric=RMSE, **floor)["passed"]


def test_a_published_model_of_another_problem_or_target_is_not_comparable():
    class Manifest:
        task, labels, problem, target = "table", [], "regression", "price"
        input = {"kind": "table", "name": "features", "shape": [3]}

    meta = {"task": "table", "labels": [], "problem": "regression", "target": "price", "input": Manifest.input}
    assert gate.comparable(meta, Manifest) is None
    assert "predicts 'rent'" in gate.comparable(dict(meta, target="rent"), Manifest)
    assert "is a classification model" in gate.comparable(dict(meta, problem="classification"), Manifest)


def test_relative_threshold_flags():
    args = parse_args([])
    assert (args.max_relative_drop_vs_best_worker, args.max_relative_regression, args.model_module) == (5.0, 5.0, None)
    args = parse_args(["--max-relative-regression", "0", "--model-module", "mine.layers"])
    assert args.max_relative_regression == 0.0 and args.model_module == "mine.layers"
    with pytest.raises(SystemExit):
        parse_args(["--max-relative-drop-vs-best-worker", "-1"])
    assert primary_metric("table", "regression") is RMSE


def test_the_regression_analysis_of_known_predictions_and_its_plot(tmp_path, capsys):
    import json

    import numpy as np

    from disttrain_aggregator import analysis

    y = np.arange(40, dtype=np.float64)
    good, biased = y + np.where(np.arange(40) % 2, 0.5, -0.5), y + 2.0  # rmse 0.5 bias 0; rmse 2 bias 2
    out = analysis.regression(good, y, *analysis.target_slices(y))
    assert out["rmse"] == pytest.approx(0.5) and out["mae"] == pytest.approx(0.5) and out["bias"] == pytest.approx(0.0)
    assert [s["examples"] for s in out["slices"]] == [10, 10, 10, 10]
    assert len(out["predicted_vs_actual"]) == 10 and out["predicted_vs_actual"][0]["mean_target"] == pytest.approx(1.5)
    report = {
        "task": "table",
        "problem": "regression",
        "target": "price",
        "labels": [],
        "strategy": "average",
        "test_examples": 40,
        "workers": [{"name": "worker 0", "worker_index": 0}, {"name": "worker 1", "worker_index": 1}],
        "final": {},
    }
    outputs = {"worker 0": {"predictions": biased}, "worker 1": {"predictions": good}, "final": {"predictions": good}}
    section = analysis.analyse(report, outputs, None, y)
    assert section["compare"]["best_worker"] == "worker 1"  # the LOWER RMSE
    assert section["compare"]["rows"][1] == {
        "model": "best worker (worker 1, by held-out RMSE)",
        "rmse": pytest.approx(0.5),
        "mae": pytest.approx(0.5),
        "r2": pytest.approx(out["r2"]),
    }
    assert section["models"]["worker 0"]["bias"] == pytest.approx(2.0) and "points" not in section["models"]["worker 0"]
    assert "skipped" in section["method"]["calibration"]
    json.dumps(section)
    path = tmp_path / "analysis.png"
    analysis.plot(section, report, str(path))
    assert path.stat().st_size > 20_000
    analysis.print_summary(section)
    assert capsys.readouterr().out.splitlines()[0].split()[:3] == ["model", "bias", "resid"]
