"""Waiting for the other tasks of a connected strategy, with a deadline and a word about whom.

A worker can start before its peers exist: on Kubernetes a peer's name
(`<job>-<i>.<service>`) resolves only once its pod has an IP, and a pod can stay Pending for
minutes while a node scales up. Left to itself TensorFlow handles both badly:
  - a peer's name that does not resolve yet does not stop MultiWorkerMirroredStrategy from
    being created (the tasks only register with worker 0), but the first collective then
    fails at once ("UNAVAILABLE: errors resolving <name>"), and the worker exits;
  - a peer that never registers makes the strategy's creation block inside TensorFlow's C++,
    silently, for 20 minutes and more, deaf to SIGTERM.
So the trainer, before it creates the strategy, (1) waits until every task's name resolves
(`wait_for_names`), then (2) creates it under a watchdog process (`watch`) that says every
PROGRESS_EVERY seconds which peers do not accept connections yet, and ends the trainer
(exit code 3, as a stage timeout) once the one deadline of both phases has passed.
It does not wait for the peers' ports before creating the strategy: each task's server only
starts with its strategy, so tasks waiting for each other's ports would wait for ever.

No TensorFlow here: the pure parts (`tasks_of`, `reason`, `waiting_line`, `timeout_message`,
`Deadline`) and the two loops (resolving and probing injectable) are unit-tested on their own.
"""

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from disttrain_contract import StageTimeout
from disttrain_contract.errors import write_termination_message

PROGRESS_EVERY = 10.0  # seconds between two progress lines of one wait
RESOLVE_EVERY = 2.0  # seconds between two lookups of a name that does not resolve yet
CONNECT_TIMEOUT = 2.0  # a probe's TCP connect
NAMED = 5  # a line names at most this many tasks (a group can have hundreds)
EXIT_CODE = StageTimeout.exit_code  # 3: gave up waiting, like a stage whose input never came
HINT = "did it start? (--peer-wait; chart: trainer.peerWaitSeconds)"


class PeerTimeout(StageTimeout):
    """The other tasks did not come within --peer-wait seconds."""


class Task(NamedTuple):
    label: str  # "worker 1", "ps 0 (task 1)": as the trainer's own lines name tasks
    host: str
    port: int
    own: bool  # this process


def tasks_of(tf_config):
    """Every task of a TF_CONFIG (text or dict), in cluster order: the chief, the parameter
    servers, then the workers, as the Indexed Job numbers them (cluster.ps_task)."""
    config = json.loads(tf_config) if isinstance(tf_config, str) else tf_config
    cluster, me = config["cluster"], config["task"]
    ps_style = "chief" in cluster  # parameter-server training labels tasks with their Job index too
    tasks, job_index = [], 0
    for role in ("chief", "ps", "worker"):
        for i, address in enumerate(cluster.get(role, [])):
            host, _, port = address.rpartition(":")
            label = f"{role} {i} (task {job_index})" if ps_style else f"{role} {i}"
            tasks.append(Task(label, host.strip("[]"), int(port), (role, i) == (me["type"], int(me["index"]))))
            job_index += 1
    return tasks


def reason(err):
    """Why a name or a port did not answer, in a few words."""
    if isinstance(err, socket.gaierror):
        return "name does not resolve yet"
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if isinstance(err, (socket.timeout, TimeoutError)):
        return f"no answer within {CONNECT_TIMEOUT:g} s"
    return (err.strerror if isinstance(err, OSError) else None) or str(err)


def group_lost_reason(message):
    """What a collective's error message (TensorFlow's UnavailableError or AbortedError when a peer is gone)
    says happened, in one line: the cause after "aborted by:" (a connection reset by the peer, refused by its
    port), or the message's first line."""
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    for line in lines:
        if "aborted by:" in line:
            return line.split("aborted by:", 1)[1].strip()
    return lines[0] if lines else "no message"


def missing_text(missing):
    """`missing`: [(task, where, why)] -> "worker 1 (host:port: connection refused), ..."."""
    if not missing:
        return "the group to form (every peer accepts connections)"
    named = [f"{task.label} ({where}: {why})" for task, where, why in missing[:NAMED]]
    more = len(missing) - NAMED
    return ", ".join(named) + (f" and {more} more" if more > 0 else "")


def waiting_line(tag, missing, elapsed, limit):
    of = f" of {limit:g} s" if limit else " (no deadline)"
    return f"{tag}: waiting for {missing_text(missing)}, {elapsed:.0f} s{of}"


def timeout_message(tag, missing, limit):
    return f"{tag}: gave up after {limit:g} s waiting for {missing_text(missing)}; {HINT}"


class Deadline:
    """The one deadline of both phases; limit 0 = none (wait for ever, still saying for whom)."""

    def __init__(self, limit, clock=time.monotonic):
        self.limit, self.clock, self.start = limit, clock, clock()

    def elapsed(self):
        return self.clock() - self.start

    def passed(self):
        return bool(self.limit) and self.elapsed() >= self.limit


def _resolve(task):
    socket.getaddrinfo(task.host, task.port, type=socket.SOCK_STREAM)


def _connect(task):
    socket.create_connection((task.host, task.port), timeout=CONNECT_TIMEOUT).close()


def _failures(check, tasks, where):
    """[(task, where(task), why)] of the tasks whose check(task) raised; checked in parallel
    (a probe that times out must not hold up the others)."""

    def one(task):
        try:
            check(task)
        except OSError as err:
            return task, where(task), reason(err)
        return None

    if not tasks:
        return []
    with ThreadPoolExecutor(max_workers=min(32, len(tasks))) as pool:
        return [f for f in pool.map(one, tasks) if f]


def wait_for_names(tag, tasks, deadline, resolve=_resolve, sleep=time.sleep, log=None):
    """Phase 1: block until every task's host name resolves (this task's own too: TensorFlow
    dials the addresses of TF_CONFIG, its own included). Prints a waiting line every
    PROGRESS_EVERY seconds; raises PeerTimeout once the deadline has passed."""
    pending, next_line = list(tasks), PROGRESS_EVERY
    while True:
        missing = _failures(resolve, pending, lambda task: task.host)
        if not missing:
            return
        pending = [task for task, _, _ in missing]  # a name that resolved once is not looked up again
        if deadline.passed():
            raise PeerTimeout(timeout_message(tag, missing, deadline.limit))
        if deadline.elapsed() >= next_line:
            print(waiting_line(tag, missing, deadline.elapsed(), deadline.limit), file=log or sys.stdout, flush=True)
            next_line += PROGRESS_EVERY
        sleep(RESOLVE_EVERY)


class watch:
    """Phase 2, around the strategy's creation: `with watch(tag, tasks, deadline): create()`.

    While the block runs, a watchdog process (`python -m disttrain_trainer.peers`, see
    `watchdog`) probes the peers' ports every PROGRESS_EVERY seconds, prints whom this task
    still waits for and, once the deadline has passed, the reason, and ends this process.
    Why a process and not a thread: TensorFlow blocks in C++ holding the GIL (measured: a
    Python thread does not run once MultiWorkerMirroredStrategy() waits), and it ignores
    SIGTERM. Why SIGQUIT: for the block's duration its C-level handler is libc's _exit, so the
    signal ends this process at once with exit status SIGQUIT = 3 = EXIT_CODE, the stage-timeout
    code (SIGKILL would make it 137); Python's own handlers could not run either."""

    def __init__(self, tag, tasks, deadline):
        self.tag, self.tasks, self.deadline = tag, tasks, deadline

    def __enter__(self):
        self.previous = _exit_on_sigquit()
        payload = {
            "parent": os.getpid(),
            "tag": self.tag,
            "limit": self.deadline.limit,
            "elapsed": self.deadline.elapsed(),
            "signal": "SIGKILL" if self.previous is None else "SIGQUIT",
            "peers": [[t.label, t.host, t.port] for t in self.tasks if not t.own],
        }
        # (on stdin: a group of hundreds of tasks would not fit in one argument)
        self.child = subprocess.Popen(
            [sys.executable, "-m", "disttrain_trainer.peers"], stdin=subprocess.PIPE, text=True
        )
        self.child.stdin.write(json.dumps(payload))
        self.child.stdin.close()
        return self

    def __exit__(self, *exc):
        self.child.kill()  # first, so that no SIGQUIT comes once the old handler is back
        self.child.wait()
        _restore_sigquit(self.previous)


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.signal.restype, libc.signal.argtypes = ctypes.c_void_p, [ctypes.c_int, ctypes.c_void_p]
    return libc


def _exit_on_sigquit():
    """Make SIGQUIT call libc's _exit(SIGQUIT); return the previous C handler, None if not done."""
    if signal.SIGQUIT != EXIT_CODE:  # (it is 3 on every Linux; never on a surprise)
        return None
    try:
        libc = _libc()
        previous = libc.signal(signal.SIGQUIT, ctypes.cast(libc._exit, ctypes.c_void_p))
    except (OSError, AttributeError):
        return None
    return None if previous == ctypes.c_void_p(-1).value else (previous or 0)  # SIG_ERR; SIG_DFL is 0


def _restore_sigquit(previous):
    if previous is not None:
        _libc().signal(signal.SIGQUIT, previous)


def watchdog(parent, tag, peers, deadline, probe=_connect, log=None, err=None, end=None, alive=None):
    """The watchdog process's loop (see `watch`); returns once the parent is gone or ended."""
    log, err = log or sys.stdout, err or sys.stderr
    alive = alive or (lambda: os.getppid() == parent)  # the parent died: nothing to watch
    end = end or (lambda: os.kill(parent, signal.SIGKILL))
    while True:
        left = deadline.limit - deadline.elapsed() if deadline.limit else PROGRESS_EVERY
        next_probe = deadline.clock() + max(0.0, min(PROGRESS_EVERY, left))
        while deadline.clock() < next_probe:
            if not alive():
                return
            time.sleep(min(1.0, max(0.0, next_probe - deadline.clock())))
        missing = _failures(probe, peers, lambda task: f"{task.host}:{task.port}")
        if not alive():
            return
        if deadline.passed():
            message = f"error: {timeout_message(tag, missing, deadline.limit)}"
            print(message, file=err, flush=True)
            write_termination_message(message)
            end()
            return
        print(waiting_line(tag, missing, deadline.elapsed(), deadline.limit), file=log, flush=True)


def _watchdog_main():
    job = json.load(sys.stdin)
    parent, kill = job["parent"], getattr(signal, job["signal"])
    deadline = Deadline(job["limit"])
    deadline.start -= job["elapsed"]  # the parent's deadline, not a new one
    peers = [Task(label, host, port, False) for label, host, port in job["peers"]]
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    watchdog(parent, job["tag"], peers, deadline, end=lambda: os.kill(parent, kill))


if __name__ == "__main__":
    _watchdog_main()
