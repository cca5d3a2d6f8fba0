"""Issue 13 in the chart: Prometheus scrape annotations and /metrics' multiprocess directory on the
server pods, the optional ServiceMonitor, the optional TensorBoard Deployment, and their
NetworkPolicy openings, as rendered."""

import pytest

from chartlib import (
    DEFAULT_KUBE,
    NAMES,
    arg,
    find,
    main_container,
    one,
    pod_spec,
    render,
    render_error,
    stage_container,
)

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="pip install kubernetes-validate (see tests/chart)"
)

SCRAPE = {"prometheus.io/scrape": "true", "prometheus.io/port": "9090", "prometheus.io/path": "/metrics"}
TENSORBOARD_ON = ("tensorboard.enabled=true",)
RESTRICTED = ("server.networkPolicy.allowFrom.ipBlocks[0].cidr=10.0.0.0/8",)


def server_pod(docs):
    return one(
        [d for d in docs if d["metadata"]["labels"].get("app.kubernetes.io/component") == "server"], "Deployment"
    )["spec"]["template"]


def env_of(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def selects(selector, labels):
    return selector["matchLabels"].items() <= labels.items()


def server_ingress(docs):
    return one([d for d in docs if d["metadata"]["name"].endswith("-server")], "NetworkPolicy")["spec"]["ingress"]


def validate(docs):
    """Every manifest strictly, except the ServiceMonitor: kubernetes-validate has no schema for the
    Prometheus Operator's CRD (its structure is checked by the ServiceMonitor test)."""
    for doc in docs:
        if doc["kind"] == "ServiceMonitor":
            continue
        try:
            kubernetes_validate.validate(doc, DEFAULT_KUBE, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']}: {err.message} at {list(err.path)}")


# ------------------------------------------------------------------ metrics


def test_server_pods_are_annotated_for_scraping_and_share_a_multiprocess_dir_on_tmp(defaults_manifest):
    pod = defaults_manifest.get(NAMES["server"])["spec"]["template"]
    assert pod["metadata"]["annotations"] == SCRAPE
    server = stage_container(defaults_manifest, "server")
    assert "--no-metrics" not in server["args"]
    directory = env_of(server)["PROMETHEUS_MULTIPROC_DIR"]
    # the root filesystem is read-only: the directory must be on the writable /tmp emptyDir
    assert server["securityContext"]["readOnlyRootFilesystem"] is True
    assert (
        directory.startswith("/tmp/") and {m["mountPath"]: m["name"] for m in server["volumeMounts"]}["/tmp"] == "tmp"
    )
    assert "emptyDir" in {v["name"]: v for v in pod["spec"]["volumes"]}["tmp"]
    with pytest.raises(KeyError, match="Kind 'ServiceMonitor' not found"):
        defaults_manifest.get("ServiceMonitor/dt-disttrain-server")


def test_scrape_port_follows_the_metrics_port_and_pod_annotations_win(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text('podAnnotations:\n  prometheus.io/path: /custom\n  team: ml\n')
    docs = render(sets=("server.port=9000", "server.metricsPort=9100"), extra=("-f", str(values)))
    assert server_pod(docs)["metadata"]["annotations"] == {
        **SCRAPE,
        "prometheus.io/port": "9100",
        "prometheus.io/path": "/custom",
        "team": "ml",
    }
    server = main_container(docs, "server")
    assert arg(server, "--metrics-port") == "9100" and arg(server, "--port") == "9000"
    assert {p["name"]: p["containerPort"] for p in server["ports"]} == {"http": 9000, "metrics": 9100}


def test_the_public_service_and_ingress_never_publish_the_metrics_port():
    docs = render(sets=("server.ingress.enabled=true", "metrics.serviceMonitor.enabled=true"))
    public = one([d for d in docs if d["metadata"]["name"] == "dt-disttrain-server"], "Service")
    assert [(p["name"], p["targetPort"]) for p in public["spec"]["ports"]] == [("http", "http")]
    assert public["spec"]["type"] == "LoadBalancer"
    backend = one(docs, "Ingress")["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "dt-disttrain-server", "port": {"number": 80}}
    scrape = one(docs, "Service", "server-metrics")
    assert scrape["spec"]["type"] == "ClusterIP" and [
        (p["name"], p["targetPort"]) for p in scrape["spec"]["ports"]
    ] == [("metrics", "metrics")]


def test_metrics_disabled_means_no_endpoint_no_annotations_no_monitor():
    docs = render(sets=("metrics.enabled=false", "metrics.serviceMonitor.enabled=true"))
    server = main_container(docs, "server")
    assert "--no-metrics" in server["args"] and "PROMETHEUS_MULTIPROC_DIR" not in env_of(server)
    assert "annotations" not in server_pod(docs)["metadata"]
    assert not find(docs, "ServiceMonitor")


def test_service_monitor_scrapes_the_server_service_when_enabled():
    docs = render(
        sets=(
            "metrics.serviceMonitor.enabled=true",
            "metrics.serviceMonitor.interval=15s",
            "metrics.serviceMonitor.labels.release=kube-prometheus-stack",
        )
    )
    monitor = one(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert (
        monitor["metadata"]["namespace"] == "ml" and monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    )
    (service,) = [d for d in find(docs, "Service") if selects(monitor["spec"]["selector"], d["metadata"]["labels"])]
    assert service["metadata"]["name"] == "dt-disttrain-server-metrics"  # not the public server Service
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["ml"]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in [p["name"] for p in service["spec"]["ports"]]
    assert (endpoint["path"], endpoint["interval"], endpoint["scrapeTimeout"]) == ("/metrics", "15s", "10s")
    # the Service's named port reaches the container port that serves /metrics
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
    assert port["targetPort"] == "metrics" and port["port"] == 9090
    assert {"name": "metrics", "containerPort": 9090, "protocol": "TCP"} in main_container(docs, "server")["ports"]
    validate(docs)


def test_prometheus_namespaces_reach_a_restricted_server():
    rules = server_ingress(
        render(sets=RESTRICTED)
    )  # allowFrom, the metrics port from the cluster's pods, the helm test pod
    assert (
        len(rules) == 3 and {"from": [{"namespaceSelector": {}}], "ports": [{"protocol": "TCP", "port": 9090}]} in rules
    )
    docs = render(
        sets=RESTRICTED + ("metrics.networkPolicy.namespaceSelectors[0].kubernetes\\.io/metadata\\.name=monitoring",)
    )
    rules = server_ingress(docs)
    monitoring = {
        "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
        "ports": [{"protocol": "TCP", "port": 9090}],
    }
    assert len(rules) == 3 and monitoring in rules
    # metrics off: no opening for a scraper
    assert (
        len(
            server_ingress(
                render(
                    sets=RESTRICTED
                    + ("metrics.enabled=false", "metrics.networkPolicy.namespaceSelectors[0].team=monitoring")
                )
            )
        )
        == 2
    )
    validate(docs)


@pytest.mark.parametrize(
    "sets, expected",
    [
        (("metrics.serviceMonitor.interval=30",), "interval"),
        (("metrics.serviceMonitor.scrapeTimeout=soon",), "scrapeTimeout"),
        (("metrics.scrapeEverything=true",), "scrapeEverything"),
        (("tensorboard.port=0",), "port"),
        (("tensorboard.reloadIntervalSeconds=0",), "reloadIntervalSeconds"),
        (("tensorboard.logdir=/",), "logdir"),
    ],
)
def test_schema_rejects_bad_metrics_and_tensorboard_values(sets, expected):
    assert expected in render_error("defaults", sets=sets)


# ------------------------------------------------------------------ TensorBoard


def test_tensorboard_is_off_by_default():
    docs = render()
    assert not [d for d in docs if "tensorboard" in d["metadata"]["name"]]


def test_tensorboard_reads_this_run_read_only_as_non_root():
    docs = render(sets=TENSORBOARD_ON)
    deployment = one(docs, "Deployment", "tensorboard")
    spec = pod_spec(deployment)
    (container,) = spec["containers"]
    assert container["image"].startswith("disttrain-trainer:")  # the trainer image has TensorBoard
    assert container["command"] == ["tensorboard"]
    assert arg(container, "--logdir") == "/workdir/run-1" and arg(container, "--host") == "0.0.0.0"
    assert arg(container, "--port") == "6006" and container["ports"][0]["containerPort"] == 6006
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["automountServiceAccountToken"] is False
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["runAsNonRoot"] is True
    assert security["allowPrivilegeEscalation"] is False and security["capabilities"] == {"drop": ["ALL"]}
    assert {"cpu", "memory"} <= set(container["resources"]["requests"]) and {"cpu", "memory"} <= set(
        container["resources"]["limits"]
    )
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/workdir"]["name"] == "workdir" and mounts["/workdir"]["readOnly"] is True
    assert mounts["/tmp"]["name"] == "tmp" and env_of(container)["HOME"] == "/tmp"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "persistentVolumeClaim" in volumes["workdir"] and "emptyDir" in volumes["tmp"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] == "tensorboard"
    service = one(docs, "Service", "tensorboard")
    assert service["spec"]["type"] == "ClusterIP"
    assert selects({"matchLabels": service["spec"]["selector"]}, deployment["spec"]["template"]["metadata"]["labels"])
    assert not selects({"matchLabels": service["spec"]["selector"]}, server_pod(docs)["metadata"]["labels"])
    validate(docs)


def test_tensorboard_follows_the_revision_and_image_values():
    docs = render(
        sets=TENSORBOARD_ON
        + (
            "tensorboard.image.repository=tensorflow/tensorflow",
            "tensorboard.image.tag=2.21.0",
            "tensorboard.port=7007",
            "tensorboard.reloadIntervalSeconds=5",
            "image.registry=registry.example",
        )
    )
    (container,) = pod_spec(one(docs, "Deployment", "tensorboard"))["containers"]
    assert container["image"] == "registry.example/tensorflow/tensorflow:2.21.0"
    assert arg(container, "--port") == "7007" and arg(container, "--reload_interval") == "5"
    assert one(docs, "Service", "tensorboard")["spec"]["ports"][0]["port"] == 7007


def test_tensorboard_is_closed_by_the_default_deny_unless_namespaces_are_named():
    docs = render(sets=TENSORBOARD_ON)
    labels = one(docs, "Deployment", "tensorboard")["spec"]["template"]["metadata"]["labels"]
    policies = [p for p in find(docs, "NetworkPolicy") if selects(p["spec"]["podSelector"], labels)]
    assert [p["metadata"]["name"] for p in policies] == ["dt-disttrain-default-deny", "dt-disttrain-dns"]
    docs = render(sets=TENSORBOARD_ON + ("tensorboard.networkPolicy.namespaceSelectors[0].team=ml",))
    (opened,) = [p for p in find(docs, "NetworkPolicy") if p["metadata"]["name"].endswith("-tensorboard")]
    assert selects(opened["spec"]["podSelector"], labels)
    assert opened["spec"]["ingress"] == [
        {"from": [{"namespaceSelector": {"matchLabels": {"team": "ml"}}}], "ports": [{"protocol": "TCP", "port": 6006}]}
    ]
    validate(docs)
