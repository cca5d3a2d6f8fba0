"""--combine through the real programs (issue 18): trainers with a validation split, the aggregator
publishing the ensemble, which a real gunicorn server loads and answers :predict with; then the same
workers' best model, promoted."""

import json
import zipfile

import numpy as np
import pytest

from server.serving import http, running_server  # the server tests' real-gunicorn helpers
from stages import run_pipeline, stage

pytestmark = [pytest.mark.slow, pytest.mark.long]  # ~1 min: two trainings, two aggregations, a server


def meta_of(path):
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("disttrain.json"))


def served_predictions(base, x):
    status, body = http("POST", f"{base}/v1/models/disttrain:predict", {"instances": x.tolist()})
    assert status == 200, body
    return np.array(body["predictions"])


def test_the_ensemble_is_published_and_served_and_best_promotes_the_best_validation_worker(tmp_path):
    work = tmp_path
    report = run_pipeline(
        str(work),
        "sample:digits",
        3,
        "average",
        epochs=6,
        batch=32,
        extra_trainer_args=("--validation-fraction", "0.15"),
        aggregator_args=("--combine", "ensemble"),
    )
    section = report["combine"]
    assert section["published"] == "ensemble"
    candidates = section["candidates"]
    assert sorted(candidates) == ["average", "best", "ensemble"]
    assert candidates["ensemble"]["forward_passes"] == 3 and candidates["average"]["forward_passes"] == 1
    # what is published is the ensemble, and the gate judged it
    assert report["final"]["test_accuracy"] == pytest.approx(candidates["ensemble"]["test_accuracy"])
    assert report["gate"]["checks"][0]["final_accuracy"] == pytest.approx(candidates["ensemble"]["test_accuracy"])
    # best: the worker with the highest validation accuracy (its markers), held-out numbers its own
    markers = [json.loads((work / "train" / f"worker-0000{i}" / "_SUCCESS").read_text()) for i in range(3)]
    validation = {m["worker_index"]: m["validation_accuracy"] for m in markers}
    best = max(sorted(validation), key=validation.get)
    assert candidates["best"]["worker_index"] == best
    assert candidates["best"]["test_accuracy"] == pytest.approx(report["workers"][best]["test_accuracy"])
    assert all(0 < c["latency_ms_per_instance"] < 1000 for c in candidates.values())
    # the validation split was carved from each shard and left out of training
    shard = json.loads((work / "data" / "manifest.json").read_text())["shards"][0]["examples"]
    assert markers[0]["validation_examples"] == round(shard * 0.15)
    assert markers[0]["examples"] == shard - markers[0]["validation_examples"]
    meta = meta_of(work / "final" / "model.keras")
    assert meta["combine"] == "ensemble" and meta["ensemble_members"] == [0, 1, 2]

    x = np.load(work / "data" / "test.x.npy", allow_pickle=False)[:100]
    y = np.load(work / "data" / "test.y.npy", allow_pickle=False)[:100]
    with running_server(str(work)) as (base, _, _):
        status, info = http("GET", f"{base}/v1/models/disttrain")
        assert status == 200, info
        probabilities = served_predictions(base, x)
    assert probabilities.shape == (100, 10)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)  # still a softmax: a mean of three
    assert (probabilities.argmax(axis=1) == y).mean() > 0.8

    promoted = stage("aggregator", "--workdir", work, "--timeout", 5, "--combine", "best", "--force")
    assert f"best (worker {best})" in promoted.stdout
    meta = meta_of(work / "final" / "model.keras")
    assert meta["combine"] == "best" and meta["promoted_worker"] == best
    with running_server(str(work)) as (base, _, _):
        served = served_predictions(base, x)
    from disttrain_contract.artifact import load_model

    worker, _ = load_model(str(work / "train" / f"worker-0000{best}" / "model.keras"))
    np.testing.assert_allclose(served, np.asarray(worker(x, training=False)), atol=1e-6)
