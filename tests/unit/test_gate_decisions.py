"""The aggregator's quality gate: its decisions, and its flags."""

import pytest

from disttrain_aggregator import gate
from disttrain_aggregator.main import parse_args

WORKERS = [("worker 0", 0.80), ("worker 1", 0.82)]
# always the training split's majority class, scored on the held-out labels (trivial.trivial_predictor's form)
MAJORITY = {
    "name": "majority class",
    "value": 0.40,
    "label": "cat",
    "description": "always the training split's majority class 'cat' (41.0% of the training examples)",
}


def decide(
    final, published=None, workers=WORKERS, drop=1.0, regression=1.0, promoted=False, trivial=MAJORITY, min_gain=1.0
):
    return gate.decide(
        final, workers, published, drop, regression, promoted, trivial=trivial, min_gain_vs_trivial=min_gain
    )


def test_an_average_better_than_every_worker_passes():
    verdict = decide(0.84)
    assert verdict["passed"] and verdict["reasons"] == []
    best, published, _ = verdict["checks"]
    assert best["reference"] == "worker 1" and best["drop_points"] == pytest.approx(-2.0)
    assert published == {"name": "published", "passed": True, "note": "no published model to compare with"}


def test_the_best_worker_check_allows_exactly_the_threshold():
    assert decide(0.81)["passed"]  # 1 point below worker 1: allowed
    verdict = decide(0.8099)
    assert not verdict["passed"]
    assert verdict["reasons"] == [
        "held-out accuracy 0.8099 is 1.01 points below worker 1's 0.8200 (at most 1 allowed: --max-drop-vs-best-worker)"
    ]


def test_a_promoted_model_passes_the_best_worker_check_trivially_and_says_so():
    verdict = decide(0.5, workers=[("chief (synchronised)", 0.5)], drop=0.0, promoted=True)
    assert verdict["passed"] and "trivially" in verdict["checks"][0]["note"]


def test_a_regression_against_the_published_model_beyond_the_threshold_fails():
    published = {"comparable": True, "test_accuracy": 0.90, "path": "/w/final/model.keras"}
    verdict = decide(0.84, published)
    assert not verdict["passed"]
    assert verdict["reasons"] == [
        "held-out accuracy 0.8400 is 6.00 points below the published model's 0.9000 "
        "on this run's held-out split (at most 1 allowed: --max-regression)"
    ]
    check = verdict["checks"][1]
    assert (
        check["reference"] == "/w/final/model.keras"
        and check["drop_points"] == pytest.approx(6.0)
        and not check["passed"]
    )
    assert decide(0.84, published, regression=6.0)["passed"]


def test_zero_regression_lets_an_identical_model_through():
    """The same accuracy (a rerun of a deterministic training) is no regression, floats or not."""
    workers = [("worker 0", 0.7)]
    assert decide(0.1 + 0.7, {"comparable": True, "test_accuracy": 0.8}, workers=workers, regression=0.0)["passed"]
    assert not decide(0.8, {"comparable": True, "test_accuracy": 0.8001}, workers=workers, regression=0.0)["passed"]


def test_both_checks_failing_give_both_reasons():
    verdict = decide(0.5, {"comparable": True, "test_accuracy": 0.9})
    assert not verdict["passed"] and len(verdict["reasons"]) == 2
    assert [c["passed"] for c in verdict["checks"]] == [False, False, True]


def test_an_incomparable_published_model_does_not_block():
    verdict = decide(
        0.84, {"comparable": False, "why": "the published model is for task 'text', this run's is 'image'"}
    )
    assert verdict["passed"]
    assert verdict["checks"][1]["comparable"] is False and "task 'text'" in verdict["checks"][1]["why"]


def test_the_summary_line_has_every_checks_numbers():
    line = gate.summary(decide(0.84, {"comparable": True, "test_accuracy": 0.9}))
    assert line.startswith("quality gate failed: 2.00 points above the best worker's 0.8200")
    assert "6.00 points below the published model's 0.9000 (at most 1 below: FAILED)" in line
    assert gate.summary(dict(decide(0.5), forced=True)).startswith("quality gate failed, forced:")


class Manifest:
    task, labels, input = "image", ["0", "1"], {"kind": "image", "height": 8, "width": 8, "channels": 1}


@pytest.mark.parametrize(
    "meta, why",
    [
        ({"task": "image", "labels": ["0", "1"], "input": Manifest.input}, None),
        ({"task": "text", "labels": ["0", "1"], "input": Manifest.input}, "is for task 'text', this run's is 'image'"),
        ({"task": "image", "labels": ["1", "0"], "input": Manifest.input}, "other labels"),
        ({"task": "image", "labels": ["0", "1"], "input": dict(Manifest.input, height=32)}, "takes input"),
    ],
)
def test_a_published_model_is_comparable_only_on_the_same_task_labels_and_input(meta, why):
    result = gate.comparable(meta, Manifest)
    assert result is None if why is None else why in result


def test_gate_flags():
    args = parse_args([])
    assert (args.max_drop_vs_best_worker, args.max_regression, args.force, args.published) == (1.0, 1.0, False, None)
    assert (args.min_gain_vs_trivial, args.min_relative_gain_vs_trivial) == (1.0, 1.0)
    args = parse_args(
        [
            "--max-drop-vs-best-worker",
            "2.5",
            "--max-regression",
            "0",
            "--force",
            "--published",
            "/w/run-*/final/model.keras",
        ]
    )
    assert (args.max_drop_vs_best_worker, args.max_regression, args.force, args.published) == (
        2.5,
        0.0,
        True,
        "/w/run-*/final/model.keras",
    )


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--max-drop-vs-best-worker", "-1"),
        ("--max-regression", "-0.5"),
        ("--max-regression", "nan"),
        ("--max-drop-vs-best-worker", "101"),
    ],
)
def test_bad_thresholds_are_an_argparse_error(capsys, flag, value):
    with pytest.raises(SystemExit) as exit:
        parse_args([flag, value])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert f"{flag} must be between 0 and 100" in err and "Traceback" not in err
