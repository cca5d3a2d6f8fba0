"""The aggregator's --exports flag and the SavedModel version numbers (no TensorFlow)."""

import os

import pytest

from disttrain_aggregator import exports
from disttrain_aggregator.main import parse_args


def test_default_is_both_and_none_is_nothing():
    assert parse_args([]).exports == ("saved_model", "tflite")
    assert parse_args(["--exports", "none"]).exports == ()
    assert parse_args(["--exports", "tflite"]).exports == ("tflite",)
    assert parse_args(["--exports", " tflite , saved_model "]).exports == ("saved_model", "tflite")


@pytest.mark.parametrize("value", ["", "onnx", "saved_model,onnx", "none,tflite", ","])
def test_unknown_exports_are_refused(value, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--exports", value])
    assert exit_info.value.code == 2
    assert "expected a comma-separated list of saved_model, tflite, or none" in capsys.readouterr().err


def test_version_is_the_time_or_past_every_version(tmp_path):
    base = tmp_path / "saved_model"
    assert exports.next_version(base, now=1795400000.7) == 1795400000  # no base directory yet
    os.makedirs(base / "1795400000")
    os.makedirs(base / "notes")  # not a version: TF Serving ignores it, so do we
    (base / "1795400009").write_text("a file, not a version")
    # a second publish within the same second, or with the clock set back: still higher
    assert exports.next_version(base, now=1795400000.2) == 1795400001
    assert exports.next_version(base, now=1795300000) == 1795400001
    assert exports.next_version(base, now=1795400050) == 1795400050
    assert exports.versions(base) == [1795400000]
