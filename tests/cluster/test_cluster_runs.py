"""`make test-cluster`: the chart's rendered release, run with the real images as a cluster runs it.

Skipped unless DISTTRAIN_TEST_CLUSTER=1 (docker/test-cluster.sh sets it after building the images).
Each run of cluster_runs.RUNS goes helm template -> cluster_plan.translate (no unknown field) ->
cluster_runtime.Cluster (Jobs, Deployment, Services, init containers, policies) -> a served model
answering :predict through the published Service port -> `helm test`.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
import uuid

import numpy as np
import pytest

yaml = pytest.importorskip("yaml")

from chartlib import CHART, ROOT, helm  # noqa: E402

pytestmark = pytest.mark.skipif(
    os.environ.get("DISTTRAIN_TEST_CLUSTER") != "1", reason="cluster runs: make test-cluster (sets DISTTRAIN_TEST_CLUSTER=1)"
)

import cluster_plan  # noqa: E402
import cluster_runs  # noqa: E402
from cluster_runs import BY_NAME, KUBE_VERSION, NAMESPACE, RESULTS, RUNS  # noqa: E402

TAG = os.environ.get("DISTTRAIN_IMAGE_TAG", "latest")
RELEASE = "dt"
SERVER = f"{RELEASE}-disttrain-server"
PREFIX = f"dtc-{uuid.uuid4().hex[:6]}"


def job_name(stage):
    return f"{RELEASE}-disttrain-{stage}-r1"


def render(values_files, sets=()):
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION, "--set", f"image.tag={TAG}"]
    for f in values_files:
        args += ["-f", str(f)]
    for s in sets:
        args += ["--set", s]
    return [d for d in yaml.safe_load_all(helm(*args).stdout) if d]


def merged_values(values_files):
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def merge(a, b):
        for k, v in (b or {}).items():
            if isinstance(v, dict) and isinstance(a.get(k), dict):
                merge(a[k], v)
            else:
                a[k] = v

    for f in values_files:
        merge(values, yaml.safe_load(f.read_text()))
    return values


@pytest.fixture(scope="module", autouse=True)
def docker_ready():
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as err:  # noqa: BLE001 - any failure means no usable daemon
        pytest.fail(f"no docker daemon ({err}): run docker/ensure-docker.sh")
    for stage in ("copier", "trainer", "aggregator", "server"):
        try:
            client.images.get(f"disttrain-{stage}:{TAG}")
        except docker.errors.ImageNotFound:
            pytest.fail(f"image disttrain-{stage}:{TAG} is not built (make images)")
    yield
    from cluster_runtime import remove_everything

    remove_everything(client, PREFIX)


def cluster(release, tmp_path, name, **kwargs):
    from cluster_runtime import Cluster

    return Cluster(release, tmp_path / "cluster", f"{PREFIX}-{name}", **kwargs)


# ----------------------------------------------------------------------------- the runs


def post(url, body, timeout=60):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as r:
        return json.load(r)


def predict_test_split(base, workdir, task):
    """Send held-out examples to :predict through the Service; (accuracy or None, predictions)."""
    x = np.load(workdir / "data" / "test.x.npy", allow_pickle=False)[:40]
    y = np.load(workdir / "data" / "test.y.npy", allow_pickle=False)[:40]
    predictions = np.array(post(f"{base}/v1/models/disttrain:predict", {"instances": x.tolist()})["predictions"])
    assert len(predictions) == len(x)
    if task == "faces":
        return None, predictions
    return float((predictions.argmax(axis=1) == y).mean()), predictions


def kill_when(cluster, kill, record):
    """Follow the container's log; SIGKILL it once a line matches (the fault a node or OOM kill gives)."""
    job = job_name(kill.job)
    pattern = re.compile(kill.after_line)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        pods = cluster.job_pods(job, kill.index)
        if pods and kill.container in pods[0].containers:
            break
        time.sleep(0.2)
    else:
        record["error"] = f"no {kill.container} container of {job} index {kill.index} started"
        return
    pod = pods[0]
    container = pod.containers[kill.container]
    for line in container.logs(stream=True, follow=True):
        line = line.decode(errors="replace")
        if pattern.search(line):
            pod.kill(kill.container)
            record.update(at=time.monotonic(), line=line.strip(), pod=pod.name)
            cluster.event(f"test: SIGKILL {pod.name}/{kill.container} after {line.strip()!r}")
            return
    record["error"] = f"{pod.name}/{kill.container} ended before a line matched {kill.after_line!r}"


def pipeline_accuracy(values, tmp_path_factory):
    """`make pipeline` with the same values (the same programs, no containers): its final accuracy."""
    task = {"sample:digits": "digits", "sample:faces": "faces", "sample:movie-reviews": "movie-reviews"}[values["data"]["source"]]
    key = (task, values["workers"], values["epochs"], values["batch"], values["strategy"], values["seed"])
    if key in PIPELINES:
        return PIPELINES[key]
    workdir = tmp_path_factory.mktemp("pipeline")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, TASK=task, SOURCE=values["data"]["source"], WORKERS=str(values["workers"]), EPOCHS=str(values["epochs"]),
               BATCH=str(values["batch"]), STRATEGY=values["strategy"], SEED=str(values["seed"]), WORKDIR=str(workdir),
               SERVE="0", BIN=str(ROOT / ".venv" / "bin"), TRAINER_PORT=str(port))
    out = subprocess.run(["bash", str(ROOT / "scripts" / "run-local.sh")], env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, f"make pipeline failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    PIPELINES[key] = json.loads((workdir / "final" / "report.json").read_text())["final"]["test_accuracy"]
    return PIPELINES[key]


PIPELINES = {}


def execute(run, tmp_path_factory):
    """Run one release to a served model (once per session; the kill run reuses the undisturbed one)."""
    if run.name in RESULTS:
        return RESULTS[run.name]
    tmp = tmp_path_factory.mktemp(run.name)
    docs = render(run.values_files)
    release = cluster_plan.translate(docs, namespace=NAMESPACE)
    values = merged_values(run.values_files)
    result = {"strategy": values["strategy"], "noops": sorted({f"{w.split('/')[0]} {f}" for w, f, _ in release.noops})}
    started = time.monotonic()
    with cluster(release, tmp, run.name) as c:
        killed = {}
        c.start()
        if run.kill:
            killer = threading.Thread(target=kill_when, args=(c, run.kill, killed), daemon=True)
            killer.start()
        try:
            for stage in ("copier", "trainer", "aggregator"):
                status = c.wait_job(job_name(stage), 900)
                assert status.state == "Complete", f"{job_name(stage)}: {status.state} {status.reason}\n{c.describe()}"
            result["jobs_done_s"] = time.monotonic() - started
            c.wait_ready(SERVER, 300)
            result["served_s"] = time.monotonic() - started
            base = c.service_url(SERVER)
            workdir = tmp / "cluster" / "claims" / f"{RELEASE}-disttrain-workdir" / "run-1"
            report = json.loads((workdir / "final" / "report.json").read_text())
            result["accuracy"] = report["final"]["test_accuracy"]
            result["predict_accuracy"], result["predictions"] = predict_test_split(base, workdir, report.get("task", ""))
            result["task"] = json.loads((workdir / "data" / "manifest.json").read_text())["task"]
            if run.helm_test:
                result["helm_test"] = [(pod.name, ok, logs) for pod, ok, logs in c.helm_test(timeout=300)]
            result["trainer"] = c.jobs[job_name("trainer")].status
            result["trainer_logs"] = {p.name: p.logs("trainer") for p in c.job_pods(job_name("trainer"))}
            result["killed"] = killed
            result["events"] = list(c.events)
        except BaseException:
            print(c.describe())
            raise
    result["total_s"] = time.monotonic() - started
    if run.pipeline_tolerance is not None:
        result["pipeline_accuracy"] = pipeline_accuracy(values, tmp_path_factory)
    RESULTS[run.name] = result
    return result


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_release_runs_to_a_served_model(run, tmp_path_factory):
    result = execute(run, tmp_path_factory)
    assert result["accuracy"] >= run.min_accuracy, f"final held-out accuracy {result['accuracy']:.4f} < {run.min_accuracy}"
    if result["task"] == "faces":
        norms = np.linalg.norm(result["predictions"], axis=1)
        assert np.allclose(norms, 1.0, atol=1e-3), f"faces :predict should answer unit embeddings, norms {norms[:5]}"
    else:
        assert result["predict_accuracy"] >= run.min_accuracy, f":predict through the Service: accuracy {result['predict_accuracy']:.3f}"
        assert np.allclose(result["predictions"].sum(axis=1), 1.0, atol=1e-3)
    if run.helm_test:
        for name, ok, logs in result["helm_test"]:
            assert ok, f"helm test pod {name} failed:\n{logs[-3000:]}"
            assert "OK" in logs
    if run.pipeline_tolerance is not None:
        gap = abs(result["accuracy"] - result["pipeline_accuracy"])
        assert gap <= run.pipeline_tolerance, (
            f"accuracy {result['accuracy']:.4f} vs make pipeline {result['pipeline_accuracy']:.4f} with the same values")
    if run.kill:
        check_killed_run(run, result, tmp_path_factory)


def check_killed_run(run, result, tmp_path_factory):
    killed = result["killed"]
    assert "error" not in killed, killed.get("error")
    assert killed, "the kill never happened"
    status = result["trainer"]
    assert status.failures.get(run.kill.index, 0) >= 1, f"index {run.kill.index} was never counted as failed: {status.failures}"
    assert status.state == "Complete"
    index_pods = [p.name for p in status.pods if p.labels.get("batch.kubernetes.io/job-completion-index") == str(run.kill.index)]
    assert len(index_pods) >= 2 and index_pods[0] == killed["pod"], f"index {run.kill.index} was not replaced: {index_pods}"
    resumed = [name for name, log in result["trainer_logs"].items() if re.search(r"resumed from .* after epoch [1-9]", log)]
    assert resumed, "no replacement pod resumed from the chief's checkpoint; logs:\n" + "\n".join(
        f"--- {n}\n{log[-1500:]}" for n, log in result["trainer_logs"].items())
    undisturbed = execute(BY_NAME[run.undisturbed], tmp_path_factory)
    gap = abs(result["accuracy"] - undisturbed["accuracy"])
    result["note"] = (f"killed {killed['pod']} after {killed['line'][:40]!r}; resumed: {', '.join(resumed)}; "
                      f"undisturbed {undisturbed['accuracy']:.4f}")
    assert gap <= run.undisturbed_tolerance, (
        f"after the kill: accuracy {result['accuracy']:.4f} vs {undisturbed['accuracy']:.4f} undisturbed")
