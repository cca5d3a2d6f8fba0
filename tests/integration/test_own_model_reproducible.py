"""Reproducible runs (docs/pipeline.md, "Reproducible runs"): the same command on the same data, with --threads 1,
gives the same final weights (every worker's final_weights_sha256), for a model file whose training draws random
numbers in four layers (RandomFlip, RandomTranslation, GaussianNoise, Dropout, none of them seeded), as a
build(spec) module's did before; another --seed gives other weights. The real copier and 2 real trainer processes
per run; the runs differ only in their --workdir and --port. Each strategy's check is 3 runs, one after the other:
localsgd's in make test (28 s on an idle 2-core host, 130 s on a loaded one), average's and multiworker's in make
test-long. localsgd and average train the model loaded at start-up; multiworker loads it again under its scope."""

import json

import pytest

from own_models import random_layers_cnn_file, workdir_with
from stages import free_port_block, stage, start_stage

pytestmark = pytest.mark.slow

WORKERS, EPOCHS, BATCH, SEED = 2, 2, 32, 42


@pytest.fixture(scope="module")
def digits_and_model(tmp_path_factory):
    """The digits copied once into 2 shards, and the model file (saved once: every run loads the same bytes)."""
    root = tmp_path_factory.mktemp("reproducible")
    stage("copier", "--source", "sample:digits", "--n-shards", WORKERS, "--workdir", root / "work")
    return root / "work" / "data", random_layers_cnn_file(str(root / "model.keras"))


def start(data, model, work, strategy, seed):
    """copier's data -> 2 trainers of `strategy`, one thread each, started."""
    work = workdir_with(data, work)
    port = free_port_block(WORKERS)
    procs = [
        start_stage(
            "trainer",
            "--workdir",
            work,
            "--worker-index",
            i,
            "--workers",
            WORKERS,
            "--strategy",
            strategy,
            "--epochs",
            EPOCHS,
            "--batch",
            BATCH,
            "--seed",
            seed,
            "--threads",
            1,
            "--port",
            port,
            "--model-file",
            model,
            log=str(work / f"worker-{i}.log"),
        )
        for i in range(WORKERS)
    ]
    return work, procs


def finish(work, procs):
    """Once they end: their markers' final_weights_sha256, and the init_weights_sha256 they share."""
    for i, proc in enumerate(procs):
        if proc.wait(timeout=600) != 0:
            for p in procs:
                p.kill()
            raise AssertionError(f"trainer {i} failed:\n" + open(work / f"worker-{i}.log").read()[-3000:])
    markers = [json.load(open(work / "train" / f"worker-{i:05d}" / "_SUCCESS")) for i in range(WORKERS)]
    assert len({m["init_weights_sha256"] for m in markers}) == 1, markers  # the file's weights: every worker's start
    return [m["final_weights_sha256"] for m in markers], markers[0]["init_weights_sha256"]


@pytest.mark.parametrize(
    "strategy",
    ["localsgd", pytest.param("average", marks=pytest.mark.long), pytest.param("multiworker", marks=pytest.mark.long)],
)
def test_a_model_file_with_random_layers_trains_to_the_same_weights_twice(strategy, digits_and_model, tmp_path):
    data, model = digits_and_model
    runs = [(tmp_path / "first", SEED), (tmp_path / "second", SEED), (tmp_path / "other-seed", SEED + 1)]
    (first, init), (second, _), (other, other_init) = [
        finish(*start(data, model, work, strategy, seed)) for work, seed in runs
    ]
    assert first == second, (first, second)
    assert init not in first  # the weights moved
    assert other_init == init  # the same start (the file's weights) ...
    assert set(other).isdisjoint(first), (first, other)  # ... and other draws: other weights
