"""`make test-cluster`: the chart's rendered release, run with the real images as a cluster runs it.

Skipped unless DISTTRAIN_TEST_CLUSTER=1 (docker/test-images.sh cluster sets it after building the images).
Each run of cluster_runs.RUNS goes helm template -> cluster_plan.translate (no unknown field) ->
cluster_runtime.Cluster (Jobs, Deployment, Services, init containers, policies) -> a served model
answering :predict through the published Service port -> `helm test`.
"""

import csv
import json
import os
import pathlib
import re
import socket
import subprocess
import threading
import time
import urllib.request
import uuid
import zipfile

import numpy as np
import pytest

yaml = pytest.importorskip("yaml")

import chartlib  # noqa: E402
from chartlib import CHART, ROOT, merged_values  # noqa: E402

pytestmark = pytest.mark.skipif(
    os.environ.get("DISTTRAIN_TEST_CLUSTER") != "1",
    reason="cluster runs: make test-cluster (sets DISTTRAIN_TEST_CLUSTER=1)",
)

import cluster_plan  # noqa: E402
import cluster_runs  # noqa: E402
from cluster_runs import BY_NAME, KUBE_VERSION, NAMESPACE, RESULTS, RUNS  # noqa: E402
from stages import read_report  # noqa: E402

TAG = os.environ.get("DISTTRAIN_IMAGE_TAG", "latest")
RELEASE = "dt"
SERVER = f"{RELEASE}-disttrain-server"
PREFIX = f"dtc-{uuid.uuid4().hex[:6]}"


def job_name(stage):
    return f"{RELEASE}-disttrain-{stage}-r1"


def render(values_files, sets=()):
    """The release `helm template` makes of values files (and --set values) at the images' tag."""
    return chartlib.render(
        None,
        sets=(f"image.tag={TAG}", *sets),
        kube_version=KUBE_VERSION,
        extra=tuple(arg for path in values_files for arg in ("-f", str(path))),
    )


@pytest.fixture(scope="module", autouse=True)
def docker_ready():
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as err:  # noqa: BLE001 - any failure means no usable daemon
        pytest.fail(f"no docker daemon ({err}): run docker/ensure-docker.sh")
    for stage in ("copier", "trainer", "sweep", "aggregator", "server"):
        try:
            client.images.get(f"disttrain-{stage}:{TAG}")
        except docker.errors.ImageNotFound:
            pytest.fail(f"image disttrain-{stage}:{TAG} is not built (make images)")
    if any(run.object_store for run in RUNS):
        import cluster_objectstore

        try:
            client.images.get(cluster_objectstore.IMAGE)
        except docker.errors.ImageNotFound:
            pytest.fail(
                f"image {cluster_objectstore.IMAGE} is not built (docker/build-seaweedfs-image.sh; make test-cluster builds it)"
            )
    yield
    from cluster_runtime import remove_everything

    remove_everything(client, PREFIX)


def node_runtimes():
    import docker

    return tuple(docker.from_env().info()["Runtimes"])


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
    task = {"sample:digits": "digits", "sample:faces": "faces", "sample:movie-reviews": "movie-reviews"}[
        values["data"]["source"]
    ]
    key = (
        task,
        values["workers"],
        values["epochs"],
        values["batch"],
        values["strategy"],
        values["seed"],
        values.get("syncEvery"),
        values.get("parameterServers"),
    )
    if key in PIPELINES:
        return PIPELINES[key]
    workdir = tmp_path_factory.mktemp("pipeline")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(
        os.environ,
        TASK=task,
        SOURCE=values["data"]["source"],
        WORKERS=str(values["workers"]),
        EPOCHS=str(values["epochs"]),
        BATCH=str(values["batch"]),
        STRATEGY=values["strategy"],
        SYNC_EVERY=str(values.get("syncEvery") or ""),
        PS=str(values.get("parameterServers") or 1),
        SEED=str(values["seed"]),
        WORKDIR=str(workdir),
        SERVE="0",
        BIN=str(ROOT / ".venv" / "bin"),
        TRAINER_PORT=str(port),
    )
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "run-local.sh")], env=env, capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, f"make pipeline failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    PIPELINES[key] = read_report(workdir / "final")["final"]["test_accuracy"]
    return PIPELINES[key]


PIPELINES = {}


def breast_cancer_table(path):
    """A user's table: scikit-learn's breast-cancer data as a CSV with 30 numeric feature columns and the
    label column `diagnosis` (benign or malignant), written at `path`."""
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([name.replace(" ", "_") for name in data.feature_names] + ["diagnosis"])
        for row, target in zip(data.data, data.target):
            writer.writerow([repr(float(v)) for v in row] + [data.target_names[target]])


# Run.seed_data -> what writes it at a path
SEED_DATA = {"breast-cancer": breast_cancer_table}


def seed(run, values, claim, tmp, store=None):
    """Write the run's data where its data.source says (`table:PATH`): a path on the shared volume is
    written into the claim's host directory before any pod mounts it; an s3:// URL is uploaded into
    the store (its bucket made first), as a user would."""
    from disttrain_contract import objectstore

    path = values["data"]["source"].split(":", 1)[1]
    if objectstore.is_url(path):
        local = tmp / "seed" / path.rsplit("/", 1)[1]
        SEED_DATA[run.seed_data](local)
        store.make_bucket(objectstore.split(path)[0])
        store.put(str(local), path)
    else:
        SEED_DATA[run.seed_data](claim / pathlib.PurePosixPath(path).relative_to(values["storage"]["mountPath"]))


def check_published(store, values, workdir):
    """aggregator.publishTo holds the release the run published (docs/object-storage.md, Publishing models):
    latest.json names it, its model.keras is the run's final/model.keras (the same architecture, metadata and
    weights: the aggregator saves it once for each, so the archives' timestamps differ), and the run's
    report.json says where it went."""
    prefix = values["aggregator"]["publishTo"].rstrip("/")
    report = json.loads((workdir / "final" / "report.json").read_text())
    with store.configured() as fs:
        latest = json.loads(fs.cat(f"{prefix}/latest.json"))
        with fs.open(latest["model"], "rb") as fh:
            published = fh.read()
        keys = fs.find(prefix)
    assert latest["model"] == f"{latest['release']}/model.keras" and latest["release"].startswith(
        f"{prefix}/releases/"
    ), latest
    assert same_keras_model(published, (workdir / "final" / "model.keras").read_bytes()), (
        f"{latest['model']} is not final/model.keras"
    )
    assert [p["release"] for p in report["published"]] == [latest["release"]], report.get("published")
    return {"release": latest["release"], "objects": len(keys)}


def same_keras_model(a, b):
    """Whether two .keras archives hold the same model: the same members, config.json and disttrain.json,
    and the same weights (every dataset of model.weights.h5); metadata.json's save date may differ."""
    import io

    import h5py

    def weights(archive):
        out = {}
        with h5py.File(io.BytesIO(archive.read("model.weights.h5")), "r") as h5:
            h5.visititems(
                lambda name, node: out.__setitem__(name, node[()]) if isinstance(node, h5py.Dataset) else None
            )
        return out

    with zipfile.ZipFile(io.BytesIO(a)) as za, zipfile.ZipFile(io.BytesIO(b)) as zb:
        if sorted(za.namelist()) != sorted(zb.namelist()):
            return False
        if any(za.read(name) != zb.read(name) for name in ("config.json", "disttrain.json") if name in za.namelist()):
            return False
        wa, wb = weights(za), weights(zb)
    return wa.keys() == wb.keys() and all(np.array_equal(wa[k], wb[k]) for k in wa)


def check_no_secret_anywhere(cluster, workdir):
    """The store's secret key reaches no log, termination message or report (the stages never print a credential)."""
    from objectstore import SECRET_KEY

    for pod in cluster.all_pods():
        for name, status in pod.statuses.items():
            assert SECRET_KEY not in status.logs + status.message, f"{pod.name}/{name} printed the secret key"
    for path in workdir.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".txt", ".log", ".csv"):
            assert SECRET_KEY not in path.read_text(errors="replace"), f"{path} holds the secret key"


def execute(run, tmp_path_factory):
    """Run one release to a served model (once per session; the kill run reuses the undisturbed one)."""
    if run.name in RESULTS:
        return RESULTS[run.name]
    tmp = tmp_path_factory.mktemp(run.name)
    docs = render(run.values_files)
    outside, store = [], None
    if run.object_store:  # the user's Secret and CA beside the release, and the store on its network
        import cluster_objectstore
        from disttrain_contract import objectstore

        assert cluster_objectstore.SECRET_KEY not in yaml.safe_dump_all(docs), "the rendering holds the secret key"
        certs = cluster_objectstore.certificates(tmp / "tls")
        docs += cluster_objectstore.manifests(certs["ca"].read_text())
        outside.append(cluster_objectstore.server(tmp / "store", certs))
    release = cluster_plan.translate(docs, namespace=NAMESPACE, runtimes=node_runtimes())
    values = merged_values(run.values_files)
    result = {"strategy": values["strategy"], "noops": sorted({f"{w.split('/')[0]} {f}" for w, f, _ in release.noops})}
    started = time.monotonic()
    claim = tmp / "cluster" / "claims" / f"{RELEASE}-disttrain-workdir"
    with cluster(release, tmp, run.name, outside=outside) as c:
        killed = {}

        def before_pods(c):
            nonlocal store
            if run.object_store:
                store = cluster_objectstore.Client(c.outside_url(cluster_objectstore.NAME), certs["ca"])
                # the bucket the aggregator publishes into exists, as a user's would (the aggregator creates no bucket)
                store.make_bucket(objectstore.split(values["aggregator"]["publishTo"])[0])
            if run.seed_data:
                seed(run, values, claim, tmp, store)

        c.start(before_pods=before_pods)
        if run.kill:
            killer = threading.Thread(target=kill_when, args=(c, run.kill, killed), daemon=True)
            killer.start()
        try:
            sweep = job_name("sweep") in c.jobs  # sweep.enabled: a sweep Job between copier and trainer
            for stage in ("copier", *(["sweep"] if sweep else []), "trainer", "aggregator"):
                status = c.wait_job(job_name(stage), 900)
                assert status.state == "Complete", f"{job_name(stage)}: {status.state} {status.reason}\n{c.describe()}"
            result["jobs_done_s"] = time.monotonic() - started
            c.wait_ready(SERVER, 300)
            result["served_s"] = time.monotonic() - started
            base = c.service_url(SERVER)
            workdir = tmp / "cluster" / "claims" / f"{RELEASE}-disttrain-workdir" / "run-1"
            report = read_report(workdir / "final")
            result["accuracy"] = report["final"]["test_accuracy"]
            if sweep:  # the trainers took the sweep's best.json (--params-from), and the report says so
                assert report["parameters_origin"]["source"] == "sweep", report.get("parameters_origin")
                assert (workdir / "sweep" / "best.json").exists() and (workdir / "sweep" / "trials.csv").exists()
                best = json.loads((workdir / "sweep" / "best.json").read_text())
                if best.get("strategy") == "localsgd":  # H searched by groups of trainers, and trained with
                    assert best["trial_workers"] == 2
                    assert report["training_parameters"]["sync_every"] == best["params"]["sync_every"]
                    result["sync_every"] = best["params"]["sync_every"]
            result["predict_accuracy"], result["predictions"] = predict_test_split(
                base, workdir, report.get("task", "")
            )
            result["task"] = json.loads((workdir / "data" / "manifest.json").read_text())["task"]
            with zipfile.ZipFile(workdir / "final" / "model.keras") as archive:  # the published model's disttrain.json
                result["model_meta"] = json.loads(archive.read("disttrain.json"))
            result["model_module"] = values["model"]["module"]
            if run.object_store:
                result["published"] = check_published(store, values, workdir)
                check_no_secret_anywhere(c, workdir)
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
    assert result["accuracy"] >= run.min_accuracy, (
        f"final held-out accuracy {result['accuracy']:.4f} < {run.min_accuracy}"
    )
    if result["task"] == "faces":
        norms = np.linalg.norm(result["predictions"], axis=1)
        assert np.allclose(norms, 1.0, atol=1e-3), f"faces :predict should answer unit embeddings, norms {norms[:5]}"
    else:
        assert result["predict_accuracy"] >= run.min_accuracy, (
            f":predict through the Service: accuracy {result['predict_accuracy']:.3f}"
        )
        assert np.allclose(result["predictions"].sum(axis=1), 1.0, atol=1e-3)
    if result["model_module"]:  # trained with the module's build(spec), loaded by the aggregator with it
        meta = result["model_meta"]
        assert meta.get("model_source") == "module", meta.get("model_source")
        assert meta["model_code"]["module"] == result["model_module"].partition(":")[0], meta.get("model_code")
    if run.helm_test:
        for name, ok, logs in result["helm_test"]:
            assert ok, f"helm test pod {name} failed:\n{logs[-3000:]}"
            assert "OK" in logs
    if run.pipeline_tolerance is not None:
        gap = abs(result["accuracy"] - result["pipeline_accuracy"])
        assert gap <= run.pipeline_tolerance, (
            f"accuracy {result['accuracy']:.4f} vs make pipeline {result['pipeline_accuracy']:.4f} with the same values"
        )
    if run.kill:
        check_killed_run(run, result, tmp_path_factory)


def check_killed_run(run, result, tmp_path_factory):
    killed = result["killed"]
    assert "error" not in killed, killed.get("error")
    assert killed, "the kill never happened"
    status = result["trainer"]
    assert status.failures.get(run.kill.index, 0) >= 1, (
        f"index {run.kill.index} was never counted as failed: {status.failures}"
    )
    assert status.state == "Complete"
    index_pods = [
        p.name for p in status.pods if p.labels.get("batch.kubernetes.io/job-completion-index") == str(run.kill.index)
    ]
    assert len(index_pods) >= 2 and index_pods[0] == killed["pod"], (
        f"index {run.kill.index} was not replaced: {index_pods}"
    )
    resumed = [
        name for name, log in result["trainer_logs"].items() if re.search(r"resumed from .* after epoch [1-9]", log)
    ]
    assert resumed, "no replacement pod resumed from the chief's checkpoint; logs:\n" + "\n".join(
        f"--- {n}\n{log[-1500:]}" for n, log in result["trainer_logs"].items()
    )
    undisturbed = execute(BY_NAME[run.undisturbed], tmp_path_factory)
    gap = abs(result["accuracy"] - undisturbed["accuracy"])
    result["note"] = (
        f"killed {killed['pod']} after {killed['line'][:40]!r}; resumed: {', '.join(resumed)}; "
        f"undisturbed {undisturbed['accuracy']:.4f}"
    )
    assert gap <= run.undisturbed_tolerance, (
        f"after the kill: accuracy {result['accuracy']:.4f} vs {undisturbed['accuracy']:.4f} undisturbed"
    )


# ----------------------------------------------------------------------------- failures, as a cluster shows them


def run_one_stage(tmp_path, stage, sets):
    """Only `stage`'s Job of the digits release with `sets`, until it ends: its JobStatus."""
    docs = render([cluster_runs.VALUES / "base.yaml", cluster_runs.VALUES / "digits-average.yaml"], sets=sets)
    with cluster(cluster_plan.translate(docs, namespace=NAMESPACE), tmp_path, f"fail-{stage}") as c:
        c.start(only=[job_name(stage)])
        return c.wait_job(job_name(stage), 300)


def test_a_failing_stage_says_why_in_its_termination_message(tmp_path):
    """The copier's one-line error reaches the termination message (`kubectl get pods`/`describe`)
    through /dev/termination-log; copier.backoffLimit 0 fails the Job at the first failed pod."""
    status = run_one_stage(tmp_path, "copier", ("data.source=csv:/workdir/missing.csv", "copier.backoffLimit=0"))
    assert status.state == "Failed" and status.reason.startswith("BackoffLimitExceeded"), status.reason
    (pod,) = status.pods
    copier = pod.statuses["copier"]
    assert copier.exit_code == 2
    assert copier.message.startswith("error: ") and "/workdir/missing.csv" in copier.message, copier.message
    assert "\n" not in copier.message
    # written by the stage itself (disttrain_contract.run_cli), not the kubelet's fallback to the log
    assert (pod.dir / "copier.termination-log").read_text() == copier.message


def test_a_wait_timeout_fails_the_index_and_the_job_with_the_wait_containers_message(tmp_path):
    """No copier: each worker's wait-for-copier times out (exit 3); backoffLimitPerIndex 0 fails the
    index, maxFailedIndexes 0 the Job; the message is the wait container's own line (FallbackToLogsOnError)."""
    status = run_one_stage(tmp_path, "trainer", ("trainer.waitTimeoutSeconds=2", "trainer.backoffLimitPerIndex=0"))
    assert status.state == "Failed" and status.reason.startswith("MaxFailedIndexesExceeded"), status.reason
    wait = status.pods[0].statuses["wait-for-copier"]
    assert wait.exit_code == 3
    assert (
        "timed out after 2s waiting for the copier's dataset" in wait.message
        and "/workdir/run-1/data/_SUCCESS" in wait.message
    )
    assert "trainer" not in status.pods[0].statuses, "the trainer must not start after a failed init container"


def policy_job(name, script, completions=1, rules=(), per_index=None, backoff=None, image=None):
    """A small Indexed Job of the copier image running `script` (python), with the chart's hardening."""
    spec = {
        "completionMode": "Indexed",
        "completions": completions,
        "parallelism": completions,
        "template": {
            "metadata": {"labels": {"app": name}, "annotations": {"note": "policy test"}},
            "spec": {
                "restartPolicy": "Never",
                "subdomain": "policy",
                "automountServiceAccountToken": False,
                "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001},
                "initContainers": [
                    {
                        "name": "init",
                        "image": image,
                        "command": ["python3", "-c", "open('/scratch/from-init', 'w').write('x')"],
                        "securityContext": {
                            "readOnlyRootFilesystem": True,
                            "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]},
                        },
                        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                    }
                ],
                "containers": [
                    {
                        "name": "main",
                        "image": image,
                        "command": ["python3", "-c", script],
                        "env": [
                            {
                                "name": "INDEX_FROM_ANNOTATION",
                                "valueFrom": {
                                    "fieldRef": {
                                        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                                    }
                                },
                            },
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "token", "key": "token"}}},
                            {"name": "GREETING", "value": "index $(INDEX_FROM_ANNOTATION)"},
                        ],
                        "resources": {
                            "limits": {"cpu": "500m", "memory": "256Mi"},
                            "requests": {"cpu": "100m", "memory": "64Mi"},
                        },
                        "securityContext": {
                            "readOnlyRootFilesystem": True,
                            "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]},
                        },
                        "terminationMessagePolicy": "FallbackToLogsOnError",
                        "volumeMounts": [
                            {"name": "scratch", "mountPath": "/scratch"},
                            {"name": "shared", "mountPath": "/shared"},
                            {"name": "token", "mountPath": "/secret", "readOnly": True},
                        ],
                    }
                ],
                "volumes": [
                    {"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}},
                    {"name": "shared", "persistentVolumeClaim": {"claimName": "shared"}},
                    {"name": "token", "secret": {"secretName": "token"}},
                ],
            },
        },
    }
    if rules:
        spec["podFailurePolicy"] = {"rules": list(rules)}
    if per_index is not None:
        spec["backoffLimitPerIndex"], spec["maxFailedIndexes"] = per_index, 0
    if backoff is not None:
        spec["backoffLimit"] = backoff
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


COMMON = [
    {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "shared"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    },
    {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "token"}, "stringData": {"token": "s3cret"}},
    {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "policy"},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"app": "retry"},
            "ports": [{"port": 9}],
        },
    },
]

# index 1 fails once (exit 1, counted), then succeeds; every pod checks what the kubelet gave it
RETRY = r"""
import errno, os, socket, sys
index = os.environ["JOB_COMPLETION_INDEX"]
assert os.environ["INDEX_FROM_ANNOTATION"] == index, "downward API annotation"
assert socket.gethostname() == "retry-" + index, socket.gethostname()
assert os.environ["GREETING"] == "index " + index
assert os.environ["TOKEN"] == open("/secret/token").read() == "s3cret"
assert open("/scratch/from-init").read() == "x", "the emptyDir is shared with the init container"
assert os.getuid() == 10001 and 10001 in os.getgroups()
for path in ("/etc/x", "/opt/x"):
    try:
        open(path, "w")
        sys.exit(f"wrote {path} on a read-only root")
    except OSError as err:
        assert err.errno == errno.EROFS, err
try:
    open("/scratch/big", "wb").write(b"x" * 2 * 2**20)
    sys.exit("wrote 2 MiB into a 1Mi emptyDir")
except OSError as err:
    assert err.errno == errno.ENOSPC, err
socket.getaddrinfo(f"retry-{index}.policy", 9)  # its own <hostname>.<subdomain>, through the search path
marker = f"/shared/attempt-{index}"
if index == "1" and not os.path.exists(marker):
    open(marker, "w").write(os.environ["POD_NAME"])
    sys.exit(1)
"""


def test_job_policies_and_pod_fields_with_real_containers(tmp_path):
    """The Job controller and kubelet semantics the chart relies on, on a small Job of its own:
    a counted failure is retried (backoffLimitPerIndex), exit 2 fails the Job at once (FailJob),
    an ignored exit code is retried without counting; every pod sees its index through the
    downward API, its hostname, the Secret, the init container's emptyDir, a read-only root and
    the emptyDir's size limit."""
    image = f"disttrain-copier:{TAG}"
    rules = [
        {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [2]}},
        {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [42]}},
    ]
    docs = COMMON + [
        policy_job("retry", RETRY, completions=2, rules=rules, per_index=1, image=image),
        policy_job("failjob", "import sys; sys.exit(2)", rules=rules, per_index=3, image=image),
        policy_job(
            "ignored",
            "import os, sys; p = '/shared/ignored'; os.path.exists(p) or (open(p, 'w').close(), sys.exit(42))",
            rules=rules,
            backoff=0,
            image=image,
        ),
        policy_job(
            "crash",
            "import sys; print('a traceback would be here', flush=True); sys.exit('boom: the last line')",
            backoff=1,
            image=image,
        ),
    ]
    release = cluster_plan.translate(docs, namespace="default")
    with cluster(release, tmp_path, "policy", backoff_base=0.2) as c:
        c.start()
        retry, failjob, ignored, crash = (c.wait_job(n, 300) for n in ("retry", "failjob", "ignored", "crash"))
    assert retry.state == "Complete", f"{retry.reason}\n" + "\n".join(f"{p.name}: {p.statuses}" for p in retry.pods)
    assert retry.failures == {1: 1} and len(retry.pods) == 3
    assert failjob.state == "Failed" and failjob.reason.startswith("PodFailurePolicy") and len(failjob.pods) == 1
    assert ignored.state == "Complete" and ignored.ignored == 1 and ignored.failures == {}
    assert crash.state == "Failed" and crash.reason.startswith("BackoffLimitExceeded") and len(crash.pods) == 2
    # FallbackToLogsOnError: the log's tail (stdout and stderr are two pipes: their order may vary)
    assert set(crash.pods[0].statuses["main"].message.splitlines()) == {
        "a traceback would be here",
        "boom: the last line",
    }


LISTENER = [
    {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "listener"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "listener"}},
            "template": {
                "metadata": {"labels": {"app": "listener"}},
                "spec": {
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "http",
                            "command": ["python3", "-m", "http.server", "12345", "--directory", "/tmp"],
                            "ports": [{"name": "collective", "containerPort": 12345}],
                            "readinessProbe": {"tcpSocket": {"port": "collective"}, "periodSeconds": 1},
                        }
                    ],
                },
            },
        },
    },
    {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "listener"},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"app": "listener"},
            "ports": [{"port": 12345}],
        },
    },
    {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "only-friends"},
        "spec": {
            "podSelector": {"matchLabels": {"app": "listener"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"podSelector": {"matchLabels": {"app": "friend"}}}],
                    "ports": [{"protocol": "TCP", "port": 12345}],
                }
            ],
        },
    },
    {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "shared"}, "spec": {}},
]

# friend: connects (retrying while the listener starts), then leaves a marker; stranger: waits for
# the marker, then must not get through within 3 s
CONNECT = r"""
import os, socket, sys, time
friend = os.environ["ROLE"] == "friend"
deadline = time.monotonic() + (60 if friend else 3)
while not friend and not os.path.exists("/shared/friend-connected"):
    time.sleep(0.2)
    deadline = time.monotonic() + 3
while time.monotonic() < deadline:
    try:
        socket.create_connection(("listener", 12345), timeout=1).close()
        if friend:
            open("/shared/friend-connected", "w").close()
        sys.exit(0 if friend else "a pod the NetworkPolicy does not allow got through")
    except OSError:
        time.sleep(0.2)
sys.exit("never connected" if friend else 0)
"""


def test_a_network_policy_lets_only_its_peers_in(tmp_path):
    image = f"disttrain-copier:{TAG}"
    jobs = []
    for role in ("friend", "stranger"):
        job = policy_job(role, CONNECT, image=image, backoff=0)
        spec = job["spec"]["template"]["spec"]
        spec["containers"][0]["env"].append({"name": "ROLE", "value": role})
        jobs.append(job)
    LISTENER[0]["spec"]["template"]["spec"]["containers"][0]["image"] = image
    docs = [d for d in COMMON if d["kind"] != "PersistentVolumeClaim"] + LISTENER + jobs
    with cluster(cluster_plan.translate(docs, namespace="default"), tmp_path, "netpol") as c:
        c.start()
        friend, stranger = c.wait_job("friend", 300), c.wait_job("stranger", 300)
        assert c.iptables_rules, "no iptables rules were made for the NetworkPolicy"
    assert friend.state == "Complete", friend.pods[-1].statuses
    assert stranger.state == "Complete", stranger.pods[-1].statuses["main"].message


def test_shared_cluster_values_reach_the_containers(tmp_path):
    """The shared-cluster CI values (Kueue labels, classes, per-stage extras) run: the copier and the
    trainers of that rendering complete with the extra env, the memory-backed /dev/shm and the runtime."""
    files = [
        cluster_runs.VALUES / "base.yaml",
        CHART / "ci" / "shared-cluster-values.yaml",
        cluster_runs.VALUES / "digits-average.yaml",
    ]
    docs = render(files, sets=("epochs=2",))
    release = cluster_plan.translate(docs, namespace=NAMESPACE, runtimes=node_runtimes())
    with cluster(release, tmp_path, "shared") as c:
        c.start(only=[job_name("copier"), job_name("trainer")])
        for stage in ("copier", "trainer"):
            status = c.wait_job(job_name(stage), 600)
            assert status.state == "Complete", f"{stage}: {status.reason}\n{c.describe()}"
        copier = c.job_pods(job_name("copier"))[0].created["copier"]
        trainer = c.job_pods(job_name("trainer"), 0)[0].created["trainer"]
    assert "DISTTRAIN_EXAMPLE=shared-cluster" in copier["Config"]["Env"]
    assert "/scratch" in [m["Target"] for m in copier["HostConfig"]["Mounts"]]
    assert {"TF_CPP_MIN_LOG_LEVEL=1", "NODE_NAME=harness-node", "JOB_COMPLETION_INDEX=0"} <= set(
        trainer["Config"]["Env"]
    )
    assert trainer["HostConfig"]["Runtime"] == "runc"
    (shm,) = [m for m in trainer["HostConfig"]["Mounts"] if m["Target"] == "/dev/shm"]
    assert shm["Type"] == "volume"


# a pod of the release reaches the outside store by its DNS name over https,
# trusting it through the CA in AWS_CA_BUNDLE (and not without), with the key pair from the Secret in its
# environment; the store refuses an unsigned request (403)
REACH_STORE = r"""
import os, ssl, urllib.error, urllib.request
assert os.environ["AWS_ACCESS_KEY_ID"] and os.environ["AWS_SECRET_ACCESS_KEY"] == open("/secret/AWS_SECRET_ACCESS_KEY").read()
trusted = ssl.create_default_context(cafile=os.environ["AWS_CA_BUNDLE"])
try:
    urllib.request.urlopen(os.environ["AWS_ENDPOINT_URL"], timeout=10, context=trusted)
    raise SystemExit("an unsigned request was accepted")
except urllib.error.HTTPError as err:
    assert err.code == 403, err
try:
    urllib.request.urlopen(os.environ["AWS_ENDPOINT_URL"], timeout=10)
    raise SystemExit("the store's certificate was trusted without its CA")
except urllib.error.URLError as err:
    assert isinstance(err.reason, ssl.SSLCertVerificationError), err
"""


def test_a_pod_reaches_a_server_outside_the_release_by_its_dns_name(tmp_path):
    """cluster_runtime.Outside: the object store of the runs that use one, on the release network under its
    own DNS name, started (and filled by before_pods) before any pod; the pod reads the key pair from the
    Secret and the CA from the ConfigMap given beside the release, as the chart's stages do with
    objectStore.existingSecret and objectStore.caBundle."""
    import cluster_objectstore

    image = f"disttrain-copier:{TAG}"
    job = policy_job("reach", REACH_STORE, image=image, backoff=0)
    main = job["spec"]["template"]["spec"]["containers"][0]
    main["env"] = [
        {"name": "AWS_ENDPOINT_URL", "value": cluster_objectstore.ENDPOINT},
        {"name": "AWS_CA_BUNDLE", "value": "/ca/ca-bundle.pem"},
    ] + [
        {"name": key, "valueFrom": {"secretKeyRef": {"name": cluster_objectstore.SECRET, "key": key}}}
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    ]
    main["volumeMounts"] = [m for m in main["volumeMounts"] if m["name"] != "token"] + [
        {"name": "keys", "mountPath": "/secret", "readOnly": True},
        {"name": "ca", "mountPath": "/ca", "readOnly": True},
    ]
    spec = job["spec"]["template"]["spec"]
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] != "token"] + [
        {"name": "keys", "secret": {"secretName": cluster_objectstore.SECRET}},
        {
            "name": "ca",
            "configMap": {
                "name": cluster_objectstore.CA_CONFIGMAP,
                "items": [{"key": "ca.crt", "path": "ca-bundle.pem"}],
            },
        },
    ]
    certs = cluster_objectstore.certificates(tmp_path / "tls")
    docs = [COMMON[0], *cluster_objectstore.manifests(certs["ca"].read_text()), job]
    filled = []

    def before_pods(c):
        filled.append(
            cluster_objectstore.Client(c.outside_url(cluster_objectstore.NAME), certs["ca"]).make_bucket("before-pods")
        )

    release = cluster_plan.translate(docs, namespace=NAMESPACE)
    with cluster(release, tmp_path, "outside", outside=[cluster_objectstore.server(tmp_path / "store", certs)]) as c:
        c.start(before_pods=before_pods)
        status = c.wait_job("reach", 300)
    assert filled == ["s3://before-pods"]
    assert status.state == "Complete", status.pods[-1].statuses["main"].message
