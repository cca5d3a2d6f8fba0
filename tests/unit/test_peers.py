"""disttrain_trainer.peers without TensorFlow: whom a task waits for, what it says, when it gives up."""

import io
import json
import signal
import socket
import subprocess
import sys
import time

import pytest

from disttrain_trainer import peers
from disttrain_trainer.cluster import build_ps_tf_config, build_tf_config
from disttrain_trainer.peers import Deadline, PeerTimeout, Task


class Clock:
    """A fake monotonic clock that `sleep` moves."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_tasks_of_a_multiworker_config_mark_this_task():
    config = build_tf_config(3, 1, "{job}-{index}.{service}:{port}", "r-trainer", "r-trainer-workers", 12345)
    tasks = peers.tasks_of(json.dumps(config))
    assert tasks == [
        Task("worker 0", "r-trainer-0.r-trainer-workers", 12345, False),
        Task("worker 1", "r-trainer-1.r-trainer-workers", 12345, True),
        Task("worker 2", "r-trainer-2.r-trainer-workers", 12345, False),
    ]


def test_tasks_of_a_parameter_server_config_carry_their_job_index():
    config = build_ps_tf_config(1, 2, 0, "127.0.0.1:{index_port}", port=2000)
    tasks = peers.tasks_of(config)
    assert [(t.label, t.port, t.own) for t in tasks] == [
        ("chief 0 (task 0)", 2000, True),
        ("ps 0 (task 1)", 2001, False),
        ("worker 0 (task 2)", 2002, False),
        ("worker 1 (task 3)", 2003, False),
    ]


def test_reasons_are_a_few_words():
    assert peers.reason(socket.gaierror(-2, "Name or service not known")) == "name does not resolve yet"
    assert peers.reason(ConnectionRefusedError(111, "Connection refused")) == "connection refused"
    assert peers.reason(socket.timeout("timed out")) == "no answer within 2 s"
    assert peers.reason(OSError(113, "No route to host")) == "No route to host"


def test_lines_name_the_missing_tasks_and_the_deadline():
    w1 = Task("worker 1", "127.0.0.1", 12346, False)
    line = peers.waiting_line("worker 0/2", [(w1, "127.0.0.1:12346", "connection refused")], 30.4, 600)
    assert line == "worker 0/2: waiting for worker 1 (127.0.0.1:12346: connection refused), 30 s of 600 s"
    assert (
        peers.waiting_line("worker 0/2", [], 12, 0)
        == "worker 0/2: waiting for the group to form (every peer accepts connections), 12 s (no deadline)"
    )
    message = peers.timeout_message("worker 0/2", [(w1, "r-1.svc", "name does not resolve yet")], 8)
    assert message.startswith(
        "worker 0/2: gave up after 8 s waiting for worker 1 (r-1.svc: name does not resolve yet); "
    )
    assert "--peer-wait" in message and "\n" not in message


def test_a_line_names_at_most_five_tasks():
    missing = [(Task(f"worker {i}", "h", 1, False), "h:1", "connection refused") for i in range(1, 9)]
    text = peers.missing_text(missing)
    assert "worker 5 " in text and "worker 6 " not in text and text.endswith(" and 3 more")


def test_deadline_zero_never_passes():
    clock = Clock()
    deadline = Deadline(0, clock)
    clock.sleep(10**6)
    assert not deadline.passed() and deadline.elapsed() == 10**6
    assert Deadline(5, clock).passed() is False


def resolver(resolves_at, clock, lookups):
    """A resolve() in which each host resolves from the time resolves_at[host] on."""

    def resolve(task):
        lookups.append(task.host)
        if clock() < resolves_at.get(task.host, 0):
            raise socket.gaierror(-2, "Name or service not known")

    return resolve


def test_wait_for_names_waits_for_the_late_name_and_says_so_every_10_s():
    clock, lookups, log = Clock(), [], io.StringIO()
    tasks = [Task("worker 0", "a", 1, True), Task("worker 1", "b", 1, False)]
    resolve = resolver({"b": clock() + 25}, clock, lookups)
    peers.wait_for_names("worker 0/2", tasks, Deadline(600, clock), resolve, clock.sleep, log)
    assert log.getvalue().splitlines() == [
        "worker 0/2: waiting for worker 1 (b: name does not resolve yet), 10 s of 600 s",
        "worker 0/2: waiting for worker 1 (b: name does not resolve yet), 20 s of 600 s",
    ]
    assert lookups.count("a") == 1  # a name that resolved is not looked up again
    assert clock() - 100 == pytest.approx(26)


def test_wait_for_names_gives_up_at_the_deadline_naming_the_task():
    clock = Clock()
    tasks = [Task("worker 0", "a", 1, True), Task("worker 1", "b", 1, False)]
    resolve = resolver({"b": float("inf")}, clock, [])
    with pytest.raises(
        PeerTimeout, match=r"gave up after 8 s waiting for worker 1 \(b: name does not resolve yet\)"
    ) as err:
        peers.wait_for_names("worker 0/2", tasks, Deadline(8, clock), resolve, clock.sleep, io.StringIO())
    assert err.value.exit_code == 3
    assert 8 <= clock() - 100 <= 8 + peers.RESOLVE_EVERY


def test_watchdog_reports_then_ends_the_parent_at_the_deadline(monkeypatch, tmp_path):
    clock = Clock()
    monkeypatch.setattr(peers.time, "sleep", clock.sleep)
    termination = tmp_path / "termination-log"
    termination.write_text("")
    monkeypatch.setenv("DISTTRAIN_TERMINATION_LOG", str(termination))
    w1 = Task("worker 1", "127.0.0.1", 12346, False)

    def refused(task):
        raise ConnectionRefusedError(111, "Connection refused")

    log, err, ended = io.StringIO(), io.StringIO(), []
    peers.watchdog(
        1,
        "worker 0/2",
        [w1],
        Deadline(25, clock),
        refused,
        log,
        err,
        lambda: ended.append(clock() - 100),
        alive=lambda: True,
    )
    assert log.getvalue().splitlines() == [
        "worker 0/2: waiting for worker 1 (127.0.0.1:12346: connection refused), 10 s of 25 s",
        "worker 0/2: waiting for worker 1 (127.0.0.1:12346: connection refused), 20 s of 25 s",
    ]
    assert err.getvalue().startswith(
        "error: worker 0/2: gave up after 25 s waiting for worker 1 (127.0.0.1:12346: connection refused)"
    )
    assert ended == [25]
    assert termination.read_text() == err.getvalue().strip()


def test_watchdog_stops_quietly_once_the_parent_is_gone(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(peers.time, "sleep", clock.sleep)
    log, ended = io.StringIO(), []
    peers.watchdog(
        1, "worker 0/2", [], Deadline(25, clock), None, log, log, lambda: ended.append(1), alive=lambda: clock() < 103
    )
    assert log.getvalue() == "" and ended == []


def test_watch_ends_a_stuck_process_with_exit_code_3():
    """The real watchdog process and the SIGQUIT -> _exit(3) handler, around a main thread that
    blocks in C (as TensorFlow does, GIL held: a Python thread would never run)."""
    code = (
        "import ctypes, sys; from disttrain_trainer import peers\n"
        "tasks = [peers.Task('worker 0', '127.0.0.1', 1, True), peers.Task('worker 1', '127.0.0.1', 1, False)]\n"
        "with peers.watch('worker 0/2', tasks, peers.Deadline(2)):\n"
        "    ctypes.CDLL(None).sleep(60)\n"
        "print('not reached')\n"
    )
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert result.returncode == peers.EXIT_CODE == 3, result.stderr
    assert time.monotonic() - started < 10
    assert result.stderr.startswith(
        "error: worker 0/2: gave up after 2 s waiting for worker 1 (127.0.0.1:1: connection refused)"
    )
    assert "Traceback" not in result.stderr and "not reached" not in result.stdout


def test_watch_leaves_a_process_that_got_through_as_it_was(tmp_path):
    """Once the block is done the watchdog is gone and SIGQUIT does what it did before (here: the
    default, set first: a process started in the background by a non-interactive shell, as CI
    may start `make test`, inherits SIGQUIT ignored)."""
    code = (
        "import os, resource, signal, time; from disttrain_trainer import peers\n"
        "signal.signal(signal.SIGQUIT, signal.SIG_DFL)\n"
        "resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
        "with peers.watch('worker 0/1', [], peers.Deadline(1)) as w:\n"
        "    pass\n"
        "assert w.child.poll() is not None\n"
        "time.sleep(2)\n"
        "print('through', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGQUIT)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert (result.returncode, result.stdout.strip()) == (-signal.SIGQUIT, "through"), result.stderr


# TensorFlow's messages when the other worker of two was killed (kill -9) mid-run: the survivor's collective
MULTIWORKER_LOST = """Graph execution error:

Detected at node allgather/CollectiveGatherV2 defined at (most recent call last):
  File "/usr/local/bin/disttrain-trainer", line 6, in <module>

Collective ops is aborted by: recvmsg:Connection reset by peer
Additional GRPC error information from remote target /job:worker/replica:0/task:1 while calling /tensorflow.WorkerService/RecvBuf:
:UNKNOWN:Error received from peer  {grpc_message:"recvmsg:Connection reset by peer", grpc_status:14}
The error could be from a previous operation. Restart your program to reset.
	 [[{{node allgather/CollectiveGatherV2}}]] [Op:__inference_one_step_965]"""


@pytest.mark.parametrize(
    "message, expected",
    [
        (MULTIWORKER_LOST, "recvmsg:Connection reset by peer"),
        (
            "Collective ops is aborted by: failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:38772: "
            "Failed to connect to remote host: Connection refused\nAdditional GRPC error information",
            "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:38772: Failed to connect to remote "
            "host: Connection refused",
        ),
        ("\n  Socket closed\nmore", "Socket closed"),
        ("", "no message"),
    ],
)
def test_a_lost_groups_reason_is_the_cause_tensorflow_names(message, expected):
    assert peers.group_lost_reason(message) == expected
