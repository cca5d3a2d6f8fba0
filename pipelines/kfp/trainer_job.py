"""Launch disttrain's trainers from a Kubeflow pipeline as the chart does: one Indexed Job plus a headless Service.

The connected strategies (multiworker, localsgd, parameterserver) need every task to reach every other
at a stable address. A pipeline task is one pod with a generated name, so the trainer step launches
an Indexed Job instead: pod i gets JOB_COMPLETION_INDEX=i and, with `subdomain` set to the headless
Service, the DNS name <job>-<i>.<service>, which is how disttrain-trainer builds TF_CONFIG
(--job, --service, --port). The Job carries the chart's failure handling (podFailurePolicy,
backoffLimitPerIndex, podReplacementPolicy) and security settings; the Service is owned by the Job,
so deleting the Job removes both.

    python3 trainer_job.py --name NAME --image IMAGE --claim PVC --mount /workdir [--dry-run] -- TRAINER ARGS...

With --dry-run it prints the two manifests (JSON, one per line) and exits; otherwise it creates them
with the official `kubernetes` client (in-cluster configuration: the pod's service account must be
allowed to create Jobs and read their status, create Services and list Pods in its namespace:
launcher-rbac.yaml), waits for the Job and exits 0 when it completes, or 1 with the Job's failure
reason and each failed pod's termination message. This file imports only the standard library at
module level: the pipeline embeds it verbatim in the launcher task, and the tests run its --dry-run to
validate the manifests.
"""

import argparse
import json
import sys
import time

# Exit codes the trainer uses (disttrain_contract.errors): 2 bad input or a broken stage contract (a
# retry cannot help: fail the Job at once), 75 a trainer that saved its checkpoint on SIGTERM (a
# preempted pod: not counted against the retries).
BAD_INPUT_EXIT_CODE = 2
PREEMPTED_EXIT_CODE = 75
UID = 10001

# The trainer's options whose value is unset arrive as "--flag=" and a switch as "--flag=true" or
# "--flag=false": the pipeline passes every option, set or not, and this drops the unset ones before
# the program runs. The same script wraps every stage of the pipeline (pipelines/kfp/pipeline.py).
DROP_UNSET_OPTIONS = (
    'for a; do shift; case "$a" in --*=|--*=false) ;; --*=true) set -- "$@" "${a%=true}" ;; '
    '*) set -- "$@" "$a" ;; esac; done'
)

# The trainer refuses an option of another strategy (exit 2), and the chart passes each only with its
# strategies: the pipeline gives them all as --flag=VALUE, and the launcher keeps those of the strategy.
STRATEGY_OPTIONS = {
    "--ps": ("parameterserver",),
    "--allreduce-dtype": ("multiworker", "localsgd"),
    "--heartbeat-timeout": ("multiworker", "localsgd"),
    "--sync-every": ("localsgd",),
    "--validation-fraction": ("average",),
    "--outer-optimizer": ("localsgd",),
    "--outer-lr": ("localsgd",),
    "--outer-momentum": ("localsgd",),
    "--outer-overlap": ("localsgd",),
    "--sync-at-epoch-end": ("localsgd",),
    "--sync-batch-norm-batches": ("localsgd",),
}
# DiLoCo's outer step: the trainer takes its learning rate and momentum with --outer-optimizer nesterov only,
# and the chart passes the three only then
OUTER_STEP_OPTIONS = ("--outer-optimizer", "--outer-lr", "--outer-momentum")
# the strategies whose group has a chief and --ps parameter servers beside the workers (disttrain_contract.strategies:
# parameter_servers; tests/unit/test_strategy_registry.py keeps these tables equal to the registry, since this
# file must run on the standard library alone)
PARAMETER_SERVER_STRATEGIES = ("parameterserver",)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="trainer_job.py",
        description="Run disttrain-trainer as an Indexed Job with a headless Service and wait for it.",
    )
    parser.add_argument("--name", required=True, help="the Job's name (a DNS label); the Service is NAME-workers")
    parser.add_argument("--namespace", default="", help="default: the pod's own namespace")
    parser.add_argument("--image", required=True, help="the disttrain-trainer image")
    parser.add_argument("--port", type=int, default=12345, help="the trainers' base port (trainer --port)")
    parser.add_argument("--claim", required=True, help="the PersistentVolumeClaim of the shared working directory")
    parser.add_argument("--mount", default="/workdir", help="where it is mounted in the trainer pods")
    parser.add_argument("--backoff-limit-per-index", type=int, default=3)
    parser.add_argument("--active-deadline", type=int, default=86400, help="seconds (the Job's activeDeadlineSeconds)")
    parser.add_argument(
        "--termination-grace", type=int, default=60, help="seconds a trainer gets to save its checkpoint on SIGTERM"
    )
    parser.add_argument("--poll", type=float, default=10.0, help="seconds between two looks at the Job")
    parser.add_argument("--dry-run", action="store_true", help="print the manifests and exit")
    parser.add_argument("trainer_args", nargs=argparse.REMAINDER, help="after --: disttrain-trainer's arguments")
    args = parser.parse_args(argv)
    if args.trainer_args[:1] == ["--"]:
        args.trainer_args = args.trainer_args[1:]
    try:
        args.trainer_args = for_strategy(args.trainer_args)
        args.tasks = trainer_tasks(args.trainer_args)
    except ValueError as err:
        parser.error(str(err))
    return args


def for_strategy(trainer_args):
    """The trainer arguments less the options (--flag=VALUE) of strategies other than the one they name, and
    less the outer step's options unless it is nesterov."""
    strategy = trainer_args[trainer_args.index("--strategy") + 1] if "--strategy" in trainer_args else "average"
    nesterov = "--outer-optimizer=nesterov" in trainer_args

    def kept(arg):
        option = arg.split("=", 1)[0] if arg.startswith("--") and "=" in arg else arg
        return strategy in STRATEGY_OPTIONS.get(option, (strategy,)) and (nesterov or option not in OUTER_STEP_OPTIONS)

    return [a for a in trainer_args if kept(a)]


def trainer_tasks(trainer_args):
    """Pods the trainer's own arguments ask for: --workers, plus 1 chief and --ps servers for parameterserver."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--workers", type=int)
    parser.add_argument("--strategy", default="average")
    parser.add_argument("--ps", type=int, default=1)
    known, _ = parser.parse_known_args([a for a in trainer_args if a not in ("--ps=", "--workers=")])
    if known.workers is None or known.workers < 1:
        raise ValueError("the trainer arguments must give --workers, at least 1")
    return known.workers + (1 + known.ps if known.strategy in PARAMETER_SERVER_STRATEGIES else 0)


def service_name(job):
    return f"{job}-workers"


def manifests(
    name,
    namespace,
    image,
    tasks,
    port,
    claim,
    mount,
    trainer_args,
    backoff_limit_per_index=3,
    active_deadline=86400,
    termination_grace=60,
):
    """The Indexed Job and its headless Service (dicts), as the chart's trainer-job.yaml renders them on Kubernetes >= 1.29."""
    service = service_name(name)
    labels = {
        "app.kubernetes.io/name": "disttrain",
        "app.kubernetes.io/component": "trainer",
        "app.kubernetes.io/instance": name,
    }
    security = {
        "runAsNonRoot": True,
        "runAsUser": UID,
        "runAsGroup": UID,
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    container = {
        "name": "trainer",
        "image": image,
        "command": ["sh", "-c", DROP_UNSET_OPTIONS + '; exec "$@"', "sh", "disttrain-trainer"],
        "args": [*trainer_args, "--job", name, "--service", service, "--port", str(port)],
        "env": [
            {"name": "HOME", "value": "/tmp"},
            {"name": "MPLCONFIGDIR", "value": "/tmp"},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
        ],
        "ports": [{"name": "collective", "containerPort": port, "protocol": "TCP"}],
        "securityContext": security,
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": "workdir", "mountPath": mount}, {"name": "tmp", "mountPath": "/tmp"}],
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "completionMode": "Indexed",
            "completions": tasks,
            "parallelism": tasks,
            "backoffLimitPerIndex": backoff_limit_per_index,
            # the aggregator needs every worker
            "maxFailedIndexes": 0,
            # a replacement only once the old pod is gone: TensorFlow never sees two pods with one task index
            "podReplacementPolicy": "Failed",
            "podFailurePolicy": {
                "rules": [
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                    {
                        "action": "FailJob",
                        "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [BAD_INPUT_EXIT_CODE]},
                    },
                    {
                        "action": "Ignore",
                        "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [PREEMPTED_EXIT_CODE]},
                    },
                ]
            },
            "activeDeadlineSeconds": active_deadline,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "subdomain": service,
                    "terminationGracePeriodSeconds": termination_grace,
                    "automountServiceAccountToken": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": UID,
                        "runAsGroup": UID,
                        "fsGroup": UID,
                        "fsGroupChangePolicy": "OnRootMismatch",
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [container],
                    "volumes": [
                        {"name": "workdir", "persistentVolumeClaim": {"claimName": claim}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
                    ],
                },
            },
        },
    }
    headless = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service, "namespace": namespace, "labels": labels},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": labels,
            "ports": [{"name": "collective", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }
    return job, headless


def own_namespace():
    with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
        return f.read().strip()


def failure_report(core, namespace, name, condition):
    """The Job's failure reason, and the termination message of each of its failed pods."""
    lines = [f"the trainer Job {namespace}/{name} failed: {condition.reason}: {condition.message}"]
    for pod in core.list_namespaced_pod(namespace, label_selector=f"job-name={name}").items:
        for status in pod.status.container_statuses or []:
            ended = status.state.terminated
            if ended is not None and ended.exit_code != 0:
                message = (ended.message or "").strip().splitlines()
                lines.append(f"  {pod.metadata.name}: exit {ended.exit_code}" + (f": {message[-1]}" if message else ""))
    return "\n".join(lines)


def launch(job, headless, poll):
    """Create the Job and its Service, wait for the Job; 0 when it completes, else 1 with the reason on stderr."""
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    config.load_incluster_config()
    batch, core = client.BatchV1Api(), client.CoreV1Api()
    namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
    try:
        uid = batch.create_namespaced_job(namespace, job).metadata.uid
        print(f"created Job {namespace}/{name} ({job['spec']['completions']} pods)", flush=True)
    except ApiException as err:
        if err.status != 409:
            raise
        # a retried launcher task of the same run: follow the Job the first attempt created
        uid = batch.read_namespaced_job_status(name, namespace).metadata.uid
        print(f"Job {namespace}/{name} exists already (a retried task): following it", flush=True)
    # owned by the Job: deleting the Job removes the Service too
    headless["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid, "blockOwnerDeletion": False}
    ]
    try:
        core.create_namespaced_service(namespace, headless)
    except ApiException as err:
        if err.status != 409:
            raise
    while True:
        status = batch.read_namespaced_job_status(name, namespace).status
        for condition in status.conditions or []:
            if condition.status != "True":
                continue
            if condition.type == "Complete":
                print(f"the trainer Job {namespace}/{name} completed: {status.succeeded} pods succeeded", flush=True)
                return 0
            if condition.type == "Failed":
                print(failure_report(core, namespace, name, condition), file=sys.stderr, flush=True)
                return 1
        time.sleep(poll)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    namespace = args.namespace or ("default" if args.dry_run else own_namespace())
    job, headless = manifests(
        args.name,
        namespace,
        args.image,
        args.tasks,
        args.port,
        args.claim,
        args.mount,
        args.trainer_args,
        args.backoff_limit_per_index,
        args.active_deadline,
        args.termination_grace,
    )
    if args.dry_run:
        print(json.dumps(job, sort_keys=True))
        print(json.dumps(headless, sort_keys=True))
        return 0
    return launch(job, headless, args.poll)


if __name__ == "__main__":
    sys.exit(main())
