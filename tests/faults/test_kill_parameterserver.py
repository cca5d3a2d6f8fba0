"""kill -9 in parameter-server training (chief + 1 ps + 2 workers on loopback, movie reviews).

worker killed mid-training: the chief does not fail and is not restarted; the coordinator
    runs the lost worker's calls again on the other worker (and on the killed one once it
    is back: it is restarted a moment later, as the Job would). The chief's marker says how
    many steps were started more than once (steps retried).
parameter server killed: the chief fails (the variables are gone); the Job restarts the
    ps and the chief; the chief resumes from its last checkpoint (each epoch) and the
    workers, which kept serving, take its steps again.
chief killed: the Job restarts it alone; it resumes from its last checkpoint with the
    parameter servers and workers that kept serving.

Either way every task exits 0 with its marker and the model's held-out accuracy is at most
2 points below an undisturbed run's. Every worker draws from all the examples
(strategies/parameterserver/strategy.py): before that, the surviving worker's shard dominated
training and a worker kill cost 2.2 points in one CI run."""

import signal
import time

import pytest

from faults.test_kill_trainer import tail
from faults.faultlib import temp_leftovers, watching
from stages import free_port_block, read_metrics, read_report, run_pipeline, stage, start_stage, wait_for_epochs

pytestmark = pytest.mark.faults

SOURCE, WORKERS, PS, EPOCHS, BATCH, SEED = "sample:movie-reviews", 2, 1, 3, 32, 42
TASKS = 1 + PS + WORKERS


def start_task(work, logs, index, label, port):
    return start_stage(
        "trainer",
        "--workdir",
        work,
        "--worker-index",
        index,
        "--workers",
        WORKERS,
        "--ps",
        PS,
        "--epochs",
        EPOCHS,
        "--batch",
        BATCH,
        "--strategy",
        "parameterserver",
        "--seed",
        SEED,
        "--port",
        port,
        log=logs / f"task-{index}-{label}.log",
    )


@pytest.fixture(scope="module")
def calm(tmp_path_factory):
    return run_pipeline(tmp_path_factory.mktemp("calm"), SOURCE, WORKERS, "parameterserver", EPOCHS, BATCH, SEED, ps=PS)


@pytest.mark.parametrize("victim", ["worker", "ps", "chief"])
def test_kill_9_in_parameter_server_training(tmp_path, calm, victim, measure):
    work, logs = tmp_path / "work", tmp_path / "logs"
    logs.mkdir()
    victim_index = {"worker": TASKS - 1, "ps": 1, "chief": 0}[
        victim
    ]  # the last worker, the parameter server, the chief
    chief_metrics = work / "train" / "worker-00000" / "metrics.json"
    port = free_port_block(TASKS)
    with watching(work) as watcher:
        stage("copier", "--source", SOURCE, "--n-shards", WORKERS, "--workdir", work)
        procs = {i: start_task(work, logs, i, "first", port) for i in range(TASKS)}
        done = wait_for_epochs(chief_metrics, 1, procs.values())
        time.sleep(min(0.5, done[0]["wall_time_sec"] / 4))  # into epoch 2
        procs[victim_index].send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        assert procs[victim_index].wait(timeout=30) == -signal.SIGKILL
        finished = len(read_metrics(chief_metrics))
        assert 1 <= finished < EPOCHS, f"the kill did not land mid-training: {finished} epochs done"
        time.sleep(2)
        if victim == "worker":  # the Job restarts the pod; the chief goes on meanwhile
            procs[victim_index] = start_task(work, logs, victim_index, "second", port)
        else:
            chief_code = procs[0].wait(timeout=300)
            assert chief_code != 0, "the chief finished without its parameter server"
            if victim == "ps":  # the chief lost its server: one line, and an exit code the Job's retries count
                chief_log = tail(logs / "task-0-first.log", 100000)
                assert chief_code == 1 and "the group lost a peer mid-run" in chief_log, chief_log[-3000:]
                assert "Traceback" not in chief_log, chief_log[-3000:]
            chief_failed_sec = time.monotonic() - killed_at
            resumed = len(read_metrics(chief_metrics))
            for i in sorted({victim_index, 0}):
                procs[i] = start_task(work, logs, i, "second", port)
        for i, proc in procs.items():
            label = "second" if i in (victim_index, 0) and victim != "worker" or i == victim_index else "first"
            assert proc.wait(timeout=900) == 0, tail(logs / f"task-{i}-{label}.log")
        recovered_sec = time.monotonic() - killed_at
        chief_log = tail(logs / f"task-0-{'first' if victim == 'worker' else 'second'}.log", 100000)
        if victim != "worker":
            assert f"after epoch {resumed}" in chief_log and f"epochs {resumed + 1}..{EPOCHS}" in chief_log, chief_log
        assert [m["epoch"] for m in read_metrics(chief_metrics)] == list(range(1, EPOCHS + 1))
        stage("aggregator", "--workdir", work, "--expect", WORKERS, "--timeout", 60)
    watcher.assert_clean()
    assert temp_leftovers(work) == []

    report = read_report(work / "final")
    # the steps each worker had started by the end of each epoch: did the restarted worker take any after?
    started = [m["steps_started_by_worker"] for m in read_metrics(chief_metrics) if "steps_started_by_worker" in m]
    rejoined = victim == "worker" and started[-1][WORKERS - 1] > started[finished][WORKERS - 1]
    calm_acc, disturbed_acc = calm["final"]["test_accuracy"], report["final"]["test_accuracy"]
    measure(
        killed=f"{victim} (task {victim_index})",
        epochs=EPOCHS,
        batch=BATCH,
        epochs_done_at_kill=finished,
        undisturbed_accuracy=round(calm_acc, 4),
        recovered_accuracy=round(disturbed_acc, 4),
        steps_scheduled=report["steps_scheduled"],
        steps_retried=report["steps_retried"],
        steps_started_by_worker=report["steps_started_by_worker"],
        started_by_epoch=started,
        **({"restarted_worker_took_steps": rejoined} if victim == "worker" else {}),
        kill_to_done_sec=round(recovered_sec, 1),
        **({"chief_failed_after_sec": round(chief_failed_sec, 1)} if victim == "ps" else {}),
        **({"resumed_after_epoch": resumed} if victim != "worker" else {}),
        watcher=watcher.summary(),
    )
    # One-sided: what a kill must not do is cost accuracy. A run with a worker lost can end
    # above the undisturbed one: the other worker then takes most steps, with fewer stale
    # gradients (measured: +0.3 to +1.2 points in 4 runs; undisturbed runs spread over 0.8).
    assert disturbed_acc >= calm_acc - 0.02, (calm_acc, disturbed_acc)
    assert disturbed_acc > 0.7
    assert report["steps_retried"] >= 0
