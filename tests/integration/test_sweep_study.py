"""The sweep end to end, with real trainer processes: two disttrain-sweep processes on one study,
then the distributed run with its best.json; and a sweep that must beat a bad learning rate.
Minutes of training on 2 cores: `make test-long`."""

import csv
import json
import os

import pytest

from disttrain_contract.params import read_params_file
from stages import free_port_block, read_report, stage, start_stage

pytestmark = pytest.mark.long


def load_trials(sweep_dir):
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(os.path.join(sweep_dir, "study.journal")))
    return optuna.load_study(study_name="disttrain", storage=storage).get_trials()


def test_two_processes_one_study_then_the_distributed_run(tmp_path):
    work = tmp_path / "w"
    stage("copier", "--source", "sample:digits", "--n-shards", 2, "--workdir", work)
    flags = ["--workdir", work, "--trials", 6, "--epochs", "2:4", "--heartbeat", 1, "--stale-after", 30]
    procs = [start_stage("sweep", *flags, "--process-index", i, log=tmp_path / f"sweep-{i}.log") for i in range(2)]
    for proc in procs:
        assert proc.wait(timeout=1500) == 0, [(tmp_path / f"sweep-{i}.log").read_text()[-3000:] for i in range(2)]
    sweep_dir = work / "sweep"
    trials = load_trials(sweep_dir)
    states = [t.state.name for t in trials]
    # every trial run once, none lost: 6 finished, no failure, 6 trial directories
    assert len(trials) == 6 and all(s in ("COMPLETE", "PRUNED") for s in states), states
    assert sorted(os.listdir(sweep_dir / "trials")) == [f"trial-{n:05d}" for n in range(6)]
    owners = {t.user_attrs["process"].split(":")[1] for t in trials}
    assert owners == {str(p.pid) for p in procs}, "both processes ran trials"
    best = json.loads((sweep_dir / "best.json").read_text())
    params = read_params_file(str(sweep_dir / "best.json"))
    assert set(params) == {"learning_rate", "batch", "width", "dropout", "epochs"} and 2 <= params["epochs"] <= 4
    assert best["value"] == max(t.value for t in trials if t.state.name == "COMPLETE")
    with open(sweep_dir / "trials.csv") as fh:
        assert len(list(csv.DictReader(fh))) == 6
    for plot in ("history.png", "importances.png", "parallel.png"):
        assert (sweep_dir / plot).stat().st_size > 1000
    # the validation split came from the shards only: the held-out split is still whole, unused
    manifest = json.loads((sweep_dir / "data" / "manifest.json").read_text())
    assert (
        manifest["test"]["name"] == "validation"
        and manifest["train_examples"] + manifest["test"]["examples"]
        == json.loads((work / "data" / "manifest.json").read_text())["train_examples"]
    )

    # the distributed run with the winner: both workers, then the report says where the parameters came from
    trainers = [
        start_stage(
            "trainer",
            "--workdir",
            work,
            "--worker-index",
            i,
            "--workers",
            2,
            "--params-from",
            sweep_dir / "best.json",
            log=tmp_path / f"worker-{i}.log",
        )
        for i in range(2)
    ]
    for proc in trainers:
        assert proc.wait(timeout=900) == 0
    out = stage("aggregator", "--workdir", work, "--force").stdout
    report = read_report(work / "final")
    # every parameter the sweep chose is the run's; the optimizer's description is the trainer's own addition
    assert {k: report["training_parameters"].get(k) for k in params} == params
    assert set(report["training_parameters"]) - set(params) == {"optimizer"}
    assert report["epochs"] == params["epochs"]
    assert report["parameters_origin"]["source"] == "sweep"
    assert report["parameters_origin"]["trial"] == best["trial"]
    assert "from the sweep" in out


def test_sweep_finds_a_clearly_better_learning_rate_than_a_bad_start(tmp_path):
    work = tmp_path / "w"
    stage("copier", "--source", "sample:digits", "--n-shards", 1, "--workdir", work)
    result = stage(
        "sweep",
        "--workdir",
        work,
        "--trials",
        6,
        "--learning-rate",
        "1e-5:1e-1",
        "--batch",
        64,
        "--width",
        64,
        "--dropout",
        0.3,
        "--epochs",
        5,
        "--pruner",
        "none",
        "--start",
        "learning_rate=1e-5",
        timeout=1500,
    )
    trials = load_trials(work / "sweep")
    start = trials[0]
    assert start.params["learning_rate"] == pytest.approx(1e-5)  # the enqueued bad start ran first
    best = json.loads((work / "sweep" / "best.json").read_text())
    # 1e-5 for 5 epochs leaves digits near chance; the sweep must find a rate >= 10x larger and
    # at least 30 points better on validation
    assert best["params"]["learning_rate"] >= 1e-4, result.stdout
    assert best["value"] >= start.value + 0.30, (start.value, best["value"])


def test_a_localsgd_sweep_searches_sync_every_with_groups_of_trainers(tmp_path):
    """--strategy localsgd: each trial is 2 trainer processes averaging over loopback, sync_every is
    searched, and the localsgd run trains with the winner's H."""
    work = tmp_path / "w"
    stage("copier", "--source", "sample:digits", "--n-shards", 2, "--workdir", work)
    stage(
        "sweep",
        "--workdir",
        work,
        "--trials",
        3,
        "--strategy",
        "localsgd",
        "--trial-workers",
        2,
        "--sync-every",
        "4,64",
        "--epochs",
        3,
        "--batch",
        32,
        "--width",
        64,
        "--dropout",
        0.3,
        "--pruner",
        "none",
        timeout=1500,
    )
    sweep_dir = work / "sweep"
    trials = load_trials(sweep_dir)
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    assert {t.params["sync_every"] for t in trials} <= {4, 64}
    for n in range(3):  # a group of two trainers per trial, each with its epochs
        for i in range(2):
            metrics = json.loads(
                (sweep_dir / "trials" / f"trial-{n:05d}" / f"worker-{i:05d}" / "metrics.json").read_text()
            )
            assert [m["epoch"] for m in metrics] == [1, 2, 3]
        assert "localsgd" in (sweep_dir / "trials" / f"trial-{n:05d}" / "trainer-1.log").read_text()
    best = json.loads((sweep_dir / "best.json").read_text())
    assert (best["strategy"], best["trial_workers"]) == ("localsgd", 2) and best["params"]["sync_every"] in (4, 64)
    data = json.loads((sweep_dir / "data" / "manifest.json").read_text())
    assert data["n_shards"] == 2

    # the localsgd run takes the winner's H; an average run is refused (the sweep searched another strategy)
    port = free_port_block(2)
    trainers = [
        start_stage(
            "trainer",
            "--workdir",
            work,
            "--worker-index",
            i,
            "--workers",
            2,
            "--strategy",
            "localsgd",
            "--port",
            port,
            "--params-from",
            sweep_dir / "best.json",
            log=tmp_path / f"worker-{i}.log",
        )
        for i in range(2)
    ]
    for i, proc in enumerate(trainers):
        assert proc.wait(timeout=900) == 0, (tmp_path / f"worker-{i}.log").read_text()[-3000:]
    stage("aggregator", "--workdir", work, "--force")
    report = read_report(work / "final")
    assert report["training_parameters"]["sync_every"] == best["params"]["sync_every"]
    assert report["parameters_origin"]["source"] == "sweep"
