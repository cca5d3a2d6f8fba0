"""The harness's translation of rendered manifests into a run plan (no Docker: runs in `make test`).

Every field of every CI values file's rendering is honoured, a documented no-op, or refused by
name; a field the harness does not know fails the translation and names it.
"""

import copy
import re

import pytest

from chartlib import CHART, VARIANTS, one, render

import cluster_plan
from cluster_plan import NOOPS, Unsupported, quantity, selector_matches, translate
from cluster_runs import NAMESPACE, RUNS

yaml = pytest.importorskip("yaml")

# CI values files the harness cannot run, and the field it names (it never skips one silently).
REFUSED = {
    "existing-claim": "uses claim 'my-shared-claim', which is not in the release",
    "external-nfs": "kind PersistentVolume (v1) is not supported",
    "nfs-server": "kind PersistentVolume (v1) is not supported",
    "gpu": "nodeSelector nvidia.com/gpu.present=true: the node",
}


# CI values files whose release refers to objects the user creates beside it (there is no API server to
# hold them): they are given with the release's manifests, as a run of the harness would.
def beside(variant):
    if variant != "object-store":
        return []
    from cluster_objectstore import (
        manifests,
    )  # the Secret object-store and the ConfigMap object-store-ca, as the values name them

    return manifests(CA_PEM)


CA_PEM = "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"  # translation reads no certificate


# server.backend tfserving translates (its monitoring ConfigMap is a volume like any other), but the
# tensorflow/serving image cannot be pulled here, so that backend is not run (tests/chart render-tests it).


def rendered(variant="defaults", sets=(), kube_version="1.33.0"):
    return copy.deepcopy(render(variant, sets=sets, kube_version=kube_version))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_ci_rendering_is_translated_or_refused_by_name(variant):
    docs = rendered(variant)
    if variant in REFUSED:
        with pytest.raises(Unsupported, match=re.escape(REFUSED[variant])):
            translate(docs, namespace="ml")
        return
    release = translate(docs + beside(variant), namespace="ml")
    assert {j.name.rsplit("-", 2)[-2] for j in release.jobs} - {"sweep"} == {"copier", "trainer", "aggregator"}
    assert [d.name for d in release.deployments] == ["dt-disttrain-server"]
    for where, path, reason in release.noops:
        assert reason in [n.reason for n in NOOPS.values()], (where, path)


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_every_test_cluster_run_translates(run):
    from chartlib import helm, load_all

    args = ["template", "dt", str(CHART), "--namespace", NAMESPACE, "--kube-version", "1.33.0"]
    for f in run.values_files:
        args += ["-f", str(f)]
    docs = load_all(helm(*args).stdout)
    if run.object_store:  # the Secret the user creates beside the release (cluster_objectstore.py)
        from cluster_objectstore import manifests

        docs += manifests(CA_PEM)
    release = translate(docs, namespace=NAMESPACE)
    sweep = yaml.safe_load(run.values_files[-1].read_text()).get("sweep", {}).get("enabled", False)
    assert len(release.jobs) == (4 if sweep else 3) and release.test_pods  # copier, [sweep,] trainer, aggregator


# ----------------------------------------------------------------------------- refusals by name


def trainer(docs):
    return one(docs, "Job", "trainer")


def container_of(doc, name):
    (c,) = [c for c in doc["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return c


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (
            lambda d: container_of(trainer(d), "trainer").update(
                lifecycle={"preStop": {"exec": {"command": ["true"]}}}
            ),
            "Job/dt-disttrain-trainer-r1: the harness does not understand: spec.template.spec.containers[trainer].lifecycle",
        ),
        (lambda d: trainer(d)["spec"]["template"]["spec"].update(hostNetwork=True), "spec.template.spec.hostNetwork"),
        (
            lambda d: trainer(d)["spec"].update(successPolicy={"rules": [{"succeededIndexes": "0"}]}),
            "spec.successPolicy",
        ),
        (
            lambda d: container_of(trainer(d), "trainer")["securityContext"].update(procMount="Unmasked"),
            "spec.template.spec.containers[trainer].securityContext.procMount",
        ),
        (
            lambda d: trainer(d)["spec"]["template"]["spec"]["volumes"].append(
                {"name": "x", "hostPath": {"path": "/"}}
            ),
            "spec.template.spec.volumes[x].hostPath",
        ),
        (
            lambda d: container_of(trainer(d), "trainer")["env"].append(
                {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}
            ),
            "spec.template.spec.containers[trainer].env[X].valueFrom.configMapKeyRef",
        ),
        (
            lambda d: one(d, "Service", "server")["spec"].update(externalTrafficPolicy="Local"),
            "Service/dt-disttrain-server: the harness does not understand: spec.externalTrafficPolicy",
        ),
        (
            lambda d: d.append(
                {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "web"}, "spec": {}}
            ),
            "Ingress/web: kind Ingress (networking.k8s.io/v1) is not supported",
        ),
        (
            lambda d: trainer(d)["metadata"].update(finalizers=["x"]),
            "Job/dt-disttrain-trainer-r1: the harness does not understand: metadata.finalizers",
        ),
    ],
)
def test_an_unknown_field_is_refused_by_name(mutate, expected):
    docs = rendered()
    mutate(docs)
    with pytest.raises(Unsupported) as err:
        translate(docs, namespace="ml")
    assert expected in str(err.value)


@pytest.mark.parametrize(
    "sets, expected",
    [
        (("trainer.nodeSelector.disktype=ssd",), "nodeSelector disktype=ssd: the node"),
        (
            ("trainer.resources.limits.nvidia\\.com/gpu=1",),
            "resources.limits.nvidia.com/gpu: the node has no nvidia.com/gpu",
        ),
        (("server.image.pullPolicy=Always",), "imagePullPolicy Always: the harness never pulls"),
        (
            ("serviceAccount.create=false", "podSecurityContext.seccompProfile.type=Localhost"),
            "seccompProfile.type 'Localhost'",
        ),
    ],
)
def test_what_one_node_cannot_do_is_refused_by_name(sets, expected):
    with pytest.raises(Unsupported) as err:
        translate(rendered(sets=sets), namespace="ml")
    assert expected in str(err.value)


def test_the_gpu_example_is_refused_for_its_gpu_and_its_runtime():
    docs = rendered("gpu", sets=("trainer.nodeSelector=null",))
    with pytest.raises(Unsupported, match="runtimeClassName 'nvidia': the node's container runtimes are"):
        translate(docs, namespace="ml")
    with pytest.raises(Unsupported, match="resources.limits.nvidia.com/gpu: the node has no nvidia.com/gpu"):
        translate(docs, namespace="ml", runtimes=("runc", "nvidia"))


def test_shared_cluster_extras_reach_the_plan():
    release = translate(rendered("shared-cluster"), namespace="ml")
    jobs = {j.name.rsplit("-", 2)[-2]: j for j in release.jobs}
    trainer = jobs["trainer"].template
    (main,) = trainer.containers
    env = {e.name: e for e in main.env}
    assert env["TF_CPP_MIN_LOG_LEVEL"].value == "1" and env["NODE_NAME"].field_path == "spec.nodeName"
    assert (
        trainer.volumes["dshm"].kind == "emptyDir"
        and trainer.volumes["dshm"].memory
        and trainer.volumes["dshm"].size_limit == 256 * 2**20
    )
    assert ("dshm", "/dev/shm") in [(m.volume, m.path) for m in main.mounts]
    assert trainer.runtime == "runc"
    assert jobs["copier"].labels["kueue.x-k8s.io/queue-name"] == "team-a"
    noops = {(w.split("/")[0], f) for w, f, _ in release.noops}
    assert ("Job", "spec.template.spec.priorityClassName") in noops and (
        "Job",
        "spec.template.spec.schedulerName",
    ) in noops


def test_the_release_namespace_must_match():
    docs = rendered()
    docs[0]["metadata"]["namespace"] = "other"
    with pytest.raises(Unsupported, match="metadata.namespace 'other' is not the release namespace 'ml'"):
        translate(docs, namespace="ml")


def test_a_downward_api_path_outside_the_supported_set_is_refused():
    docs = rendered()
    container_of(trainer(docs), "trainer")["env"].append(
        {"name": "LIMIT", "valueFrom": {"fieldRef": {"fieldPath": "status.qosClass"}}}
    )
    with pytest.raises(Unsupported, match=r"env\[LIMIT\].valueFrom.fieldRef.fieldPath 'status.qosClass'"):
        translate(docs, namespace="ml")


# ----------------------------------------------------------------------------- what the plan carries


def test_the_trainer_job_plan():
    release = translate(rendered("multiworker"), namespace="ml")
    (job,) = [j for j in release.jobs if "trainer" in j.name]
    assert job.indexed and job.completions == job.parallelism == 4
    assert (job.backoff_limit, job.backoff_limit_per_index, job.max_failed_indexes) == (None, 3, 0)
    assert job.replacement_policy == "Failed"
    ignore, fail, preempted = job.failure_rules
    assert ignore.action == "Ignore" and ignore.conditions == (("DisruptionTarget", "True"),)
    assert (fail.action, fail.container, fail.operator, fail.exit_codes) == ("FailJob", "trainer", "In", (2,))
    # a trainer that saved on SIGTERM (a plain pod delete, no DisruptionTarget) is not counted against the retries
    assert (preempted.action, preempted.container, preempted.operator, preempted.exit_codes) == (
        "Ignore",
        "trainer",
        "In",
        (75,),
    )
    pod = job.template
    assert pod.subdomain == "dt-disttrain-workers" and pod.restart_policy == "Never" and pod.hostname == ""
    (init,) = pod.init_containers
    (main,) = pod.containers
    assert init.name == "wait-for-copier" and init.command[:2] == ["python", "-c"]
    assert main.command is None and main.args[:2] == ["--workdir", "/workdir/run-1"]
    assert (main.user, main.group, main.supplementary_groups) == (10001, 10001, [10001])
    assert main.read_only_root and main.no_new_privileges and not main.privileged
    assert main.cap_drop == ["ALL"] and main.seccomp == "RuntimeDefault" and main.run_as_non_root
    assert (main.nano_cpus, main.memory_limit, main.cpu_shares, main.memory_reservation) == (
        2 * 10**9,
        4 * 2**30,
        1024,
        2 * 2**30,
    )
    assert main.ports == {"collective": 12345}
    assert [(m.volume, m.path) for m in main.mounts] == [("workdir", "/workdir"), ("tmp", "/tmp")]
    assert pod.volumes["tmp"].kind == "emptyDir" and pod.volumes["tmp"].size_limit == 2**30
    assert pod.volumes["workdir"].claim == "dt-disttrain-workdir" and pod.fs_group == 10001
    assert {e.name: e.value for e in main.env}["DISTTRAIN_WORKDIR"] == "/workdir/run-1"
    policies = {p.name: p for p in release.network_policies}
    deny = policies["dt-disttrain-default-deny"]
    assert deny.isolates_ingress and deny.rules == [] and selector_matches(deny.selector, pod.labels)
    (rule,) = policies["dt-disttrain-trainer"].rules
    assert rule.ports == [("TCP", 12345)] and rule.peers == [policies["dt-disttrain-trainer"].selector]
    (anyone, scrapers, tester) = policies["dt-disttrain-server"].rules
    assert (anyone.peers, anyone.ports) == (None, [("TCP", 8080)])  # allowFrom empty: any source
    # the metrics port from the cluster's namespaces: no pod of the release (a namespaceSelector alone is outside it)
    assert (scrapers.peers, scrapers.ports) == ([], [("TCP", 9090)])
    assert tester.peers == [
        {
            "app.kubernetes.io/name": "disttrain",
            "app.kubernetes.io/instance": "dt",
            "app.kubernetes.io/component": "test",
        }
    ]
    # egress is listed as a documented no-op, not dropped silently
    assert any(path.endswith("egress") for _, path, _ in release.noops)


def test_older_clusters_get_a_job_wide_backoff_limit():
    (job,) = [j for j in translate(rendered(kube_version="1.25.0"), namespace="ml").jobs if "trainer" in j.name]
    assert (job.backoff_limit, job.backoff_limit_per_index, job.failure_rules) == (6, None, [])


def test_services_and_probes():
    release = translate(rendered(), namespace="ml")
    services = {s.name: s for s in release.services}
    headless = services["dt-disttrain-workers"]
    assert headless.headless and headless.publish_not_ready and headless.ports[0].port == 12345
    server = services["dt-disttrain-server"]
    assert (server.type, server.headless, server.ports[0].port, server.ports[0].target) == (
        "LoadBalancer",
        False,
        80,
        "http",
    )
    (dep,) = release.deployments
    (c,) = dep.template.containers
    assert c.readiness.path == "/readyz" and c.readiness.port == "http" and c.ports["http"] == 8080
    assert c.startup.failure_threshold == 60 and c.liveness.period == 15
    (test_pod,) = release.test_pods
    assert test_pod.containers[0].mounts[0].read_only


def test_every_noop_is_documented_in_the_chart_readme():
    readme = (CHART / "README.md").read_text()
    for noop in NOOPS.values():
        assert noop.reason in readme, noop.reason


@pytest.mark.parametrize(
    "text, value",
    [
        ("512Mi", 512 * 2**20),
        ("1Gi", 2**30),
        ("100m", 0.1),
        ("2", 2),
        (2, 2),
        ("1.5", 1.5),
        ("1e3", 1000),
        ("1k", 1000),
        ("250M", 250e6),
    ],
)
def test_quantities(text, value):
    assert quantity(text, "x") == pytest.approx(value)


def test_a_bad_quantity_is_named():
    with pytest.raises(
        Unsupported, match="containers\\[x\\].resources.limits.cpu: '2 cores' is not a Kubernetes quantity"
    ):
        quantity("2 cores", "containers[x].resources.limits.cpu")


def test_failure_rules_match_as_the_job_controller_does():
    fail = cluster_plan.FailureRule("FailJob", "trainer", "In", (2,))
    assert (
        fail.matches({"trainer": 2}) and not fail.matches({"trainer": 1}) and not fail.matches({"wait-for-copier": 2})
    )
    not_in = cluster_plan.FailureRule("Count", None, "NotIn", (0, 137))
    assert not_in.matches({"trainer": 1}) and not not_in.matches({"trainer": 137})
    ignore = cluster_plan.FailureRule("Ignore", conditions=(("DisruptionTarget", "True"),))
    assert not ignore.matches({"trainer": 137}) and ignore.matches({}, conditions=[("DisruptionTarget", "True")])


def test_kubernetes_variable_expansion():
    from cluster_runtime import Cluster

    env = {"A": "1", "B": "two"}
    assert Cluster.expand(["$(A)-$(B)", "$$(A)", "$(MISSING)", "plain"], env) == [
        "1-two",
        "$(A)",
        "$(MISSING)",
        "plain",
    ]


def test_network_policy_rules_add_up_and_deny_last():
    """The iptables rules the harness makes of the chart's policies (multiworker: trainers talk)."""
    import types

    from cluster_plan import network_policy_rules

    release = translate(rendered("multiworker"), namespace="ml")
    pods = {}
    for i, template in enumerate(
        [j.template for j in release.jobs] + [d.template for d in release.deployments] + release.test_pods
    ):
        pods[template.labels["app.kubernetes.io/component"]] = types.SimpleNamespace(
            ip=f"10.0.0.{i + 2}", labels=template.labels
        )
    pods["trainer-2"] = types.SimpleNamespace(ip="10.0.0.99", labels=pods["trainer"].labels)
    rules = network_policy_rules(release.network_policies, list(pods.values()), "br-x")
    accept = [r for r in rules if r[-1] == "ACCEPT" and "conntrack" not in r]
    drops = [r for r in rules if r[-1] == "DROP"]
    assert rules.index(drops[0]) > max(rules.index(r) for r in accept)  # every allow before any deny
    assert {r[r.index("-d") + 1] for r in drops} == {p.ip for p in pods.values()}  # default deny isolates every pod

    def allowed(src, dst, port):
        return any(
            r[r.index("-d") + 1] == pods[dst].ip
            and ("-s" not in r or r[r.index("-s") + 1] == pods[src].ip)
            and r[r.index("--dport") + 1] == str(port)
            for r in accept
        )

    assert allowed("trainer-2", "trainer", 12345) and allowed("trainer", "trainer-2", 12345)
    assert not allowed("copier", "trainer", 12345) and not allowed("server", "trainer", 12345)
    assert allowed("test", "server", 8080) and allowed("copier", "server", 8080)  # allowFrom empty: any source
    assert not allowed("test", "server", 9999) and not allowed("server", "copier", 8080)


# ----------------------------------------------------------------------------- ConfigMaps (your model's code)

CODE_DIR = "/opt/disttrain/user-code"


def test_the_model_code_configmap_is_mounted_read_only_where_the_code_is_imported():
    release = translate(rendered("own-model"), namespace="ml")
    source = release.config_maps["dt-disttrain-model-code"]["tabular.py"].decode()
    assert source.startswith("import keras") and "def build(spec):" in source
    pods = {j.name.rsplit("-", 2)[-2]: j.template for j in release.jobs}
    pods["server"] = release.deployments[0].template
    for stage, pod in pods.items():
        (main,) = pod.containers
        mounts = {m.volume: m for m in main.mounts}
        env = {e.name: e.value for e in main.env}
        if stage == "copier":
            assert "user-code" not in pod.volumes and "user-code" not in mounts and "PYTHONPATH" not in env
            continue
        volume = pod.volumes["user-code"]
        assert (volume.kind, volume.secret, volume.mode, volume.read_only) == (
            "configMap",
            "dt-disttrain-model-code",
            0o444,
            True,
        )
        assert (mounts["user-code"].path, mounts["user-code"].read_only) == (CODE_DIR, True)
        assert env["PYTHONPATH"] == CODE_DIR and env["PYTHONDONTWRITEBYTECODE"] == "1"
        for init in pod.init_containers:
            assert "user-code" not in {m.volume for m in init.mounts}
        assert "--model-module" in main.args and main.args[main.args.index("--model-module") + 1] == "tabular:build"


def test_the_tfserving_monitoring_configmap_translates_too():
    release = translate(rendered("tfserving"), namespace="ml")
    assert "dt-disttrain-tfserving" in release.config_maps
    assert release.deployments[0].template.volumes["tfserving-config"].kind == "configMap"


def external_code(name="my-model-code", data=None):
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ml"},
        "data": data if data is not None else {"tabular.py": "import keras\n"},
    }


def test_a_configmap_outside_the_release_is_refused_unless_given_with_it():
    sets = ("model.codeConfigMap=my-model-code", "model.code=null")
    with pytest.raises(Unsupported, match="uses ConfigMap 'my-model-code', which is not in the release"):
        translate(rendered("own-model", sets=sets), namespace="ml")
    release = translate(rendered("own-model", sets=sets) + [external_code()], namespace="ml")
    assert release.config_maps["my-model-code"] == {"tabular.py": b"import keras\n"}


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (
            lambda cm, vol: cm.update(binaryData={"tabular.py": "eA=="}),
            "key 'tabular.py' is in both data and binaryData",
        ),
        (lambda cm, vol: cm.update(data={"a/b.py": "x"}), "key 'a/b.py' is not a valid ConfigMap key"),
        (
            lambda cm, vol: vol["configMap"].update(items=[{"key": "tabular.py", "path": "../escape.py"}]),
            "a relative path without '..'",
        ),
        (
            lambda cm, vol: vol["configMap"].update(items=[{"key": "missing.py", "path": "m.py"}]),
            "has no key 'missing.py'",
        ),
        (lambda cm, vol: vol["configMap"].update(sources=[]), "volumes[user-code].configMap.sources"),
    ],
)
def test_configmap_mistakes_are_refused_by_name(mutate, expected):
    docs = rendered("own-model")
    cm = one(docs, "ConfigMap", "model-code")
    (vol,) = [v for v in trainer(docs)["spec"]["template"]["spec"]["volumes"] if v["name"] == "user-code"]
    mutate(cm, vol)
    with pytest.raises(Unsupported, match=re.escape(expected)):
        translate(docs, namespace="ml")


def test_binary_data_and_items_reach_the_volume_files(tmp_path):
    from cluster_runtime import write_volume_files

    docs = rendered("own-model")
    cm = one(docs, "ConfigMap", "model-code")
    cm["binaryData"] = {"blob.bin": "AAEC"}
    (vol,) = [v for v in trainer(docs)["spec"]["template"]["spec"]["volumes"] if v["name"] == "user-code"]
    release = translate(docs, namespace="ml")
    volume = next(j for j in release.jobs if "trainer" in j.name).template.volumes["user-code"]
    write_volume_files(tmp_path / "all", volume, release.config_maps["dt-disttrain-model-code"])
    assert (tmp_path / "all" / "blob.bin").read_bytes() == b"\x00\x01\x02"
    assert (tmp_path / "all" / "tabular.py").read_text().startswith("import keras")
    assert (tmp_path / "all" / "tabular.py").stat().st_mode & 0o777 == 0o444  # defaultMode 292
    vol["configMap"]["items"] = [{"key": "tabular.py", "path": "pkg/model.py", "mode": 0o400}]
    release = translate(docs, namespace="ml")
    volume = next(j for j in release.jobs if "trainer" in j.name).template.volumes["user-code"]
    write_volume_files(tmp_path / "items", volume, release.config_maps["dt-disttrain-model-code"])
    assert sorted(str(p.relative_to(tmp_path / "items")) for p in (tmp_path / "items").rglob("*")) == [
        "pkg",
        "pkg/model.py",
    ]
    assert (tmp_path / "items" / "pkg" / "model.py").stat().st_mode & 0o777 == 0o400


def test_the_object_store_run_reads_its_key_pair_from_the_secret_given_beside_the_release():
    """table-object-store: the chart refers to the user's Secret (objectStore.existingSecret); the harness,
    which has no API server, takes it with the release's manifests and resolves secretKeyRef from it, for
    the copier and the aggregator only."""
    from cluster_objectstore import CA_CONFIGMAP, SECRET, manifests
    from cluster_runs import BY_NAME
    from objectstore import ACCESS_KEY

    run = BY_NAME["table-object-store"]
    args = []
    for f in run.values_files:
        args += ["-f", str(f)]
    docs = copy.deepcopy(render(None, extra=tuple(args)))
    secret, ca = manifests(CA_PEM)
    with pytest.raises(Unsupported, match=f"env AWS_ACCESS_KEY_ID uses Secret '{SECRET}', which is not in the release"):
        translate(docs + [ca], namespace=NAMESPACE)
    with pytest.raises(
        Unsupported, match=f"volume object-store-ca uses ConfigMap '{CA_CONFIGMAP}', which is not in the release"
    ):
        translate(docs + [secret], namespace=NAMESPACE)
    release = translate(docs + [secret, ca], namespace=NAMESPACE)
    assert release.secrets[SECRET]["AWS_ACCESS_KEY_ID"] == ACCESS_KEY.encode()
    pods = {j.name.rsplit("-", 2)[-2]: j.template for j in release.jobs}
    pods["server"] = release.deployments[0].template
    for stage, pod in pods.items():
        (main,) = pod.containers
        env = {e.name: e for e in main.env}
        if stage in ("copier", "aggregator"):
            assert env["AWS_ACCESS_KEY_ID"].secret == (SECRET, "AWS_ACCESS_KEY_ID", False)
            assert env["AWS_SECRET_ACCESS_KEY"].secret == (SECRET, "AWS_SECRET_ACCESS_KEY", False)
            assert env["AWS_ENDPOINT_URL"].value == "https://seaweedfs.storage.svc.cluster.local:8443"
            assert env["AWS_CA_BUNDLE"].value == "/etc/disttrain/object-store-ca/ca-bundle.pem"
            assert pod.volumes["object-store-ca"].secret == CA_CONFIGMAP
            assert pod.labels["disttrain.io/object-store"] == "true"
        else:
            assert not [name for name in env if name.startswith("AWS_")], stage
            assert "disttrain.io/object-store" not in pod.labels
    assert "dt-disttrain-object-store" in [p.name for p in release.network_policies]
