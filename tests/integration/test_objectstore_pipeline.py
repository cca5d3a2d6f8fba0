"""The pipeline with its inputs in a real S3 store (SeaweedFS on loopback, tests/objectstore.py): the
table and the model file from s3:// train the same model as the same files on the volume, the
trainer's --model-file s3:// fails on a wrong key, a missing bucket or object and an unreachable
endpoint with one line naming the URL and the cause (exit 2, nothing written), and no secret reaches
a log or an artifact."""

import hashlib
import json
import os
import zipfile

import pytest

from objectstore import SECRET_KEY
from own_models import (
    breast_cancer_csv,
    classifier,
    only_error_line,
    run_own_pipeline,
    saved,
    table_statistics,
    train,
    workdir_with,
)
from stages import stage

pytestmark = pytest.mark.slow


def _leftovers(work):
    """Downloaded model files left behind (there must be none once the trainer has exited)."""
    return [name for _, _, files in os.walk(work) for name in files if name.startswith(".model-file-")]


@pytest.fixture(scope="module")
def model_in_store(object_store, cancer_data, tmp_path_factory):
    """A notebook's classifier for the breast-cancer table, saved, and uploaded: (local path, s3:// URL)."""
    root = tmp_path_factory.mktemp("model")
    mean, variance = table_statistics(cancer_data / "manifest.json")
    path = saved(classifier(30, mean, variance, head="sigmoid", seed=3), root / "model.keras")
    return path, object_store.put(path, f"{object_store.make_bucket('models')}/notebook/model.keras")


def refused(object_store, work, model_url, cause, **overrides):
    """The trainer with --model-file model_url: exit 2, one line naming the URL and the cause, nothing written."""
    result = train(work, "--model-file", model_url, "--epochs", 1, env=object_store.env(**overrides))
    assert result.returncode == 2, result.stderr
    line = only_error_line(result)
    assert line.startswith(f"error: {model_url}: {cause}"), line
    assert SECRET_KEY not in result.stdout + result.stderr and "not-the-key" not in result.stderr
    assert not (work / "train").exists() and not _leftovers(work)


def test_a_model_file_missing_from_the_store_is_one_line_and_exit_2(
    object_store, cancer_data, model_in_store, tmp_path
):
    refused(object_store, workdir_with(cancer_data, tmp_path), "s3://models/notebook/missing.keras", "no such object")


@pytest.mark.long
def test_a_model_file_from_the_store_trains_and_each_store_failure_is_one_line(
    object_store, cancer_data, model_in_store, tmp_path
):
    path, url = model_in_store
    work = workdir_with(cancer_data, tmp_path)
    refused(object_store, work, url, "access denied", AWS_SECRET_ACCESS_KEY="not-the-key")
    refused(object_store, work, "s3://no-such-bucket/model.keras", "the bucket does not exist")
    # one attempt: the default's retries with backoff take ~20 s before giving up on a closed port
    refused(
        object_store,
        work,
        url,
        "cannot reach the endpoint",
        AWS_ENDPOINT_URL="http://127.0.0.1:9",
        AWS_MAX_ATTEMPTS="1",
    )

    result = train(work, "--model-file", url, "--epochs", 1, env=object_store.env())
    assert result.returncode == 0, result.stderr
    meta = json.loads(zipfile.ZipFile(work / "train" / "worker-00000" / "model.keras").read("disttrain.json"))
    assert meta["model_file_sha256"] == hashlib.sha256(open(path, "rb").read()).hexdigest()
    assert not _leftovers(work)  # the downloaded copy is gone with the trainer
    assert SECRET_KEY not in result.stdout + result.stderr


# ~20 s on an idle 2-core host: in make test-long (make test's budget; make test reads every source kind from the store)
@pytest.mark.long
def test_the_same_table_and_model_from_the_store_and_from_the_volume_train_the_same_model(object_store, tmp_path):
    table = breast_cancer_csv(str(tmp_path / "cancer.csv"))
    bucket = object_store.make_bucket("pipeline")
    table_url = object_store.put(table, f"{bucket}/tables/cancer.csv")
    runs = {}
    for where in ("volume", "store"):
        work = tmp_path / where
        env = object_store.env() if where == "store" else None
        stage(
            "copier",
            "--source",
            f"table:{table_url if where == 'store' else table}",
            "--n-shards",
            2,
            "--workdir",
            work,
            "--no-stats-plot",
            env=env,
        )
        if where == "volume":  # the user's model, built on the data's statistics, saved and uploaded
            model = saved(
                classifier(30, *table_statistics(work / "data" / "manifest.json"), seed=5), tmp_path / "m.keras"
            )
            model_url = object_store.put(model, f"{bucket}/models/m.keras")
        report = run_own_pipeline(
            work,
            2,
            "average",
            "--model-file",
            model_url if where == "store" else model,
            epochs=4,
            env=env,
            aggregator_args=("--force",),
        )
        runs[where] = (json.load(open(work / "data" / "manifest.json")), report, work)

    (local_manifest, local_report, _), (s3_manifest, s3_report, s3_work) = runs["volume"], runs["store"]
    for split in ("shards", "test"):  # byte-identical shards
        assert json.dumps(s3_manifest[split], sort_keys=True) == json.dumps(local_manifest[split], sort_keys=True)
    assert s3_manifest["source"] == f"table:{table_url}"
    assert s3_report["final"]["test_accuracy"] == local_report["final"]["test_accuracy"], (
        s3_report["final"],
        local_report["final"],
    )
    assert not _leftovers(s3_work) and [n for n in os.listdir(s3_work) if n.startswith(".")] == []
    for dirpath, _, files in os.walk(s3_work):  # the logs, report.json, every artifact's metadata
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as fh:
                assert SECRET_KEY.encode() not in fh.read(), os.path.join(dirpath, name)
