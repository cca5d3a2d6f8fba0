"""Object storage (values.yaml, section Object storage): the store's variables, the Secret's key pair
(by reference only), the private CA and the egress to the store reach exactly the stages that use the
store; the schema and the templates refuse what cannot work.

The ci/object-store variant is also validated strictly for every Kubernetes version, linted, scanned
and its args parsed by the real CLIs with the other variants (test_chart_manifests, test_chart_lint_schema,
test_chart_checkov, test_chart_drift)."""

import pytest

from chartlib import (
    CHART,
    KUBE_VERSIONS,
    containers,
    find,
    helm,
    load_values,
    main_container,
    one,
    pod_spec,
    render,
    render_error,
    stage_of,
    workloads,
)

STORAGE = ("storage.storageClass=nfs-client", "server.allowedHosts={demo.example.com}")
STORE = (
    "objectStore.endpoint=http://seaweedfs.storage.svc:8333",
    "objectStore.allowPlainHttp=true",
    "objectStore.existingSecret=store-keys",
    "objectStore.networkPolicy.to[0].ipBlock.cidr=10.20.0.0/16",
)
LABEL = "disttrain.io/object-store"
KINDS = {"copier": "Job", "sweep": "Job", "trainer": "Job", "aggregator": "Job", "server": "Deployment"}


def store(*sets):
    return render(sets=STORAGE + STORE + tuple(sets))


def workload(docs, stage):
    return one([d for d in docs if stage_of(d) == stage], KINDS[stage])


def aws_env(container):
    return {e["name"]: e for e in container.get("env", []) if e["name"].startswith("AWS_")}


def stages_with_store_env(docs):
    """The stages whose main container has any AWS_ variable (and no other container has one)."""
    found = set()
    for doc in workloads(docs):
        for c in containers(pod_spec(doc)):
            if aws_env(c):
                assert c["name"] == stage_of(doc), f"{doc['metadata']['name']}/{c['name']} got the store's variables"
                found.add(c["name"])
    return found


def store_pods(docs):
    """Stages whose pods carry the label the object-store NetworkPolicy selects."""
    out = set()
    for d in workloads(docs):
        labels = d["metadata"]["labels"] if d["kind"] == "Pod" else d["spec"]["template"]["metadata"]["labels"]
        if labels.get(LABEL) == "true":
            out.add(stage_of(d))
    return out


# ------------------------------------------------------------------ nothing without the store


def test_the_defaults_give_no_stage_the_store():
    docs = render(sets=STORAGE)
    assert stages_with_store_env(docs) == set()
    assert store_pods(docs) == set()
    assert not find(docs, "NetworkPolicy", "object-store")
    for doc in workloads(docs):
        assert "object-store-ca" not in [v["name"] for v in pod_spec(doc).get("volumes", [])]
    assert "--publish-to" not in main_container(docs, "aggregator")["args"]


def test_store_values_alone_give_no_stage_the_store():
    """objectStore.* says where the store is; only an s3:// value makes a stage use it."""
    docs = store("objectStore.endpoint=https://minio.storage.svc:9000", "objectStore.caBundle.configMap=store-ca")
    assert stages_with_store_env(docs) == set() and store_pods(docs) == set()
    assert not find(docs, "NetworkPolicy", "object-store")


# ------------------------------------------------------------------ only the stages that use it


@pytest.mark.parametrize(
    "sets, stages",
    [
        (("data.source=table:s3://datasets/cancer.csv",), {"copier"}),
        (("data.source=csv:s3://datasets/reviews.csv",), {"copier"}),
        # the aggregator never reads model.file (it loads the workers' models): it gets nothing of the store for it
        (("data.source=table:/workdir/own/cancer.csv", "model.file=s3://models/start.keras"), {"trainer"}),
        (
            ("data.source=table:/workdir/own/cancer.csv", "model.file=s3://models/start.keras", "sweep.enabled=true"),
            {"sweep", "trainer"},
        ),
        (("aggregator.publishTo=s3://models/disttrain",), {"aggregator"}),
        (
            (
                "data.source=table:s3://data/c.csv",
                "model.file=s3://models/s.keras",
                "aggregator.publishTo=s3://models/p",
                "sweep.enabled=true",
            ),
            {"copier", "sweep", "trainer", "aggregator"},
        ),
    ],
)
def test_only_the_stages_that_use_the_store_get_it(sets, stages):
    docs = store(*sets)
    assert stages_with_store_env(docs) == stages
    assert store_pods(docs) == stages
    assert "server" not in stages_with_store_env(docs)
    # the Job objects themselves keep their labels: the store's label is on the pods only
    for stage in stages:
        assert LABEL not in workload(docs, stage)["metadata"]["labels"]


SWEEP = ("sweep.enabled=true",)  # the sweep's trials read model.file too (not in the ci variant: the drift test's
# trainer would read the sweep's best.json)


def test_the_ci_variant_wires_the_secret_by_reference_the_ca_and_the_flags(object_store_manifest):
    values = load_values("object-store")
    docs = render("object-store", sets=SWEEP)
    assert stages_with_store_env(docs) == {"copier", "sweep", "trainer", "aggregator"}
    for stage in ("copier", "sweep", "trainer", "aggregator"):
        c = main_container(docs, stage)
        env = aws_env(c)
        assert env["AWS_ENDPOINT_URL"] == {
            "name": "AWS_ENDPOINT_URL",
            "value": "https://minio.storage.svc.cluster.local:9000",
        }
        assert env["AWS_REGION"] == {"name": "AWS_REGION", "value": "us-east-1"}
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            assert env[name] == {"name": name, "valueFrom": {"secretKeyRef": {"name": "object-store", "key": name}}}, (
                stage
            )
        assert env["AWS_CA_BUNDLE"] == {
            "name": "AWS_CA_BUNDLE",
            "value": "/etc/disttrain/object-store-ca/ca-bundle.pem",
        }
        (mount,) = [m for m in c["volumeMounts"] if m["name"] == "object-store-ca"]
        assert mount == {"name": "object-store-ca", "mountPath": "/etc/disttrain/object-store-ca", "readOnly": True}
        (volume,) = [v for v in pod_spec(workload(docs, stage))["volumes"] if v["name"] == "object-store-ca"]
        assert volume == {
            "name": "object-store-ca",
            "configMap": {
                "name": "object-store-ca",
                "defaultMode": 0o444,
                "items": [{"key": "ca.crt", "path": "ca-bundle.pem"}],
            },
        }
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
    server = pod_spec(workload(docs, "server"))
    assert "object-store-ca" not in [v["name"] for v in server["volumes"]]
    args = main_container(docs, "aggregator")["args"]
    assert args[args.index("--publish-to") + 1] == values["aggregator"]["publishTo"] == "s3://models/disttrain"
    for stage in ("sweep", "trainer"):
        args = main_container(docs, stage)["args"]
        assert args[args.index("--model-file") + 1] == "s3://models/start/tabular.keras"
    args = main_container(docs, "copier")["args"]
    assert args[args.index("--source") + 1] == "table:s3://datasets/cancer/breast_cancer.csv"
    # pytest-helm's index of the same rendering agrees (and holds no duplicate object)
    assert object_store_manifest.get("NetworkPolicy/dt-disttrain-object-store")["spec"]["egress"][0]["ports"] == [
        {"protocol": "TCP", "port": 9000}
    ]


def test_no_key_is_ever_written_into_the_rendering():
    """The key pair exists only in the user's Secret: the chart renders no Secret of its own for it,
    and no container has a literal value for either key (a value would land in the release's
    manifest, which Helm keeps in its release Secret and `helm get manifest` prints)."""
    docs = render("object-store", sets=SWEEP)
    for doc in find(docs, "Secret"):
        assert not {
            k for k in list(doc.get("data") or {}) + list(doc.get("stringData") or {}) if k.startswith("AWS_")
        }, doc["metadata"]["name"]
    for doc in workloads(docs):
        for c in containers(pod_spec(doc)):
            for e in c.get("env", []):
                if e["name"] in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
                    assert set(e) == {"name", "valueFrom"} and set(e["valueFrom"]) == {"secretKeyRef"}, e


def test_the_secrets_key_names_come_from_values():
    docs = store(
        "aggregator.publishTo=s3://models/p",
        "objectStore.existingSecretKeys.accessKeyId=access",
        "objectStore.existingSecretKeys.secretAccessKey=secret",
    )
    env = aws_env(main_container(docs, "aggregator"))
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {"name": "store-keys", "key": "access"}
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "store-keys", "key": "secret"}


def test_aws_s3_with_workload_identity_needs_no_secret():
    """No endpoint and no Secret: AWS S3, with the SDK's credential chain (IRSA or EKS Pod Identity
    through serviceAccount.annotations, or the node's instance profile). The pods get the region and
    no key variable, and the ServiceAccount carries the role annotation."""
    docs = render(
        sets=STORAGE
        + (
            "aggregator.publishTo=s3://models/disttrain",
            "objectStore.region=eu-west-1",
            "objectStore.networkPolicy.to[0].ipBlock.cidr=0.0.0.0/0",
            "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::111122223333:role/disttrain",
        )
    )
    env = aws_env(main_container(docs, "aggregator"))
    assert env == {"AWS_REGION": {"name": "AWS_REGION", "value": "eu-west-1"}}
    policy = one(docs, "NetworkPolicy", "object-store")
    assert policy["spec"]["egress"] == [
        {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"protocol": "TCP", "port": 443}]}
    ]
    (account,) = [a for a in find(docs, "ServiceAccount") if a["metadata"]["name"] == "dt-disttrain"]  # the stages'
    assert account["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/disttrain"
    }


def test_extra_env_comes_after_the_stores_so_it_can_override():
    docs = store(
        "data.source=table:s3://data/c.csv",
        "copier.extraEnv[0].name=AWS_REGION",
        "copier.extraEnv[0].value=eu-central-1",
    )
    names = [e["name"] for e in main_container(docs, "copier")["env"]]
    assert names.count("AWS_REGION") == 1 and names[-1] == "AWS_REGION"
    docs = store(
        "data.source=table:s3://data/c.csv",
        "objectStore.region=us-east-1",
        "copier.extraEnv[0].name=AWS_REGION",
        "copier.extraEnv[0].value=eu-central-1",
    )
    env = main_container(docs, "copier")["env"]
    regions = [e["value"] for e in env if e["name"] == "AWS_REGION"]
    assert regions == ["us-east-1", "eu-central-1"]  # the last entry of a name wins


def test_the_wait_containers_get_nothing_of_the_store():
    docs = render("object-store", sets=SWEEP)
    for doc in workloads(docs):
        for c in pod_spec(doc).get("initContainers", []):
            assert not aws_env(c), c["name"]
            assert "object-store-ca" not in [m["name"] for m in c.get("volumeMounts", [])]


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
def test_the_store_with_the_sweep_validates_strictly(kube):
    """The ci variant is validated for every version with the others (test_chart_manifests); with the sweep too."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    for doc in render("object-store", sets=SWEEP, kube_version=kube):
        kubernetes_validate.validate(doc, kube, strict=True)


# ------------------------------------------------------------------ NetworkPolicy


def test_egress_to_the_store_is_open_for_its_users_only():
    docs = render("object-store", sets=SWEEP)
    policy = one(docs, "NetworkPolicy", "object-store")
    assert policy["spec"]["podSelector"] == {
        "matchLabels": {"app.kubernetes.io/name": "disttrain", "app.kubernetes.io/instance": "dt", LABEL: "true"}
    }
    assert policy["spec"]["policyTypes"] == ["Egress"]
    values = load_values("object-store")
    assert policy["spec"]["egress"] == [
        {"to": values["objectStore"]["networkPolicy"]["to"], "ports": [{"protocol": "TCP", "port": 9000}]}
    ]
    assert "ingress" not in policy["spec"]
    assert store_pods(docs) == {"copier", "sweep", "trainer", "aggregator"}
    # the server, the helm test pod and TensorBoard keep the default deny
    assert stage_of(one(docs, "Pod", "test")) == "test" and LABEL not in one(docs, "Pod", "test")["metadata"]["labels"]
    # every other policy is the same as without the store
    plain = render(
        sets=STORAGE + ("data.source=table:/workdir/own/c.csv", "model.file=/workdir/m.keras", "sweep.enabled=true")
    )
    others = {
        d["metadata"]["name"]: d["spec"]
        for d in find(docs, "NetworkPolicy")
        if not d["metadata"]["name"].endswith("object-store")
    }
    assert others == {d["metadata"]["name"]: d["spec"] for d in find(plain, "NetworkPolicy")}


@pytest.mark.parametrize(
    "endpoint, port_value, port",
    [
        ("https://minio.storage.svc", None, 443),
        ("http://seaweedfs.storage.svc", None, 80),
        ("http://seaweedfs.storage.svc:8333", None, 8333),
        ("https://10.1.2.3:9000/", None, 9000),
        ("https://[fd00::1]:9443", None, 9443),
        ("http://minio.storage.svc", 9000, 9000),  # a Service on 80 in front of pods on 9000
        ("", None, 443),  # AWS S3
    ],
)
def test_the_policy_port_is_the_endpoints(endpoint, port_value, port):
    sets = STORAGE + (
        "aggregator.publishTo=s3://models/p",
        "objectStore.networkPolicy.to[0].ipBlock.cidr=10.0.0.0/8",
        f"objectStore.endpoint={endpoint}",
        "objectStore.allowPlainHttp=true",
        "objectStore.existingSecret=keys",
    )
    if port_value is not None:
        sets += (f"objectStore.networkPolicy.port={port_value}",)
    policy = one(render(sets=sets), "NetworkPolicy", "object-store")
    assert policy["spec"]["egress"][0]["ports"] == [{"protocol": "TCP", "port": port}]


def test_without_network_policies_the_env_stays_and_no_policy_is_rendered():
    docs = render(sets=STORAGE + STORE[:3] + ("aggregator.publishTo=s3://models/p", "networkPolicy.enabled=false"))
    assert not find(docs, "NetworkPolicy")
    assert stages_with_store_env(docs) == {"aggregator"}


def test_the_ca_volume_name_is_taken():
    err = render_error(
        sets=STORAGE + ("copier.extraVolumes[0].name=object-store-ca", "copier.extraVolumes[0].emptyDir.medium=Memory")
    )
    assert 'copier.extraVolumes: the volume name "object-store-ca" is the chart\'s own' in err


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    "source",
    [
        "table:s3://datasets/cancer.csv",
        "table:s3://datasets/part.parquet",
        "csv:s3://data/reviews.csv",
        "npz:s3://data/arrays.npz",
    ],
)
def test_schema_accepts_object_sources(source):
    helm("template", "dt", str(CHART), *sum((["--set", s] for s in STORAGE + STORE + (f"data.source={source}",)), []))


@pytest.mark.parametrize(
    "sets, expected",
    [
        (("aggregator.publishTo=http://models/disttrain",), "/aggregator/publishTo"),
        (("aggregator.publishTo=/workdir/published",), "/aggregator/publishTo"),
        (("aggregator.publishTo=s3://",), "/aggregator/publishTo"),
        (("aggregator.publishTo=s3://Models/x",), "/aggregator/publishTo"),
        (("model.file=s3://models",), "/model/file"),
        (("model.file=s3://models/start.h5",), "/model/file"),
        (("objectStore.endpoint=minio.storage.svc:9000",), "/objectStore/endpoint"),
        (("objectStore.endpoint=https://minio.storage.svc:9000/bucket",), "/objectStore/endpoint"),
        (("objectStore.existingSecret=Store_Keys",), "/objectStore/existingSecret"),
        (("objectStore.existingSecretKeys.accessKeyId=a key",), "/objectStore/existingSecretKeys/accessKeyId"),
        (("objectStore.caBundle.configMap=My CA",), "/objectStore/caBundle/configMap"),
        (("objectStore.networkPolicy.port=0",), "/objectStore/networkPolicy/port"),
        (("objectStore.networkPolicy.to[0].host=minio.storage.svc",), "/objectStore/networkPolicy/to/0"),
        (("objectStore.networkPolicy.to[0].ipBlock.cidr=minio",), "/objectStore/networkPolicy/to/0/ipBlock/cidr"),
        (("objectStore.bucket=models",), "bucket"),
    ],
)
def test_schema_rejects_store_nonsense(sets, expected):
    err = render_error(sets=STORAGE + STORE + tuple(sets))
    assert expected in err, err


def test_schema_wants_a_secret_for_an_s3_compatible_store():
    err = render_error(sets=STORAGE + ("objectStore.endpoint=https://minio.storage.svc:9000",))
    assert "objectStore.endpoint names an S3-compatible store: set objectStore.existingSecret" in err, err


@pytest.mark.parametrize(
    "use", ["data.source=table:s3://data/c.csv", "model.file=s3://models/s.keras", "aggregator.publishTo=s3://models/p"]
)
def test_schema_wants_the_stores_address_when_network_policies_deny_egress(use):
    sets = STORAGE + STORE[:3] + (use,) + (("data.source=table:/workdir/c.csv",) if use.startswith("model") else ())
    err = render_error(sets=sets)
    assert (
        "a stage uses the object store and networkPolicy.enabled denies its egress: set objectStore.networkPolicy.to"
        in err
    ), err
    helm("template", "dt", str(CHART), *sum((["--set", s] for s in sets + ("networkPolicy.enabled=false",)), []))


# the same rules in the templates, one line each (--skip-schema-validation)
@pytest.mark.parametrize(
    "sets, expected",
    [
        (
            STORE + ("aggregator.publishTo=/workdir/published",),
            'disttrain: aggregator.publishTo "/workdir/published" must be an s3://BUCKET[/PREFIX] URL',
        ),
        (
            STORE + ("model.file=s3://models/start.h5", "data.source=table:/workdir/c.csv"),
            'disttrain: model.file "s3://models/start.h5" must be the absolute path of a .keras file in the trainer pods',
        ),
        (
            ("objectStore.endpoint=minio:9000", "objectStore.existingSecret=k"),
            'disttrain: objectStore.endpoint "minio:9000" must be an http:// or https:// URL without a path',
        ),
        (("objectStore.endpoint=https://minio:9000",), "disttrain: objectStore.endpoint names an S3-compatible store"),
        (
            ("objectStore.endpoint=https://AKIAEXAMPLE:wJalrXUtnFEMI@minio:9000", "objectStore.existingSecret=k"),
            "disttrain: objectStore.endpoint carries a credential (USER:SECRET@ before the host)",
        ),
        # the checks that would print the endpoint (plain http, its shape, the CA bundle's) skip one with a credential
        (
            (
                "objectStore.endpoint=http://AKIAEXAMPLE:wJalrXUtnFEMI@minio:9000/path",
                "objectStore.existingSecret=k",
                "objectStore.caBundle.configMap=ca",
            ),
            "disttrain: objectStore.endpoint carries a credential (USER:SECRET@ before the host)",
        ),
        (
            ("objectStore.endpoint=http://seaweedfs.storage.svc:8333", "objectStore.existingSecret=k"),
            "disttrain: objectStore.endpoint http://seaweedfs.storage.svc:8333 is plain http",
        ),
        (STORE + ("objectStore.caBundle.configMap=ca",), "disttrain: objectStore.caBundle verifies an https endpoint"),
        (
            STORE[:3] + ("aggregator.publishTo=s3://models/p", "data.source=table:s3://data/c.csv"),
            "disttrain: copier, aggregator use the object store, and networkPolicy.enabled denies their egress",
        ),
    ],
)
def test_template_refusals(sets, expected):
    err = render_error(sets=STORAGE + tuple(sets), extra=("--skip-schema-validation",))
    assert expected in err, err
    assert len([line for line in err.splitlines() if "disttrain:" in line]) == 1, f"one line, got:\n{err}"
    assert "wJalrXUtnFEMI" not in err and "AKIAEXAMPLE" not in err  # a credential in the endpoint is never repeated


def test_plain_http_reaches_the_stages_only_with_its_opt_in():
    docs = store("aggregator.publishTo=s3://models/p")
    env = {e["name"]: e.get("value") for e in main_container(docs, "aggregator")["env"]}
    assert env["AWS_ENDPOINT_URL"] == "http://seaweedfs.storage.svc:8333" and env["DISTTRAIN_S3_ALLOW_HTTP"] == "1"
    https = render(
        sets=STORAGE
        + (
            "objectStore.endpoint=https://minio:9000",
            "objectStore.existingSecret=k",
            "objectStore.networkPolicy.to[0].ipBlock.cidr=10.0.0.0/8",
            "aggregator.publishTo=s3://models/p",
        )
    )
    assert "DISTTRAIN_S3_ALLOW_HTTP" not in [e["name"] for e in main_container(https, "aggregator")["env"]]
