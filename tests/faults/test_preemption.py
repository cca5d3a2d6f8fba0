"""SIGTERM mid-epoch (a node drain, a preemption, a deleted pod), in every strategy: the trainer
saves what its strategy allows and exits with code 75 (disttrain_contract PREEMPTED_EXIT_CODE),
its peers stop with it instead of hanging, and the restarted group resumes from one consistent
state (docs/operations.md, "Preemption", has the table these tests hold the code to).

average          stops after the train call in flight, saves, exits 75; restarted, it ends with
                 exactly the weights of an undisturbed run (--threads 1).
multiworker      every worker stops after the same train call (at most one after the signal);
                 the chief saves the group's checkpoint; all exit 75; the group resumes from it.
localsgd         every worker runs on to the next average (at most H steps), each saves its own
                 checkpoint of that step; all exit 75; the group resumes from that step.
parameterserver  the chief finishes the epoch, saves, exits 75 (the ps and workers serve on); a
                 worker exits 75 at once and the chief goes on without it.
"""

import json
import re
import shutil
import signal
import time

import pytest

from faults.faultlib import temp_leftovers, watching
from faults.test_kill_trainer import tail
from stages import free_port_block, stage, start_stage

pytestmark = pytest.mark.faults

EXIT_CODE = 75  # disttrain_contract.errors.PREEMPTED_EXIT_CODE (test_the_exit_code_is_the_contracts...)
STOPPED = re.compile(r"preempted: SIGTERM at step (\d+), stopped at step (\d+)")
WITH_GROUP = re.compile(r"preempted: a peer had SIGTERM: stopped with the group at step (\d+)")
# small batches and calls: an epoch has many train calls, so the signal lands inside one
BATCH, STEPS_PER_CALL = 16, 8


def read_json(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def wait_until_training(progress_path, procs, epoch=2, step=1, timeout=600):
    """Until the worker's progress.json (rewritten every --progress-interval) says it is at least
    `step` steps into the first half of epoch `epoch`, or of a later one but the last: a signal
    then lands mid-epoch, with room for the steps a stop may take."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            assert proc.poll() is None, "a trainer exited before the signal"
        progress = read_json(progress_path) or {}
        if (
            progress.get("state") == "training"
            and epoch <= progress["epoch"] < progress["epochs"]
            and step <= progress["step"] <= progress["steps_per_epoch"] // 2
        ):
            return progress
        time.sleep(0.01)
    raise AssertionError(f"{progress_path} never reached epoch {epoch}")


def stopped_at(log_path):
    """(step at the signal, step stopped at) from the preempted trainer's line."""
    found = STOPPED.search(log_path.read_text())
    assert found, tail(log_path)
    return int(found.group(1)), int(found.group(2))


def steps_per_epoch(log_path):
    return int(re.search(r"(\d+) steps/epoch", log_path.read_text()).group(1))


def trainer(work, log, *extra, index=0, workers=1, strategy="average", port=None, epochs=3):
    return start_stage(
        "trainer",
        "--workdir",
        work,
        "--worker-index",
        index,
        "--workers",
        workers,
        "--epochs",
        epochs,
        "--batch",
        BATCH,
        "--steps-per-call",
        STEPS_PER_CALL,
        "--strategy",
        strategy,
        "--progress-interval",
        0.05,
        *(("--port", port) if port else ()),
        *extra,
        log=log,
    )


def wait_exit(proc, log, expected, timeout):
    started = time.monotonic()
    code = proc.wait(timeout=timeout)
    assert code == expected, f"exit {code}, not {expected}:\n{tail(log)}"
    return time.monotonic() - started


def test_average_saves_on_sigterm_and_resumes_bit_exact(tmp_path, measure):
    """One thread: the same arithmetic in the same order in both runs, so the resumed model must
    equal the undisturbed one bit for bit; the epochs' metrics too (the partial epoch's running
    sums are in the saved state)."""
    stage("copier", "--source", "sample:movie-reviews", "--n-shards", 1, "--workdir", tmp_path / "source")
    runs = {}
    for name in ("undisturbed", "preempted"):
        work = tmp_path / name
        shutil.copytree(tmp_path / "source" / "data", work / "data")
        log = tmp_path / f"{name}-first.log"
        first = trainer(work, log, "--threads", 1)
        if name == "preempted":
            wait_until_training(work / "train" / "worker-00000" / "progress.json", [first])
            first.send_signal(signal.SIGTERM)
            exit_sec = wait_exit(first, tmp_path / f"{name}-first.log", EXIT_CODE, 120)
            at_signal, saved = stopped_at(tmp_path / f"{name}-first.log")
            per_epoch = steps_per_epoch(tmp_path / f"{name}-first.log")
            # lost at most one train call: the call in flight finished, then the state was saved
            assert 0 <= saved - at_signal <= STEPS_PER_CALL, (at_signal, saved)
            assert saved % per_epoch, f"stopped at an epoch's end ({saved}): the signal did not land mid-epoch"
            checkpoint = work / "train" / "worker-00000" / "checkpoints" / "preempted" / f"ckpt-{saved}.index"
            assert checkpoint.is_file()
            assert exit_sec < 60
            log = tmp_path / f"{name}-second.log"
            first = trainer(work, log, "--threads", 1)
        wait_exit(first, log, 0, 600)
        runs[name] = (
            read_json(work / "train" / "worker-00000" / "_SUCCESS"),
            read_json(work / "train" / "worker-00000" / "metrics.json"),
        )
    log = (tmp_path / "preempted-second.log").read_text()
    epoch, within = divmod(saved, per_epoch)
    assert f"preempted/ckpt-{saved} after epoch {epoch} and {within} steps of epoch {epoch + 1}" in log, log
    (calm_marker, calm_metrics), (marker, metrics) = runs["undisturbed"], runs["preempted"]
    assert marker["final_weights_sha256"] == calm_marker["final_weights_sha256"]
    assert [(m["epoch"], m["loss"], m["accuracy"], m["examples"]) for m in metrics] == [
        (m["epoch"], m["loss"], m["accuracy"], m["examples"]) for m in calm_metrics
    ]
    assert not (tmp_path / "preempted" / "train" / "worker-00000" / "checkpoints" / "preempted").exists()
    assert temp_leftovers(tmp_path / "preempted") == []
    measure(
        steps_per_call=STEPS_PER_CALL,
        step_at_signal=at_signal,
        saved_at_step=saved,
        sigterm_to_exit_sec=round(exit_sec, 1),
    )


# (localsgd with eager updates: the workers agree to stop while a sync's exchange is in flight, and save it)
@pytest.mark.parametrize(
    "strategy, bound, options",
    [("multiworker", STEPS_PER_CALL, ()), ("localsgd", 24, ()), ("localsgd", 24, ("--outer-overlap", "eager"))],
    ids=["multiworker", "localsgd", "localsgd-eager-updates"],
)
def test_a_connected_group_stops_together_and_resumes_from_one_state(tmp_path, strategy, bound, options, measure):
    """Worker 1 gets SIGTERM; worker 0 must stop too, at the same step, within the bound (no
    hang), and the restarted group must resume both workers from that one step."""
    work, train = tmp_path / "work", tmp_path / "work" / "train"
    extra = ("--sync-every", bound, *options) if strategy == "localsgd" else ()
    stage("copier", "--source", "sample:movie-reviews", "--n-shards", 2, "--workdir", work)
    port = free_port_block(2)
    logs = [tmp_path / f"w{i}-first.log" for i in range(2)]
    with watching(work) as watcher:
        group = [trainer(work, logs[i], *extra, index=i, workers=2, strategy=strategy, port=port) for i in range(2)]
        wait_until_training(train / "worker-00001" / "progress.json", group)
        group[1].send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        assert [p.wait(timeout=120) for p in group] == [EXIT_CODE, EXIT_CODE], tail(logs[0]) + tail(logs[1])
        exit_sec = time.monotonic() - signalled
        at_signal, saved = stopped_at(logs[1])
        found = WITH_GROUP.search(logs[0].read_text())
        assert found and int(found.group(1)) == saved, tail(logs[0])
        assert 0 <= saved - at_signal <= bound, (at_signal, saved)
        if strategy == "localsgd":
            assert saved % bound == 0  # at an average
            resumed_from = [train / f"worker-{i:05d}" / "checkpoints" / "preempted" / f"ckpt-{saved}" for i in range(2)]
        else:
            resumed_from = [train / "worker-00000" / "checkpoints" / "preempted" / f"ckpt-{saved}"] * 2
        for path in resumed_from:
            assert path.with_name(path.name + ".index").is_file()

        port = free_port_block(2)
        logs = [tmp_path / f"w{i}-second.log" for i in range(2)]
        group = [trainer(work, logs[i], *extra, index=i, workers=2, strategy=strategy, port=port) for i in range(2)]
        assert [p.wait(timeout=600) for p in group] == [0, 0], tail(logs[0]) + tail(logs[1])
    for i in range(2):
        assert f"resumed from {resumed_from[i]} after epoch" in logs[i].read_text(), tail(logs[i])
    markers = [read_json(train / f"worker-{i:05d}" / "_SUCCESS") for i in range(2)]
    assert markers[0]["final_weights_sha256"] == markers[1]["final_weights_sha256"]
    assert [m["epoch"] for m in read_json(train / "worker-00000" / "metrics.json")] == [1, 2, 3]
    watcher.assert_clean()
    measure(
        bound_steps=bound,
        step_at_signal=at_signal,
        saved_at_step=saved,
        group_exit_sec=round(exit_sec, 1),
        watcher=watcher.summary(),
    )
    assert exit_sec < 60


PS_WORKERS, PS = 2, 1
PS_TASKS = 1 + PS + PS_WORKERS


@pytest.mark.parametrize("victim", ["chief", "worker", "ps"])
def test_parameter_server_training_on_sigterm(tmp_path, victim, measure):
    """chief: it lets the epoch's scheduled calls finish, saves that epoch and exits 75, while
    the ps and the workers serve on; restarted, it resumes after that epoch. worker: it exits 75
    at once; the chief runs its calls on the other worker and the restarted worker rejoins.
    ps: it exits 75 at once; the chief fails at its next call instead of hanging (the variables
    are gone) and, restarted with the ps, resumes from its last saved epoch."""
    work, train = tmp_path / "work", tmp_path / "work" / "train"
    stage("copier", "--source", "sample:movie-reviews", "--n-shards", PS_WORKERS, "--workdir", work)
    port = free_port_block(PS_TASKS)
    extra = ("--ps", PS)

    def task(i, label):
        return trainer(
            work,
            tmp_path / f"task-{i}-{label}.log",
            *extra,
            index=i,
            workers=PS_WORKERS,
            strategy="parameterserver",
            port=port,
        )

    procs = {i: task(i, "first") for i in range(PS_TASKS)}
    index = {"chief": 0, "ps": 1, "worker": PS_TASKS - 1}[victim]
    # (the chief's step moves only at an epoch's end: its calls run on the workers)
    wait_until_training(train / "worker-00000" / "progress.json", procs.values(), step=0)
    procs[index].send_signal(signal.SIGTERM)
    exit_sec = wait_exit(procs[index], tmp_path / f"task-{index}-first.log", EXIT_CODE, 120)
    if victim == "chief":
        epochs_saved = len(read_json(train / "worker-00000" / "metrics.json"))
        assert epochs_saved == 2  # the epoch in flight (2 of 3) was finished and saved
        assert "nothing to save (the last checkpoint holds this state)" in (tmp_path / "task-0-first.log").read_text()
        for i in range(1, PS_TASKS):
            assert procs[i].poll() is None, f"task {i} stopped with the chief"  # they serve on, for the restarted chief
    else:
        assert exit_sec < 10  # nothing to save: at once
    if victim == "ps":
        chief_exit = procs[0].wait(timeout=300)  # bounded: the chief's next call fails, it does not hang
        assert chief_exit not in (0, EXIT_CODE), chief_exit
        procs[0] = task(0, "second")
    measure(sigterm_to_exit_sec=round(exit_sec, 1))
    procs[index] = task(index, "second")
    assert {i: p.wait(timeout=600) for i, p in procs.items()} == {i: 0 for i in range(PS_TASKS)}
    if victim == "chief":
        assert f"after epoch {epochs_saved}" in (tmp_path / "task-0-second.log").read_text()
    assert read_json(train / "worker-00000" / "_SUCCESS")["epochs"] == 3
