"""disttrain-aggregator --publish-to against a real S3 store (SeaweedFS): a real run's model is
published, and read back as each reader reads it -- TensorFlow's SavedModel from the downloaded
version directory, model.keras in Keras safe mode, report.json, latest.json -- and as KServe's own
storage initializer (the kserve-storage package, in its own virtualenv) downloads it. A wrong key, a
missing bucket or an unreachable endpoint is one line and exit 2 before the aggregator waits for or
evaluates anything, and no credential reaches the logs or the report."""

import json
import os
import subprocess

import numpy as np
import pytest

from disttrain_contract import objectstore
from kserve_venv import run_with_kserve_storage
from objectstore import SECRET_KEY
from publishing import PUBLISH, local_saved_model, partial_releases, partial_versions, split_listing, trained_run
from stages import read_report, stage

pytestmark = pytest.mark.slow

DOWNLOAD = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kserve_storage_download.py")


@pytest.fixture(scope="module")
def published(object_store, tmp_path_factory):
    """A digits run published to s3://publish-tests/digits by the aggregator: (workdir, url, stdout)."""
    root = trained_run(tmp_path_factory.mktemp("publish"))
    url = object_store.make_bucket("publish-tests") + "/digits"
    done = stage("aggregator", "--workdir", root, "--publish-to", url, env=object_store.env())
    return root, url, done.stdout + done.stderr


def held_out(root, n=64):
    """The first `n` held-out instances as the model takes them."""
    from disttrain_contract.evaluation import as_model_input
    from disttrain_contract.manifest import Manifest, read_split

    manifest = Manifest.read(str(root / "data"))
    x, _ = read_split(str(root / "data"), manifest, manifest.test)
    return as_model_input(manifest.task, x)[:n]


def download_prefix(url, local):
    """Every object under `url` into `local`, keeping the paths below the prefix."""
    for key in objectstore.listing(url):
        os.makedirs(os.path.dirname(os.path.join(local, key)), exist_ok=True)
        objectstore.download(f"{url}/{key}", os.path.join(local, key))
    return local


def test_the_published_release_is_the_local_one_and_loads_back(object_store, published, tmp_path):
    import tensorflow as tf

    from disttrain_contract.artifact import load_model
    from disttrain_contract.evaluation import predict
    from disttrain_contract.serving import INPUT_NAMES, OUTPUT_NAMES

    root, url, out = published
    local = read_report(root / "final")  # read (and so checked) by the contract's typed Report
    [entry] = local["published"]
    n = entry["version"]
    assert entry["url"] == url and n == local["exports"]["saved_model"]["version"]  # an empty store: the local number
    assert f"aggregator: uploaded release {n} to {url}/releases/{n}" in out
    assert SECRET_KEY not in out and SECRET_KEY not in json.dumps(local)
    with object_store.configured():
        objects = objectstore.listing(url)
        versions, releases, other = split_listing(objects)
        assert sorted(versions) == sorted(releases) == [n] and other == ["latest.json"], objects
        latest = json.loads(objectstore.read_bytes(f"{url}/latest.json"))
        manifest = json.loads(objectstore.read_bytes(f"{entry['release']}/RELEASE.json"))
        saved = download_prefix(entry["saved_model"], str(tmp_path / "saved_model"))
        release = download_prefix(entry["release"], str(tmp_path / "release"))
    saved_model = local_saved_model(root / "final")
    assert versions[n] == saved_model and not partial_versions(versions, saved_model)
    assert not partial_releases(releases, {n: manifest})
    assert latest["version"] == n and latest["storage_uri"] == f"{url}/releases/{n}/saved_model"
    assert latest["tf_serving_base_path"] == f"{url}/saved_model"
    assert {"model.keras", "model.tflite", "report.json", "RELEASE.json"} <= set(releases[n])

    uploaded = read_report(release)
    assert uploaded["published"] == local["published"] and uploaded["final"] == local["final"]
    assert SECRET_KEY not in json.dumps(uploaded)

    # the Keras model in safe mode, and the SavedModel as TF Serving loads it: the same outputs
    x = held_out(root)
    model, meta = load_model(os.path.join(release, "model.keras"))
    expected = predict(model, x)
    signature = tf.saved_model.load(saved).signatures["serving_default"]
    got = signature(**{INPUT_NAMES[meta["task"]]: tf.constant(x)})[OUTPUT_NAMES[meta["task"]]].numpy()
    assert got.shape == expected.shape and np.abs(got - expected).max() <= 1e-5


def test_kserve_storage_initializer_downloads_a_loadable_savedmodel(object_store, published, tmp_path):
    """KServe's storage initializer (kserve-storage, configured by the AWS variables as in a cluster)
    downloads the release's storageUri; TF Serving's layout comes out: <dir>/<version>/saved_model.pb."""
    import tensorflow as tf

    root, url, _ = published
    [entry] = json.load(open(root / "final" / "report.json"))["published"]
    target = tmp_path / "mnt-models"
    target.mkdir()
    env = {k: v for k, v in object_store.env().items() if not k.startswith("DISTTRAIN_")}
    done = run_with_kserve_storage(DOWNLOAD, entry["storage_uri"], target, env=env)
    assert done.returncode == 0, f"kserve-storage failed:\n{done.stdout}\n{done.stderr[-4000:]}"
    version_dir = target / str(entry["version"])
    assert sorted(os.listdir(target)) == [str(entry["version"])], os.listdir(target)
    assert local_saved_model(root / "final") == {
        os.path.relpath(os.path.join(r, n), version_dir): os.path.getsize(os.path.join(r, n))
        for r, _, names in os.walk(version_dir)
        for n in names
    }
    probabilities = (
        tf.saved_model.load(str(version_dir))
        .signatures["serving_default"](image=tf.constant(held_out(root, 16)))["probabilities"]
        .numpy()
    )
    assert probabilities.shape == (16, 10) and np.allclose(probabilities.sum(axis=1), 1, atol=1e-4)


def test_a_second_publish_gets_a_higher_version_and_keeps_the_first(object_store, published, tmp_path):
    """The small uploader re-publishes the run's final directory: a new number, latest.json moves,
    the first version stays (TF Serving's base keeps two)."""
    root, url, _ = published
    first = json.load(open(root / "final" / "report.json"))["published"][0]["version"]
    done = subprocess.run(
        [*PUBLISH, str(root / "final"), url], capture_output=True, text=True, timeout=300, env=object_store.env()
    )
    assert done.returncode == 0, done.stdout + done.stderr
    with object_store.configured():
        versions, releases, _ = split_listing(objectstore.listing(url))
        latest = json.loads(objectstore.read_bytes(f"{url}/latest.json"))
    assert latest["version"] > first and sorted(versions) == sorted(releases) == [first, latest["version"]]
    assert f"published release {latest['version']}" in done.stdout and SECRET_KEY not in done.stdout + done.stderr


@pytest.mark.parametrize(
    "overrides, where, cause",
    [
        ({"AWS_SECRET_ACCESS_KEY": "not-the-key"}, "publish-tests/x", "access denied"),
        ({}, "no-such-bucket/x", "the bucket does not exist"),
        (
            {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_MAX_ATTEMPTS": "1"},
            "publish-tests/x",
            "cannot reach the endpoint http://127.0.0.1:9",
        ),
    ],
)
def test_a_store_that_refuses_is_one_line_and_exit_2_before_anything_else(
    object_store, tmp_path, overrides, where, cause
):
    """An empty workdir: without the early probe the aggregator would wait for the copier (--timeout 5:
    exit 3). It exits 2 at once, naming the URL and the cause, no traceback, no credential."""
    object_store.make_bucket("publish-tests")
    done = stage(
        "aggregator",
        "--workdir",
        tmp_path,
        "--timeout",
        5,
        "--publish-to",
        f"s3://{where}",
        check=False,
        env=object_store.env(**overrides),
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(lines) == 1 and lines[0].startswith(f"error: --publish-to s3://{where}: cannot publish there: "), lines
    assert cause in lines[0], lines
    assert "Traceback" not in done.stderr and SECRET_KEY not in done.stdout + done.stderr
    assert "not-the-key" not in done.stdout + done.stderr


def test_a_bad_url_is_refused_by_the_flag(tmp_path):
    """(The URL forms are unit-tested: tests/unit/test_publish_names.py.)"""
    done = stage("aggregator", "--workdir", tmp_path, "--publish-to", "/local/dir", check=False)
    assert done.returncode == 2 and "is not an s3:// URL" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_the_uploader_refuses_a_directory_that_is_no_final_directory(object_store, tmp_path):
    done = subprocess.run(
        [*PUBLISH, str(tmp_path), "s3://publish-tests/y"],
        capture_output=True,
        text=True,
        timeout=120,
        env=object_store.env(),
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"no report.json in {tmp_path}" in done.stderr


@pytest.mark.long
def test_a_model_the_gate_refuses_is_never_uploaded(object_store, published, tmp_path):
    """A run trained with a vanishing learning rate (its initial weights, about chance) against the
    published model as --published: the gate refuses it (exit 4) and nothing reaches the store."""
    root, url, _ = published
    stage("copier", "--source", "sample:digits", "--n-shards", 1, "--workdir", tmp_path)
    stage("trainer", "--workdir", tmp_path, "--epochs", 1, "--learning-rate", 1e-9)
    done = stage(
        "aggregator",
        "--workdir",
        tmp_path,
        "--published",
        root / "final" / "model.keras",
        "--publish-to",
        f"{url}-refused",
        check=False,
        env=object_store.env(),
    )
    assert done.returncode == 4, done.stdout + done.stderr
    assert "refused to publish" in done.stderr and not (tmp_path / "final" / "model.keras").exists()
    with object_store.configured():
        assert objectstore.listing(f"{url}-refused") == {}  # not even the probe's object is left
