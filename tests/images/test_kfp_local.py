"""The Kubeflow pipeline (pipelines/kfp) executed, not only compiled: kfp.local's DockerRunner runs its tasks on
the images `make test-images` builds (tests/images/kfp_local_run.py says how it is set up), with the trainers
in-task (the local runner mounts only the pipeline root into each task, so the stages meet in a directory under
it and only strategy average can run), and the model it publishes has the held-out accuracy of `make pipeline`
with the same seeds; then the server image, with server.yaml's arguments, serves it. Run by `make test-images`
(DISTTRAIN_TEST_IMAGES=1).

Not here: the in-task trainers' refusal of a connected strategy (tests/kfp runs that script). kfp.local counts a
container that exits before the runner attaches to its logs as a success (kfp/local/docker_task_handler.py: the
container is gone, NotFound, "assume success"), and the refusal exits at once: a run then went on to the aggregator,
which waited for the workers that never trained."""

import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

from kfp_venv import PIPELINE_DIR, ROOT, run_with_kfp
from stages import read_report
from test_images import free_port, wait_ready

pytestmark = pytest.mark.skipif(
    os.environ.get("DISTTRAIN_TEST_IMAGES") != "1",
    reason="image tests: make test-images (sets DISTTRAIN_TEST_IMAGES=1)",
)

TAG = os.environ.get("DISTTRAIN_IMAGE_TAG", "latest")
UID = 10001
RUNNER = os.path.join(ROOT, "tests", "images", "kfp_local_run.py")
# digits: a small task whose 2 workers train in seconds; --force, as `make pipeline` below: 3 epochs may fail the
# quality gate, which tests/integration/test_gate_pipeline.py tests
SETTINGS = {"source": "sample:digits", "workers": 2, "epochs": 3, "batch": 64, "seed": 42, "gate_force": True}


def kfp_run(pipeline_root, **params):
    """Run the pipeline locally; (CompletedProcess, seconds) with WORKDIR_ROOT = PIPELINE_ROOT/workdir."""
    # the runner mounts the pipeline root into each task at the same path: UID 10001 must get through it
    pipeline_root.chmod(0o755)
    workdir_root = pipeline_root / "workdir"
    workdir_root.mkdir(parents=True)
    if os.geteuid() == 0:  # the stages run as UID 10001: the stages' directory must be theirs
        os.chown(workdir_root, UID, UID)
    else:
        os.chmod(workdir_root, 0o777)
    params = {**SETTINGS, "workdir_root": str(workdir_root), "trainer_launch": "in-task", **params}
    start = time.monotonic()
    result = run_with_kfp(RUNNER, pipeline_root, TAG, json.dumps(params), timeout=1800)
    return result, time.monotonic() - start


def clean(path):
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
                f"{path}:/clean",
                "--entrypoint",
                "sh",
                f"disttrain-copier:{TAG}",
                "-c",
                "rm -rf /clean/* /clean/.[!.]*",
            ],
            capture_output=True,
            timeout=120,
        )
    subprocess.run(["rm", "-rf", str(path)], check=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    for stage in ("copier", "trainer", "aggregator"):
        image = f"disttrain-{stage}:{TAG}"
        if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode:
            pytest.fail(f"image not built: {image} (make images)")
    make_workdir = tmp_path_factory.mktemp("make-pipeline")
    # `make pipeline TASK=digits WORKERS=2 EPOCHS=3 AGGREGATOR_ARGS=--force`, with this venv's stages
    env = {
        **os.environ,
        "TASK": "digits",
        "WORKERS": "2",
        "EPOCHS": "3",
        "BATCH": "64",
        "SEED": "42",
        "WORKDIR": str(make_workdir),
        "BIN": os.path.dirname(sys.executable),
        "SERVE": "0",
        "AGGREGATOR_ARGS": "--force",
    }
    made = subprocess.run(
        ["bash", os.path.join(ROOT, "scripts", "run-local.sh")],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]

    root = tmp_path_factory.mktemp("kfp-root")
    result, seconds = kfp_run(root)
    print(f"\nkfp.local run (copier, 2 trainers in-task, aggregator): {seconds:.0f}s")
    try:
        assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
        yield {"make": make_workdir, "workdir_root": root / "workdir", "output": result.stdout + result.stderr}
    finally:
        clean(root)


def test_the_local_runner_used_the_built_images_and_pulled_none(runs):
    for stage in ("copier", "trainer", "aggregator"):
        assert f"Found image 'disttrain-{stage}:{TAG}'" in runs["output"]
    assert "Pulling image" not in runs["output"]


def test_every_stage_left_its_marker(runs):
    """The runner counts a container that exits before its logs are read as a success: the stages' own markers say."""
    (run,) = (runs["workdir_root"]).glob("run-*")
    assert (run / "data" / "_SUCCESS").is_file()
    assert sorted(p.parent.name for p in (run / "train").glob("worker-*/_SUCCESS")) == ["worker-00000", "worker-00001"]
    assert (runs["workdir_root"] / "final" / "_SUCCESS").is_file()
    assert all(p.stat().st_uid == UID for p in runs["workdir_root"].rglob("*")), (
        "every file is written by the non-root user"
    )


def test_the_published_model_matches_make_pipeline(runs):
    kfp, made = read_report(runs["workdir_root"] / "final"), read_report(runs["make"] / "final")
    print(
        f"\nheld-out accuracy: kfp.local {kfp['final']['test_accuracy']:.4f}, make pipeline {made['final']['test_accuracy']:.4f}"
    )
    assert kfp["final"]["test_accuracy"] == made["final"]["test_accuracy"]
    assert [w["test_accuracy"] for w in kfp["workers"]] == [w["test_accuracy"] for w in made["workers"]]


def test_server_yaml_serves_the_published_model(runs):
    """The server image with server.yaml's arguments, the stages' directory mounted read-only where the claim goes."""
    with open(os.path.join(PIPELINE_DIR, "server.yaml")) as f:
        deployment = next(doc for doc in yaml.safe_load_all(f) if doc["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    port = free_port()
    args[args.index("--host") + 1], args[args.index("--port") + 1] = "127.0.0.1", str(port)
    args[args.index("--metrics-port") + 1] = str(free_port())  # (the host's network: a port no other test holds)
    name = f"disttrain-kfp-server-{port}"
    subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--detach",
            "--init",
            "--name",
            name,
            "--network",
            "host",
            "--read-only",
            "--tmpfs",
            "/tmp",
            "-v",
            f"{runs['workdir_root']}:/workdir:ro",
            f"disttrain-server:{TAG}",
            *args,
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    try:
        wait_ready(name, f"http://127.0.0.1:{port}/readyz", timeout=300)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models/disttrain", timeout=30) as response:
            status = json.loads(response.read())
        assert status["model_version_status"][0]["state"] == "AVAILABLE", status
    finally:
        subprocess.run(["docker", "rm", "--force", name], capture_output=True, timeout=120)
