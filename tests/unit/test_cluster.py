"""TF_CONFIG construction for MultiWorkerMirroredStrategy."""

import json

import pytest

from disttrain_trainer.cluster import (
    KUBERNETES_PATTERN,
    LOCAL_PATTERN,
    build_tf_config,
    default_host_pattern,
    parse_tf_config,
)


def test_kubernetes_addresses_follow_the_indexed_job_and_headless_service():
    config = build_tf_config(3, 1, KUBERNETES_PATTERN, job="dt-trainer-2", service="dt-workers", port=2222)
    assert config == {
        "cluster": {
            "worker": [
                "dt-trainer-2-0.dt-workers:2222",
                "dt-trainer-2-1.dt-workers:2222",
                "dt-trainer-2-2.dt-workers:2222",
            ]
        },
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
    for bad in (
        "not json",
        '{"cluster": {}}',
        json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 5}}),
    ):
        with pytest.raises(ValueError, match="TF_CONFIG"):
            parse_tf_config(bad)


# ------------------------------------------------------------ parameter-server training
from disttrain_trainer.cluster import build_ps_tf_config, job_index, parse_ps_tf_config, ps_task  # noqa: E402


def test_ps_roles_follow_the_job_index_chief_then_ps_then_workers():
    roles = [ps_task(i, ps=2, workers=3) for i in range(6)]
    assert roles == [("chief", 0), ("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1), ("worker", 2)]
    assert [job_index(t, i, ps=2) for t, i in roles] == list(range(6))


@pytest.mark.parametrize(
    "index, ps, workers, message",
    [
        (0, 0, 2, "--ps must be >= 1"),
        (0, 1, 0, "--workers must be >= 1"),
        (4, 1, 2, r"--worker-index must be in 0\.\.3"),
        (-1, 1, 2, "--worker-index"),
    ],
)
def test_bad_ps_clusters_are_refused(index, ps, workers, message):
    with pytest.raises(ValueError, match=message):
        ps_task(index, ps, workers)


def test_ps_tf_config_on_kubernetes_and_locally():
    config = build_ps_tf_config(1, 2, 3, KUBERNETES_PATTERN, job="dt-trainer", service="dt-workers", port=2222)
    assert config == {
        "cluster": {
            "chief": ["dt-trainer-0.dt-workers:2222"],
            "ps": ["dt-trainer-1.dt-workers:2222"],
            "worker": ["dt-trainer-2.dt-workers:2222", "dt-trainer-3.dt-workers:2222"],
        },
        "task": {"type": "worker", "index": 1},
    }
    local = build_ps_tf_config(2, 1, 1, LOCAL_PATTERN, port=5000)
    assert local["cluster"] == {
        "chief": ["127.0.0.1:5000"],
        "ps": ["127.0.0.1:5001", "127.0.0.1:5002"],
        "worker": ["127.0.0.1:5003"],
    }
    assert local["task"] == {"type": "ps", "index": 0}
    with pytest.raises(ValueError, match="same address"):
        build_ps_tf_config(1, 1, 0, "127.0.0.1:{port}")


def test_given_ps_tf_config_is_read_back():
    for index in range(5):
        assert parse_ps_tf_config(json.dumps(build_ps_tf_config(2, 2, index, LOCAL_PATTERN))) == (2, index, 2)
    worker_only = json.dumps(build_tf_config(2, 0, LOCAL_PATTERN))
    no_ps = json.dumps(
        {"cluster": {"chief": ["a:1"], "ps": [], "worker": ["b:1"]}, "task": {"type": "chief", "index": 0}}
    )
    bad_index = json.dumps(
        {"cluster": {"chief": ["a:1"], "ps": ["c:1"], "worker": ["b:1"]}, "task": {"type": "ps", "index": 1}}
    )
    for bad in ("not json", worker_only, no_ps, bad_index):
        with pytest.raises(ValueError, match="TF_CONFIG"):
            parse_ps_tf_config(bad)


def test_a_parameter_server_epoch_is_split_evenly_over_the_workers():
    pytest.importorskip("tensorflow")
    from disttrain_trainer.strategies.parameterserver.strategy import split_epoch

    assert split_epoch(160, 32, 2) == [27, 27, 27, 27, 26, 26]  # not 5 calls of 32: 3 for one worker
    assert split_epoch(23, 32, 2) == [6, 6, 6, 5]  # at least 2 calls per worker
    assert split_epoch(3, 32, 2) == [1, 1, 1]  # never an empty call
    for spe, spc, workers in [(1000, 32, 3), (7, 2, 1), (64, 64, 4)]:
        calls = split_epoch(spe, spc, workers)
        assert sum(calls) == spe and max(calls) <= spc and max(calls) - min(calls) <= 1
