"""The server under faults: a gunicorn worker killed with SIGKILL while clients are
predicting, and a schemathesis fuzz of the HTTP API the server describes at
/openapi.json. Both against the real `disttrain-server --workers 2` on loopback."""

import json
import math
import os
import re
import signal
import subprocess
import threading
import time

import pytest

from server.serving import NEGATIVE, POSITIVE, access_log, http, running_server, worker_pids
from stages import BIN

pytestmark = pytest.mark.faults

CLIENTS, LOAD_SEC, MAX_REQUESTS = 8, 15, 50_000  # the time bounds the load; the count is a safety cap


@pytest.mark.parametrize("worker_threads", [1, 8], ids=["sync-workers", "8-threads"])
def test_sigkill_of_a_worker_under_load(served, measure, worker_threads):
    with running_server(served, "--workers", "2", "--threads", str(worker_threads)) as (base, proc, log):
        url = base + "/v1/models/disttrain:predict"
        before = worker_pids(proc.pid)
        assert len(before) == 2
        results, lock, stop = [], threading.Lock(), threading.Event()

        def client():
            while not stop.is_set():
                with lock:
                    if len(results) >= MAX_REQUESTS:
                        return
                started = time.monotonic()
                try:
                    status, body = http("POST", url, {"instances": [POSITIVE, NEGATIVE]}, timeout=30)
                    ok, detail = status == 200 and len(body["predictions"]) == 2, status
                except Exception as err:  # a reset connection, a timeout: counted, not raised
                    ok, detail = False, repr(err)
                with lock:
                    results.append((started, time.monotonic(), ok, detail))

        threads = [threading.Thread(target=client, daemon=True) for _ in range(CLIENTS)]
        load_started = time.monotonic()
        for t in threads:
            t.start()
        time.sleep(LOAD_SEC / 3)
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        respawned_at = new_pid = None
        while time.monotonic() - killed_at < 90:
            pids = worker_pids(proc.pid)
            if victim not in pids and len(pids) == 2:
                respawned_at, new_pid = time.monotonic(), (set(pids) - set(before)).pop()
                break
            time.sleep(0.05)
        assert new_pid, "gunicorn did not start a new worker"
        # keep the load on until the new worker has answered for a while (bounded)
        while time.monotonic() - load_started < LOAD_SEC or (
            not any(line["pid"] == str(new_pid) for line in access_log(log)) and time.monotonic() - killed_at < 90
        ):
            time.sleep(0.2)
        time.sleep(2)
        stop.set()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads)

        served_by_new = sum(line["pid"] == str(new_pid) for line in access_log(log))
        failed = [r for r in results if not r[2]]
        failed_after_kill = [r for r in failed if r[0] > killed_at]
        first_new_answer = min((r[1] for r in results if r[0] > respawned_at and r[2]), default=None)
        measure(
            clients=CLIENTS,
            worker_threads=worker_threads,
            requests=len(results),
            failed=len(failed),
            failed_details=[r[3] for r in failed],
            load_sec=round(results[-1][1] - load_started, 1),
            respawn_sec=round(respawned_at - killed_at, 2),
            served_by_new_worker=served_by_new,
            requests_per_sec=round(len(results) / (results[-1][1] - load_started), 1),
        )
        # Only the requests in flight in the killed worker may be lost: a sync worker (--threads 1)
        # has at most one, a threaded worker at most one per thread (and per client).
        assert len(failed) <= min(worker_threads, CLIENTS), failed
        assert failed_after_kill == [], failed_after_kill  # every request sent after the kill was answered
        assert served_by_new > 0 and first_new_answer is not None
        assert http("GET", base + "/readyz")[0] == 200
        assert proc.poll() is None  # the master never went down


# DISTTRAIN_FUZZ_REQUESTS: fewer requests for a quick look (a round still takes about a minute).
FUZZ_REQUESTS, FUZZ_DEADLINE_SEC = int(os.environ.get("DISTTRAIN_FUZZ_REQUESTS", 10_000)), 360
FUZZ_TOKEN = "fuzz-token-7d1e4b0c"


@pytest.mark.parametrize("token", [None, FUZZ_TOKEN], ids=["no-token", "with-token"])
def test_schemathesis_fuzz_of_the_published_openapi(served, tmp_path, measure, token):
    """>= 10,000 generated requests over every operation /openapi.json lists at run time
    (and an extra pass on :predict, where the model runs): no 5xx, no crashed worker.
    Twice: without a token, and with --api-token-file and --token-required-for all, the fuzzer
    sending the right token so that its requests get past the check to the model and the gallery.
    Both send X-Requested-With, which multipart bodies need (security.check_body_type)."""
    cli = os.path.join(BIN, "schemathesis")
    assert os.path.exists(cli), "schemathesis is not installed: pip install -r requirements-dev.txt"
    config = tmp_path / "schemathesis.toml"
    config.write_text('[parameters]\nmodel_name = "disttrain"\n')  # the served name, so requests reach the model
    server_args, headers = ["--workers", "2"], ["-H", "X-Requested-With: schemathesis"]
    if token:
        (tmp_path / "token").write_text(token + "\n")
        server_args += ["--api-token-file", str(tmp_path / "token"), "--token-required-for", "all"]
        headers += ["-H", f"Authorization: Bearer {token}"]
    with running_server(served, *server_args) as (base, proc, log):
        workers_before = worker_pids(proc.pid)
        operations = sorted(
            f"{m.upper()} {p}" for p, ops in http("GET", base + "/openapi.json")[1]["paths"].items() for m in ops
        )
        started, passes, rate = time.monotonic(), [], None  # rate: requests per second in the last round
        # Two schemathesis processes at a time (one worker thread each: its threaded mode trips a
        # CPython 3.11 ast bug inside Hypothesis), each bounded by --max-time, until enough requests.
        # After the first round, a round lasts what the requests still missing need at the last round's
        # rate, with a margin (10 to 30 s): a fixed 30 s round overshot by about 4,000 requests.
        while (sent := len(access_log(log))) < FUZZ_REQUESTS and time.monotonic() - started < FUZZ_DEADLINE_SEC:
            if not passes:
                rounds = [("all", 60, []), ("predict", 60, ["--include-path-regex", r":predict$"])]
            else:
                seconds = min(30, max(10, math.ceil(1.25 * (FUZZ_REQUESTS - sent) / rate))) if rate else 30
                rounds = [("all", seconds, [])] * 2
            round_started = time.monotonic()
            running = []
            for name, seconds, extra in rounds:
                seed = 1000 + len(passes) + len(running)
                report = tmp_path / f"pass-{seed}.json"
                running.append(
                    (
                        name,
                        seed,
                        report,
                        seconds,
                        subprocess.Popen(
                            [
                                cli,
                                "--config-file",
                                str(config),
                                "run",
                                base + "/openapi.json",
                                *extra,
                                *headers,
                                "--checks",
                                "not_a_server_error",
                                "--max-time",
                                str(seconds),
                                "--workers",
                                "1",
                                "--no-shrink",
                                "--seed",
                                str(seed),
                                "--request-timeout",
                                "30",
                                "--report",
                                "json",
                                "--report-json-path",
                                str(report),
                            ],
                            stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT,
                            text=True,
                        ),
                    )
                )
            outputs = [fuzzer.communicate(timeout=seconds + 180)[0] for _, _, _, seconds, fuzzer in running]
            for (name, seed, report, seconds, fuzzer), output in zip(running, outputs):
                summary = json.loads(report.read_text())
                passes.append(
                    {
                        "pass": name,
                        "seed": seed,
                        "seconds": seconds,
                        "exit": fuzzer.returncode,
                        "test_cases": summary["test_cases"],
                        "failures": summary["failures"],
                        "errors": summary["errors"],
                    }
                )
                assert fuzzer.returncode == 0, output[-6000:]
            rate = (len(access_log(log)) - sent) / (time.monotonic() - round_started)
        lines = access_log(log)
        assert http("GET", base + "/readyz")[0] == 200
        workers_after = worker_pids(proc.pid)
    with open(log, errors="replace") as fh:
        server_log = fh.read()
    by_status = {}
    for line in lines:
        by_status[line["status"]] = by_status.get(line["status"], 0) + 1
    templates = sorted({op.split(" ", 1)[1] for op in operations}, key=len, reverse=True)
    by_operation = {}
    for line in lines:
        key = f"{line['method']} {path_template(line['path'], templates)}"
        by_operation[key] = by_operation.get(key, 0) + 1
    measure(
        requests=len(lines),
        seconds=round(time.monotonic() - started, 1),
        statuses=dict(sorted(by_status.items())),
        operations_in_spec=operations,
        requests_by_operation=dict(sorted(by_operation.items())),
        passes=passes,
    )
    assert len(lines) >= FUZZ_REQUESTS, f"only {len(lines)} requests in {FUZZ_DEADLINE_SEC}s"
    assert [line for line in lines if line["status"].startswith("5")] == []
    assert all(p["failures"] == [] and p["errors"] == [] for p in passes), passes
    # no worker crashed or was restarted, and nothing raised inside the app
    assert workers_after == workers_before
    assert "Traceback" not in server_log and "WORKER TIMEOUT" not in server_log
    if token:
        assert by_status.get("401", 0) == 0, (
            "the fuzzer's token was refused"
        )  # every request reached the checks after it
        assert token not in server_log  # never logged


def path_template(path, templates):
    """/v1/models/disttrain:predict -> /v1/models/{model_name}:predict (the spec's template it matches)."""
    path = path.split("?", 1)[0]
    for template in templates:
        if re.fullmatch(re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(template)), path):
            return template
    return "(not in the spec)"
