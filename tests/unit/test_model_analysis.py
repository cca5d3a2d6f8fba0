"""The aggregator's model analysis (issue 18) on hand-made predictions whose answers are known:
confusion matrix, per-class F1, macro-F1, the ECE of a calibrated and of an over-confident
predictor, the text length buckets, the faces figures per person; then the report section and
its plot from a whole (hand-made) run, and the predictions evaluate() keeps being the ones its
figures came from (a real Keras model)."""

import json

import numpy as np
import pytest

from disttrain_aggregator import analysis
from disttrain_contract import ContractError
from disttrain_contract.evaluation import retrieval_margin


def one_hot_ish(predicted, confidence, classes):
    """Probabilities with the top class `predicted` at `confidence`, the rest shared evenly."""
    probs = np.full((len(predicted), classes), 0.0)
    for row, (p, c) in enumerate(zip(predicted, confidence)):
        probs[row] = (1 - c) / (classes - 1)
        probs[row, p] = c
    return probs


def test_confusion_matrix_per_class_and_macro_f1():
    y = np.array([0, 0, 0, 1, 1, 2])
    predicted = [0, 0, 1, 1, 1, 2]
    probs = one_hot_ish(predicted, [0.9] * 6, 3)
    out = analysis.classification(probs, y, ["a", "b", "c"], np.zeros(6, dtype=int), [{"slice": "all"}])
    assert out["confusion_matrix"] == [[2, 1, 0], [0, 2, 0], [0, 0, 1]]  # rows true, columns predicted
    by_label = {c["label"]: c for c in out["per_class"]}
    assert by_label["a"] == {
        "label": "a",
        "precision": 1.0,
        "recall": pytest.approx(2 / 3),
        "f1": pytest.approx(0.8),
        "support": 3,
    }
    assert by_label["b"] == {
        "label": "b",
        "precision": pytest.approx(2 / 3),
        "recall": 1.0,
        "f1": pytest.approx(0.8),
        "support": 2,
    }
    assert by_label["c"]["f1"] == 1.0 and by_label["c"]["support"] == 1
    assert out["macro_f1"] == pytest.approx((0.8 + 0.8 + 1.0) / 3)
    assert out["accuracy"] == pytest.approx(5 / 6)
    assert out["slices"] == [{"slice": "all", "examples": 6, "accuracy": pytest.approx(5 / 6)}]


def test_a_class_never_predicted_has_zero_precision_not_an_error():
    y = np.array([0, 1, 1])
    out = analysis.classification(
        one_hot_ish([1, 1, 1], [0.8] * 3, 2), y, ["a", "b"], np.zeros(3, dtype=int), [{"slice": "all"}]
    )
    assert out["per_class"][0]["precision"] == 0.0 and out["per_class"][0]["f1"] == 0.0
    assert out["macro_f1"] == pytest.approx((0.0 + 0.8) / 2)


def test_ece_is_zero_for_a_calibrated_predictor():
    # 4 examples at confidence 0.75 of which 3 right, 5 at 0.6 of which 3 right: accuracy = confidence in each bin
    predicted, y = [0] * 9, np.array([0, 0, 0, 1] + [0, 0, 0, 1, 1])
    ece, bins = analysis.calibration(one_hot_ish(predicted, [0.75] * 4 + [0.6] * 5, 2), y)
    assert ece == pytest.approx(0.0, abs=1e-9)
    assert len(bins) == analysis.CALIBRATION_BINS and [b["lower"] for b in bins] == pytest.approx(np.arange(10) / 10)
    filled = [b for b in bins if b["examples"]]
    assert [(b["examples"], b["confidence"], b["accuracy"]) for b in filled] == [
        (5, pytest.approx(0.6), pytest.approx(0.6)),
        (4, pytest.approx(0.75), pytest.approx(0.75)),
    ]
    assert all(b["accuracy"] is None and b["confidence"] is None for b in bins if not b["examples"])
    # the same predictor at 0.65 instead of 0.6: a gap of 0.05 on 5 of the 9 examples
    ece, _ = analysis.calibration(one_hot_ish(predicted, [0.75] * 4 + [0.65] * 5, 2), y)
    assert ece == pytest.approx(5 / 9 * 0.05)


def test_ece_of_an_over_confident_predictor():
    # 10 examples at 0.95 of which half right: gap 0.45; plus 10 at 0.55 all right: gap 0.45 the other way
    y = np.array([0] * 5 + [1] * 5 + [0] * 10)
    probs = one_hot_ish([0] * 20, [0.95] * 10 + [0.55] * 10, 2)
    ece, _ = analysis.calibration(probs, y)
    assert ece == pytest.approx(0.45)
    ece, _ = analysis.calibration(probs[:10], y[:10])
    assert ece == pytest.approx(0.45)
    # confidence 1.0 falls in the last bin, not past it
    ece, bins = analysis.calibration(one_hot_ish([0, 0], [1.0, 1.0], 2), np.array([0, 0]))
    assert ece == 0.0 and bins[-1]["examples"] == 2


def test_text_length_buckets_count_tokens_as_the_model_sees_them():
    # TextVectorization's standardisation: lower case, punctuation stripped, split on whitespace
    texts = ["Good!", "well-made film", "a b c", "A, b; c. d", "1 2 3 4 5", "1 2 3 4 5 6", "x " * 7, "y " * 8]
    bucket, buckets = analysis.length_buckets(texts)
    # lengths 1, 2 (well-made is one token), 3, 4, 5, 6, 7, 8: quartiles (lower) 2, 4, 6
    assert [b["slice"] for b in buckets] == ["1-2 tokens", "3-4 tokens", "5-6 tokens", "7-8 tokens"]
    assert bucket.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    # many equal lengths: equal quartiles merge, no empty bucket
    bucket, buckets = analysis.length_buckets(["a b"] * 9 + ["a b c d e"])
    assert [b["slice"] for b in buckets] == ["2 tokens", "3-5 tokens"]
    assert bucket.tolist() == [0] * 9 + [1]


def test_slices_by_length_in_the_classification():
    texts = ["a", "b", "a b c", "a b c d"]
    slice_of, slices = analysis.length_buckets(texts)
    y = np.array([0, 1, 0, 1])
    out = analysis.classification(one_hot_ish([0, 1, 1, 0], [0.9] * 4, 2), y, ["neg", "pos"], slice_of, slices)
    by = {s["slice"]: (s["examples"], s["accuracy"]) for s in out["slices"]}
    assert by == {"1 token": (2, 1.0), "2-3 tokens": (1, 0.0), "4 tokens": (1, 0.0)}


def face_outputs():
    d = np.array(
        [
            [0.2, 0.5, 0.9],  # person 0: right (0.2), nearest wrong person 1 at 0.5
            [0.4, 0.3, 0.8],  # person 1: right (0.3), nearest wrong person 0 at 0.4
            [0.1, 0.6, 0.5],
        ]
    )  # person 2: wrong (person 0 at 0.1 is nearer than 0.5)
    hard = d.T.copy()  # something else for the harder queries
    return {
        "people": [3, 5, 7],
        "distances": d,
        "darker_distances": hard,
        "rotated_distances": d,
        "smaller_distances": hard,
    }


def test_faces_retrieval_figures_per_person():
    names = [f"p{i}" for i in range(8)]
    out = analysis.retrieval_per_person(face_outputs(), names)
    people = {p["person"]: p for p in out["people"]}
    assert list(people) == ["p3", "p5", "p7"]
    assert people["p3"]["query"] == {
        "top1": True,
        "right_distance": 0.2,
        "nearest_wrong_distance": 0.5,
        "nearest_wrong_person": "p5",
        "margin": pytest.approx(2.5),
    }
    assert people["p5"]["query"]["nearest_wrong_person"] == "p3" and people["p5"]["query"]["margin"] == pytest.approx(
        4 / 3
    )
    assert not people["p7"]["query"]["top1"] and people["p7"]["query"]["nearest_wrong_person"] == "p3"
    assert out["people_right"]["query"] == 2 and out["people_count"] == 3
    # per person, the same figures the report's overall retrieval numbers come from
    d = face_outputs()["distances"]
    overall = retrieval_margin(d)
    assert out["accuracy"] == pytest.approx(overall["top1_accuracy"])
    assert np.mean([p["query"]["right_distance"] for p in out["people"]]) == pytest.approx(overall["right_distance"])
    assert np.mean([p["query"]["nearest_wrong_distance"] for p in out["people"]]) == pytest.approx(
        overall["nearest_wrong_distance"]
    )
    assert out["people_right"]["darker"] == round(
        retrieval_margin(face_outputs()["darker_distances"])["top1_accuracy"] * 3
    )


# ------------------------------------------------------------------------ a whole run's section
LABELS = ["0", "1", "2"]


def run(tmp_path, task="image", combine=True):
    """A report as main.py builds it and the outputs its held_out() kept: 2 workers, the candidates."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, size=60)

    def noisy(right):
        predicted = np.where(rng.random(60) < right, y, (y + 1) % 3)
        return {"probabilities": one_hot_ish(predicted, rng.uniform(0.5, 0.99, size=60), 3)}

    outputs = {"worker 0": noisy(0.7), "worker 1": noisy(0.8), "average": noisy(0.9), "ensemble": noisy(0.85)}
    acc = {name: float((o["probabilities"].argmax(1) == y).mean()) for name, o in outputs.items()}
    report = {
        "task": task,
        "labels": LABELS,
        "source": "sample:test",
        "split_seed": 42,
        "test_examples": 60,
        "strategy": "average",
        "workers": [
            {"name": "worker 0", "worker_index": 0, "test_accuracy": acc["worker 0"]},
            {"name": "worker 1", "worker_index": 1, "test_accuracy": acc["worker 1"]},
        ],
        "final": {"test_accuracy": acc["average"]},
    }
    if combine:
        report["combine"] = {
            "published": "average",
            "candidates": {
                "average": {"test_accuracy": acc["average"]},
                "ensemble": {"test_accuracy": acc["ensemble"]},
                "best": {"worker_index": 0, "test_accuracy": acc["worker 0"]},
            },
        }
    x = np.array([[" ".join(["w"] * int(n))] for n in rng.integers(1, 30, size=60)], dtype=object)
    return report, outputs, x, y, acc


def test_the_report_section_puts_final_best_worker_and_baseline_first(tmp_path):
    report, outputs, x, y, acc = run(tmp_path)
    section = analysis.analyse(report, outputs, x, y)
    assert section["order"] == ["worker 0", "worker 1", "average", "ensemble", "best", "final"]
    models = section["models"]
    for name in ("worker 0", "worker 1", "average", "ensemble"):  # the same predictions as the held-out accuracy's
        assert models[name]["accuracy"] == pytest.approx(acc[name])
    assert models["best"] == dict(models["worker 0"], role="candidate")  # best (by validation) is worker 0's model
    assert models["final"] == dict(models["average"], role="final")  # --combine average published the average
    rows = section["compare"]["rows"]
    best = max(["worker 0", "worker 1"], key=lambda name: acc[name])
    assert acc["worker 0"] != acc["worker 1"]  # (else the first of equals: worker 0)
    assert [r["model"] for r in rows] == ["final (average)", f"best worker ({best}, by held-out accuracy)"]
    assert rows[0]["macro_f1"] == models["final"]["macro_f1"] and rows[1]["ece"] == models[best]["ece"]
    baseline = section["compare"]["baseline"]
    assert baseline["available"] is False and "a plain run has none" in baseline["why"]
    assert section["method"]["slices"] == "true class" and section["method"]["calibration_bins"] == 10
    assert [s["slice"] for s in models["final"]["slices"]] == LABELS
    json.dumps(section)  # JSON as it is: no numpy scalars

    text = analysis.analyse(dict(report, task="text"), outputs, x, y)
    assert "quantiles" in text["method"]["slices"]
    assert (
        sum(s["examples"] for s in text["models"]["final"]["slices"]) == 60
        and len(text["models"]["final"]["slices"]) >= 3
    )


def test_a_1_worker_baseline_report_joins_the_comparison_and_other_data_is_refused(tmp_path):
    report, outputs, x, y, _ = run(tmp_path)
    baseline = dict(
        report,
        workers=report["workers"][:1],
        final={"test_accuracy": 0.5},
        analysis={"models": {"final": {"macro_f1": 0.45, "ece": 0.2}}},
    )
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(baseline))
    section = analysis.analyse(report, outputs, x, y, str(path))
    assert section["compare"]["rows"][-1] == {
        "model": "1-worker baseline",
        "accuracy": 0.5,
        "macro_f1": 0.45,
        "ece": 0.2,
    }
    assert section["compare"]["baseline"]["available"] is True
    path.write_text(json.dumps(dict(baseline, split_seed=7)))
    with pytest.raises(ContractError, match="is of other data: its split_seed is 7, this run's 42"):
        analysis.analyse(report, outputs, x, y, str(path))
    path.write_text(json.dumps(report))  # 2 workers
    with pytest.raises(ContractError, match="is a 2-worker average run, not a 1-worker one"):
        analysis.read_baseline(str(path), report)


def test_the_plot_is_written_atomically_and_print_summary_is_one_line_per_model(tmp_path, capsys):
    report, outputs, x, y, _ = run(tmp_path)
    section = analysis.analyse(report, outputs, x, y)
    path = tmp_path / "analysis.png"
    analysis.plot(section, report, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 20_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["analysis.png"]  # no temporary left
    analysis.print_summary(section)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split()[:3] == ["model", "macro-F1", "ECE"]
    assert len(lines) == 1 + len(section["order"]) + 1  # header, one per model, the baseline line
    assert lines[-1].startswith("baseline: none")


def test_faces_section_and_plot(tmp_path):
    names = [f"person {i}" for i in range(8)]
    out = face_outputs()
    report = {
        "task": "faces",
        "labels": names,
        "strategy": "multiworker",
        "test_examples": 9,
        "workers": [{"name": "chief (synchronised)", "worker_index": 0}],
        "final": {},
    }
    section = analysis.analyse(report, {"chief (synchronised)": out, "final": out}, None, [3, 3, 5, 5, 7, 7, 7, 7, 7])
    assert section["order"] == ["chief (synchronised)", "final"]
    assert section["models"]["final"]["people_right"]["query"] == 2
    assert [r["model"] for r in section["compare"]["rows"]] == [
        "final",
        "best worker (chief (synchronised), by held-out accuracy)",
    ]
    path = tmp_path / "analysis.png"
    analysis.plot(section, report, str(path))
    assert path.stat().st_size > 10_000


def test_evaluate_keeps_the_predictions_its_figures_came_from():
    """The aggregator reuses these instead of a second pass over the held-out split."""
    from disttrain_contract.evaluation import evaluate
    from disttrain_contract.faces import FACE_PREPROCESSING, FACE_SIZE
    from disttrain_contract.tensorflow_import import import_tensorflow

    import_tensorflow()
    import keras

    from disttrain_trainer.models import build_face_model, build_image_model

    keras.utils.set_random_seed(0)
    model = build_image_model(8, 8, 1, 3, hidden=8)
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 256, size=(40, 8, 8, 1), dtype=np.uint8), rng.integers(0, 3, size=40)
    kept = {}
    metrics = evaluate(model, "image", x, y, outputs=kept)
    assert kept["probabilities"].shape == (40, 3)
    assert analysis.classification(kept["probabilities"], y, LABELS, y, [{"slice": n} for n in LABELS])[
        "accuracy"
    ] == pytest.approx(metrics["accuracy"])

    faces = build_face_model(FACE_SIZE, FACE_SIZE, 1, embedding_size=8)
    x = rng.integers(0, 256, size=(8, FACE_SIZE, FACE_SIZE, 1), dtype=np.uint8)
    y = np.array([0, 0, 1, 1, 2, 2, 3, 3])
    kept = {}
    metrics = evaluate(faces, "faces", x, y, meta={"face_preprocessing": FACE_PREPROCESSING}, outputs=kept)
    per_person = analysis.retrieval_per_person(kept, ["a", "b", "c", "d"])
    assert per_person["accuracy"] == pytest.approx(metrics["top1_accuracy"])
    for kind in ("darker", "rotated", "smaller"):
        assert per_person["people_right"][kind] == round(metrics[f"{kind}_top1_accuracy"] * 4)
