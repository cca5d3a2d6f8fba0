"""server.backend tfserving: the official TensorFlow Serving image on the run's SavedModel export.

Render tests only: the TF Serving image cannot be pulled where these tests run (no container
registry), so no test starts it. What TF Serving loads, the SavedModel, is tested with
TensorFlow's own loader by the aggregator's export tests; the helm test pod's python is run
against a stand-in answering as TF Serving in test_chart_drift.py.

The common renderings come from pytest-helm's session fixtures (conftest.py: `tfserving_manifest`,
`defaults_manifest`, ...); renderings with per-test --set values from chartlib.render.
"""

import pytest

from chartlib import CHART, NAMESPACE, RELEASE, VARIANTS, load_values, render, render_error

SERVER = f"{RELEASE}-disttrain-server"
TFSERVING = (
    "server.backend=tfserving",
    "server.auth.enabled=false",
    "server.service.type=ClusterIP",
    "server.allowedHosts=null",
)
DIGEST = "sha256:" + "ab" * 32


def server_pod(index):
    return index.get(f"Deployment/{SERVER}").spec.template


def container(pod, name="server"):
    (c,) = [c for c in pod.spec.containers if c.name == name]
    return c


def test_tfserving_runs_the_official_image_on_the_saved_model(tfserving_manifest):
    c = container(server_pod(tfserving_manifest))
    assert c.image == "tensorflow/serving:2.19.1" and c.imagePullPolicy == "IfNotPresent"
    assert c.command == [
        "/usr/bin/tensorflow_model_server"
    ]  # not the image's entrypoint script, which adds its own base path
    assert c.args == [
        "--model_name=disttrain",
        "--model_base_path=/workdir/run-1/final/saved_model",
        "--rest_api_port=8080",
        "--port=8500",
        "--file_system_poll_wait_seconds=30",
        "--monitoring_config_file=/etc/disttrain/tfserving/monitoring.config",
    ]
    assert [(p.name, p.containerPort) for p in c.ports] == [("http", 8080), ("grpc", 8500)]


def test_tfserving_values_reach_the_flags():
    docs = render(
        sets=TFSERVING
        + (
            "server.modelName=reviews",
            "server.port=9000",
            "server.tfserving.grpcPort=9500",
            "server.reloadIntervalSeconds=5",
            "server.tfserving.image.tag=2.18.0",
            "server.tfserving.extraArgs={--enable_batching=true}",
            "metrics.enabled=false",
        )
    )
    (deployment,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == SERVER]
    c = deployment["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == "tensorflow/serving:2.18.0"
    assert c["args"] == [
        "--model_name=reviews",
        "--model_base_path=/workdir/run-1/final/saved_model",
        "--rest_api_port=9000",
        "--port=9500",
        "--file_system_poll_wait_seconds=5",
        "--enable_batching=true",
    ]
    assert c["readinessProbe"]["httpGet"] == {"path": "/v1/models/reviews", "port": "http"}
    assert not [d for d in docs if d["kind"] == "ConfigMap"]
    assert "prometheus.io/scrape" not in (deployment["spec"]["template"]["metadata"].get("annotations") or {})


def test_a_numeric_tag_is_taken_as_its_text():
    docs = render(sets=TFSERVING + ("server.tfserving.image.tag=2.19",))
    (deployment,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == SERVER]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "tensorflow/serving:2.19"


def test_a_digest_pins_the_image():
    docs = render(sets=TFSERVING + (f"server.tfserving.image.digest={DIGEST}",))
    (deployment,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == SERVER]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == f"tensorflow/serving@{DIGEST}"


def test_tfserving_probes_ask_the_model_status(tfserving_manifest):
    c = container(server_pod(tfserving_manifest))
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe].httpGet == {"path": "/v1/models/disttrain", "port": "http"}, probe
    assert c.startupProbe.periodSeconds * c.startupProbe.failureThreshold == 300  # five minutes to load the model


def test_tfserving_mounts_the_volume_read_only_and_writes_only_tmp(tfserving_manifest):
    pod = server_pod(tfserving_manifest)
    c = container(pod)
    assert [(m.name, m.mountPath, m.get("readOnly", False)) for m in c.volumeMounts] == [
        ("workdir", "/workdir", True),
        ("tmp", "/tmp", False),
        ("tfserving-config", "/etc/disttrain/tfserving", True),
    ]
    assert c.securityContext.readOnlyRootFilesystem is True
    volumes = {v.name: v for v in pod.spec.volumes}
    assert sorted(volumes) == ["tfserving-config", "tmp", "workdir"]  # no gallery, no API token
    assert volumes["workdir"].persistentVolumeClaim.claimName == f"{RELEASE}-disttrain-workdir"
    assert volumes["tfserving-config"].configMap == {"name": f"{RELEASE}-disttrain-tfserving", "defaultMode": 0o444}


def test_tfserving_keeps_the_security_contexts_and_resources_of_the_disttrain_server(
    tfserving_manifest, defaults_manifest
):
    values = load_values("tfserving")
    tfs, ours = server_pod(tfserving_manifest), server_pod(defaults_manifest)
    assert container(tfs).securityContext == values["containerSecurityContext"] == container(ours).securityContext
    assert tfs.spec.securityContext == values["podSecurityContext"] == ours.spec.securityContext
    assert container(tfs).resources == values["server"]["resources"] == container(ours).resources
    assert tfs.spec.automountServiceAccountToken is False
    assert {e.name: e.value for e in container(tfs).env}["HOME"] == "/tmp"


def test_tfserving_waits_for_the_same_final_marker(tfserving_manifest, defaults_manifest):
    """The same wait container as the disttrain backend (it has the python TF Serving's image lacks); no gallery-dir."""
    tfs, ours = server_pod(tfserving_manifest), server_pod(defaults_manifest)
    (wait,) = tfs.spec.initContainers
    assert wait.name == "wait-for-model" and wait.command[-1] == "/workdir/run-1/final/_SUCCESS"
    assert wait == [c for c in ours.spec.initContainers if c.name == "wait-for-model"][0]
    deployment = tfserving_manifest.get(f"Deployment/{SERVER}")
    assert deployment.spec.strategy.rollingUpdate == {
        "maxSurge": 1,
        "maxUnavailable": 0,
    }  # the previous run serves until this one is ready


def test_tfserving_service_and_network_policy_open_rest_and_grpc(tfserving_manifest, defaults_manifest):
    service = tfserving_manifest.get(f"Service/{SERVER}")
    assert [(p.name, p.port, p.targetPort) for p in service.spec.ports] == [
        ("http", 80, "http"),
        ("grpc", 8500, "grpc"),
    ]
    assert [p.name for p in defaults_manifest.get(f"Service/{SERVER}").spec.ports] == ["http"]
    ingress = tfserving_manifest.get(f"NetworkPolicy/{SERVER}").spec.ingress
    clients, tester = ingress[0], ingress[-1]
    assert "from" not in clients and clients.ports == [
        {"protocol": "TCP", "port": 8080},
        {"protocol": "TCP", "port": 8500},
    ]
    assert tester["from"][0].podSelector.matchLabels["app.kubernetes.io/component"] == "test"
    assert tester.ports == [{"protocol": "TCP", "port": 8080}]  # the helm test pod uses REST only
    ours = defaults_manifest.get(f"NetworkPolicy/{SERVER}").spec.ingress[0]
    assert ours.ports == [{"protocol": "TCP", "port": 8080}]


def test_tfserving_metrics_are_its_own_prometheus_endpoint(tfserving_manifest):
    config = tfserving_manifest.get(f"ConfigMap/{RELEASE}-disttrain-tfserving").data["monitoring.config"]
    assert config.split() == [
        "prometheus_config",
        "{",
        "enable:",
        "true,",
        "path:",
        '"/monitoring/prometheus/metrics"',
        "}",
    ]
    annotations = server_pod(tfserving_manifest).metadata.annotations
    assert (
        annotations["prometheus.io/path"] == "/monitoring/prometheus/metrics"
        and annotations["prometheus.io/port"] == "8080"
    )
    assert len(annotations["checksum/tfserving-monitoring"]) == 64
    docs = render(sets=TFSERVING + ("metrics.serviceMonitor.enabled=true",))
    (monitor,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert monitor["spec"]["endpoints"][0]["path"] == "/monitoring/prometheus/metrics"


def test_helm_test_pod_knows_the_backend(tfserving_manifest, defaults_manifest):
    for index, backend in ((tfserving_manifest, "tfserving"), (defaults_manifest, "disttrain")):
        (c,) = index.get(f"Pod/{RELEASE}-disttrain-test").spec.containers
        assert c.command[-1] == backend
        assert c.image == "disttrain-server:0.1.0"  # its python; TF Serving's image has none


def test_the_disttrain_backend_is_the_default(defaults_manifest):
    c = container(server_pod(defaults_manifest))
    assert c.image == "disttrain-server:0.1.0" and "command" not in c
    assert load_values("defaults")["server"]["backend"] == "disttrain"
    with pytest.raises(KeyError, match="Kind 'ConfigMap' not found"):
        defaults_manifest.get(f"ConfigMap/{RELEASE}-disttrain-tfserving")


# ------------------------------------------------------------------ refused combinations


@pytest.mark.parametrize(
    "sets, expected",
    [
        (("server.backend=triton",), ["/server/backend", "disttrain", "tfserving"]),
        (
            ("server.backend=tfserving", "server.service.type=ClusterIP"),
            ["server.backend tfserving checks no API token"],
        ),
        (TFSERVING + ("server.allowedHosts={demo.example.com}",), ["server.backend tfserving answers any Host header"]),
        (
            ("server.backend=tfserving", "server.auth.enabled=false"),
            [
                "server.backend tfserving behind a LoadBalancer with no loadBalancerSourceRanges lets anyone on the network call the model"
            ],
        ),
        (TFSERVING + ("server.tfserving.image.digest=sha256:short",), ["/server/tfserving/image/digest"]),
        (TFSERVING + ("server.tfserving.extraArgs={rm -rf}",), ["/server/tfserving/extraArgs/0"]),
        (TFSERVING + ("server.tfserving.grpcPort=0",), ["/server/tfserving/grpcPort"]),
        (TFSERVING + ("server.tfserving.image.tag=a b",), ["/server/tfserving/image/tag"]),
        (("aggregator.exports={onnx}",), ["/aggregator/exports/0", "saved_model", "tflite"]),
        (("aggregator.exports={tflite,tflite}",), ["/aggregator/exports"]),
        (TFSERVING + ("aggregator.exports={tflite}",), ["keep saved_model in aggregator.exports"]),
    ],
)
def test_schema_refuses(sets, expected):
    err = render_error(sets=("storage.storageClass=x",) + sets)
    for part in expected:
        assert part in err, f"{part!r} not in:\n{err}"


@pytest.mark.parametrize(
    "sets, expected",
    [
        (("server.backend=triton",), 'unknown server.backend "triton"'),
        (("server.backend=tfserving", "server.service.type=ClusterIP"), "server.backend tfserving checks no API token"),
        (TFSERVING + ("server.allowedHosts={demo.example.com}",), "server.backend tfserving answers any Host header"),
        (
            ("server.backend=tfserving", "server.auth.enabled=false"),
            "behind a LoadBalancer with no server.service.loadBalancerSourceRanges",
        ),
        (
            TFSERVING
            + ("server.extraVolumes[0].name=tfserving-config", "server.extraVolumes[0].emptyDir.medium=Memory"),
            'the volume name "tfserving-config" is the chart\'s own',
        ),
        (
            TFSERVING + ("aggregator.exports={tflite}",),
            "serves the SavedModel the aggregator exports: keep saved_model in aggregator.exports",
        ),
    ],
)
def test_template_refuses_without_the_schema(sets, expected):
    err = render_error(sets=("storage.storageClass=x",) + sets, extra=("--skip-schema-validation",))
    assert expected in err, err


@pytest.mark.parametrize(
    "sets",
    [
        ("server.service.loadBalancerSourceRanges={203.0.113.0/24}",),
        ("server.service.allowPublicUnauthenticated=true",),
    ],
)
def test_a_load_balancer_is_accepted_when_restricted_or_explicitly_public(sets):
    docs = render(sets=("server.backend=tfserving", "server.auth.enabled=false", "server.allowedHosts=null") + sets)
    (service,) = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == SERVER]
    assert service["spec"]["type"] == "LoadBalancer"


def test_a_disttrain_gallery_rule_does_not_hide_the_tfserving_reason():
    """The gallery exposure rule is the disttrain backend's; tfserving gets its own reason only."""
    err = render_error(sets=("storage.storageClass=x", "server.backend=tfserving", "server.auth.enabled=false"))
    assert "enrol and delete face photos" not in err


def test_notes_tell_how_to_reach_tf_serving():
    from chartlib import helm

    out = helm(
        "install",
        "dt",
        str(CHART),
        "--dry-run=client",
        "--namespace",
        NAMESPACE,
        "-f",
        str(CHART / "ci" / VARIANTS["tfserving"]),
    )
    notes = out.stdout.split("NOTES:", 1)[1]
    for needle in (
        "tensorflow/serving:2.19.1",
        "/workdir/run-1/final/saved_model/<version>/",
        "gRPC on 8500",
        "curl -s http://127.0.0.1:8080/v1/models/disttrain/metadata",
        "/monitoring/prometheus/metrics",
    ):
        assert needle in notes, needle
    assert "/readyz" not in notes and "open http://127.0.0.1:8080/" not in notes
    assert (
        "report.png\n\n3. TF Serving" in notes and "--logs\n\n5. Metrics" in notes
    )  # the numbered steps keep their blank line


def test_notes_of_the_disttrain_backend_keep_their_steps():
    from chartlib import helm

    out = helm(
        "install",
        "dt",
        str(CHART),
        "--dry-run=client",
        "--namespace",
        NAMESPACE,
        "--set",
        "storage.storageClass=x",
        "--set",
        "server.allowedHosts={demo.example.com}",
    )
    notes = out.stdout.split("NOTES:", 1)[1]
    assert (
        "report.png\n\n3. Open the demo and the API:\n" in notes
        and "--logs\n\n5. Metrics: Prometheus text at /metrics " in notes
    )
    assert "port 9090, which no public Service publishes" in notes
    assert "TF Serving" not in notes


# ------------------------------------------------------------------ every rendering, through pytest-helm


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_no_two_resources_share_a_kind_and_name(variant, request):
    """pytest-helm's index refuses duplicates (DuplicateManifestError); helm install would refuse them too."""
    index = request.getfixturevalue(f"{variant.replace('-', '_')}_manifest")
    assert index.get(f"Deployment/{SERVER}").metadata.labels["app.kubernetes.io/component"] == "server"
