"""Issue 11 in the chart: the API token, the gallery's own mount, the exposure rule, the Ingress,
and the NetworkPolicies (default deny plus one policy per allowed path), as rendered."""

import base64

import pytest

from chartlib import (
    CHART,
    NAMES,
    arg,
    find,
    helm,
    load_all,
    main_container,
    one,
    pod_spec,
    policy_of,
    render,
    render_error,
    stage_container,
    wait_containers,
)

PUBLIC_OPEN = ("server.auth.enabled=false",)  # with the defaults: LoadBalancer, no source ranges, writable gallery
REFUSAL = "lets anyone"


def policy(docs, suffix):
    return one([d for d in docs if d["metadata"]["name"].endswith(f"-{suffix}")], "NetworkPolicy")


def pod_labels(docs, kind, name):
    doc = one(docs, kind, name)
    return doc["metadata"]["labels"] if kind == "Pod" else doc["spec"]["template"]["metadata"]["labels"]


def selects(selector, labels):
    return selector["matchLabels"].items() <= labels.items()


# ------------------------------------------------------------------ the API token


def test_auth_generates_a_token_secret_and_mounts_it_read_only():
    docs = render()
    secret = one(docs, "Secret", "api-token")
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert len(token) == 43 and token.isalnum()  # randAlphaNum 43: 256 bits
    server = main_container(docs, "server")
    assert arg(server, "--api-token-file") == "/etc/disttrain/api-token/token"
    assert arg(server, "--token-required-for") == "writes"
    (mount,) = [m for m in server["volumeMounts"] if m["name"] == "api-token"]
    assert mount == {"name": "api-token", "mountPath": "/etc/disttrain/api-token", "readOnly": True}
    (volume,) = [v for v in pod_spec(one(docs, "Deployment", "server"))["volumes"] if v["name"] == "api-token"]
    assert volume["secret"] == {
        "secretName": secret["metadata"]["name"],
        "defaultMode": 0o440,
        "items": [{"key": "token", "path": "token"}],
    }


def test_two_renderings_draw_different_tokens():
    # no cluster for `lookup`: each rendering draws anew (an upgrade keeps the live Secret's)
    a, b = (one(render(sets=(f"seed={s}",)), "Secret", "api-token")["data"]["token"] for s in (1, 2))
    assert a != b


def test_an_existing_secret_is_used_as_it_is():
    docs = render(
        sets=("server.auth.existingSecret=my-token", "server.auth.existingSecretKey=api", "server.auth.requiredFor=all")
    )
    assert not find(docs, "Secret")
    (volume,) = [v for v in pod_spec(one(docs, "Deployment", "server"))["volumes"] if v["name"] == "api-token"]
    assert volume["secret"]["secretName"] == "my-token" and volume["secret"]["items"] == [
        {"key": "api", "path": "token"}
    ]
    assert arg(main_container(docs, "server"), "--token-required-for") == "all"
    test = one(docs, "Pod", "test")
    assert test["spec"]["containers"][0]["command"][-3:-1] == ["/etc/disttrain/api-token/token", "all"]
    assert {"name": "api-token", "mountPath": "/etc/disttrain/api-token", "readOnly": True} in test["spec"][
        "containers"
    ][0]["volumeMounts"]


def test_no_auth_no_token_anywhere():
    docs = render(
        sets=("server.auth.enabled=false", "server.gallery.readOnly=true", "server.auth.publicFaceSearch=true")
    )
    assert not find(docs, "Secret")
    server = main_container(docs, "server")
    assert "--api-token-file" not in server["args"] and "--token-required-for" not in server["args"]
    assert server["args"][server["args"].index("--read-only-gallery") - 1] != "--read-only-gallery"
    assert one(docs, "Pod", "test")["spec"]["containers"][0]["command"][-3:-1] == ["", ""]


def test_server_limits_and_hosts_reach_the_args():
    docs = render(
        sets=(
            "server.gallery.maxEntries=50",
            "server.gallery.maxMB=12",
            "server.maxRequestPixels=4000000",
            "server.allowedHosts={demo.example.com,127.0.0.1}",
        )
    )
    server = main_container(docs, "server")
    assert arg(server, "--gallery-max-entries") == "50" and arg(server, "--gallery-max-mb") == "12"
    assert arg(server, "--max-request-pixels") == "4000000"
    # the Service's in-cluster names are added, so the helm test pod (and other pods) get through
    assert arg(server, "--allowed-hosts") == (
        "demo.example.com,127.0.0.1,dt-disttrain-server,dt-disttrain-server.ml,"
        "dt-disttrain-server.ml.svc,dt-disttrain-server.ml.svc.cluster.local,localhost"
    )  # loopback: port-forward
    assert "--read-only-gallery" not in server["args"]
    assert arg(main_container(render(), "server"), "--allowed-hosts").startswith(
        "disttrain.example.com,"
    )  # ci's default-values


# ------------------------------------------------------------------ the shared volume and the gallery


def test_server_mounts_the_shared_volume_read_only_and_the_gallery_writable():
    docs = render()
    server = main_container(docs, "server")
    mounts = {m["mountPath"]: m for m in server["volumeMounts"]}
    assert mounts["/workdir"] == {"name": "workdir", "mountPath": "/workdir", "readOnly": True}
    assert mounts["/var/lib/disttrain/gallery"] == {
        "name": "workdir",
        "mountPath": "/var/lib/disttrain/gallery",
        "subPath": "gallery",
    }
    assert arg(server, "--gallery") == "/var/lib/disttrain/gallery"
    # the gallery folder is made by an init container as UID 10001 before the subPath mount
    spec = pod_spec(one(docs, "Deployment", "server"))
    (make,) = [c for c in spec["initContainers"] if c["name"] == "gallery-dir"]
    assert make["command"][-1] == "/workdir/gallery" and make["securityContext"]["runAsUser"] == 10001
    assert [c["name"] for c in spec["initContainers"]] == ["wait-for-model", "gallery-dir"]
    assert len(wait_containers(one(docs, "Deployment", "server"))) == 1
    # the other stages still write the volume
    for stage in ("copier", "trainer", "aggregator"):
        (m,) = [m for m in main_container(docs, stage)["volumeMounts"] if m["name"] == "workdir"]
        assert not m.get("readOnly")


def test_a_non_persistent_gallery_is_an_empty_dir():
    docs = render(sets=("server.gallery.persistent=false", "server.gallery.maxMB=100"))
    spec = pod_spec(one(docs, "Deployment", "server"))
    (volume,) = [v for v in spec["volumes"] if v["name"] == "gallery"]
    assert volume == {"name": "gallery", "emptyDir": {"sizeLimit": "116Mi"}}
    assert [c["name"] for c in spec["initContainers"]] == ["wait-for-model"]
    server = main_container(docs, "server")
    assert {"name": "gallery", "mountPath": "/var/lib/disttrain/gallery"} in server["volumeMounts"]


# ------------------------------------------------------------------ exposure


def test_public_unauthenticated_writable_gallery_is_refused_by_the_schema():
    err = render_error(sets=PUBLIC_OPEN)
    assert REFUSAL in err and "allowPublicUnauthenticated" in err


def test_the_template_refuses_it_too_without_the_schema():
    err = render_error(sets=PUBLIC_OPEN + ("storage.storageClass=x",), extra=("--skip-schema-validation",))
    assert REFUSAL in err and "server.service.allowPublicUnauthenticated=true" in err


def test_helm3_refuses_it_too():
    assert REFUSAL in render_error(sets=PUBLIC_OPEN + ("storage.storageClass=x",), major=3)


@pytest.mark.parametrize(
    "sets",
    [
        ("server.service.allowPublicUnauthenticated=true",),
        ("server.gallery.readOnly=true", "server.auth.publicFaceSearch=true"),
        ("server.service.loadBalancerSourceRanges={203.0.113.0/24}",),
        ("server.service.type=ClusterIP",),
        (),  # auth on: the default
    ],
)
def test_each_way_out_is_accepted(sets):
    sets = ("server.allowedHosts={demo.example.com}",) + (sets if sets == () else PUBLIC_OPEN + sets)
    helm("template", "dt", str(CHART), "--set", "storage.storageClass=x", *sum((["--set", s] for s in sets), []))


FACE_REFUSAL = "lets anyone search the face gallery and read the enrolled people's names and faces"
HOSTS_REFUSAL = "disttrain: a LoadBalancer or Ingress server with no host names"
HOST = ("server.allowedHosts={demo.example.com}",)


@pytest.mark.parametrize(
    "sets",
    [
        PUBLIC_OPEN + ("server.gallery.readOnly=true",),  # nobody can write, but anyone could search
        PUBLIC_OPEN + ("server.gallery.readOnly=true", "server.service.type=ClusterIP", "server.ingress.enabled=true"),
    ],
)
def test_public_face_search_without_a_token_is_refused(sets):
    err = render_error(sets=("storage.storageClass=x",) + HOST + sets, extra=("--skip-schema-validation",))
    assert FACE_REFUSAL in err and "server.auth.publicFaceSearch=true" in err
    assert len([line for line in err.splitlines() if "disttrain:" in line]) == 1, err
    docs = render(sets=HOST + sets + ("server.auth.publicFaceSearch=true",))  # the opt-out says what it exposes
    assert one(docs, "Deployment", "server")


def test_face_search_needs_the_token_unless_opted_out(defaults_manifest):
    server = stage_container(defaults_manifest, "server")
    assert "--public-face-search" not in server["args"] and arg(server, "--token-required-for") == "writes"
    assert "--show-heldout-examples" not in server["args"]
    opened = main_container(
        render(sets=("server.auth.publicFaceSearch=true", "server.showHeldoutExamples=true")), "server"
    )
    assert "--public-face-search" in opened["args"] and "--show-heldout-examples" in opened["args"]


def test_a_load_balancer_or_ingress_needs_host_names():
    for sets in [(), ("server.service.type=ClusterIP", "server.ingress.enabled=true", "server.ingress.hosts[0].host=")]:
        err = render_error(sets=("storage.storageClass=x", *sets), extra=("--skip-schema-validation",))
        assert HOSTS_REFUSAL in err and "server.allowedHosts" in err, err
        assert len([line for line in err.splitlines() if "disttrain:" in line]) == 1, err
    # an Ingress gives its hosts; a ClusterIP Service alone may answer any Host (port-forward, in-cluster clients)
    docs = render(
        sets=(
            "server.allowedHosts=null",
            "server.service.type=ClusterIP",
            "server.ingress.enabled=true",
            "server.ingress.hosts[0].host=demo.example.com",
        )
    )
    hosts = arg(main_container(docs, "server"), "--allowed-hosts").split(",")
    assert hosts[0] == "demo.example.com" and "dt-disttrain-server.ml.svc" in hosts
    plain = main_container(render(sets=("server.allowedHosts=null", "server.service.type=ClusterIP")), "server")
    assert "--allowed-hosts" not in plain["args"]


def test_allocate_load_balancer_node_ports(defaults_manifest):
    assert defaults_manifest.get(NAMES["service"])["spec"]["allocateLoadBalancerNodePorts"] is True
    spec = one(render(sets=("server.service.allocateLoadBalancerNodePorts=false",)), "Service", "server")["spec"]
    assert spec["allocateLoadBalancerNodePorts"] is False
    assert (
        "allocateLoadBalancerNodePorts"
        not in one(render(sets=("server.service.type=ClusterIP",)), "Service", "server")["spec"]
    )


def test_ingress_is_optional_and_points_at_the_service(defaults_manifest):
    with pytest.raises(KeyError, match="Kind 'Ingress' not found"):
        defaults_manifest.get("Ingress/dt-disttrain-server")
    docs = render(
        sets=(
            "server.ingress.enabled=true",
            "server.ingress.className=nginx",
            "server.ingress.annotations.cert-manager\\.io/cluster-issuer=le",
            "server.ingress.hosts[0].host=demo.example.com",
            "server.ingress.hosts[0].paths[0].path=/",
            "server.ingress.hosts[0].paths[0].pathType=Prefix",
            "server.ingress.tls[0].secretName=demo-tls",
            "server.ingress.tls[0].hosts[0]=demo.example.com",
        )
    )
    ingress = one(docs, "Ingress")
    service = one(docs, "Service", "server")
    assert ingress["metadata"]["annotations"] == {"cert-manager.io/cluster-issuer": "le"}
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [{"hosts": ["demo.example.com"], "secretName": "demo-tls"}]
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == "demo.example.com"
    (path,) = rule["http"]["paths"]
    assert path["backend"] == {"service": {"name": service["metadata"]["name"], "port": {"number": 80}}}


def test_the_tls_ingress_example_of_the_docs_renders(tmp_path):
    """docs/security.md, section TLS: its values file as written, rendered. TLS at the Ingress for the
    page's host, the Service off the network, the server answering that host only."""
    text = (CHART.parents[1] / "docs" / "security.md").read_text()
    example = text.split("## TLS", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    values = tmp_path / "tls-values.yaml"
    values.write_text(example)
    docs = load_all(
        helm(
            "template",
            "dt",
            str(CHART),
            "--namespace",
            "ml",
            "--set",
            "storage.storageClass=nfs-client",
            "-f",
            str(values),
        ).stdout
    )
    ingress = one(docs, "Ingress")
    assert ingress["spec"]["tls"] == [{"hosts": ["demo.example.com"], "secretName": "demo-tls"}]
    assert ingress["spec"]["rules"][0]["host"] == "demo.example.com" and ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/ssl-redirect"] == "true"
    service = one(docs, "Service", "server")
    assert service["spec"]["type"] == "ClusterIP"
    assert ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"] == service["metadata"]["name"]
    hosts = arg(main_container(docs, "server"), "--allowed-hosts").split(",")
    assert hosts[0] == "demo.example.com" and "evil.example" not in hosts
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "dt-disttrain-server"]
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}} in policy["spec"][
        "ingress"
    ][0]["from"]


def test_every_namespaced_resource_names_the_release_namespace():
    docs = render("nfs-server", sets=("server.ingress.enabled=true",))
    for d in docs:
        if d["kind"] != "PersistentVolume":
            assert d["metadata"]["namespace"] == "ml", d["metadata"]["name"]


def test_images_pinned_by_digest_render_as_given():
    stages = ("copier", "trainer", "aggregator", "server")
    digests = {stage: "sha256:" + f"{i:x}" * 64 for i, stage in enumerate(stages, 1)}  # each image its own
    docs = render(
        sets=("image.registry=registry.example.com/dt",) + tuple(f"{s}.image.tag=1.2.3@{d}" for s, d in digests.items())
    )
    for stage in stages:
        image = f"registry.example.com/dt/disttrain-{stage}:1.2.3@{digests[stage]}"
        assert main_container(docs, stage)["image"] == image
        doc = one(docs, "Deployment" if stage == "server" else "Job", stage)
        assert {c["image"] for c in pod_spec(doc).get("initContainers", [])} <= {image}  # the wait containers too
    assert (
        one(docs, "Pod", "test")["spec"]["containers"][0]["image"]
        == f"registry.example.com/dt/disttrain-server:1.2.3@{digests['server']}"
    )


# ------------------------------------------------------------------ NetworkPolicies


def test_default_deny_selects_every_pod_of_the_release_both_ways():
    docs = render("parameterserver", sets=("server.ingress.enabled=true",))
    deny = policy(docs, "default-deny")
    assert deny["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert "ingress" not in deny["spec"] and "egress" not in deny["spec"]
    for kind, name in (
        ("Job", "copier"),
        ("Job", "trainer"),
        ("Job", "aggregator"),
        ("Deployment", "server"),
        ("Pod", "test"),
    ):
        assert selects(deny["spec"]["podSelector"], pod_labels(docs, kind, name)), name


def test_dns_is_allowed_for_every_pod_from_the_configured_dns_pods():
    docs = render(sets=("networkPolicy.dns.namespaceSelector.name=dns", "networkPolicy.dns.podSelector.app=coredns"))
    dns = policy(docs, "dns")
    assert dns["spec"]["podSelector"] == policy(docs, "default-deny")["spec"]["podSelector"]
    assert dns["spec"]["policyTypes"] == ["Egress"]
    (rule,) = dns["spec"]["egress"]
    assert rule["to"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system", "name": "dns"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns", "app": "coredns"}},
        }
    ]
    assert rule["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]


@pytest.mark.parametrize("variant", ["defaults", "multiworker", "localsgd", "parameterserver"])
def test_trainers_reach_only_trainers_on_the_collective_port(variant):
    docs = render(variant)
    trainers = policy(docs, "trainer")
    labels = pod_labels(docs, "Job", "trainer")
    assert selects(trainers["spec"]["podSelector"], labels)
    (ingress,), (egress,) = trainers["spec"]["ingress"], trainers["spec"]["egress"]
    assert ingress["from"] == egress["to"] == [{"podSelector": trainers["spec"]["podSelector"]}]
    assert ingress["ports"] == egress["ports"] == [{"protocol": "TCP", "port": 12345}]
    for other in (("Job", "copier"), ("Job", "aggregator"), ("Deployment", "server")):
        assert not selects(trainers["spec"]["podSelector"], pod_labels(docs, *other))


def test_server_port_is_open_to_all_by_default_and_to_the_test_pod(defaults_manifest):
    server_labels = defaults_manifest.get(NAMES["server"])["spec"]["template"]["metadata"]["labels"]
    server = policy_of(defaults_manifest, "server")
    assert selects(server["spec"]["podSelector"], server_labels)
    assert server["spec"]["policyTypes"] == ["Ingress"]
    anyone, scrapers, tester = server["spec"]["ingress"]
    assert anyone == {"ports": [{"protocol": "TCP", "port": 8080}]}  # no `from`: any source
    # the metrics port from the cluster's pods only (metrics.networkPolicy.namespaceSelectors empty)
    assert scrapers == {"from": [{"namespaceSelector": {}}], "ports": [{"protocol": "TCP", "port": 9090}]}
    (peer,) = tester["from"]
    assert (
        selects(peer["podSelector"], defaults_manifest.get(NAMES["test"])["metadata"]["labels"])
        and tester["ports"] == anyone["ports"]
    )
    test = policy_of(defaults_manifest, "test")
    assert test["spec"]["policyTypes"] == ["Egress"]
    (out,) = test["spec"]["egress"]
    assert selects(out["to"][0]["podSelector"], server_labels)
    assert out["ports"] == [{"protocol": "TCP", "port": 8080}]


def test_server_peers_from_values():
    docs = render(
        sets=(
            "server.port=9000",
            "server.networkPolicy.allowFrom.ipBlocks[0].cidr=203.0.113.0/24",
            "server.networkPolicy.allowFrom.ipBlocks[0].except[0]=203.0.113.7/32",
            "server.networkPolicy.allowFrom.namespaceSelectors[0].kubernetes\\.io/metadata\\.name=ingress-nginx",
        )
    )
    peers, _scrapers, _tester = policy(docs, "server")["spec"]["ingress"]
    assert peers["from"] == [
        {"ipBlock": {"cidr": "203.0.113.0/24", "except": ["203.0.113.7/32"]}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}},
    ]
    assert peers["ports"] == [{"protocol": "TCP", "port": 9000}]


def test_without_the_helm_test_there_is_no_test_policy():
    docs = render(sets=("tests.enabled=false",))
    assert not [d for d in find(docs, "NetworkPolicy") if d["metadata"]["name"].endswith("-test")]
    assert len(policy(docs, "server")["spec"]["ingress"]) == 2  # the clients, the metrics port


def test_copier_egress_is_https_by_default_and_a_value(defaults_manifest):
    copier = policy_of(defaults_manifest, "copier")
    assert selects(
        copier["spec"]["podSelector"], defaults_manifest.get(NAMES["copier"])["spec"]["template"]["metadata"]["labels"]
    )
    assert copier["spec"]["policyTypes"] == ["Egress"]
    assert copier["spec"]["egress"] == [{"ports": [{"protocol": "TCP", "port": 443}]}]
    offline = render(sets=("copier.networkPolicy.egress=null",))
    assert not [d for d in find(offline, "NetworkPolicy") if d["metadata"]["name"].endswith("-copier")]
    narrow = render(
        sets=(
            "copier.networkPolicy.egress[0].to[0].ipBlock.cidr=10.1.0.0/16",
            "copier.networkPolicy.egress[0].ports[0].port=8443",
        )
    )
    assert policy(narrow, "copier")["spec"]["egress"] == [
        {"to": [{"ipBlock": {"cidr": "10.1.0.0/16"}}], "ports": [{"port": 8443}]}
    ]


def test_nfs_server_ports_only_from_the_node_cidrs():
    docs = render("nfs-server")
    nfs = policy(docs, "nfs-server")
    assert selects(nfs["spec"]["podSelector"], pod_labels(docs, "Deployment", "nfs"))
    (rule,) = nfs["spec"]["ingress"]
    assert rule["from"] == [{"ipBlock": {"cidr": "10.0.0.0/16"}}]
    assert {(p["protocol"], p["port"]) for p in rule["ports"]} == {
        (pr, po) for po in (2049, 20048, 111) for pr in ("TCP", "UDP")
    }


def test_nfs_server_without_node_cidrs_is_refused():
    err = render_error(sets=("nfsServer.enabled=true",))
    assert "nfsServer.networkPolicy.allowedCIDRs" in err
    err = render_error(sets=("nfsServer.enabled=true",), extra=("--skip-schema-validation",))
    assert "nfsServer.networkPolicy.allowedCIDRs" in err
    helm(
        "template",
        "dt",
        str(CHART),
        "--set",
        "nfsServer.enabled=true",
        "--set",
        "networkPolicy.enabled=false",
        "--set",
        "server.allowedHosts={demo.example.com}",
    )


def test_policies_can_be_turned_off():
    assert not find(render(sets=("networkPolicy.enabled=false",)), "NetworkPolicy")


@pytest.mark.parametrize("name", ["gallery", "api-token"])
def test_the_servers_own_volume_names_are_taken(name):
    err = render_error(
        sets=(
            f"server.extraVolumes[0].name={name}",
            "server.extraVolumes[0].emptyDir.medium=Memory",
            "storage.storageClass=x",
        ),
        extra=("--skip-schema-validation",),
    )
    assert f'server.extraVolumes: the volume name "{name}" is the chart\'s own' in err


@pytest.mark.parametrize("kube", ["1.29.0", "1.35.0"])
def test_the_optional_shapes_validate_strictly(kube):
    """What no CI values file renders: the Ingress, server peers, an emptyDir gallery, an existing Secret."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    docs = render(
        "nfs-server",
        kube_version=kube,
        sets=(
            "server.ingress.enabled=true",
            "server.ingress.tls[0].secretName=t",
            "server.ingress.tls[0].hosts[0]=disttrain.local",
            "server.networkPolicy.allowFrom.ipBlocks[0].cidr=203.0.113.0/24",
            "server.networkPolicy.allowFrom.namespaceSelectors[0].team=web",
            "server.gallery.persistent=false",
            "server.auth.existingSecret=tok",
            "server.allowedHosts={demo.example.com}",
            "server.service.allocateLoadBalancerNodePorts=false",
        ),
    )
    assert find(docs, "Ingress")
    for doc in docs:
        kubernetes_validate.validate(doc, kube, strict=True)


def test_the_public_pods_do_not_carry_the_object_stores_identity():
    """serviceAccount.annotations (e.g. an IRSA role for the object store) stay on the stages'
    ServiceAccount; the server, TensorBoard and the helm test pod run as their own, without them."""
    docs = render(
        sets=(
            "tensorboard.enabled=true",
            "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::1:role/store",
        )
    )
    accounts = {d["metadata"]["name"]: d for d in find(docs, "ServiceAccount")}
    assert set(accounts) == {"dt-disttrain", "dt-disttrain-serving"}
    assert accounts["dt-disttrain"]["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/store"
    }
    assert "annotations" not in accounts["dt-disttrain-serving"]["metadata"]
    assert all(a["automountServiceAccountToken"] is False for a in accounts.values())
    serving = {"Deployment/dt-disttrain-server", "Deployment/dt-disttrain-tensorboard", "Pod/dt-disttrain-test"}
    for doc in docs:
        if doc["kind"] in ("Deployment", "Job", "Pod"):
            spec = doc["spec"] if doc["kind"] == "Pod" else doc["spec"]["template"]["spec"]
            name = f"{doc['kind']}/{doc['metadata']['name']}"
            if name.endswith("nfs-server"):
                continue
            assert spec["serviceAccountName"] == ("dt-disttrain-serving" if name in serving else "dt-disttrain"), name
    named = render(sets=("serviceAccount.create=false", "serviceAccount.name=store-identity"))
    assert pod_spec(one(named, "Deployment", "server"))["serviceAccountName"] == "default"
    assert pod_spec(one(named, "Job", "copier"))["serviceAccountName"] == "store-identity"
    assert not find(named, "ServiceAccount")


def test_notes_warn_when_face_search_is_public():
    def notes(*sets):
        out = helm(
            "install",
            "dt",
            str(CHART),
            "--dry-run=client",
            "--namespace",
            "ml",
            "--set",
            "storage.storageClass=x",
            *sum((["--set", s] for s in HOST + sets), []),
        )
        return out.stdout.split("NOTES:", 1)[1]

    assert "server.auth.publicFaceSearch=true: anyone who reaches the server can" in notes(
        "server.auth.publicFaceSearch=true"
    )
    assert "publicFaceSearch" not in notes()
