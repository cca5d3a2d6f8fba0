"""disttrain-server's command line: defaults, validation, and the gunicorn settings it implies."""

import os

import pytest

from disttrain_contract import ContractError
from disttrain_server.main import app_config, gunicorn_options, main, parse_args


def test_defaults_follow_the_workdir_layout(monkeypatch, tmp_path):
    monkeypatch.setenv("DISTTRAIN_WORKDIR", str(tmp_path))
    args = parse_args([])
    config = app_config(args)
    assert config["MODEL_PATH"] == os.path.join(str(tmp_path), "final", "model.keras")
    assert config["MODEL_NAME"] == "disttrain"
    assert config["MAX_CONTENT_LENGTH"] == 8 * 1024 * 1024
    assert (config["MAX_TEXT_CHARS"], config["MAX_INSTANCES"], config["RELOAD_INTERVAL"]) == (10_000, 256, 5)
    assert config["GALLERY_DIR"] == os.path.join(str(tmp_path), "gallery")
    assert config["GALLERY_SEED"] is None and config["TOP_K"] == 3
    assert (config["WORKDIR"], config["RUNS_DIR"]) == (str(tmp_path), None)  # the page's progress: this run
    options = gunicorn_options(args)
    assert options["bind"] == ["127.0.0.1:8080"] and (options["workers"], options["threads"]) == (2, 8)
    assert options["preload_app"] is False  # TensorFlow must not be loaded before the fork
    assert options["keepalive"] == 75  # longer than the usual proxies' 60 s idle timeout (gunicorn's own: 2 s)


def test_explicit_flags(tmp_path):
    args = parse_args(
        [
            "--model",
            str(tmp_path / "m.keras"),
            "--model-name",
            "reviews",
            "--host",
            "::1",
            "--port",
            "9000",
            "--workers",
            "3",
            "--threads",
            "4",
            "--keepalive",
            "5",
            "--max-upload-mb",
            "0.5",
            "--max-text-chars",
            "50",
            "--max-instances",
            "7",
            "--reload-interval",
            "0",
            "--gallery",
            str(tmp_path / "people"),
            "--gallery-seed",
            str(tmp_path),
            "--top-k",
            "5",
            "--runs-dir",
            str(tmp_path),
        ]
    )
    config = app_config(args)
    assert (config["GALLERY_DIR"], config["GALLERY_SEED"], config["TOP_K"]) == (
        str(tmp_path / "people"),
        str(tmp_path),
        5,
    )
    assert config["MODEL_PATH"] == str(tmp_path / "m.keras") and config["MODEL_NAME"] == "reviews"
    assert config["MAX_CONTENT_LENGTH"] == 512 * 1024
    assert (config["MAX_BATCH_SIZE"], config["BATCH_TIMEOUT_MS"]) == (32, 0)
    options = gunicorn_options(args)
    assert options["bind"] == ["[::1]:9000"] and options["keepalive"] == 5
    assert config["RUNS_DIR"] == str(tmp_path)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--workers", "0"], "--workers must be at least 1"),
        (["--keepalive", "0"], "--keepalive must be at least 1"),
        (["--port", "70000"], "--port must be between 0 and 65535"),
        (["--max-instances", "0"], "--max-instances must be at least 1"),
        (["--max-upload-mb", "0"], "--max-upload-mb must be positive"),
        (["--max-batch-size", "0"], "--max-batch-size must be at least 1"),
        (["--batch-timeout-ms", "-1"], "--batch-timeout-ms not negative"),
        (["--model-name", "a:b"], "--model-name must be non-empty without '/' or ':'"),
        (["--top-k", "0"], "--top-k must be between 1 and 100"),
        (["--gallery-seed", "/nonexistent/seed"], "--gallery-seed /nonexistent/seed is not a directory"),
        # (a URL was taken for a local path, and the server waited for it forever)
        (
            ["--model", "s3://bucket/final/model.keras"],
            "--model s3://bucket/final/model.keras: the server serves a model file on its own volume, not a URL",
        ),
        (["--model", "gs://b/m.keras"], "not a URL"),
    ],
)
def test_bad_flags_exit_2_with_a_message(capsys, argv, words):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2
    assert words in capsys.readouterr().err


def test_a_runs_dir_that_is_not_a_directory_is_refused_before_serving(tmp_path):
    with pytest.raises(ContractError, match="--runs-dir .*/nonexistent is not a directory"):
        main(["--workdir", str(tmp_path), "--runs-dir", str(tmp_path / "nonexistent")])
