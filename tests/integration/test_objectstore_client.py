"""disttrain_contract.objectstore against a real S3 store (SeaweedFS): streaming reads, and one line
naming the URL and the cause for a wrong key, a missing bucket or object and an unreachable endpoint."""

import os

import pytest

from disttrain_contract import objectstore
from disttrain_contract.objectstore import ObjectStoreError
from objectstore import SECRET_KEY


@pytest.fixture(scope="module")
def bucket(object_store, tmp_path_factory):
    url = object_store.make_bucket("client-tests")
    blob = tmp_path_factory.mktemp("blob") / "blob.bin"
    blob.write_bytes(os.urandom(3 * objectstore.BLOCK_SIZE + 12345))
    object_store.put(str(blob), f"{url}/blob.bin")
    return url, blob.read_bytes()


def test_streams_an_object_in_ranged_reads(object_store, bucket):
    url, data = bucket
    with object_store.configured():
        with objectstore.open_input(f"{url}/blob.bin") as fh:
            chunks = iter(lambda: fh.read(1 << 20), b"")
            assert b"".join(chunks) == data
            fh.seek(objectstore.BLOCK_SIZE + 7)
            assert fh.read(5) == data[objectstore.BLOCK_SIZE + 7 : objectstore.BLOCK_SIZE + 12]
        assert objectstore.size(f"{url}/blob.bin") == len(data)


def test_download_is_whole_or_absent(object_store, bucket, tmp_path):
    url, data = bucket
    with object_store.configured():
        target = tmp_path / "copy.bin"
        objectstore.download(f"{url}/blob.bin", str(target))
        assert target.read_bytes() == data
        with pytest.raises(ObjectStoreError, match="no such object"):
            objectstore.download(f"{url}/missing.bin", str(tmp_path / "missing.bin"))
        assert sorted(os.listdir(tmp_path)) == ["copy.bin"]


@pytest.mark.parametrize(
    "overrides, path, cause",
    [
        ({"AWS_SECRET_ACCESS_KEY": "not-the-key"}, "client-tests/blob.bin", "access denied"),
        ({}, "no-such-bucket/blob.bin", "the bucket does not exist"),
        ({}, "client-tests/no-such-object", "no such object"),
        # one attempt: the default's retries with backoff take ~20 s before giving up on a closed port
        (
            {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_MAX_ATTEMPTS": "1"},
            "client-tests/blob.bin",
            "cannot reach the endpoint http://127.0.0.1:9",
        ),
    ],
)
def test_failures_are_one_line_naming_url_and_cause(object_store, bucket, overrides, path, cause):
    url = f"s3://{path}"
    with object_store.configured(**overrides):
        with pytest.raises(ObjectStoreError) as caught:
            with objectstore.open_input(url) as fh:
                fh.read(1)
    message = str(caught.value)
    assert message.startswith(f"{url}: {cause}")
    assert "\n" not in message
    assert SECRET_KEY not in message and "not-the-key" not in message


def test_a_url_without_a_bucket_is_refused():
    with pytest.raises(ObjectStoreError, match="names no bucket"):
        objectstore.split("s3:///key")
    assert objectstore.split("s3://b/k/x.csv") == ("b", "k/x.csv")
    assert not objectstore.is_url("/data/x.csv")


def test_an_endpoint_with_a_credential_is_refused_without_repeating_it(monkeypatch):
    secret = "wJalrXUtnFEMI-K7MDENG"
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"https://AKIAEXAMPLE:{secret}@minio.storage.svc:9000")
    objectstore.reset()
    with pytest.raises(ObjectStoreError) as refused:
        objectstore.filesystem()  # before any request: the first use of the store
    message = str(refused.value)
    assert "carries a credential" in message and "AWS_SECRET_ACCESS_KEY" in message
    assert secret not in message and "AKIAEXAMPLE" not in message and "\n" not in message
    objectstore.reset()


@pytest.mark.parametrize(
    "url, allowed",
    [
        ("https://minio.storage.svc:9000", True),
        ("http://127.0.0.1:8333", True),  # the demo's SeaweedFS: nothing leaves the host
        ("http://localhost:8333", True),
        ("http://[::1]:8333", True),
        ("http://seaweedfs.storage.svc:8333", False),
        ("http://10.0.0.7:9000", False),
    ],
)
def test_plain_http_needs_loopback_or_the_opt_in(monkeypatch, url, allowed):
    monkeypatch.delenv(objectstore.ALLOW_HTTP_ENV, raising=False)
    if allowed:
        objectstore.check_endpoint(url)
    else:
        with pytest.raises(ObjectStoreError, match=f"is plain http: .* set {objectstore.ALLOW_HTTP_ENV}=1"):
            objectstore.check_endpoint(url)
        monkeypatch.setenv(objectstore.ALLOW_HTTP_ENV, "1")
        objectstore.check_endpoint(url)
