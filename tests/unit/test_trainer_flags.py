"""The trainer's flags: nonsense is refused by name before any TensorFlow work (exit 2)."""

import pytest

from disttrain_trainer.main import parse_args
from disttrain_trainer.tasks import text as text_task


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--strategy", "average", "--sync-every", "8"], "--sync-every applies to --strategy localsgd, not average"),
        (["--strategy", "multiworker", "--sync-every", "8"], "--sync-every applies to --strategy localsgd, not multiworker"),
        (["--strategy", "localsgd", "--sync-every", "0"], "--sync-every must be >= 1"),
        (["--steps-per-call", "0"], "--steps-per-call must be >= 1"),
        (["--allreduce-dtype", "int8"], "invalid choice: 'int8'"),
        (["--allreduce-dtype", "bfloat16"], "invalid choice: 'bfloat16'"),  # TensorFlow's collectives refuse it
        (["--allreduce-pack-bytes", "-1"], "--allreduce-pack-bytes must be >= 0"),
        (["--peer-wait", "-1"], "--peer-wait must be >= 0 (0: no deadline)"),
        (["--strategy", "allreduce"], "invalid choice: 'allreduce'"),
        (["--model", "vgg16"], "invalid choice: 'vgg16'"),
        (["--image-size", "64"], "--image-size applies to --model mobilenetv2 or resnet50"),
        (["--model", "mobilenetv2", "--image-size", "16"], "--image-size must be >= 32"),
        (["--learning-rate", "0"], "--learning-rate and --margin must be > 0"),
        (["--strategy", "multiworker", "--ps", "1"], "--ps and --serve-timeout apply to --strategy parameterserver"),
        (["--serve-timeout", "10"], "--ps and --serve-timeout apply to --strategy parameterserver, not average"),
        (["--strategy", "parameterserver", "--ps", "0"], "--ps must be >= 1"),
        (["--validation-fraction", "1"], "--validation-fraction must be between 0 and 1 (0: no validation split)"),
        (["--validation-fraction", "-0.1"], "--validation-fraction must be between 0 and 1"),
        (["--validation-fraction", "nan"], "--validation-fraction must be between 0 and 1"),
        (["--progress-interval", "-1"], "--progress-interval must be >= 0 (0: no progress.json)"),
        (["--progress-interval", "nan"], "--progress-interval must be >= 0"),
        (["--strategy", "multiworker", "--validation-fraction", "0.1"],
         "--validation-fraction applies to --strategy average, not multiworker"),
    ],
)
def test_nonsense_is_refused_by_name(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_new_flags_parse():
    args = parse_args(["--strategy", "localsgd", "--sync-every", "16", "--allreduce-dtype", "float16",
                       "--allreduce-pack-bytes", "1048576", "--steps-per-call", "8"])
    assert (args.strategy, args.sync_every, args.allreduce_dtype, args.allreduce_pack_bytes, args.steps_per_call) == (
        "localsgd", 16, "float16", 1048576, 8)
    args = parse_args(["--model", "mobilenetv2", "--image-size", "64"])
    assert (args.model, args.image_size) == ("mobilenetv2", 64)


def test_learning_rate_defaults_per_task_unless_given():
    assert parse_args([]).learning_rate is None  # main() takes the task's default (tasks/)
    assert parse_args(["--learning-rate", "0.01"]).learning_rate == 0.01
    assert text_task.Task.learning_rate > 0


def test_parameter_server_flags_default_to_one_ps():
    args = parse_args(["--strategy", "parameterserver"])
    assert (args.ps, args.serve_timeout) == (1, 7 * 24 * 3600.0)
    assert parse_args(["--strategy", "parameterserver", "--ps", "2", "--serve-timeout", "60"]).ps == 2
