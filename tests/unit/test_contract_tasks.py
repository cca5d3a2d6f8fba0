"""disttrain_contract.tasks: one entry per manifest task, importable without TensorFlow, and the facts
the stages read from it agree with the names and lists they used to spell out."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from disttrain_contract import manifest, metrics, serving
from disttrain_contract.evaluation import as_model_input
from disttrain_contract.tasks import PROBLEMS, TASKS, Task, task_of


def test_every_manifest_task_has_one_entry_named_like_it():
    assert tuple(TASKS) == manifest.TASKS == ("text", "image", "faces", "table", "array", "typed_table")
    for name, task in TASKS.items():
        assert isinstance(task, Task) and task.name == name
        assert task.kind in ("text", "image", "table", "array")
        assert task.storage in ("jsonl", "npy", "parquet")
        assert set(task.problems) <= set(PROBLEMS) and task.problems


def test_importing_the_contract_registry_imports_neither_tensorflow_nor_opencv():
    code = textwrap.dedent("""
        import json, sys
        import disttrain_contract.tasks, disttrain_contract.manifest, disttrain_contract.serving
        import disttrain_contract.metrics, disttrain_contract.evaluation
        from disttrain_contract.tasks import TASKS
        TASKS["text"].model_input(["a b"])
        TASKS["image"].preprocess([1], None)
        print(json.dumps(sorted(m for m in ("tensorflow", "keras", "cv2") if m in sys.modules)))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_the_served_names_are_the_registrys():
    assert serving.INPUT_NAMES == {"text": "text", "image": "image", "faces": "face"}
    assert serving.OUTPUT_NAMES == {"text": "probabilities", "image": "probabilities", "faces": "embedding"}
    for name, task in TASKS.items():
        # a built-in served input has a dtype and an output; a numeric or typed table's model brings its own
        own_inputs = task.numeric or task.feature_inputs
        assert (task.input_name is None) == (task.input_dtype is None) == (task.output_name is None) == own_inputs
        assert serving.INPUT_NAMES.get(name) == task.input_name
        assert serving.OUTPUT_NAMES.get(name) == task.output_name


def test_the_facts_the_stages_branch_on():
    assert manifest.NUMERIC_TASKS == ("table", "array")
    assert [n for n, t in TASKS.items() if t.storage == "jsonl"] == ["text"]
    assert [n for n, t in TASKS.items() if t.vocabulary] == ["text"]
    assert [n for n, t in TASKS.items() if t.input_dtype == "string"] == ["text"]
    assert [n for n, t in TASKS.items() if t.bytes_signature] == ["image"]
    assert [n for n, t in TASKS.items() if t.feature_inputs] == ["table", "typed_table"]
    assert [n for n, t in TASKS.items() if t.storage == "parquet"] == ["typed_table"]
    for fact in ("retrieval", "split_by_person", "face_preprocessing"):
        assert [n for n, t in TASKS.items() if getattr(t, fact)] == ["faces"], fact
    assert [n for n, t in TASKS.items() if "regression" not in t.problems] == ["faces"]
    assert [n for n, t in TASKS.items() if not t.own_models] == ["faces"]
    assert [n for n, t in TASKS.items() if not t.parameter_server] == ["faces"]
    assert {n: t.kind for n, t in TASKS.items()} == {
        "text": "text",
        "image": "image",
        "faces": "image",
        "table": "table",
        "array": "array",
        "typed_table": "table",
    }


def test_the_metrics_follow_retrieval_and_the_problem():
    assert metrics.primary_metric("faces") is metrics.TOP1
    assert metrics.metrics_of("faces") == [metrics.TOP1]
    for name in ("text", "image", "table", "array", None, "not-a-task"):
        assert metrics.primary_metric(name) is metrics.ACCURACY
        assert metrics.metrics_of(name) == [metrics.ACCURACY, metrics.LOSS]
    assert metrics.primary_metric("table", "regression") is metrics.RMSE


def test_model_input_and_preprocess():
    column = as_model_input("text", ["a", "b c"])
    assert column.shape == (2, 1) and column.dtype == object and column[1, 0] == "b c"
    pixels = np.zeros((2, 4, 4, 1), np.uint8)
    for name in ("image", "faces", "table", "array"):
        assert as_model_input(name, pixels) is pixels
    for name in ("text", "image", "table", "array"):
        assert TASKS[name].preprocess(pixels, None) is pixels


def test_task_of_takes_a_manifest_a_dict_or_a_name():
    class Manifest:
        task = "faces"

    assert task_of(Manifest()) is task_of({"task": "faces"}) is task_of("faces") is TASKS["faces"]
    with pytest.raises(KeyError):
        task_of("movie-reviews")


def test_describe_input():
    assert TASKS["table"].describe_input({"features": ["a", "b"]}) == "2 features"
    assert TASKS["array"].describe_input({"dtype": "float64", "shape": [3, 2]}) == "x float64 [3, 2] per example"
    assert TASKS["image"].describe_input({"height": 8}) == ""
