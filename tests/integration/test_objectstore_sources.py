"""The copier's sources from a real S3 store (SeaweedFS on loopback, tests/objectstore.py), through the
real `disttrain-copier` CLI: each kind gives the same shards, byte for byte, as the same file on the
volume, fetches each byte of the object once, survives a connection dropped in the middle of a body,
and fails on a wrong key, a missing bucket or object and an unreachable endpoint with one line naming
the URL and the cause, exit 2 and nothing written."""

import json
import os
import re

import numpy as np
import pytest

from objectstore import SECRET_KEY, Proxy
from own_models import breast_cancer_csv
from stages import stage

BUCKET = "sources"


def _images(root, per_class=12):
    import cv2

    rng = np.random.default_rng(0)
    for name, colour in (("cats", 40), ("dogs", 200)):
        os.makedirs(root / name / "more", exist_ok=True)
        for i in range(per_class):
            image = np.clip(rng.normal(colour, 30, size=(12, 12, 3)), 0, 255).astype(np.uint8)
            # nested folders count for their class, as on disk, in the same order: "zz" sorts after "more/"
            where = f"more/{i:02d}" if i % 3 == 0 else f"zz{i:02d}"
            cv2.imwrite(str(root / name / f"{where}.png"), image)


def _texts(path):
    rng = np.random.default_rng(1)
    words = ["good", "bad", "plot", "actor", "dull", "great", "long", "fun"]
    with open(path, "w") as fh:
        fh.write("text,label\n")
        for i in range(160):
            fh.write(f"{' '.join(rng.choice(words, 6))} {i},{'pos' if i % 2 else 'neg'}\n")


@pytest.fixture(scope="module")
def inputs(object_store, tmp_path_factory):
    """Every kind of input on the volume and the same bytes in the store: {kind: (local spec, s3 spec)}."""
    import pyarrow.csv
    import pyarrow.parquet

    root = tmp_path_factory.mktemp("inputs")
    table = breast_cancer_csv(str(root / "cancer.csv"))
    pyarrow.parquet.write_table(pyarrow.csv.read_csv(table), str(root / "cancer.parquet"), row_group_size=100)
    _texts(root / "reviews.csv")
    rng = np.random.default_rng(2)
    np.savez(root / "arrays.npz", x=rng.normal(size=(300, 7)).astype(np.float32), y=rng.integers(0, 3, 300))
    _images(root / "images")
    bucket = object_store.make_bucket(BUCKET)
    for dirpath, _, files in os.walk(root):
        for name in files:
            local = os.path.join(dirpath, name)
            object_store.put(local, f"{bucket}/{os.path.relpath(local, root)}")
    return {
        kind: (f"{kind.split('-')[0]}:{root / path}", f"{kind.split('-')[0]}:{bucket}/{path}")
        for kind, path in (
            ("table", "cancer.csv"),
            ("table-parquet", "cancer.parquet"),
            ("csv", "reviews.csv"),
            ("npz", "arrays.npz"),
            ("images", "images"),
        )
    }


def copy(source, workdir, *extra, env=None, check=True):
    return stage(
        "copier",
        "--source",
        source,
        "--n-shards",
        2,
        "--workdir",
        workdir,
        "--no-stats-plot",
        "--image-size",
        8,
        *extra,
        env=env,
        check=check,
    )


def checksums(workdir):
    manifest = json.load(open(os.path.join(workdir, "data", "manifest.json")))
    return manifest, {split["name"]: split["sha256"] for split in [*manifest["shards"], manifest["test"]]}


def fetched_bytes(result):
    found = re.search(r"fetched ([\d,]+) bytes from the object store", result.stdout + result.stderr)
    return int(found.group(1).replace(",", "")) if found else None


@pytest.mark.parametrize("kind", ["table", "table-parquet", "csv", "npz", "images"])
def test_a_source_in_the_store_gives_the_same_shards_as_on_the_volume(object_store, inputs, kind, tmp_path):
    local, remote = inputs[kind]
    copy(local, tmp_path / "local")
    result = copy(remote, tmp_path / "s3", env=object_store.env())
    manifest, sums = checksums(tmp_path / "s3")
    assert sums == checksums(tmp_path / "local")[1]
    assert manifest["source"] == remote  # recorded as given, as a local path is
    # nothing left beside the output: the spooled copy of a table is removed
    assert sorted(os.listdir(tmp_path / "s3")) == ["data"]
    path = remote.split(":", 1)[1]
    size = (
        sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(local.split(":", 1)[1]) for f in fs)
        if kind == "images"
        else os.path.getsize(local.split(":", 1)[1])
    )
    if kind == "npz":  # the zip's directory and y.npy first (a ranged read at the end), then x.npy once
        assert size <= fetched_bytes(result) <= size + 64 * 1024, (path, fetched_bytes(result), size)
    else:
        assert fetched_bytes(result) == size, (path, fetched_bytes(result), size)
    assert SECRET_KEY not in result.stdout + result.stderr


def test_each_byte_crosses_the_wire_once_and_a_dropped_connection_is_retried(object_store, inputs, tmp_path):
    """Through a proxy that counts what the store sends: the table's bytes once (plus the requests'
    headers); then through one that resets the first connection 1 MB into the body: still the same shards."""
    local, remote = inputs["table"]
    size = os.path.getsize(local.split(":", 1)[1])
    copy(local, tmp_path / "local")
    proxy = Proxy(object_store.endpoint)
    try:
        copy(remote, tmp_path / "counted", env=object_store.env(AWS_ENDPOINT_URL=proxy.endpoint))
    finally:
        proxy.close()
    assert size <= proxy.bytes_from_store <= size + 16 * 1024, (proxy.bytes_from_store, size)

    big = tmp_path / "big.csv"  # the breast-cancer table 12 times: ~1.5 MB, more than the cut
    with open(local.split(":", 1)[1]) as fh:
        header, *rows = fh.readlines()
    big.write_text(header + "".join(rows * 12))
    url = object_store.put(str(big), f"s3://{BUCKET}/big.csv")
    copy(f"table:{big}", tmp_path / "big-local", "--allow-duplicates")  # (the same rows 12 times)
    proxy = Proxy(object_store.endpoint, cut_after=2**20)
    try:
        result = copy(
            f"table:{url}",
            tmp_path / "big-s3",
            "--allow-duplicates",
            env=object_store.env(AWS_ENDPOINT_URL=proxy.endpoint),
        )
    finally:
        proxy.close()
    assert proxy.cuts == 1
    assert checksums(tmp_path / "big-s3")[1] == checksums(tmp_path / "big-local")[1]
    assert fetched_bytes(result) == big.stat().st_size  # the download resumed where the cut left it


@pytest.mark.parametrize(
    "source, overrides, cause",
    [
        (f"table:s3://{BUCKET}/cancer.csv", {"AWS_SECRET_ACCESS_KEY": "not-the-key"}, "access denied"),
        ("table:s3://no-such-bucket/cancer.csv", {}, "the bucket does not exist"),
        (f"table:s3://{BUCKET}/no-such.csv", {}, "no such object"),
        (f"npz:s3://{BUCKET}/no-such.npz", {}, "no such object"),
        (f"images:s3://{BUCKET}", {"AWS_SECRET_ACCESS_KEY": "not-the-key"}, "access denied"),
        # one attempt: the default's retries with backoff take ~20 s before giving up on a closed port
        (
            f"table:s3://{BUCKET}/cancer.csv",
            {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_MAX_ATTEMPTS": "1"},
            "cannot reach the endpoint http://127.0.0.1:9",
        ),
    ],
)
def test_a_store_failure_is_one_line_exit_2_and_nothing_written(
    object_store, inputs, source, overrides, cause, tmp_path
):
    result = copy(source, tmp_path / "work", env=object_store.env(**overrides), check=False)
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {source.split(':', 1)[1]}: {cause}"), result.stderr
    assert "Traceback" not in result.stderr
    assert SECRET_KEY not in result.stdout + result.stderr and "not-the-key" not in result.stdout + result.stderr
    assert not (tmp_path / "work").exists() or os.listdir(tmp_path / "work") == []


def test_a_url_with_a_credential_in_it_is_refused(object_store, tmp_path):
    result = copy(
        f"table:s3://KEY:{SECRET_KEY}@{BUCKET}/cancer.csv", tmp_path / "work", env=object_store.env(), check=False
    )
    assert result.returncode == 2 and "never a credential" in result.stderr, result.stderr
    assert SECRET_KEY not in result.stdout + result.stderr
