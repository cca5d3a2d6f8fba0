"""TF_CONFIG for MultiWorkerMirroredStrategy, built from a worker's index.

On Kubernetes the trainers are one Indexed Job behind a headless Service, so
worker i is reachable as `<job>-<i>.<service>` and finds its own index in
$JOB_COMPLETION_INDEX. Locally all workers share 127.0.0.1, one port each.
Pure functions, no TensorFlow: unit-tested on their own.
"""

import json

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
