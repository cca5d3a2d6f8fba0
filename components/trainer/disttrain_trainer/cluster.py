"""TF_CONFIG for MultiWorkerMirroredStrategy and ParameterServerStrategy, built from a task's index.

On Kubernetes the trainers are one Indexed Job behind a headless Service, so
worker i is reachable as `<job>-<i>.<service>` and finds its own index in
$JOB_COMPLETION_INDEX. Locally all workers share 127.0.0.1, one port each.

Parameter-server training runs 1 + ps + workers tasks on the same Indexed Job:
index 0 is the chief (the coordinator), 1..ps the parameter servers, then the
workers; the worker with Job index i reads shard i - 1 - ps (`ps_task`).
Pure functions, no TensorFlow: unit-tested on their own.
"""

import json
import os
from typing import NamedTuple

KUBERNETES_PATTERN = "{job}-{index}.{service}:{port}"
LOCAL_PATTERN = "127.0.0.1:{index_port}"


def default_host_pattern(service):
    return KUBERNETES_PATTERN if service else LOCAL_PATTERN


def worker_addresses(workers, pattern, job="", service="", port=12345):
    """host:port of every worker. Placeholders: {index}, {job}, {service},
    {port} (the base port) and {index_port} (base port + index)."""
    try:
        return [
            pattern.format(index=i, job=job, service=service, port=port, index_port=port + i) for i in range(workers)
        ]
    except (KeyError, IndexError, ValueError) as err:
        raise ValueError(f"bad --host-pattern {pattern!r}: {err}") from None


def build_tf_config(workers, index, pattern, job="", service="", port=12345):
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    if not 0 <= index < workers:
        raise ValueError(f"--worker-index must be in 0..{workers - 1}, got {index}")
    addresses = worker_addresses(workers, pattern, job, service, port)
    if len(set(addresses)) != workers:
        raise ValueError(f"--host-pattern {pattern!r} gives the same address to two workers: {addresses}")
    return {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}}


def parse_tf_config(text):
    """(workers, index) from a TF_CONFIG given by the environment."""
    try:
        config = json.loads(text)
        workers = len(config["cluster"]["worker"])
        index = int(config["task"]["index"])
        task_type = config["task"]["type"]
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"TF_CONFIG is not valid: {err}") from None
    if task_type != "worker" or set(config["cluster"]) != {"worker"} or not 0 <= index < workers:
        raise ValueError(f"TF_CONFIG task {config['task']} does not fit a cluster of {workers} workers")
    return workers, index


# ------------------------------------------------------------ parameter-server training
def ps_task(index, ps, workers):
    """(task type, task index) of the Indexed Job's pod `index`: 0 = chief, 1..ps = ps, then workers."""
    if ps < 1:
        raise ValueError(f"--ps must be >= 1, got {ps}")
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    if not 0 <= index < 1 + ps + workers:
        raise ValueError(
            f"--worker-index must be in 0..{ps + workers} (1 chief + {ps} ps + {workers} workers), got {index}"
        )
    if index == 0:
        return "chief", 0
    if index <= ps:
        return "ps", index - 1
    return "worker", index - 1 - ps


def job_index(task_type, task_index, ps):
    """The inverse of ps_task."""
    return {"chief": 0, "ps": 1, "worker": 1 + ps}[task_type] + task_index


def build_ps_tf_config(ps, workers, index, pattern, job="", service="", port=12345):
    """TF_CONFIG of Job index `index` in a cluster of 1 chief, `ps` parameter servers and `workers` workers
    (addresses: `pattern` with the Job index, as for build_tf_config)."""
    task_type, task_index = ps_task(index, ps, workers)
    total = 1 + ps + workers
    addresses = worker_addresses(total, pattern, job, service, port)
    if len(set(addresses)) != total:
        raise ValueError(f"--host-pattern {pattern!r} gives the same address to two tasks: {addresses}")
    cluster = {"chief": addresses[:1], "ps": addresses[1 : 1 + ps], "worker": addresses[1 + ps :]}
    return {"cluster": cluster, "task": {"type": task_type, "index": task_index}}


def parse_ps_tf_config(text):
    """(workers, Job index, ps) from a parameter-server TF_CONFIG given by the environment."""
    try:
        config = json.loads(text)
        cluster, task = config["cluster"], config["task"]
        chiefs, ps, workers = (len(cluster[key]) for key in ("chief", "ps", "worker"))
        task_type, task_index = task["type"], int(task["index"])
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"TF_CONFIG is not valid for parameter-server training: {err}") from None
    if (
        set(cluster) != {"chief", "ps", "worker"}
        or chiefs != 1
        or ps < 1
        or workers < 1
        or task_type not in cluster
        or not 0 <= task_index < len(cluster[task_type])
    ):
        raise ValueError(f"TF_CONFIG task {task} does not fit a cluster of 1 chief, {ps} ps and {workers} workers")
    return workers, job_index(task_type, task_index, ps), ps


class Placement(NamedTuple):
    """Where this task is in its group: the workers, its Job index, its TF_CONFIG text (None: a strategy whose
    workers never talk) and the parameter-server tasks (parameterserver; 0 otherwise)."""

    workers: int
    index: int
    tf_config: str | None = None
    parameter_servers: int = 0


def configure(config, workers, index, connected):
    """This task's Placement, with os.environ["TF_CONFIG"] set for a connected strategy: the TF_CONFIG given in
    the environment wins (its task count and index too; parameter-server training also takes its number of
    ps tasks from it), else one is built from --host-pattern (by default the Kubernetes names
    `<job>-<index>.<service>` with --service, else loopback ports). A strategy whose workers never talk gets
    none: a stray TF_CONFIG must not turn the default strategy distributed. ValueError from a malformed
    TF_CONFIG or pattern is raised as ContractError (one line, exit 2)."""
    from disttrain_contract import ContractError

    tf_config = os.environ.get("TF_CONFIG")
    if not connected:
        os.environ.pop("TF_CONFIG", None)
        return Placement(workers, index)
    ps = config.strategy_settings.ps  # (parameterserver's --ps; 0 for the others)
    try:
        if tf_config and ps:
            workers, index, ps = parse_ps_tf_config(tf_config)
        elif tf_config:
            workers, index = parse_tf_config(tf_config)
        else:
            pattern = config.host_pattern or default_host_pattern(config.service)
            built = (
                build_ps_tf_config(ps, workers, index, pattern, config.job, config.service, config.port)
                if ps
                else build_tf_config(workers, index, pattern, config.job, config.service, config.port)
            )
            tf_config = json.dumps(built)
            os.environ["TF_CONFIG"] = tf_config
    except ValueError as err:
        raise ContractError(str(err)) from None
    return Placement(workers, index, tf_config, ps)
