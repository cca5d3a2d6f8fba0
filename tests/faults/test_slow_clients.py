"""Slow clients against the real server with its front: `disttrain-server --front nginx` (real nginx,
real gunicorn with the chart's 1 worker x 8 threads, a real model), on loopback only.

64 connections send a predict request's header a few bytes at a time (a slowloris) while a client
sends :predict requests and a prober asks /healthz and /readyz in turn as the kubelet would (5 s
timeout). Rounds with and without the trickling connections alternate in one server, so the p99 they
are compared on is measured side by side on the same busy machine. Without the front, 8 such connections hold all 8
threads and every request, the probes included, waits until they give up (docs/operations.md)."""

import json
import os
import signal
import socket
import subprocess
import threading
import time

import numpy as np
import pytest

from disttrain_server.front import find_nginx
from server.serving import NEGATIVE, POSITIVE, access_log, http, running_server
from stages import BIN

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(find_nginx() is None, reason="needs nginx (Debian's nginx-light: make front-deps)"),
]

SLOW_CONNECTIONS = 64
HEADER_TIMEOUT = 4  # --header-timeout of the server under test: each trickling connection is cut after it
TRICKLE_EVERY = 0.25  # seconds between the few bytes a trickling connection sends
ROUNDS, ROUND_SEC, ROUND_MAX_REQUESTS = 3, 8, 5000  # per kind of round; the time bounds a round, the count is a cap
PREDICT_CLIENTS = 2
PROBE_EVERY, PROBE_TIMEOUT = 0.5, 5  # the chart's liveness probe times out after 5 s


def trickle(port, stop, stats, count=SLOW_CONNECTIONS):
    """Keep `count` connections open that send a request header byte by byte, a new one for
    each the server closes, until `stop`; one thread, non-blocking sockets. Records in `stats` the most
    open at once and, for each closed by the server, how long it had been open."""
    header = (
        b"POST /v1/models/disttrain:predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + b"".join(b"X-Padding-%d: %s\r\n" % (i, b"x" * 40) for i in range(200))
    )  # never ends: no blank line
    conns = {}  # socket -> (opened at, bytes sent)

    def open_one():
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.setblocking(False)
        conns[s] = (time.monotonic(), 0)

    for _ in range(count):
        open_one()
    while not stop.is_set():
        stats["most_open"] = max(stats["most_open"], len(conns))
        for s, (opened, sent) in list(conns.items()):
            closed = False
            try:
                if s.recv(4096) == b"":  # nginx closes a connection past its header deadline
                    closed = True
            except BlockingIOError:
                pass
            except OSError:
                closed = True
            if not closed:
                try:
                    sent += s.send(header[sent : sent + 3]) if sent < len(header) else 0
                    conns[s] = (opened, sent)
                except BlockingIOError:
                    pass
                except OSError:
                    closed = True
            if closed:
                stats["closed_after"].append(time.monotonic() - opened)
                s.close()
                del conns[s]
                open_one()
        stop.wait(TRICKLE_EVERY)
    for s in conns:
        s.close()


def predict_round(url, seconds):
    """PREDICT_CLIENTS threads send :predict requests for `seconds`: [(latency s, ok, detail)]."""
    results, lock = [], threading.Lock()
    deadline = time.monotonic() + seconds

    def client():
        while time.monotonic() < deadline:
            with lock:
                if len(results) >= ROUND_MAX_REQUESTS:
                    return
            started = time.monotonic()
            try:
                status, body = http("POST", url, {"instances": [POSITIVE, NEGATIVE]}, timeout=30)
                ok, detail = status == 200 and len(body["predictions"]) == 2, status
            except Exception as err:  # a timeout, a reset: counted, not raised
                ok, detail = False, repr(err)
            with lock:
                results.append((time.monotonic() - started, ok, detail))

    threads = [threading.Thread(target=client) for _ in range(PREDICT_CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 60)
    return results


def probe(base, stop, probes, paths=("/healthz",)):
    """Ask each of `paths` in turn, as the kubelet's probes would, until `stop`: [(seconds, status, path)]."""
    turn = 0
    while not stop.is_set():
        path, turn = paths[turn % len(paths)], turn + 1
        started = time.monotonic()
        try:
            status = http("GET", base + path, timeout=PROBE_TIMEOUT)[0]
        except Exception as err:  # a timeout is the failure this test is about
            status = repr(err)
        probes.append((time.monotonic() - started, status, path))
        stop.wait(PROBE_EVERY)


def test_slow_clients_do_not_starve_predictions_or_probes(served, measure):
    with running_server(
        served, "--front", "nginx", "--workers", "1", "--threads", "8", "--header-timeout", HEADER_TIMEOUT
    ) as (base, proc, log):
        port = int(base.rsplit(":", 1)[1])
        url = base + "/v1/models/disttrain:predict"
        predict_round(url, 2)  # warm-up: the model's first calls trace its graph
        probes, probe_stop = [], threading.Event()
        # the liveness and the readiness probe, both answered by the threads the slow clients would hold
        prober = threading.Thread(target=probe, args=(base, probe_stop, probes, ("/healthz", "/readyz")))
        prober.start()
        calm, slowed, stats = [], [], {"most_open": 0, "closed_after": []}
        try:
            for _ in range(ROUNDS):
                calm += predict_round(url, ROUND_SEC)
                stop = threading.Event()
                trickler = threading.Thread(target=trickle, args=(port, stop, stats))
                trickler.start()
                try:
                    time.sleep(1)  # the 64 connections open and trickling before the predictions start
                    slowed += predict_round(url, ROUND_SEC)
                finally:
                    stop.set()
                    trickler.join(timeout=30)
        finally:
            probe_stop.set()
            prober.join(timeout=30)
        assert proc.poll() is None, "the server exited"

    p99_calm, p99_slowed = (float(np.percentile([r[0] for r in rs], 99)) * 1000 for rs in (calm, slowed))
    failed_probes = [p for p in probes if p[1] != 200]
    measure(
        slow_connections=SLOW_CONNECTIONS,
        header_timeout=HEADER_TIMEOUT,
        most_open=stats["most_open"],
        cut_by_header_timeout=len(stats["closed_after"]),
        closed_after_sec=[
            round(x, 1) for x in sorted(stats["closed_after"])[:: max(1, len(stats["closed_after"]) // 8)]
        ],
        calm_requests=len(calm),
        slowed_requests=len(slowed),
        p99_calm_ms=round(p99_calm, 1),
        p99_slowed_ms=round(p99_slowed, 1),
        p50_calm_ms=round(float(np.percentile([r[0] for r in calm], 50)) * 1000, 1),
        p50_slowed_ms=round(float(np.percentile([r[0] for r in slowed], 50)) * 1000, 1),
        probes=len(probes),
        readiness_probes=len([p for p in probes if p[2] == "/readyz"]),
        probe_max_ms=round(max(p[0] for p in probes) * 1000, 1),
        failed_probes=failed_probes[:5],
    )
    assert stats["most_open"] == SLOW_CONNECTIONS
    assert not [r for r in calm + slowed if not r[1]], json.dumps([r for r in calm + slowed if not r[1]][:5])
    assert len(slowed) >= 50 * ROUNDS, f"only {len(slowed)} predictions answered beside the slow clients"
    assert p99_slowed <= 2 * p99_calm, f"p99 {p99_slowed:.1f} ms beside the slow clients, {p99_calm:.1f} ms without"
    assert not failed_probes, failed_probes[:5]
    # the header deadline holds: every trickling connection the server cut, it cut at --header-timeout
    assert stats["closed_after"], "no trickling connection was cut"
    assert all(HEADER_TIMEOUT - 0.5 <= t <= HEADER_TIMEOUT + 3 for t in stats["closed_after"]), sorted(
        stats["closed_after"]
    )


def test_without_the_front_eight_slow_clients_stall_the_probes(served):
    """The control: gunicorn alone (--front none, 1 worker x 8 threads), 8 of the same trickling
    connections, and /healthz times out; what the test above guards against, and proof that its
    trickling connections and probes see it."""
    with running_server(served, "--front", "none", "--workers", "1", "--threads", "8") as (base, proc, log):
        port = int(base.rsplit(":", 1)[1])
        stop, stats, probes = threading.Event(), {"most_open": 0, "closed_after": []}, []
        trickler = threading.Thread(target=trickle, args=(port, stop, stats), kwargs={"count": 8})
        trickler.start()
        try:
            time.sleep(1)
            probe_stop = threading.Event()
            prober = threading.Thread(target=probe, args=(base, probe_stop, probes))
            prober.start()
            time.sleep(2 * PROBE_TIMEOUT)
            probe_stop.set()
            prober.join(timeout=30)
        finally:
            stop.set()
            trickler.join(timeout=30)
    assert stats["most_open"] == 8 and not stats["closed_after"], stats  # gunicorn cut none of them
    assert probes and all(status != 200 for _, status, _ in probes), probes


def nginx_pids(master):
    """The nginx processes the server `master` started: its child nginx master and that one's workers."""

    def children(pid):
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(p) for p in fh.read().split()]

    def name(pid):
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()

    (front,) = [pid for pid in children(master) if name(pid) == "nginx"]
    return front, children(front)


def test_the_server_stops_when_its_front_dies(served):
    """nginx killed (SIGKILL, its worker left behind) while the server runs: the server stops with
    one line and a non-zero exit, so that the container is restarted, and takes the orphaned
    worker with it; the port is free again."""
    with running_server(served, "--front", "nginx", "--workers", "1", "--threads", "2", ready_path="/healthz") as (
        base,
        proc,
        log,
    ):
        front, workers = nginx_pids(proc.pid)
        assert workers, "nginx has no worker process"
        os.kill(front, signal.SIGKILL)
        proc.wait(timeout=60)
        with open(log, errors="replace") as fh:
            lines = fh.read().splitlines()
        assert proc.returncode == 2, lines[-5:]
        assert lines[-1] == "error: the front (nginx) exited: the server stopped with it"
        assert not any("Traceback" in line for line in lines)
        for pid in workers:
            assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z", (
                f"nginx worker {pid} outlived the server"
            )
        port = int(base.rsplit(":", 1)[1])
        with socket.socket() as s:
            # (SO_REUSEADDR, as nginx and gunicorn bind: it passes the connections left in TIME_WAIT, never a listener)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen()  # raises if anything still listens there


def test_a_taken_port_is_one_line(served, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run(
            [os.path.join(BIN, "disttrain-server"), "--workdir", str(served), "--front", "nginx", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert out.returncode == 2
    assert out.stderr.splitlines()[-1] == (
        f"error: --front nginx: nginx could not start on 127.0.0.1:{port} (exit 1; its message is above)"
    )
    assert "Address already in use" in out.stderr and "Traceback" not in out.stderr


BODY_TIMEOUT = 2  # --body-timeout of the server under test
SLOW_BODIES = 16  # more than its threads: each would hold one if gunicorn read the bodies


def slow_body(port, declared):
    """A connection that sends a :predict header declaring `declared` bytes of body, then a part of it,
    and stops: (socket, when its last byte went)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(
        b"POST /v1/models/disttrain:predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % declared + b'{"instances": ['
    )
    return s, time.monotonic()


def answer_of(s, sent):
    """Everything the server sends on `s` until it closes it, and how long after `sent` it closed it."""
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    return data, time.monotonic() - sent


def test_the_front_cuts_stalled_bodies_and_refuses_oversized_ones(served):
    """Bodies that stop arriving (more connections than gunicorn has threads) are cut at --body-timeout
    by nginx, which closes the connection, while the threads answer others; gunicorn never sees
    them. A body declared past --max-upload-mb (plus the front's margin of 2 MB) is refused by nginx
    before any of it is read, with the server's JSON error."""
    args = (
        "--front",
        "nginx",
        "--workers",
        "1",
        "--threads",
        "2",
        "--body-timeout",
        BODY_TIMEOUT,
        "--max-upload-mb",
        1,
    )
    with running_server(served, *args) as (base, proc, log):
        port = int(base.rsplit(":", 1)[1])
        stalled = [slow_body(port, 4096) for _ in range(SLOW_BODIES)]
        time.sleep(0.5)
        assert http("GET", base + "/healthz", timeout=PROBE_TIMEOUT)[0] == 200
        status, body = http("POST", base + "/v1/models/disttrain:predict", {"instances": [POSITIVE]}, timeout=10)
        assert status == 200 and len(body["predictions"]) == 1
        answers = [answer_of(*conn) for conn in stalled]
        assert all(data == b"" for data, _ in answers), [data[:80] for data, _ in answers]
        assert all(BODY_TIMEOUT - 0.5 <= after <= BODY_TIMEOUT + 3 for _, after in answers), [a for _, a in answers]
        data, _ = answer_of(*slow_body(port, 4 * 1024 * 1024))
        head, _, payload = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 413 "), data[:200]
        assert json.loads(payload) == {"error": "request body too large: the limit is 1 MB"}
        assert proc.poll() is None, "the server exited"
    predicts = [line["status"] for line in access_log(log) if line["path"].endswith(":predict")]
    assert predicts == ["200"], predicts  # gunicorn saw the one whole request only
