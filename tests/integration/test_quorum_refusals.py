"""Quorum success (issue 19): a strategy whose workers end together (multiworker, localsgd,
parameterserver) has no result without every worker, so the aggregator refuses
--min-workers there with the reason; the kill -9 run of `average` with a worker lost for
good is tests/faults/test_kill_average_quorum.py."""

from disttrain_contract import write_marker
from stages import stage


def test_a_missing_worker_of_a_multiworker_run_is_refused_with_the_reason(tmp_path):
    stage("copier", "--source", "sample:digits", "--n-shards", 2, "--workdir", tmp_path)
    write_marker(
        tmp_path / "train" / "worker-00000",
        "trainer",
        worker_index=0,
        workers=2,
        strategy="multiworker",
        epochs=1,
        init_weights_sha256="0" * 64,
        examples=700,
        model="model.keras",
    )
    result = stage(
        "aggregator", "--workdir", tmp_path, "--min-workers", 1, "--straggler-wait", 0, "--timeout", 5, check=False
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "worker(s) 1 did not finish, and a multiworker run has no result without every worker" in result.stderr
    assert not (tmp_path / "final").exists()


def test_min_workers_out_of_range_is_a_usage_error(tmp_path):
    result = stage("aggregator", "--workdir", tmp_path, "--expect", 2, "--min-workers", 3, check=False)
    assert result.returncode == 2 and "--min-workers must be in 1..--expect (2), got 3" in result.stderr
