"""disttrain_trainer.preemption without TensorFlow: what SIGTERM does in each phase of a trainer,
the line it prints when it stops, and which saved state a resume picks."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from disttrain_contract.errors import PREEMPTED_EXIT_CODE
from disttrain_trainer import preemption
from disttrain_trainer.preemption import EXIT_CODE, Notice, Stop, group_step, is_newer


class Exited(Exception):
    def __init__(self, code):
        self.code = code


def leave(code):
    raise Exited(code)


class Clock:
    def __init__(self):
        self.now = 50.0

    def __call__(self):
        return self.now


@pytest.fixture
def notice(tmp_path):
    """A Notice whose exits raise (instead of ending pytest) and whose lines go to a file."""
    err = open(tmp_path / "stderr", "wb+")
    yield Notice("worker 0/2", clock=Clock(), exit=leave, err_fd=err.fileno())
    err.close()


@pytest.fixture
def real_sigterm():
    """The test process's SIGTERM handler is put back afterwards."""
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


def written(tmp_path):
    return (tmp_path / "stderr").read_text()


def test_the_exit_code_is_the_contracts_and_not_another_codes():
    assert EXIT_CODE == PREEMPTED_EXIT_CODE == 75
    assert EXIT_CODE not in (0, 1, 2, 3, 4, 130, 128 + signal.SIGTERM, 128 + signal.SIGKILL)


def test_during_training_sigterm_only_sets_the_flag(notice, real_sigterm):
    notice.install().training()
    notice.steps_done = 96
    os.kill(os.getpid(), signal.SIGTERM)  # a real signal: Python runs the handler before the next bytecode
    assert notice.requested and notice.step_at_signal == 96 and notice.received_at == 50.0
    notice.steps_done = 128
    notice.handle()  # a second SIGTERM changes nothing
    assert notice.step_at_signal == 96


def test_before_training_sigterm_exits_at_once_with_the_code(notice, tmp_path, real_sigterm, monkeypatch):
    log = tmp_path / "termination-log"
    log.write_text("")
    monkeypatch.setenv("DISTTRAIN_TERMINATION_LOG", str(log))
    notice.install()
    with pytest.raises(Exited) as exited:
        os.kill(os.getpid(), signal.SIGTERM)
    assert exited.value.code == EXIT_CODE
    assert (
        "SIGTERM with nothing of its own to save (before training, or a task that only serves); exiting with code 75"
        in written(tmp_path)
    )
    assert "exiting with code 75" in log.read_text()


def test_while_finishing_the_run_finishes_then_exits_0(notice, tmp_path):
    notice.training()
    notice.finishing()
    notice.handle()  # writing the model and the marker: no exit here
    assert notice.requested
    with pytest.raises(Exited) as exited:
        notice.done()  # the marker is written
    assert exited.value.code == 0


def test_after_the_marker_sigterm_exits_0(notice):
    notice.done()
    with pytest.raises(Exited) as exited:
        notice.handle()
    assert exited.value.code == 0


def test_the_stop_line_says_the_step_at_the_signal_and_the_step_saved(notice):
    notice.training()
    notice.steps_done = 130
    notice.handle()
    line = notice.stopped_line(Stop(160, 80, [1.0, 2.0, 3.0]), "/w/checkpoints/preempted/ckpt-160", now=51.5)
    assert line == (
        "worker 0/2: preempted: SIGTERM at step 130, stopped at step 160 (30 steps and 1.5 s later); "
        "saved /w/checkpoints/preempted/ckpt-160; exiting with code 75"
    )
    peer = Notice("worker 1/2", clock=Clock(), exit=leave)
    assert peer.stopped_line(Stop(160, 0, [0, 0, 0]), None) == (
        "worker 1/2: preempted: a peer had SIGTERM: stopped with the group at step 160; nothing to save (the last "
        "checkpoint holds this state); exiting with code 75"
    )


def test_a_preempted_state_is_newer_only_after_the_last_epoch():
    assert preemption.checkpoint_number("/w/checkpoints/preempted/ckpt-160") == 160
    assert is_newer(130, 1, 80)  # saved in epoch 2
    assert not is_newer(80, 1, 80)  # the end of epoch 1 is the epoch's own checkpoint
    assert not is_newer(130, 2, 80)  # epoch 2 ended after it: stale
    assert not is_newer(None, 0, 80)


def test_localsgd_resumes_a_preempted_step_only_if_every_worker_saved_it():
    assert group_step([96, 96], 1, 80) == 96
    assert group_step([96, None], 1, 80) is None  # one worker was killed before it saved
    assert group_step([96, 64], 0, 80) is None  # two different stops: no common state
    assert group_step([64, 64], 1, 80) is None  # older than the epoch every worker saved
    assert group_step([], 0, 80) is None


def test_a_stop_carries_where_the_loop_was():
    stop = Stop(200, 40, (1.5, 30.0, 64.0))
    assert (stop.step, stop.done, stop.sums) == (200, 40, [1.5, 30.0, 64.0])


def test_a_real_process_exits_with_the_code_on_sigterm_before_training(tmp_path):
    """The whole path in a process of its own: the handler, the line on stderr, os._exit(75)."""
    program = textwrap.dedent("""
        import os, signal, sys, time
        from disttrain_trainer.preemption import Notice
        Notice("worker 3/4").install()
        print("ready", flush=True)
        time.sleep(30)
        sys.exit(1)
    """)
    proc = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == EXIT_CODE
    assert (
        err.strip()
        == "worker 3/4: SIGTERM with nothing of its own to save (before training, or a task that only serves); exiting with code 75 (to be started again)"
    )


def test_a_stopped_trainer_leaves_without_the_interpreters_teardown(notice, capsys):
    """(os._exit in the trainer: tearing TensorFlow down took longer than the stop)"""
    print("the stop line", end="")  # still in the buffer
    with pytest.raises(Exited) as exited:
        notice.exit(EXIT_CODE)
    assert exited.value.code == EXIT_CODE
    assert capsys.readouterr().out == "the stop line"
