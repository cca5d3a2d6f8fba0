"""The trainer's flags: nonsense is refused by name before any TensorFlow work (exit 2)."""

import os
import subprocess
import sys

import pytest

from disttrain_trainer import parse_config as parse_args
from disttrain_trainer.strategies import options
from disttrain_trainer.strategies.localsgd import options as localsgd_options
from disttrain_trainer.tasks import text as text_task


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--strategy", "average", "--sync-every", "8"], "--sync-every applies to --strategy localsgd, not average"),
        (
            ["--strategy", "multiworker", "--sync-every", "8"],
            "--sync-every applies to --strategy localsgd, not multiworker",
        ),
        (["--strategy", "localsgd", "--sync-every", "0"], "--sync-every must be >= 1"),
        (["--steps-per-call", "0"], "--steps-per-call must be >= 1"),
        (["--allreduce-dtype", "int8"], "--allreduce-dtype int8 applies to --strategy localsgd, not average"),
        (
            ["--strategy", "multiworker", "--allreduce-dtype", "int8"],
            "--allreduce-dtype int8 applies to --strategy localsgd, not multiworker (TensorFlow's all-reduce refuses int8",
        ),
        (
            ["--strategy", "multiworker", "--allreduce-dtype", "int4"],
            "--allreduce-dtype int4 applies to --strategy localsgd, not multiworker (TensorFlow's all-reduce refuses int8",
        ),
        (["--allreduce-dtype", "int2"], "invalid choice: 'int2'"),
        (["--strategy", "localsgd", "--outer-optimizer", "nesterov", "--outer-lr", "-0.7"], "--outer-lr must be > 0"),
        (["--strategy", "localsgd", "--outer-optimizer", "nesterov", "--outer-lr", "nan"], "--outer-lr must be > 0"),
        (
            ["--strategy", "localsgd", "--outer-optimizer", "nesterov", "--outer-momentum", "1"],
            "--outer-momentum must be >= 0 and < 1",
        ),
        (
            ["--strategy", "localsgd", "--outer-optimizer", "nesterov", "--outer-momentum", "-0.1"],
            "--outer-momentum must be >= 0 and < 1",
        ),
        (["--strategy", "localsgd", "--outer-optimizer", "adamw"], "invalid choice: 'adamw'"),
        (
            ["--strategy", "localsgd", "--outer-lr", "0.5"],
            "--outer-lr and --outer-momentum apply to --outer-optimizer nesterov, not none",
        ),
        (
            ["--strategy", "multiworker", "--outer-optimizer", "nesterov"],
            "--outer-optimizer, --outer-lr and --outer-momentum apply to --strategy localsgd, not multiworker",
        ),
        (
            ["--outer-momentum", "0.5"],
            "--outer-optimizer, --outer-lr and --outer-momentum apply to --strategy localsgd, not average",
        ),
        (
            ["--strategy", "parameterserver", "--outer-optimizer", "none"],
            "--outer-optimizer, --outer-lr and --outer-momentum apply to --strategy localsgd, not parameterserver",
        ),
        (["--strategy", "localsgd", "--outer-overlap", "sometimes"], "invalid choice: 'sometimes'"),
        (
            ["--strategy", "multiworker", "--outer-overlap", "eager"],
            "--outer-overlap applies to --strategy localsgd, not multiworker",
        ),
        (["--sync-at-epoch-end"], "--sync-at-epoch-end applies to --strategy localsgd, not average"),
        (
            [
                "--strategy",
                "localsgd",
                "--outer-optimizer",
                "nesterov",
                "--outer-overlap",
                "eager",
                "--sync-at-epoch-end",
            ],
            "--sync-at-epoch-end does not go with --outer-overlap eager: an overlapped sync applies its exchange one sync late",
        ),
        (["--allreduce-dtype", "bfloat16"], "invalid choice: 'bfloat16'"),  # TensorFlow's collectives refuse it
        (["--allreduce-pack-bytes", "-1"], "--allreduce-pack-bytes must be >= 0"),
        (["--peer-wait", "-1"], "--peer-wait must be >= 0 (0: no deadline)"),
        (["--strategy", "localsgd", "--heartbeat-timeout", "0.5"], "--heartbeat-timeout must be >= 1 second"),
        (["--strategy", "multiworker", "--heartbeat-timeout", "nan"], "--heartbeat-timeout must be >= 1 second"),
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
        (
            ["--strategy", "multiworker", "--validation-fraction", "0.1"],
            "--validation-fraction applies to --strategy average, not multiworker",
        ),
    ],
)
def test_nonsense_is_refused_by_name(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.splitlines()[-1].startswith("disttrain-trainer: error: ")  # one line after the usage, no traceback


def test_localsgd_outer_flags_default_to_plain_averaging_and_dilocos_values():
    args = parse_args(["--strategy", "localsgd"]).strategy_settings
    assert (args.outer_optimizer, args.outer_lr, args.outer_momentum, args.allreduce_dtype) == (
        "none",
        0.7,
        0.9,
        "float32",
    )
    assert args.outer_overlap == "none"
    assert localsgd_options.outer_settings(args) == {}  # a default run records (and resumes) what it always did
    args = parse_args(
        [
            "--strategy",
            "localsgd",
            "--outer-optimizer",
            "nesterov",
            "--outer-lr",
            "0.5",
            "--outer-momentum",
            "0",
            "--allreduce-dtype",
            "int8",
            "--sync-every",
            "500",
        ]
    ).strategy_settings
    assert options.REGISTRY["localsgd"].model_meta(args) == {
        "sync_every": 500,
        "outer_optimizer": "nesterov",
        "outer_lr": 0.5,
        "outer_momentum": 0.0,
        "allreduce_dtype": "int8",
    }
    args = parse_args(["--strategy", "localsgd", "--outer-overlap", "eager"]).strategy_settings  # (plain averaging too)
    assert options.REGISTRY["localsgd"].model_meta(args) == {"sync_every": 32, "outer_overlap": "eager"}
    assert parse_args(["--strategy", "localsgd"]).strategy_settings.sync_at_epoch_end is False
    args = parse_args(["--strategy", "localsgd", "--sync-every", "50", "--sync-at-epoch-end"]).strategy_settings
    assert options.REGISTRY["localsgd"].model_meta(args) == {"sync_every": 50, "sync_at_epoch_end": True}
    assert options.users_of("outer_lr") == ["localsgd"]


def test_the_new_flags_parse():
    args = parse_args(
        [
            "--strategy",
            "localsgd",
            "--sync-every",
            "16",
            "--allreduce-dtype",
            "float16",
            "--allreduce-pack-bytes",
            "1048576",
            "--steps-per-call",
            "8",
        ]
    )
    own = args.strategy_settings
    assert (args.strategy, own.sync_every, own.allreduce_dtype, own.allreduce_pack_bytes, args.steps_per_call) == (
        "localsgd",
        16,
        "float16",
        1048576,
        8,
    )
    args = parse_args(["--model", "mobilenetv2", "--image-size", "64"])
    assert (args.model, args.image_size) == ("mobilenetv2", 64)


def test_learning_rate_defaults_per_task_unless_given():
    assert parse_args([]).learning_rate is None  # main() takes the task's default (tasks/)
    assert parse_args(["--learning-rate", "0.01"]).learning_rate == 0.01
    assert text_task.Task.learning_rate > 0


def test_parameter_server_flags_default_to_one_ps():
    args = parse_args(["--strategy", "parameterserver"]).strategy_settings
    assert (args.ps, args.serve_timeout) == (1, 7 * 24 * 3600.0)
    assert parse_args(["--strategy", "parameterserver", "--ps", "2", "--serve-timeout", "60"]).strategy_settings.ps == 2


def test_localsgd_resolves_its_default_sync_every():
    assert parse_args(["--strategy", "localsgd"]).strategy_settings.sync_every == localsgd_options.DEFAULT_SYNC_EVERY
    assert not hasattr(parse_args([]).strategy_settings, "sync_every")  # (not average's)


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--linger-for-peers", "5", "--strategy", "localsgd"],
            "--linger-for-peers applies to --strategy average, not localsgd",
        ),
        (["--linger-for-peers", "-1"], "--linger-for-peers must be >= 0"),
    ],
)
def test_average_flags_are_refused_elsewhere(argv, message, capsys):
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert message in capsys.readouterr().err


def test_every_strategy_is_one_registry_entry_owning_its_flags():
    """A strategy is its package (its options, training code and cost model) and its entry in the contract's
    registry: the names, the connected ones and whose flag a --params-from key is all come from the entries."""
    from disttrain_trainer import strategies

    assert options.NAMES == tuple(options.REGISTRY) == ("average", "multiworker", "localsgd", "parameterserver")
    assert options.CONNECTED == ("multiworker", "localsgd", "parameterserver")
    assert options.users_of("sync_every") == ["localsgd"]
    assert options.users_of("allreduce_dtype") == ["multiworker", "localsgd"]
    assert options.users_of("learning_rate") is None  # every strategy's
    for name in options.NAMES:  # each entry has its package: its options, its training code and its cost model
        assert type(options.REGISTRY[name]).__module__ == f"disttrain_trainer.strategies.{name}.options"
        for module in ("options.py", "strategy.py", "cost.py"):
            path = os.path.join(os.path.dirname(strategies.__file__), name, module)
            assert os.path.isfile(path), path
    from disttrain_trainer.cluster import Placement

    assert options.REGISTRY["parameterserver"].tag(Placement(2, 0, None, 2)) == "chief 0 (task 0)"
    assert options.REGISTRY["parameterserver"].tag(Placement(2, 3, None, 2)) == "worker 0 (task 3)"
    assert options.REGISTRY["multiworker"].tag(Placement(2, 1)) == "worker 1/2"


def test_help_and_flag_errors_import_no_tensorflow():
    """--help lists each strategy's flags under the strategy; neither it nor a refused flag imports TensorFlow."""
    code = (
        "import sys\nfrom disttrain_trainer.main import parse_args\n"
        "try:\n    parse_args(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print('TF', 'tensorflow' in sys.modules, 'keras' in sys.modules)"
    )
    for argv in (["--help"], ["--strategy", "average", "--sync-every", "4"]):
        result = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True)
        assert result.stdout.splitlines()[-1] == "TF False False", result.stdout
    help_text = subprocess.run([sys.executable, "-c", code, "--help"], capture_output=True, text=True).stdout
    assert "strategy localsgd:\n  --sync-every" in help_text and "strategy parameterserver:\n  --ps PS" in help_text


def test_checkpoints_resume_only_with_the_same_outer_settings(tmp_path):
    """run.json records localsgd's outer settings when not the defaults: a DiLoCo checkpoint (its outer
    momentum, its residual) is not resumed as plain averaging, and the refusal names what changed."""
    from disttrain_contract import ContractError
    from disttrain_trainer.training import check_run_config

    def config(*argv):
        args = parse_args(["--strategy", "localsgd", *argv]).strategy_settings
        return {"strategy": "localsgd", "sync_every": args.sync_every, **localsgd_options.outer_settings(args)}

    diloco = config("--outer-optimizer", "nesterov", "--allreduce-dtype", "int8")
    check_run_config(tmp_path, diloco, write=True)
    check_run_config(tmp_path, diloco, write=True)  # the same run resumes
    with pytest.raises(ContractError, match=r"changed: allreduce_dtype, outer_lr, outer_momentum, outer_optimizer\)"):
        check_run_config(tmp_path, config(), write=True)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        [
            "--strategy",
            "localsgd",
            "--sync-every",
            "50",
            "--outer-optimizer",
            "nesterov",
            "--outer-lr",
            "0.5",
            "--sync-at-epoch-end",
            "--allreduce-dtype",
            "int8",
        ],
        ["--strategy", "localsgd", "--outer-overlap", "eager", "--threads", "1", "--learning-rate", "0.01"],
        ["--strategy", "parameterserver", "--ps", "2", "--workers", "3", "--service", "svc", "--job", "job"],
        ["--strategy", "multiworker", "--allreduce-dtype", "float16", "--model", "mobilenetv2", "--image-size", "64"],
        [
            "--validation-fraction",
            "0.2",
            "--linger-for-peers",
            "5",
            "--dp-l2-clip",
            "1",
            "--dp-noise-multiplier",
            "1.1",
            "--dp-delta",
            "1e-5",
        ],
    ],
)
def test_a_configuration_is_its_command_line(argv):
    """to_argv is the command line of the same run: parsed again, it is the same frozen TrainConfig."""
    import dataclasses

    config = parse_args(["--workdir", "/w", *argv])
    assert parse_args(config.to_argv()) == config
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.epochs = 1


def test_the_task_defaults_make_a_new_configuration():
    """The task's defaults (learning rate, width, dropout, optimizer) fill what the flags left unset, in a new
    configuration; the parsed one is not changed."""
    config = parse_args(["--width", "8"])
    with_defaults = config.with_task_defaults(text_task.Task)
    assert (with_defaults.learning_rate, with_defaults.width, with_defaults.dropout, with_defaults.optimizer) == (
        text_task.Task.learning_rate,
        8,
        text_task.Task.dropout,
        "adam",
    )
    assert (config.learning_rate, config.dropout, config.optimizer) == (None, None, None)
