"""kill -9 of one of two disttrain-sweep processes mid-trial: the other completes the study.

The killed process's trial loses its heartbeat; the survivor fails it after --stale-after and
Optuna's retry callback enqueues it as a new trial, which the survivor runs. No trial number is
run twice (each has one trial directory, made with exist_ok=False), none is lost (the study ends
with --trials finished trials), and the killed process's trainer dies with it (PR_SET_PDEATHSIG)."""

import os
import signal
import time

import pytest

from stages import stage, start_stage

pytestmark = pytest.mark.faults

TRIALS = 5


def load_trials(sweep_dir):
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(os.path.join(sweep_dir, "study.journal")))
    return optuna.load_study(study_name="disttrain", storage=storage).get_trials()


def running_trainers(trial_dir):
    """pids of processes whose command line names this trial's directory."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if str(trial_dir).encode() in fh.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def test_kill_one_of_two_sweep_processes_mid_trial(tmp_path):
    work = tmp_path / "w"
    stage("copier", "--source", "sample:digits", "--n-shards", 2, "--workdir", work)
    flags = [
        "--workdir",
        work,
        "--trials",
        TRIALS,
        "--epochs",
        8,
        "--pruner",
        "none",
        "--heartbeat",
        1,
        "--stale-after",
        8,
    ]
    logs = [tmp_path / f"sweep-{i}.log" for i in range(2)]
    survivor = start_stage("sweep", *flags, "--process-index", 0, log=logs[0])
    victim = start_stage("sweep", *flags, "--process-index", 1, log=logs[1])
    # wait until the victim's trial has reported an epoch: it is mid-trial, its trainer running
    deadline, killed = time.monotonic() + 900, None
    while time.monotonic() < deadline and killed is None:
        assert victim.poll() is None, logs[1].read_text()[-2000:]
        for line in logs[1].read_text().splitlines():
            if " epoch 1/" in line:
                killed = int(line.split("trial ")[1].split(" ")[0])
        time.sleep(0.2)
    assert killed is not None, "the victim never reported an epoch"
    trial_dir = work / "sweep" / "trials" / f"trial-{killed:05d}"
    assert running_trainers(trial_dir), "the victim's trainer should be running"
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    time.sleep(2)
    assert not running_trainers(trial_dir), "the killed sweep's trainer must die with it"

    assert survivor.wait(timeout=1500) == 0, logs[0].read_text()[-3000:]
    trials = load_trials(work / "sweep")
    by_number = {t.number: t for t in trials}
    assert by_number[killed].state.name == "FAIL"
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == killed]
    assert len(retries) == 1 and retries[0].state.name == "COMPLETE"
    assert retries[0].params == by_number[killed].params  # the same trial again, under a new number
    finished = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED")]
    assert len(finished) == TRIALS and len(trials) == TRIALS + 1  # none lost, none extra
    # each trial number ran in one process: one directory each, and the killed one's never reused
    assert sorted(os.listdir(work / "sweep" / "trials")) == [f"trial-{t.number:05d}" for t in trials]
    assert "no heartbeat" in logs[0].read_text()
    assert (work / "sweep" / "_SUCCESS").exists() and (work / "sweep" / "best.json").exists()
