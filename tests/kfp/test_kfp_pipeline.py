"""The Kubeflow pipeline (pipelines/kfp): the checked-in pipeline.yaml is what pipeline.py compiles to, and the
scripts it runs behave. Compiling runs in the kfp SDK's own venv (tests/kfp_venv.py); the run itself, with
kfp.local and the images, is tests/images/test_kfp_local.py (make test-images)."""

import difflib
import pathlib
import subprocess

import pytest
import yaml

from kfp_venv import PIPELINE_DIR, ROOT, run_with_kfp

CHECKED_IN = pathlib.Path(PIPELINE_DIR) / "pipeline.yaml"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("kfp") / "pipeline.yaml"
    result = run_with_kfp("pipelines/kfp/pipeline.py", "--output", out, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return out.read_text()


def documents():
    """The pipeline spec and the Kubernetes platform spec (kfp-kubernetes' volume mounts)."""
    pipeline, platform = yaml.safe_load_all(CHECKED_IN.read_text())
    return pipeline, platform


def executors():
    spec = documents()[0]
    return {name.removeprefix("exec-"): e["container"] for name, e in spec["deploymentSpec"]["executors"].items()}


def test_the_checked_in_pipeline_is_what_pipeline_py_compiles_to(compiled):
    if compiled != CHECKED_IN.read_text():
        diff = "".join(
            difflib.unified_diff(
                CHECKED_IN.read_text().splitlines(True),
                compiled.splitlines(True),
                "pipeline.yaml (checked in)",
                "pipeline.py compiled",
                n=1,
            )
        )
        pytest.fail(f"pipelines/kfp/pipeline.yaml is stale: run `make kfp-pipeline` and commit it\n{diff[:4000]}")


def test_one_task_per_stage_on_the_stage_images():
    images = {name: c["image"] for name, c in executors().items()}
    assert images == {
        "copier": "disttrain-copier:latest",
        "trainer-in-task": "disttrain-trainer:latest",
        "aggregator": "disttrain-aggregator:latest",
        "aggregator-2": "disttrain-aggregator:latest",
        "trainer-job": "python:3.11-slim",
    }


def test_the_launcher_runs_trainer_job_py_verbatim_with_the_pinned_client():
    launcher = executors()["trainer-job"]
    assert launcher["command"][3] == (pathlib.Path(PIPELINE_DIR) / "trainer_job.py").read_text()
    pins = {
        line.split("==")[0].lower().replace("_", "-"): line.split("==")[1].split()[0]
        for line in open(ROOT + "/requirements-kfp.txt")
        if "==" in line and not line.startswith("#")
    }
    installed = [p for p in launcher["command"][2].split(" && ")[0].split() if "==" in p]
    assert "kubernetes==30.1.0" in installed
    for pin in installed:
        name, version = pin.split("==")
        assert pins.get(name.lower().replace("_", "-")) == version, f"{pin} is not requirements-kfp.txt's pin"


def sh(script, *args):
    return subprocess.run(["sh", "-c", script, "sh", *args], capture_output=True, text=True, timeout=30)


def test_unset_options_are_left_out_and_switches_become_flags():
    """The wrapper every stage runs in: --flag= and --flag=false go, --flag=true becomes --flag."""
    command = executors()["copier"]["command"]
    assert command[:2] == ["sh", "-c"] and command[3:] == ["sh", "disttrain-copier"]
    shown = sh(
        command[2],
        "printf",
        "%s\n",
        "--source",
        "sample:digits",
        "--label-column=",
        "--allow-duplicates=false",
        "--allow-label-skew=true",
        "--max-label-skew",
        "0.2",
        "--seed=3",
    )
    assert shown.stdout.splitlines() == [
        "--source",
        "sample:digits",
        "--allow-label-skew",
        "--max-label-skew",
        "0.2",
        "--seed=3",
    ]


def test_the_in_task_trainers_run_one_after_the_other_and_refuse_a_connected_strategy():
    command = executors()["trainer-in-task"]["command"]
    script = command[2]
    ran = sh(script, "3", "average", "echo", "--workdir", "/w", "--model-file=")
    assert ran.returncode == 0, ran.stderr
    assert [line for line in ran.stdout.splitlines() if not line.startswith("==")] == [
        f"--workdir /w --worker-index {i}" for i in range(3)
    ]
    refused = sh(script, "2", "multiworker", "echo")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip().splitlines() == [
        "error: trainer_launch in-task runs the workers one after the other: strategy average only, not multiworker"
        " (use trainer_launch job)"
    ]
    failing = sh(script, "3", "average", "sh", "-c", 'echo "$@"; exit 7', "sh")
    assert failing.returncode == 7 and failing.stdout.count("--worker-index") == 1  # stops at the first failure


def test_every_stage_meets_the_others_on_the_claim():
    mounts = documents()[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert sorted(mounts) == ["exec-aggregator", "exec-aggregator-2", "exec-copier", "exec-trainer-in-task"]
    for name, config in mounts.items():
        (mount,) = config["pvcMount"]
        assert mount["mountPath"] == "/workdir", name


# pipeline parameter -> the chart value it stands for (values.yaml path); the pipeline's "" is the chart's null or 0
CHART_VALUES = {
    "source": "data.source",
    "task": "data.task",
    "label_column": "data.labelColumn",
    "problem": "data.problem",
    "test_fraction": "data.testFraction",
    "data_seed": "data.seed",
    "max_tokens": "data.maxTokens",
    "image_size": "data.imageSize",
    "channels": "data.channels",
    "max_label_skew": "data.validation.maxLabelSkew",
    "allow_duplicates": "data.validation.allowDuplicates",
    "allow_label_skew": "data.validation.allowLabelSkew",
    "allow_missing_classes": "data.validation.allowMissingClasses",
    "workers": "workers",
    "epochs": "epochs",
    "batch": "batch",
    "strategy": "strategy",
    "learning_rate": "learningRate",
    "sync_every": "syncEvery",
    "outer_optimizer": "outerOptimizer",
    "outer_learning_rate": "outerLearningRate",
    "outer_momentum": "outerMomentum",
    "outer_overlap": "outerOverlap",
    "sync_at_epoch_end": "syncAtEpochEnd",
    "sync_batch_norm_batches": "syncBatchNormBatches",
    "optimizer": "optimizer",
    "allreduce_dtype": "allreduceDtype",
    "parameter_servers": "parameterServers",
    "seed": "seed",
    "model_file": "model.file",
    "dp_l2_clip": "trainer.privacy.l2Clip",
    "dp_noise_multiplier": "trainer.privacy.noiseMultiplier",
    "dp_delta": "trainer.privacy.delta",
    "validation_fraction": "trainer.validationFraction",
    "dp_vocab_epsilon": "copier.privateVocabulary.epsilon",
    "dp_vocab_delta": "copier.privateVocabulary.delta",
    "dp_vocab_max_tokens_per_example": "copier.privateVocabulary.maxTokensPerExample",
    "trainer_port": "trainer.port",
    "trainer_threads": "trainer.threads",
    "trainer_malloc": "trainer.malloc",
    "trainer_heartbeat_timeout_seconds": "trainer.heartbeatTimeoutSeconds",
    "combine": "aggregator.combine",
    "exports": "aggregator.exports",
    "publish_to": "aggregator.publishTo",
    "gate_max_drop_vs_best_worker": "aggregator.gate.maxDropVsBestWorker",
    "gate_max_regression": "aggregator.gate.maxRegression",
    "gate_max_relative_drop_vs_best_worker": "aggregator.gate.maxRelativeDropVsBestWorker",
    "gate_max_relative_regression": "aggregator.gate.maxRelativeRegression",
    "gate_min_gain_vs_trivial": "aggregator.gate.minGainVsTrivial",
    "gate_min_relative_gain_vs_trivial": "aggregator.gate.minRelativeGainVsTrivial",
    "gate_force": "aggregator.gate.force",
    "workdir_root": "storage.mountPath",
}
NOT_CHART_VALUES = {"workdir_claim", "trainer_launch"}


def test_the_parameters_are_the_charts_values_with_their_defaults():
    values = yaml.safe_load(open(ROOT + "/charts/disttrain/values.yaml"))
    parameters = documents()[0]["root"]["inputDefinitions"]["parameters"]
    assert set(parameters) == set(CHART_VALUES) | NOT_CHART_VALUES
    for name, path in CHART_VALUES.items():
        chart = values
        for key in path.split("."):
            chart = chart[key]
        if isinstance(chart, list):
            chart = ",".join(chart)
        ours = parameters[name].get("defaultValue")
        if ours == "" and chart in (None, 0):
            continue
        assert ours == chart or (isinstance(chart, (int, float)) and float(ours) == chart), (name, ours, chart)
