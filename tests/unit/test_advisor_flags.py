"""disttrain-advise's flags: nonsense is refused by name (exit 2) before any probe; the trainer's flags mean
the same things (its parser is the trainer's)."""

import pytest

from disttrain_advisor.main import parse_args


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--budget-seconds", "5"], "--budget-seconds must be between 10 and 3600"),
        (["--budget-seconds", "nan"], "--budget-seconds must be between 10 and 3600"),
        (["--link-mbit", "0"], "--link-mbit must be a number > 0"),
        (["--link-mbit", "inf"], "--link-mbit must be a number > 0"),
        (["--epochs-to-target", "-1"], "--epochs-to-target must be a number > 0"),
        (["--worker-counts", "1,two"], "--worker-counts must be whole numbers separated by commas"),
        (["--worker-counts", "0,2"], "--worker-counts must be >= 1"),
        (["--strategy", "average", "--sync-every", "8"], "--sync-every applies to --strategy localsgd, not average"),
        (["--batch", "0"], "--batch must be >= 1"),
    ],
)
def test_nonsense_is_refused_by_name(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.strip().splitlines()[-1].startswith("disttrain-advise: error: ")


def test_the_trainer_flags_and_the_advisor_flags_parse():
    args = parse_args(
        [
            "--strategy",
            "localsgd",
            "--sync-every",
            "64",
            "--batch",
            "32",
            "--link-mbit",
            "50",
            "--worker-counts",
            "4,1,2,2",
            "--epochs-to-target",
            "3.5",
        ]
    )
    assert (args.train.strategy, args.train.strategy_settings.sync_every, args.train.batch) == ("localsgd", 64, 32)
    assert (args.link_mbit, args.worker_counts, args.epochs_to_target, args.budget_seconds) == (50, (1, 2, 4), 3.5, 60)


def test_a_private_run_is_never_advised_parameterserver():
    """With the DP flags, parameterserver (which cannot train privately) is neither shown nor recommended."""
    from disttrain_trainer import perfmodel as pm
    from disttrain_advisor.main import advise

    probe = pm.Probe(
        step_seconds_alone=0.005,
        step_seconds_pair=0.006,
        weight_bytes=5_120_000,
        weight_tensors=4,
        gradient_bytes=5_120_000,
        gradient_sparse=False,
        latency_seconds=0.001,
        per_byte_seconds=0.0,
        link_measured="loopback",
        train_examples=12_800,
        batch=64,
        steps_per_call=32,
        cores=2,
        one_host=True,
        startup_seconds=8.0,
        join_seconds=1.0,
        eval_seconds=0.1,
    )
    dp = ["--dp-l2-clip", "1", "--dp-noise-multiplier", "1", "--dp-delta", "1e-6"]
    for argv, shown in (([], True), (dp, False)):
        text, document = advise(parse_args(["--epochs", "5", *argv]), probe, {"workers": 2})
        assert ("parameterserver" in {p["strategy"] for p in document["predictions"]}) is shown
        assert document["recommendation"]["strategy"] != "parameterserver" or shown


def test_the_parameter_server_phase_runs_the_trainer_with_the_runs_own_flags_and_its_own_placement():
    from disttrain_advisor import parameterserver_phase
    from disttrain_trainer import parse_config

    args = parse_args(
        [
            "--model",
            "mobilenetv2",
            "--image-size",
            "32",
            "--batch",
            "32",
            "--threads",
            "1",
            "--learning-rate",
            "0.0005",
            "--optimizer",
            "sgd",
            "--steps-per-call",
            "8",
            "--strategy",
            "localsgd",
            "--sync-every",
            "100",
            "--outer-optimizer",
            "nesterov",
            "--service",
            "train",
            "--port",
            "2222",
            "--budget-seconds",
            "90",
            "--link-mbit",
            "50",
            "--json",
            "advice.json",
        ]
    )
    phase = parameterserver_phase.phase_config(args.train, "/data", "/out", 23000, epochs=4, peer_wait=30)
    argv = phase.to_argv()
    # the run's model, data and step flags are passed on; not the advisor's, not another strategy's, not the placement
    assert "--sync-every" not in argv and "--outer-optimizer" not in argv and "--budget-seconds" not in argv
    run = parse_config(argv)
    assert run == phase
    for name in ("model", "image_size", "batch", "threads", "learning_rate", "optimizer", "steps_per_call", "malloc"):
        assert getattr(run, name) == getattr(args.train, name), name
    assert (run.strategy, run.strategy_settings.ps, run.workers, run.port, run.service, run.job) == (
        "parameterserver",
        1,
        2,
        23000,
        "",
        "",
    )
    assert (run.host_pattern, run.data, run.out, run.epochs, run.peer_wait) == (
        "127.0.0.1:{index_port}",
        "/data",
        "/out",
        4,
        30,
    )
