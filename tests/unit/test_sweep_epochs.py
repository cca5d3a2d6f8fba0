"""The sweep reads a trial's epochs from worker 0's metrics.json as the trainer replaces it (EpochReports), not
from its log: every epoch once and in order, the value the trainer's epoch line prints; and a trial whose
values the pruner refuses is stopped at that epoch (train_trial, with a stand-in trainer process)."""

import dataclasses
import json
import os
import sys
import textwrap
import time
import types

import pytest

from disttrain_contract.metrics import ACCURACY, RMSE
from disttrain_contract.trainer_records import EpochRecord, write_epoch_records
from disttrain_sweep import main as sweep_main


def record(epoch, **metrics):
    return EpochRecord(
        epoch=epoch,
        loss=0.5,
        examples=100,
        examples_per_sec=1000.0,
        wall_time_sec=0.1,
        metrics={"accuracy": 0.5, **metrics},
    )


def test_each_epoch_once_in_order_with_the_printed_value(tmp_path):
    path = str(tmp_path / "metrics.json")
    epochs = sweep_main.EpochReports(path, ACCURACY)
    assert epochs.new() == []  # no file yet
    write_epoch_records(path, [record(1, test_accuracy=0.612345)])
    assert epochs.new() == [(1, 0.6123)]  # as the epoch line prints it: test_accuracy=0.6123
    assert epochs.new() == []  # not replaced since
    # two epochs ended between two looks: both, in order; the first again: not
    write_epoch_records(
        path, [record(1, test_accuracy=0.612345), record(2, test_accuracy=0.7), record(3, test_accuracy=float("nan"))]
    )
    reported = epochs.new()
    assert reported[0] == (2, 0.7) and reported[1][0] == 3 and reported[1][1] != reported[1][1]  # nan


def test_an_epoch_without_the_metric_is_not_reported(tmp_path):
    """A worker that does not evaluate has no test_<metric>: the log had no value for the sweep either."""
    path = str(tmp_path / "metrics.json")
    epochs = sweep_main.EpochReports(path, RMSE)
    write_epoch_records(path, [record(1, test_accuracy=0.5), record(2, test_rmse=1.25)])
    assert epochs.new() == [(2, 1.25)]


STAND_IN_TRAINER = textwrap.dedent("""
    # writes one epoch's record every 0.3 s as the trainer does (the whole list, atomically), prints its line,
    # then trains on for a minute unless stopped
    import os, sys, time
    from disttrain_contract.trainer_records import EpochRecord, write_epoch_records
    out = sys.argv[sys.argv.index("--out") + 1]
    os.makedirs(os.path.join(out, "worker-00000"))
    records = []
    for epoch, value in enumerate(VALUES, 1):
        time.sleep(0.3)
        records.append(EpochRecord(epoch=epoch, loss=1.0, examples=10, examples_per_sec=10.0, wall_time_sec=0.3,
                                   metrics={"accuracy": 0.5, "test_accuracy": value}))
        print(f"worker 0/1 epoch {epoch}/EPOCHS: test_accuracy={value:.4f}", flush=True)
        write_epoch_records(os.path.join(out, "worker-00000", "metrics.json"), records)
    print("done", flush=True)
    if PAUSE:
        time.sleep(60)
""")


def run_stand_in(tmp_path, monkeypatch, values, pause, pruner):
    import optuna

    script = tmp_path / "trainer.py"
    script.write_text(
        STAND_IN_TRAINER.replace("VALUES", repr(values))
        .replace("EPOCHS", str(len(values)))
        .replace("PAUSE", repr(pause))
    )
    trial_dir = tmp_path / "trial"
    os.makedirs(trial_dir)
    monkeypatch.setattr(sweep_main, "trainer_command", lambda sweep, trial_dir, params: (None, dict(os.environ)))
    monkeypatch.setattr(
        sweep_main, "worker_command", lambda config, index: [sys.executable, str(script), "--out", str(trial_dir)]
    )
    study = optuna.create_study(direction="maximize", pruner=pruner)
    args = types.SimpleNamespace(metric=ACCURACY, heartbeat=5.0, stale_after=60.0, trial_workers=1)
    beats = sweep_main.HeartbeatWatch(str(tmp_path), 60.0)
    sweep = sweep_main.Sweep(args, None, str(tmp_path), "sweep[0]", {}, study, None, None, None, beats)
    trial = study.ask()
    started = time.monotonic()
    run = sweep_main.train_trial(sweep, trial, str(trial_dir), {"epochs": len(values)})
    return run, trial, time.monotonic() - started, trial_dir


def test_a_trial_is_pruned_at_the_epoch_the_pruner_refuses(tmp_path, monkeypatch, capsys):
    import optuna

    values = [0.8, 0.7, 0.2, 0.9, 0.9]
    run, trial, seconds, trial_dir = run_stand_in(
        tmp_path, monkeypatch, values, pause=True, pruner=optuna.pruners.ThresholdPruner(lower=0.5)
    )
    assert run.pruned and run.values == [0.8, 0.7, 0.2]  # the pruner saw epochs 1, 2, 3 and refused the third
    assert trial.storage.get_trial(trial._trial_id).intermediate_values == {1: 0.8, 2: 0.7, 3: 0.2}
    assert seconds < 30 and run.returncode != 0  # terminated, not waited for
    out = capsys.readouterr().out
    assert "sweep[0]: trial 0 epoch 3/5: validation accuracy 0.2000 -> pruned" in out
    assert "epoch 4/5" not in out
    log = (trial_dir / "trainer.log").read_text()  # worker 0's output is still its log
    assert "worker 0/1 epoch 1/5: test_accuracy=0.8000" in log and run.lines[0].startswith("worker 0/1 epoch 1/5")


def test_a_trial_that_is_not_pruned_reports_every_epoch_then_ends(tmp_path, monkeypatch):
    import optuna

    values = [0.61234, 0.7, 0.75]
    run, trial, _, trial_dir = run_stand_in(
        tmp_path, monkeypatch, values, pause=False, pruner=optuna.pruners.NopPruner()
    )
    assert (run.pruned, run.values, run.returncode, run.lines[-1]) == (False, [0.6123, 0.7, 0.75], 0, "done")
    assert json.loads((trial_dir / "worker-00000" / "metrics.json").read_text())[-1]["epoch"] == 3


@pytest.fixture(autouse=True)
def quiet_optuna():
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_a_trials_command_line_is_the_trainers_configuration_with_the_trials_parameters(tmp_path):
    """trainer_command: the sweep's data, model and strategy with the trial's parameters, a strategy's own among
    them in its part of the TrainConfig; each worker's command line parses back to that configuration."""
    from disttrain_contract import Workdir
    from disttrain_trainer import parse_config

    args = types.SimpleNamespace(
        strategy="localsgd",
        trial_workers=2,
        stale_after=60.0,
        seed=7,
        threads=1,
        model_file=None,
        model_module="",
        local_model_file=None,
    )
    sweep = sweep_main.Sweep(
        args, Workdir(str(tmp_path)), str(tmp_path / "sweep"), "sweep[0]", {}, None, None, None, None, None
    )
    config, env = sweep_main.trainer_command(
        sweep, str(tmp_path / "trial"), {"learning_rate": 0.0123, "batch": 32, "sync_every": 16}
    )
    assert "TF_CONFIG" not in env and "JOB_COMPLETION_INDEX" not in env
    assert (config.strategy, config.workers, config.seed, config.learning_rate, config.batch) == (
        "localsgd",
        2,
        7,
        0.0123,
        32,
    )
    assert config.strategy_settings.sync_every == 16 and config.wait_timeout == 0
    for index in (0, 1):
        argv = sweep_main.worker_command(config, index)
        assert argv[1:3] == ["-m", "disttrain_trainer.main"]
        parsed = parse_config(argv[3:])
        assert parsed.worker_index == index and parsed == dataclasses.replace(config, worker_index=index)
