"""Helpers shared by tests/server and tests/browser (imported as `server.serving`).

Real models from the real copier and trainer, and a real gunicorn server
started as a separate process, the way it runs in production.
"""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request

from disttrain_contract import Workdir
from disttrain_server import create_app
from stages import free_port_block, run_pipeline, stage, start_stage

POSITIVE = "a wonderful, moving, brilliant film; one of the best of the year"
NEGATIVE = "a dull, boring, awful mess; one of the worst films of the year, a total waste of time"


def sample_model(tmp_path_factory, source, epochs=2):
    """copier (one shard) + trainer worker 0 on a built-in sample; returns the workdir it trained in.

    Trained once per test session, shared by tests/server and tests/browser:
    the cache lives in the session's base temp dir."""
    root = tmp_path_factory.getbasetemp() / "sample-models" / f"{source.replace(':', '-')}-{epochs}-epochs"
    if not os.path.exists(worker_model(root)):
        stage("copier", "--source", source, "--n-shards", 1, "--workdir", root)
        stage("trainer", "--workdir", root, "--worker-index", 0, "--epochs", epochs)
    return root


def faces_model(tmp_path_factory, epochs=30):
    """The faces task through the whole pipeline (copier, one trainer, aggregator): the published
    WORKDIR/final/model.keras, an embedding model of 32x32 face crops. Once per session (~30-60 s)."""
    root = tmp_path_factory.getbasetemp() / "sample-models" / f"faces-{epochs}-epochs"
    model = Workdir(root).final_model
    if not os.path.exists(model):
        stage("copier", "--source", "sample:faces", "--n-shards", 1, "--workdir", root)
        stage("trainer", "--workdir", root, "--worker-index", 0, "--epochs", epochs, "--batch", 32)
        stage("aggregator", "--workdir", root)
    return model


def pipeline_run(tmp_path_factory, workers=2, epochs=12):
    """A whole real run (copier, `workers` average trainers, aggregator) on the digits sample: its workdir,
    with final/report.json, report.png, analysis.png, model.keras and each worker's progress.json.
    Once per session (~30-60 s on 2 busy cores), shared by the dashboard's server and browser tests."""
    root = tmp_path_factory.getbasetemp() / "sample-models" / f"digits-run-{workers}-workers-{epochs}-epochs"
    if not os.path.exists(os.path.join(Workdir(root).final, "_SUCCESS")):
        shutil.rmtree(root, ignore_errors=True)  # (a run interrupted earlier in this session)
        # (at 3 epochs of batch 64 the average was 3.9 points below the best worker: the gate refused it)
        run_pipeline(str(root), "sample:digits", workers, "average", epochs=epochs, batch=32)
    return root


def refused_run(tmp_path_factory, published):
    """A whole real run the quality gate refuses: 3 epochs of batch 64 (held-out accuracy about 0.75)
    compared with `published`, a better model (pipeline_run's, about 0.97): more than --max-regression's
    1 point below it, so the aggregator keeps the model with its report in rejected/<time>/ and exits 4.
    Its workdir; once per session."""
    root = tmp_path_factory.getbasetemp() / "sample-models" / "digits-run-refused"
    if not os.path.isdir(os.path.join(root, "rejected")):
        shutil.rmtree(root, ignore_errors=True)
        try:
            run_pipeline(
                str(root), "sample:digits", 2, "average", epochs=3, batch=64, aggregator_args=("--published", published)
            )
        except AssertionError as err:
            assert "exited 4" in str(err) and "refused to publish" in str(err), err
        else:
            raise AssertionError("the aggregator published the 3-epoch model; it should have refused it")
    return root


def worker_model(root):
    return os.path.join(Workdir(root).worker(0), "model.keras")


def publish(model, workdir, mtime=None):
    """Publish `model` as WORKDIR/final/model.keras the way the aggregator does (new inode, os.replace)."""
    target = Workdir(workdir).final_model
    os.makedirs(os.path.dirname(target), exist_ok=True)
    tmp = target + ".tmp"
    shutil.copyfile(model, tmp)
    if mtime is not None:
        os.utime(tmp, (mtime, mtime))
    os.replace(tmp, target)
    return target


def make_client(model, workdir, **config):
    """A Flask test client serving `model` published into `workdir` (or nothing if model is None)."""
    if model is not None:
        publish(model, workdir)
    app = create_app(
        {
            "MODEL_PATH": Workdir(workdir).final_model,
            "GALLERY_DIR": os.path.join(workdir, "gallery"),
            "TESTING": True,
            **config,
        }
    )
    return app.test_client()


def predict_url(name="disttrain"):
    return f"/v1/models/{name}:predict"


def error_of(response, status):
    """Assert the status and that the body is our JSON error; return its message."""
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.is_json, response.content_type
    body = response.get_json()
    assert set(body) == {"error"} and body["error"]
    return body["error"]


def http(method, url, body=None, timeout=30):
    """(status, parsed JSON or text) without raising on 4xx/5xx."""
    data = json.dumps(body).encode() if body is not None and not isinstance(body, bytes) else body
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, raw, kind = response.status, response.read(), response.headers.get_content_type()
    except urllib.error.HTTPError as err:
        status, raw, kind = err.code, err.read(), err.headers.get_content_type()
    return status, json.loads(raw) if kind == "application/json" else raw.decode()


@contextlib.contextmanager
def running_server(workdir, *args, ready_timeout=120, ready_path="/readyz", env=None):
    """Start `disttrain-server` on a free loopback port, wait for `ready_path` to answer 200 (/readyz: a model
    is loaded; /healthz: the server runs, with or without one), yield its base URL; always stop it.
    `env`: the server's environment (default: this process's)."""
    port = free_port_block(1)
    log = os.path.join(workdir, f"server-{port}.log")
    proc = start_stage("server", "--workdir", workdir, "--host", "127.0.0.1", "--port", port, *args, log=log, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"disttrain-server exited {proc.returncode}:\n{_tail(log)}")
            try:
                if http("GET", base + ready_path, timeout=5)[0] == 200:
                    break
            except OSError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise AssertionError(f"disttrain-server not ready after {ready_timeout}s:\n{_tail(log)}")
            time.sleep(0.5)
        yield base, proc, log
    finally:
        stop(proc)


def worker_pids(master):
    """The gunicorn master's children: its worker processes."""
    with open(f"/proc/{master}/task/{master}/children") as fh:
        return {int(pid) for pid in fh.read().split()}


# gunicorn's access log line (the server's access_log_format ends with the answering worker's pid=<...>)
ACCESS_LINE = re.compile(r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+" (?P<status>\d{3}) .*pid=<(?P<pid>\d+)>')


def access_log(log):
    """The access log's requests, as dicts of method, path, status and pid (strings)."""
    with open(log, errors="replace") as fh:
        return [m.groupdict() for m in map(ACCESS_LINE.search, fh) if m]


def loaded_workers(proc, log, count, timeout=120):
    """The gunicorn master's `count` worker pids, once each has logged its model load (post_worker_init: its
    app built, a gallery seed done, the model loaded). /readyz answers as soon as one worker has; holding
    another (answered_only_by) before then could stop it inside its start-up, under the gallery's lock."""
    deadline = time.monotonic() + timeout
    while True:
        workers = worker_pids(proc.pid)
        with open(log, errors="replace") as fh:
            loaded = {int(pid) for pid in re.findall(r"\[(\d+)\] \[INFO\] loaded ", fh.read())}
        if len(workers) == count and workers <= loaded:
            return workers
        assert time.monotonic() < deadline, (
            f"workers {sorted(workers)}, of which loaded a model: {sorted(loaded & workers)}"
        )
        time.sleep(0.2)


@contextlib.contextmanager
def answered_only_by(pid, workers):
    """Requests made inside go to worker `pid`: the other workers are held (SIGSTOP), so only `pid` calls
    accept() on the shared socket. The kernel hands connections to whichever worker accepts first, so
    without this, one worker can answer every request of a run. Held for seconds, far below gunicorn's
    120 s worker timeout."""
    held = sorted(set(workers) - {pid})
    for other in held:
        os.kill(other, signal.SIGSTOP)
    try:
        yield
    finally:
        for other in held:
            os.kill(other, signal.SIGCONT)


def stop(proc, timeout=30):
    """SIGTERM (gunicorn's graceful shutdown), SIGKILL if it does not exit in time; returns the exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    return proc.returncode


def _tail(path, chars=3000):
    with open(path, errors="replace") as fh:
        return fh.read()[-chars:]
