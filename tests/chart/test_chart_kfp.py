"""The Kubernetes objects of the Kubeflow pipeline (pipelines/kfp), checked without an API server.

The trainer Job that its launcher task creates (pipelines/kfp/trainer_job.py): the manifests, printed by the
launcher's own --dry-run, validate strictly as Kubernetes objects (the same kubernetes-validate check as the chart's
rendering), and they carry the chart's trainer Job where it matters: the Indexed Job's failure handling, the headless
Service that gives the pods their stable names, the trainer's arguments and security settings. The server Deployment
of the published model (server.yaml) and the launcher's Role (launcher-rbac.yaml) validate too; the server takes its
arguments and serves the file the aggregator publishes; the Role grants exactly the API calls the launcher makes.
Not run here (it needs a cluster): creating the objects, the pods, the launcher's wait and its failure report."""

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from chartlib import KUBE_VERSIONS, ROOT, arg, one, pod_spec, render

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="pip install kubernetes-validate (see tests/chart)"
)

LAUNCHER = os.path.join(ROOT, "pipelines", "kfp", "trainer_job.py")
STRATEGIES = ("average", "multiworker", "localsgd", "parameterserver")
RUN_ID = "0b5c1d2e-5f6a-4b7c-8d9e-0f1a2b3c4d5e"  # a KFP run id (a UUID)
NAME = f"disttrain-{RUN_ID}"  # the pipeline's Job name


# the options the pipeline passes as --flag=VALUE, with its defaults ("": unset)
PIPELINE_OPTIONS = {
    "--learning-rate": "",
    "--validation-fraction": "",
    "--model-file": "",
    "--sync-every": "",
    "--allreduce-dtype": "float32",
    "--ps": "1",
    "--outer-optimizer": "none",
    "--outer-lr": "0.7",
    "--outer-momentum": "0.9",
    "--outer-overlap": "none",
    "--sync-at-epoch-end": "false",
    "--sync-batch-norm-batches": "",
    "--dp-l2-clip": "",
    "--dp-noise-multiplier": "",
    "--dp-delta": "",
    "--threads": "0",
    "--malloc": "tuned",
    "--heartbeat-timeout": "120",
}


def launch_dry_run(strategy, *overrides):
    """The launcher as the pipeline calls it (pipeline.py's trainer_job task); overrides: "--flag=VALUE"."""
    options = dict(PIPELINE_OPTIONS, **dict(o.split("=", 1) for o in overrides))
    args = [
        sys.executable,
        LAUNCHER,
        "--name",
        NAME,
        "--namespace",
        "ml",
        "--image",
        "disttrain-trainer:1.0",
        "--port",
        "12345",
        "--claim",
        "disttrain-workdir",
        "--mount",
        "/workdir",
        "--dry-run",
        "--",
        "--workdir",
        f"/workdir/run-{RUN_ID}",
        "--strategy",
        strategy,
        "--epochs",
        "5",
        "--batch",
        "64",
        "--optimizer=",
        "--seed",
        "42",
        "--workers",
        "2",
        *(f"{k}={v}" for k, v in options.items()),
    ]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    job, service = map(json.loads, out.stdout.splitlines())
    return job, service


def effective_args(container):
    """The arguments disttrain-trainer gets: the container's command (the unset-option wrapper) run with `printf`."""
    command = container["command"]
    assert command[:2] == ["sh", "-c"] and command[-1] == "disttrain-trainer"
    shown = subprocess.run(
        ["sh", "-c", command[2], command[3], "printf", "%s\\n", *container["args"]],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return shown.stdout.splitlines()


def flags(args):
    """{--flag: value or True} of an argument list."""
    out, i = {}, 0
    while i < len(args):
        if "=" in args[i]:
            flag, value = args[i].split("=", 1)
            out[flag], i = value, i + 1
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[args[i]], i = args[i + 1], i + 2
        else:
            out[args[i]], i = True, i + 1
    return out


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_job_and_its_service_validate_strictly(strategy, kube):
    for doc in launch_dry_run(strategy):
        try:
            kubernetes_validate.validate(doc, kube, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{strategy} @ {kube}: {doc['kind']}: {err.message} at {list(err.path)}")


def test_the_validator_catches_a_wrong_field():
    job, _ = launch_dry_run("multiworker")
    job["spec"]["completionz"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, "1.33.0", strict=True)


# (strategy, the pipeline's arguments for the launcher, the same settings as chart values)
SETTINGS = [(strategy, (), ()) for strategy in STRATEGIES] + [
    (
        "localsgd",
        ("--sync-every=500", "--outer-optimizer=nesterov", "--outer-lr=0.5", "--outer-momentum=0.8"),
        ("syncEvery=500", "outerOptimizer=nesterov", "outerLearningRate=0.5", "outerMomentum=0.8"),
    ),
    ("localsgd", ("--sync-batch-norm-batches=0",), ("syncBatchNormBatches=0",)),
    (
        "localsgd",
        ("--outer-optimizer=nesterov", "--outer-overlap=eager"),
        ("outerOptimizer=nesterov", "outerOverlap=eager"),
    ),
    (
        "localsgd",
        ("--outer-optimizer=nesterov", "--sync-at-epoch-end=true"),
        ("outerOptimizer=nesterov", "syncAtEpochEnd=true"),
    ),
    ("parameterserver", ("--ps=2",), ("parameterServers=2",)),
    (
        "multiworker",
        ("--dp-l2-clip=1.0", "--dp-noise-multiplier=1.1", "--dp-delta=1e-05"),
        ("trainer.privacy.l2Clip=1.0", "trainer.privacy.noiseMultiplier=1.1", "trainer.privacy.delta=1e-05"),
    ),
    ("average", ("--optimizer=sgd",), ("optimizer=sgd",)),
    # a slow link's syncs: a longer heartbeat timeout; one thread and glibc's malloc
    (
        "multiworker",
        ("--heartbeat-timeout=600", "--threads=1", "--malloc=glibc"),
        ("trainer.heartbeatTimeoutSeconds=600", "trainer.threads=1", "trainer.malloc=glibc"),
    ),
    ("parameterserver", ("--heartbeat-timeout=600",), ("trainer.heartbeatTimeoutSeconds=600",)),
]


@pytest.mark.parametrize("strategy, ours, values", SETTINGS)
def test_the_job_is_the_charts_trainer_job(strategy, ours, values):
    job, service = launch_dry_run(strategy, *ours)
    chart_job = one(render(sets=(f"strategy={strategy}", *values), kube_version="1.29.0"), "Job", "trainer")
    spec, chart_spec = job["spec"], chart_job["spec"]
    for key in (
        "completionMode",
        "completions",
        "parallelism",
        "maxFailedIndexes",
        "podReplacementPolicy",
        "podFailurePolicy",
        "backoffLimitPerIndex",
        "activeDeadlineSeconds",
    ):
        assert spec[key] == chart_spec[key], key
    pod, chart_pod = pod_spec(job), pod_spec(chart_job)
    for key in ("restartPolicy", "terminationGracePeriodSeconds", "securityContext", "automountServiceAccountToken"):
        assert pod[key] == chart_pod[key], key
    (container,) = pod["containers"]
    (chart_container,) = chart_pod["containers"]
    for key in ("securityContext", "terminationMessagePath", "terminationMessagePolicy"):
        assert container[key] == chart_container[key], key
    if strategy != "average":
        assert container["ports"] == chart_container["ports"]
    # the stable names: pod i is <job>-<i>.<service>, the Service headless over exactly these pods
    assert pod["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"].items() <= job["spec"]["template"]["metadata"]["labels"].items()
    assert len(f"{NAME}-{spec['completions'] - 1}") <= 63 and len(service["metadata"]["name"]) <= 63

    # the trainer's arguments: the chart's for the same values, less what the pipeline leaves to the trainer's defaults
    ours, chart = flags(effective_args(container)), flags(chart_container["args"])
    chart["--workdir"] = f"/workdir/run-{RUN_ID}"  # the run's directory: the pipeline's run id, the chart's revision
    chart["--job"], chart["--service"] = NAME, service["metadata"]["name"]
    not_parameters = {"--wait-timeout", "--peer-wait", "--progress-interval", "--embedding-size", "--margin", "--views"}
    assert set(chart) - set(ours) == not_parameters
    assert ours == {k: v for k, v in chart.items() if k not in not_parameters}


def test_a_parameter_server_job_has_a_chief_and_its_servers():
    job, _ = launch_dry_run("parameterserver", "--ps=2")
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 1 + 2 + 2


def test_the_launcher_refuses_trainer_arguments_without_workers():
    out = subprocess.run(
        [
            sys.executable,
            LAUNCHER,
            "--name",
            NAME,
            "--image",
            "i",
            "--claim",
            "c",
            "--dry-run",
            "--",
            "--strategy",
            "average",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and out.stdout == ""
    assert (
        out.stderr.strip().splitlines()[-1]
        == "trainer_job.py: error: the trainer arguments must give --workers, at least 1"
    )


# ------------------------------------------------ the server of the published model, the launcher's rights

KFP_DIR = os.path.join(ROOT, "pipelines", "kfp")


def kfp_manifests(name):
    with open(os.path.join(KFP_DIR, name)) as f:
        return [doc for doc in yaml.safe_load_all(f) if doc]


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
@pytest.mark.parametrize("name", ["server.yaml", "launcher-rbac.yaml"])
def test_the_serving_and_rbac_manifests_validate_strictly(name, kube):
    for doc in kfp_manifests(name):
        kubernetes_validate.validate(doc, kube, strict=True)


def test_the_server_serves_what_the_aggregator_publishes_and_takes_its_arguments():
    from disttrain_server.main import parse_args

    deployment = one(kfp_manifests("server.yaml"), "Deployment")
    (container,) = pod_spec(deployment)["containers"]
    args = parse_args(container["args"])
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "workdir"]
    assert mount["mountPath"] == "/workdir" and mount["readOnly"] is True
    # pipeline.yaml: the aggregator's --savefile is WORKDIR_ROOT/final/model.keras, WORKDIR_ROOT /workdir by default
    pipeline, _ = yaml.safe_load_all(open(os.path.join(KFP_DIR, "pipeline.yaml")))
    aggregator = pipeline["deploymentSpec"]["executors"]["exec-aggregator"]["container"]["args"]
    savefile = aggregator[aggregator.index("--savefile") + 1]
    root = pipeline["root"]["inputDefinitions"]["parameters"]["workdir_root"]["defaultValue"]
    assert (
        savefile.replace("{{$.inputs.parameters['workdir_root']}}", root) == args.model == "/workdir/final/model.keras"
    )
    chart = one(render(sets=("storage.existingClaim=wd",)), "Deployment", "server")
    (chart_container,) = [c for c in pod_spec(chart)["containers"] if c["name"] == "server"]
    for key in ("securityContext", "startupProbe", "livenessProbe", "readinessProbe"):
        assert container[key] == chart_container[key], key
    # the API's port and the metrics port, as the chart's server has them (server.port, server.metricsPort)
    assert container["ports"] == chart_container["ports"]
    assert arg(container, "--metrics-port") == arg(chart_container, "--metrics-port")
    assert pod_spec(deployment)["securityContext"] == pod_spec(chart)["securityContext"]


def test_the_launchers_role_allows_exactly_the_calls_it_makes():
    calls = set(re.findall(r"\.((?:create|read|list|delete|patch)_namespaced_\w+)\(", open(LAUNCHER).read()))
    needs = {
        "create_namespaced_job": ("batch", "jobs", "create"),
        "create_namespaced_service": ("", "services", "create"),
        "read_namespaced_job_status": ("batch", "jobs/status", "get"),
        "list_namespaced_pod": ("", "pods", "list"),
    }
    assert calls == set(needs)
    role = one(kfp_manifests("launcher-rbac.yaml"), "Role")
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == set(needs.values())
