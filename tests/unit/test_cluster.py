"""TF_CONFIG construction for MultiWorkerMirroredStrategy."""

import json

import pytest

from disttrain_trainer.cluster import KUBERNETES_PATTERN, LOCAL_PATTERN, build_tf_config, default_host_pattern, parse_tf_config


def test_kubernetes_addresses_follow_the_indexed_job_and_headless_service():
    config = build_tf_config(3, 1, KUBERNETES_PATTERN, job="dt-trainer-2", service="dt-workers", port=2222)
    assert config == {
        "cluster": {"worker": ["dt-trainer-2-0.dt-workers:2222", "dt-trainer-2-1.dt-workers:2222", "dt-trainer-2-2.dt-workers:2222"]},
        "task": {"type": "worker", "index": 1},
    }


def test_local_addresses_use_one_port_per_worker():
    config = build_tf_config(2, 0, LOCAL_PATTERN, port=5000)
    assert config["cluster"]["worker"] == ["127.0.0.1:5000", "127.0.0.1:5001"]
    assert config["task"] == {"type": "worker", "index": 0}


def test_default_pattern_depends_on_the_service():
    assert default_host_pattern("svc") == KUBERNETES_PATTERN
    assert default_host_pattern("") == LOCAL_PATTERN


@pytest.mark.parametrize(
    "workers, index, pattern, message",
    [
        (0, 0, LOCAL_PATTERN, "--workers must be >= 1"),
        (2, 2, LOCAL_PATTERN, "--worker-index must be in 0..1"),
        (2, -1, LOCAL_PATTERN, "--worker-index must be in 0..1"),
        (2, 0, "127.0.0.1:{port}", "same address to two workers"),
        (2, 0, "{host}:{port}", "bad --host-pattern"),
    ],
)
def test_bad_cluster_specs_are_refused(workers, index, pattern, message):
    with pytest.raises(ValueError, match=message):
        build_tf_config(workers, index, pattern)


def test_given_tf_config_is_read_back():
    text = json.dumps(build_tf_config(4, 3, LOCAL_PATTERN))
    assert parse_tf_config(text) == (4, 3)
    for bad in ("not json", '{"cluster": {}}', json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 5}})):
        with pytest.raises(ValueError, match="TF_CONFIG"):
            parse_tf_config(bad)
