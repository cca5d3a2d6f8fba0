"""Object storage: S3 and S3-compatible stores (AWS S3, GCS's XML API, Ceph RGW, SeaweedFS, MinIO).

Every stage that reads an input or writes an output it publishes goes through this module for an
`s3://bucket/key` path, so credentials, endpoints, retries and error messages behave the same in all.

Why fsspec with s3fs: TensorFlow's own `s3://` file system now lives in tensorflow-io, whose last
release fails on the TensorFlow we pin. s3fs (the fsspec project's S3 file system, on botocore) gives
file objects that stream with ranged reads, which pyarrow's CSV and Parquet readers take as they
are, and it is configured exactly like the AWS tools and boto3 (which TF Serving's and KServe's
storage initialisers use): the standard environment variables, nothing of our own.

Configuration, all standard (botocore reads them):
  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN)   the credentials
  AWS_ENDPOINT_URL       an S3-compatible store's address (unset: AWS S3)
  AWS_REGION / AWS_DEFAULT_REGION                                   the region
  AWS_CA_BUNDLE          a private CA's certificates (PEM) for an https endpoint
and one of ours (check_endpoint): DISTTRAIN_S3_ALLOW_HTTP=1 accepts a plain http:// endpoint that is
not on loopback (its requests, signed keys and data cross the network in clear).

Retries: botocore retries each request (its "standard" mode: throttling and transient errors, with
exponential backoff and jitter) up to ATTEMPTS times (AWS_MAX_ATTEMPTS and AWS_RETRY_MODE, when set,
take precedence as in every AWS tool), and s3fs repeats a call that failed on a dropped
connection up to S3FS_RETRIES times with its own backoff. A wrong key, a missing bucket or object, or
an endpoint that cannot be reached is not retried forever: it becomes one ObjectStoreError line that
names the URL and the cause, never a credential.
"""

import contextlib
import errno
import ipaddress
import os
from urllib.parse import urlsplit

from disttrain_contract.atomic import atomic_path, describe_os_error
from disttrain_contract.errors import ContractError

SCHEME = "s3://"
ATTEMPTS = 5  # botocore's total attempts per request (standard retry mode)
S3FS_RETRIES = 3  # s3fs's repeats of a call that failed on a dropped connection
CONNECT_TIMEOUT_SEC = 10
READ_TIMEOUT_SEC = 60
BLOCK_SIZE = 8 * 2**20  # bytes per ranged read while streaming: memory stays bounded by a few blocks
CREDENTIAL_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
# what only a local write raises (s3fs gives a store's AccessDenied as EACCES: not in this list)
LOCAL_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


class ObjectStoreError(ContractError):
    """An object store refused or could not serve a request: the message names the URL and the cause."""


def is_url(path):
    """Whether `path` names an object (s3://...) rather than a local file."""
    return isinstance(path, str) and path.startswith(SCHEME)


def split(url):
    """'s3://bucket/some/key' -> ('bucket', 'some/key'); a URL without a bucket is an error, and so is
    one that carries a credential (s3://KEY:SECRET@bucket/...): credentials come from the environment."""
    if not is_url(url):
        raise ObjectStoreError(f"{url!r} is not an s3:// URL")
    bucket, _, key = url[len(SCHEME) :].partition("/")
    if not bucket:
        raise ObjectStoreError(f"{url!r} names no bucket (expected s3://BUCKET/KEY)")
    if "@" in bucket or ":" in bucket:
        # the URL is printed and recorded (the manifest's source): it must not hold a secret
        raise ObjectStoreError(
            "an s3:// URL names a bucket and a key, never a credential: set AWS_ACCESS_KEY_ID "
            "and AWS_SECRET_ACCESS_KEY in the environment instead"
        )
    return bucket, key


ALLOW_HTTP_ENV = "DISTTRAIN_S3_ALLOW_HTTP"
LOOPBACK_NAMES = ("localhost",)


def check_endpoint(url):
    """AWS_ENDPOINT_URL as the stages accept it: no credential in it (an https://KEY:SECRET@host URL
    would sit in the pod spec and in every message naming the endpoint; the key pair belongs in
    AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), and https unless the store is on loopback (the
    demo's SeaweedFS: nothing leaves the host) or DISTTRAIN_S3_ALLOW_HTTP=1 says plain http is meant."""
    parts = urlsplit(url)
    if "@" in parts.netloc:
        # the message never repeats the URL: its user part is the secret
        raise ObjectStoreError(
            "AWS_ENDPOINT_URL carries a credential (USER:SECRET@ before the host): give the "
            "store's address alone and the key pair in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        )
    if parts.scheme == "http" and not is_loopback(parts.hostname) and os.environ.get(ALLOW_HTTP_ENV) != "1":
        raise ObjectStoreError(
            f"AWS_ENDPOINT_URL {url} is plain http: requests and data would cross the network "
            f"in clear; use https, or set {ALLOW_HTTP_ENV}=1 (chart: objectStore.allowPlainHttp=true) "
            "for a store on a network you trust"
        )


def is_loopback(host):
    if not host:
        return False
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def endpoint():
    """The store's address as the user gave it (for messages; check_endpoint has refused one holding a credential)."""
    return os.environ.get("AWS_ENDPOINT_URL") or "AWS S3"


_filesystem = None


def filesystem():
    """The process's s3fs file system, configured from the environment (created on first use).

    s3fs is imported here, not at module level: the stages import the contract on every start and
    most runs never touch an object store."""
    global _filesystem
    if _filesystem is None:
        if os.environ.get("AWS_ENDPOINT_URL"):
            check_endpoint(os.environ["AWS_ENDPOINT_URL"])
        import s3fs

        config = {"connect_timeout": CONNECT_TIMEOUT_SEC, "read_timeout": READ_TIMEOUT_SEC}
        if not (os.environ.get("AWS_MAX_ATTEMPTS") or os.environ.get("AWS_RETRY_MODE")):
            config["retries"] = {"max_attempts": ATTEMPTS, "mode": "standard"}
        fs = s3fs.S3FileSystem(skip_instance_cache=True, default_block_size=BLOCK_SIZE, config_kwargs=config)
        fs.retries = S3FS_RETRIES
        _filesystem = fs
    return _filesystem


def reset():
    """Forget the configured file system (after the environment changed: tests, a new credential)."""
    global _filesystem
    _filesystem = None


def scrub(text):
    """`text` with any credential from the environment replaced by '***'."""
    text = str(text)
    for name in CREDENTIAL_VARIABLES:
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


def describe(url, err):
    """One line for a failed request on `url`: what went wrong and what to check, never a secret."""
    name = type(err).__name__
    text = " ".join(scrub(err).split())
    if isinstance(err, PermissionError) or any(
        code in text for code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden")
    ):
        cause = (
            "access denied (check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and that this key may "
            "read/write the bucket)"
        )
    elif "bucket does not exist" in text.lower() or "NoSuchBucket" in text:
        cause = "the bucket does not exist"
    elif isinstance(err, FileNotFoundError):
        cause = "no such object"
    elif (
        "EndpointConnectionError" in name
        or "Could not connect" in text
        or "ConnectTimeout" in name
        or "ClientConnectorError" in name
    ):
        cause = f"cannot reach the endpoint {endpoint()} (check AWS_ENDPOINT_URL and the network)"
    elif "SSLError" in name or "CERTIFICATE_VERIFY_FAILED" in text:
        cause = f"TLS failed with {endpoint()} (for a private CA, set AWS_CA_BUNDLE)"
    elif "NoCredentialsError" in name or "Unable to locate credentials" in text:
        cause = "no credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
    else:
        cause = f"{name}: {text}" if text else name
    return f"{url}: {cause}"


@contextlib.contextmanager
def errors(url):
    """Turn what the store or the network raises inside the block into one ObjectStoreError line."""
    try:
        yield
    except ObjectStoreError:
        raise
    except ContractError:
        raise
    except Exception as err:  # botocore, aiohttp and s3fs each raise their own kinds
        if not _from_store(err):
            raise
        raise ObjectStoreError(describe(url, err)) from None


def _from_store(err):
    module = type(err).__module__ or ""
    return isinstance(err, OSError) or module.split(".")[0] in ("botocore", "aiobotocore", "aiohttp", "s3fs")


_fetched = {"bytes": 0, "requests": 0}


def fetched():
    """{"bytes", "requests"}: what this process has fetched from object stores so far (the ranged
    reads of open_read and download, and read_bytes). A stage reports it, so that a second read of
    the same object would show."""
    return dict(_fetched)


def _counting(fetch):
    def counted(start, end):
        data = fetch(start, end)
        _fetched["bytes"] += len(data)
        _fetched["requests"] += 1
        return data

    return counted


def open_read(url, cache_type="readahead"):
    """A binary file object streaming the object at `url` by ranged reads (seekable, bounded memory).

    Each ranged read is one GET of about BLOCK_SIZE bytes, repeated on a dropped connection (the
    module docstring). The existence check happens here, so a wrong key or a missing object fails
    before any reading. Reads through the file object raise what the store raises: wrap them in
    errors(url)."""
    split(url)
    with errors(url):
        fh = filesystem().open(url, "rb", block_size=BLOCK_SIZE, cache_type=cache_type)
    fh.cache.fetcher = _counting(fh.cache.fetcher)
    return fh


def open_input(path):
    """A binary file object for a local path or an s3:// URL."""
    return open_read(path) if is_url(path) else open(path, "rb")


def size(url):
    with errors(url):
        return filesystem().size(url)


def require_object(url):
    """The size of the object at `url`; an ObjectStoreError line if there is none (a missing object, or
    a prefix: a "folder" of objects)."""
    split(url)
    with errors(url):
        info = filesystem().info(url)
    if info.get("type") != "file":
        raise ObjectStoreError(f"{url}: no such object (it is a prefix of other objects: name one object)")
    return int(info["size"])


def read_bytes(url):
    """The whole of one (small) object, in one request (repeated on a dropped connection)."""
    with errors(url):
        data = filesystem().cat_file(url)
    _fetched["bytes"] += len(data)
    _fetched["requests"] += 1
    return data


def exists(url):
    with errors(url):
        return filesystem().exists(url)


def download(url, local_path):
    """Copy one object to a local file (through a temporary name: the file is whole or absent).

    One GET whose body streams to the file in 64 KiB pieces; when the connection drops, s3fs asks
    again from the first byte it has not received (up to S3FS_RETRIES times): every byte is fetched
    once and memory stays small. (s3fs's default for a large object, parallel ranged GETs, holds
    several 8 MiB parts in memory, does not repeat a part whose connection drops, and first opens
    and abandons a GET of the whole object.)"""
    from fsspec.callbacks import Callback

    split(url)
    received = Callback()
    with atomic_path(local_path) as tmp:  # removed on any failure; renamed into place once whole
        with errors(url), _local_errors(local_path, LOCAL_WRITE_ERRNOS):  # a full disk is not the store's fault
            filesystem().get_file(url, tmp, max_concurrency=1, callback=received)
        _fetched["bytes"] += received.value
        _fetched["requests"] += 1
        with _local_errors(local_path):
            with open(tmp, "rb+") as out:
                os.fsync(out.fileno())
    return local_path


# ------------------------------------------------------------------ writing (aggregator --publish-to)
# An object is only ever seen whole: S3 makes a single PUT visible at once, and s3fs sends a file
# larger than its chunk size as a multipart upload, which S3 makes visible only when it completes
# (an interrupted one stays invisible until it is aborted: abort_uploads).


def upload(local_path, url):
    """One local file to the object `url`."""
    with errors(url):
        filesystem().put_file(local_path, url)


def write_bytes(url, data):
    """`data` as the object `url`, in one PUT."""
    with errors(url):
        filesystem().pipe_file(url, data)


def copy(source_url, url):
    """A server-side copy of one object (no data passes through this process)."""
    with errors(url):
        filesystem().copy(source_url, url)


def listing(url):
    """{key below the prefix `url`: size} of every object under it, listed afresh (s3fs caches listings)."""
    bucket, key = split(url)
    root = f"{bucket}/{key.strip('/')}/" if key.strip("/") else f"{bucket}/"
    fs = filesystem()
    with errors(url):
        fs.invalidate_cache()
        found = fs.find(root, detail=True)
    return {
        path[len(root) :]: info["size"]
        for path, info in found.items()
        if path.startswith(root) and info.get("type", "file") == "file"
    }


def remove(urls):
    """Delete objects (a batch DeleteObjects per bucket); ones already gone are not an error."""
    urls = list(urls)
    if urls:
        with errors(urls[0]):
            filesystem().rm(urls)


def abort_uploads(url, started_before):
    """Abort the incomplete multipart uploads of keys under the prefix `url` that were started before
    `started_before` (an aware datetime): an interrupted upload's parts are invisible but kept (and
    billed) until aborted. Returns the keys."""
    bucket, key = split(url)
    prefix = f"{key.strip('/')}/" if key.strip("/") else ""
    fs = filesystem()
    aborted, page = [], {"Bucket": bucket, "Prefix": prefix}
    with errors(url):
        while True:
            response = fs.call_s3("list_multipart_uploads", **page)
            for upload in response.get("Uploads") or []:
                if upload["Initiated"] < started_before:
                    fs.call_s3("abort_multipart_upload", Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
                    aborted.append(upload["Key"])
            if not response.get("IsTruncated"):
                return aborted
            page.update(KeyMarker=response["NextKeyMarker"], UploadIdMarker=response["NextUploadIdMarker"])


@contextlib.contextmanager
def _local_errors(path, errnos=None):
    """An OSError writing `path` (of one of `errnos`, default any) as the one line every stage prints."""
    try:
        yield
    except OSError as err:
        if errnos is not None and err.errno not in errnos:
            raise
        raise ContractError(describe_os_error(err, path)) from None
