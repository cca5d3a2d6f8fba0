"""`helm upgrade` of a release at revision 4, rendered for real (no cluster).

`helm template` always renders revision 1. To see revision 5, Helm's in-memory
release driver is preloaded with a revision-4 release (HELM_DRIVER=memory,
HELM_MEMORY_DRIVER_DATA) and `helm upgrade --dry-run=client` runs against a
stand-in API server on 127.0.0.1 that only answers the version and discovery
requests Helm makes. This also exercises .Capabilities.KubeVersion as Helm
reads it from a cluster, not from --kube-version.
"""

import http.server
import json
import subprocess
import threading

import pytest

from chartlib import (
    CHART,
    NAMESPACE,
    RELEASE,
    _render,
    arg,
    helm_path,
    load_all,
    main_container,
    one,
    wait_containers,
    yaml,
)


class FakeApiServer(http.server.BaseHTTPRequestHandler):
    minor = "33"

    def log_message(self, *args):
        pass

    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/version":
            body = {"major": "1", "minor": self.minor, "gitVersion": f"v1.{self.minor}.0", "platform": "linux/amd64"}
        elif path == "/api":
            body = {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        elif path == "/apis":
            body = {"kind": "APIGroupList", "apiVersion": "v1", "groups": []}
        else:
            self.send_response(404)
            self.end_headers()
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def cluster(tmp_path):
    """(env, release file): a kubeconfig for the stand-in API server and a stored revision-4 release."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeApiServer)
    # (shutdown() waits for the serving loop's next poll: the default is half a second)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
                "users": [{"name": "fake", "user": {}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": NAMESPACE}}],
                "current-context": "fake",
            }
        )
    )
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    releases = tmp_path / "releases.yaml"
    releases.write_text(
        yaml.safe_dump(
            [
                {
                    "name": RELEASE,
                    "namespace": NAMESPACE,
                    "version": 4,
                    "info": {"status": "deployed"},
                    "chart": {"metadata": {k: chart[k] for k in ("apiVersion", "name", "version", "appVersion")}},
                    "config": {"storage": {"storageClass": "nfs-client"}},
                    "manifest": _render(
                        "defaults", (), "1.33.0", None, ()
                    ),  # what revision 4 would have applied (named -r1 here)
                }
            ]
        )
    )
    env = {
        "KUBECONFIG": str(kubeconfig),
        "HELM_DRIVER": "memory",
        "HELM_MEMORY_DRIVER_DATA": str(releases),
        "HOME": str(tmp_path),
        "PATH": "/usr/bin:/bin",
    }
    yield env
    server.shutdown()
    server.server_close()
    FakeApiServer.minor = "33"


def upgrade(env, *sets, major=4):
    args = [
        helm_path(major),
        "upgrade",
        RELEASE,
        str(CHART),
        "-n",
        NAMESPACE,
        "--dry-run=client" if major == 4 else "--dry-run",
        "--set",
        "storage.storageClass=nfs-client",
        "--set",
        "server.allowedHosts={demo.example.com}",
    ]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "REVISION: 5" in text
    hooks = text.split("HOOKS:", 1)[1].split("MANIFEST:", 1)[0]
    manifest = text.split("MANIFEST:", 1)[1].split("NOTES:", 1)[0]
    docs = load_all(hooks + "\n---\n" + manifest)
    return docs, text.split("NOTES:", 1)[1]


@pytest.mark.parametrize("major", [4, 3])
def test_upgrade_starts_run_5_in_its_own_directory(cluster, major):
    docs, notes = upgrade(cluster, "workers=3", major=major)
    for stage in ("copier", "trainer", "aggregator"):
        job = one(docs, "Job", stage)
        assert job["metadata"]["name"] == f"{RELEASE}-disttrain-{stage}-r5"  # a new Job: nothing immutable is patched
        assert job["spec"]["template"]["metadata"]["labels"]["disttrain.io/run"] == "r5"
    for stage in ("copier", "trainer", "aggregator", "server"):
        assert arg(main_container(docs, stage), "--workdir") == "/workdir/run-5"
    waits = {
        d["metadata"]["name"]: [a for a in c["command"] if a.endswith("_SUCCESS")]
        for d in docs
        if d["kind"] in ("Job", "Deployment")
        for c in wait_containers(d)
    }
    assert waits[f"{RELEASE}-disttrain-trainer-r5"] == ["/workdir/run-5/data/_SUCCESS"]
    assert waits[f"{RELEASE}-disttrain-aggregator-r5"] == [
        f"/workdir/run-5/train/worker-{i:05d}/_SUCCESS" for i in range(3)
    ]
    assert waits[f"{RELEASE}-disttrain-server"] == ["/workdir/run-5/final/_SUCCESS"]
    assert arg(main_container(docs, "server"), "--model") == "/workdir/run-5/final/model.keras"
    assert arg(main_container(docs, "trainer"), "--job") == f"{RELEASE}-disttrain-trainer-r5"
    # what stays: the claim (the data of earlier runs), the server Deployment and the Services
    assert one(docs, "PersistentVolumeClaim")["metadata"]["name"] == f"{RELEASE}-disttrain-workdir"
    assert one(docs, "Deployment")["metadata"]["name"] == f"{RELEASE}-disttrain-server"
    assert one(docs, "Pod")["spec"]["containers"][0]["command"][6] == "/workdir/run-5/data/manifest.json"
    assert "job/dt-disttrain-copier-r5" in notes and "/workdir/run-5/final/report.json" in notes


@pytest.mark.parametrize(
    "minor, per_index, failure_policy", [("33", True, True), ("28", False, True), ("25", False, False)]
)
def test_failure_handling_follows_the_clusters_version(cluster, minor, per_index, failure_policy):
    FakeApiServer.minor = minor
    spec = one(upgrade(cluster)[0], "Job", "trainer")["spec"]
    assert ("backoffLimitPerIndex" in spec) == per_index
    assert ("podReplacementPolicy" in spec) == per_index
    assert ("podFailurePolicy" in spec) == failure_policy
