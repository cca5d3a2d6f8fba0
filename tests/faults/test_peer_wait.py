"""Start-up races of the connected strategies, with real trainer processes (--peer-wait, peers.py):
a peer that never comes ends the worker with exit code 3 and one line naming it; a peer whose
name resolves only 10 s late is waited for (make test-faults: they break the start-up on purpose).
(A peer that starts 30 s late: tests/faults/test_late_peer.py.)"""

import os
import shlex
import shutil
import subprocess
import threading
import time

import pytest

from stages import BIN, free_port_block, stage

pytestmark = pytest.mark.faults

SOURCE = "sample:digits"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    work = tmp_path_factory.mktemp("peers")
    stage("copier", "--source", SOURCE, "--n-shards", 2, "--workdir", work)
    return work


def trainer_args(work, index, port, *extra):
    return [
        os.path.join(BIN, "disttrain-trainer"),
        "--workdir",
        work,
        "--strategy",
        "multiworker",
        "--workers",
        2,
        "--worker-index",
        index,
        "--epochs",
        1,
        "--batch",
        64,
        "--port",
        port,
        *extra,
    ]


def test_a_peer_that_never_comes_ends_the_worker_with_exit_code_3(data, tmp_path):
    termination = tmp_path / "termination-log"
    termination.write_text("")
    started = time.monotonic()
    result = subprocess.run(
        list(map(str, trainer_args(data, 0, free_port_block(2), "--peer-wait", 8))),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DISTTRAIN_TERMINATION_LOG": str(termination)},
    )
    seconds = time.monotonic() - started
    assert result.returncode == 3, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "gave up after 8 s waiting for worker 1 (127.0.0.1:" in errors[0], result.stderr
    assert "connection refused" in errors[0] and "--peer-wait" in errors[0]
    assert "Traceback" not in result.stderr
    assert termination.read_text() == errors[0]
    assert seconds < 8 + 30, f"{seconds:.0f} s (about 10 s of TensorFlow import + 8 s + a probe)"


def can_private_mount():
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return "needs root and unshare(1)"
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", "mount --bind /etc/hosts /etc/hosts"],
        capture_output=True,
        text=True,
    )
    return None if probe.returncode == 0 else f"cannot bind-mount in a private mount namespace: {probe.stderr.strip()}"


def test_a_peer_whose_name_resolves_10_s_late_is_waited_for(data, tmp_path):
    """Both trainers in a private mount namespace whose /etc/hosts is a file of the test; worker 1's
    name (disttrain-peer-1.test) appears in it 10 s after the start. Without the wait for names,
    TensorFlow creates the strategy anyway and the first collective fails at once
    (measured: "UNAVAILABLE: errors resolving disttrain-peer-1.test")."""
    reason = can_private_mount()
    if reason:
        pytest.skip(reason)
    hosts = tmp_path / "hosts"
    hosts.write_text(open("/etc/hosts").read() + "\n127.0.0.1 disttrain-peer-0.test\n")
    port = free_port_block(2)
    pattern = ("--host-pattern", "disttrain-peer-{index}.test:{index_port}")
    logs = [tmp_path / f"worker-{i}.log" for i in range(2)]
    # one shell in one namespace: the bind mount is seen by both trainers and by nobody else
    run = [
        f"{shlex.join(map(str, trainer_args(data, i, port, *pattern)))} > {shlex.quote(str(logs[i]))} 2>&1 & p{i}=$!"
        for i in range(2)
    ]
    script = (
        f"mount --bind {shlex.quote(str(hosts))} /etc/hosts || exit 1; {run[0]}; {run[1]}; "
        "wait $p0; s0=$?; wait $p1; s1=$?; exit $((s0 | s1))"
    )
    done = threading.Event()

    def publish_late():
        """Worker 1's name appears 12 s after both trainers began to wait for it (after their
        TensorFlow import): long enough for a progress line at 10 s."""
        while not done.is_set() and not all(log.exists() and "joining the cluster" in log.read_text() for log in logs):
            time.sleep(0.2)
        if not done.wait(12):
            with open(hosts, "a") as fh:  # appending keeps the inode the bind mount shows (a rename would not)
                fh.write("127.0.0.1 disttrain-peer-1.test\n")

    publisher = threading.Thread(target=publish_late, daemon=True)
    started = time.monotonic()
    publisher.start()
    try:
        result = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        done.set()
        publisher.join()
    seconds = time.monotonic() - started
    text = [log.read_text() for log in logs]
    assert result.returncode == 0, (
        f"{result.stderr}\n--- worker 0:\n{text[0][-3000:]}\n--- worker 1:\n{text[1][-3000:]}"
    )
    assert seconds > 12
    for log in text:
        assert "waiting for worker 1 (disttrain-peer-1.test: name does not resolve yet)" in log
        assert "done ->" in log
    assert (data / "train" / "worker-00000" / "model.keras").exists()
