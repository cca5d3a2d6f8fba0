"""The rendered manifests: valid Kubernetes objects for 1.29..1.35, and what the values promise."""

import json
import re
import subprocess
import sys

import pytest

from chartlib import (
    CHART,
    KUBE_VERSIONS,
    NAMESPACE,
    OLD_KUBE_VERSIONS,
    RELEASE,
    NAMES,
    VARIANTS,
    arg,
    containers,
    find,
    is_nfs_server,
    load_values,
    main_container,
    one,
    pod_spec,
    prerender,
    render,
    render_error,
    stage_container,
    stage_of,
    wait_containers,
    workloads,
)

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="pip install kubernetes-validate (see tests/chart)"
)

STAGES = ("copier", "trainer", "aggregator", "server")


@pytest.fixture(scope="module", autouse=True)
def _rendered_in_parallel():
    prerender(sorted(VARIANTS), KUBE_VERSIONS + OLD_KUBE_VERSIONS)


# ------------------------------------------------------------------ validity


@pytest.mark.parametrize("kube", KUBE_VERSIONS + OLD_KUBE_VERSIONS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_manifests_validate_strictly(variant, kube):
    docs = render(variant, kube_version=kube)
    assert docs
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, kube, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(
                f"{variant} @ {kube}: {doc['kind']}/{doc['metadata']['name']}: {err.message} at {list(err.path)}"
            )


def test_validator_is_strict_enough_to_catch_a_field_from_the_future(tmp_path):
    """Sanity check of the validator itself: the 1.29 trainer Job does not fit 1.27 (no backoffLimitPerIndex there)."""
    job = one(render(kube_version="1.29.0"), "Job", "trainer")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, "1.27.0", strict=True)
    bad = dict(job, spec=dict(job["spec"], completionz=3))
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, "1.29.0", strict=True)


def test_kubernetes_validate_cli_accepts_the_default_rendering(tmp_path):
    path = tmp_path / "manifests.yaml"
    from chartlib import _render

    path.write_text(_render("defaults", (), "1.29.0", None, ()))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "kubernetes_validate",
            "--strict",
            "--kubernetes-version",
            "1.29.0",
            "--quiet",
            str(path),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


# -------------------------------------------------------------- the trainers


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_workers_reach_completions_parallelism_shards_and_markers(variant):
    docs = render(variant)
    values = load_values(variant)
    workers = values["workers"]
    tasks = workers + (1 + values["parameterServers"] if values["strategy"] == "parameterserver" else 0)
    job = one(docs, "Job", "trainer")
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == tasks
    trainer = main_container(docs, "trainer")
    assert arg(trainer, "--workers") == str(workers)
    assert "--worker-index" not in trainer["args"]  # from $JOB_COMPLETION_INDEX
    assert arg(main_container(docs, "copier"), "--n-shards") == str(workers)
    assert arg(main_container(docs, "aggregator"), "--expect") == str(workers)
    aggregator = one(docs, "Job", "aggregator")
    (wait,) = pod_spec(aggregator)["initContainers"]
    markers = [a for a in wait["command"] if a.endswith("/_SUCCESS")]
    assert markers == [f"/workdir/run-1/train/worker-{i:05d}/_SUCCESS" for i in range(tasks)]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_headless_service_gives_workers_their_tf_config_names(variant):
    docs = render(variant)
    job = one(docs, "Job", "trainer")
    services = [s for s in find(docs, "Service") if s["spec"].get("clusterIP") == "None"]
    assert len(services) == 1
    service = services[0]
    spec = pod_spec(job)
    # worker i is <job>-<i>.<service>: hostname <job>-<i> (Indexed Job) + subdomain <service>
    assert spec["subdomain"] == service["metadata"]["name"]
    trainer = main_container(docs, "trainer")
    assert arg(trainer, "--job") == job["metadata"]["name"]
    assert arg(trainer, "--service") == service["metadata"]["name"]
    assert arg(trainer, "--port") == str(service["spec"]["ports"][0]["port"])
    assert service["spec"]["publishNotReadyAddresses"] is True
    selector = service["spec"]["selector"]
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= labels.items()
    workers = load_values(variant)["workers"]
    assert len(f"{job['metadata']['name']}-{workers - 1}") <= 63  # a pod hostname is a DNS label


def test_long_names_keep_hostnames_within_63_characters():
    docs = render(sets=("fullnameOverride=" + "x" * 70, "workers=1000"))
    for doc in docs:
        assert len(doc["metadata"]["name"]) <= (253 if doc["kind"] == "PersistentVolume" else 63), doc["metadata"][
            "name"
        ]
    job = one(docs, "Job", "trainer")
    assert len(f"{job['metadata']['name']}-999") <= 63


@pytest.mark.parametrize(
    "sets, strategy, epochs, batch",
    [
        ((), "average", "5", "64"),
        (("strategy=multiworker", "epochs=3", "batch=100"), "multiworker", "3", "100"),
        (("epochs=12", "batch=7", "learningRate=0.0003"), "average", "12", "7"),
    ],
)
def test_epochs_batch_strategy_reach_the_trainer(sets, strategy, epochs, batch):
    trainer = main_container(render(sets=sets), "trainer")
    assert arg(trainer, "--strategy") == strategy
    assert arg(trainer, "--epochs") == epochs
    assert arg(trainer, "--batch") == batch
    if "learningRate=0.0003" in sets:
        assert float(arg(trainer, "--learning-rate")) == 0.0003
    else:  # null: the trainer's per-task default
        assert "--learning-rate" not in trainer["args"]


def test_localsgd_passes_sync_every_only_to_localsgd(localsgd_manifest, multiworker_manifest):
    trainer = stage_container(localsgd_manifest, "trainer")
    assert (arg(trainer, "--strategy"), arg(trainer, "--sync-every")) == ("localsgd", "16")
    trainer = main_container(render(sets=("strategy=localsgd",)), "trainer")
    assert "--sync-every" not in trainer["args"]  # null: the trainer's default
    assert "--sync-every" not in stage_container(multiworker_manifest, "trainer")["args"]


def test_localsgd_passes_the_outer_optimizer_and_the_int8_wire():
    trainer = main_container(
        render(
            sets=(
                "strategy=localsgd",
                "syncEvery=500",
                "outerOptimizer=nesterov",
                "outerLearningRate=0.5",
                "outerMomentum=0.8",
                "allreduceDtype=int8",
            )
        ),
        "trainer",
    )
    assert [
        arg(trainer, f)
        for f in ("--sync-every", "--outer-optimizer", "--outer-lr", "--outer-momentum", "--allreduce-dtype")
    ] == ["500", "nesterov", "0.5", "0.8", "int8"]
    # none (the default): no outer flags, so the trainer's plain averaging (and its refusal of --outer-lr without nesterov)
    trainer = main_container(render(sets=("strategy=localsgd",)), "trainer")
    assert [a for a in trainer["args"] if a.startswith("--outer-")] == ["--outer-overlap"]
    assert arg(trainer, "--outer-overlap") == "none"
    trainer = main_container(
        render(sets=("strategy=localsgd", "outerOptimizer=nesterov", "outerOverlap=eager")), "trainer"
    )
    assert arg(trainer, "--outer-overlap") == "eager"
    assert "--sync-at-epoch-end" not in trainer["args"]  # (off by default)
    trainer = main_container(
        render(sets=("strategy=localsgd", "outerOptimizer=nesterov", "syncAtEpochEnd=true")), "trainer"
    )
    assert "--sync-at-epoch-end" in trainer["args"]


def test_parameterserver_runs_chief_ps_and_workers_in_one_indexed_job(parameterserver_manifest):
    job = parameterserver_manifest.get(NAMES["trainer"])
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 4  # 1 chief + 1 ps + 2 workers
    trainer = stage_container(parameterserver_manifest, "trainer")
    assert (arg(trainer, "--strategy"), arg(trainer, "--ps"), arg(trainer, "--workers")) == (
        "parameterserver",
        "1",
        "2",
    )
    # (the aggregator waits for every task's marker: test_workers_reach_completions_parallelism_shards_and_markers)
    assert "--ps" not in main_container(render(sets=("parameterServers=3",)), "trainer")["args"]  # average ignores it
    one_ps = one(render(sets=("strategy=parameterserver", "parameterServers=2", "workers=3")), "Job", "trainer")
    assert one_ps["spec"]["completions"] == 6


@pytest.mark.parametrize("variant", ["multiworker", "localsgd", "parameterserver"])
def test_connected_strategies_open_the_collective_port_and_the_policy_guards_it(variant):
    docs = render(variant)
    trainer = main_container(docs, "trainer")
    assert trainer["ports"] == [{"name": "collective", "containerPort": 12345, "protocol": "TCP"}]
    policy = one(docs, "NetworkPolicy", "-trainer")
    job = one(docs, "Job", "trainer")
    trainer_labels = job["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= trainer_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    (rule,) = policy["spec"]["ingress"]
    (out,) = policy["spec"]["egress"]  # and trainers may only call trainers (besides DNS)
    assert (out["to"], out["ports"]) == (rule["from"], rule["ports"])
    (peer,) = rule["from"]
    assert set(peer) == {"podSelector"}  # only pods of this namespace, and only trainers
    assert peer["podSelector"]["matchLabels"].items() <= trainer_labels.items()
    for other in ("copier", "aggregator"):
        labels = one(docs, "Job", other)["spec"]["template"]["metadata"]["labels"]
        assert not peer["podSelector"]["matchLabels"].items() <= labels.items()
    assert rule["ports"] == [{"protocol": "TCP", "port": 12345}]


def test_network_policy_can_be_disabled():
    assert not find(render(sets=("networkPolicy.enabled=false",)), "NetworkPolicy")


@pytest.mark.parametrize("kube", ["1.29.0", "1.33.0", "1.35.0"])
def test_trainer_failure_handling_on_new_clusters(kube):
    spec = one(render(kube_version=kube), "Job", "trainer")["spec"]
    assert spec["backoffLimitPerIndex"] == 3
    assert spec["maxFailedIndexes"] == 0
    assert spec["podReplacementPolicy"] == "Failed"
    assert "backoffLimit" not in spec
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert rules[1]["action"] == "FailJob" and rules[1]["onExitCodes"]["values"] == [2]
    assert pod_spec({"kind": "Job", "spec": spec})["restartPolicy"] == "Never"  # required by both features
    assert spec["activeDeadlineSeconds"] == 86400


@pytest.mark.parametrize(
    "exports, expected",
    [
        (None, "saved_model,tflite"),
        ('["tflite"]', "tflite"),
        ('["tflite","saved_model"]', "tflite,saved_model"),
        ("[]", "none"),
    ],
)
def test_aggregator_exports_come_from_values(exports, expected):
    """aggregator.exports reaches --exports (the aggregator orders the kinds itself); [] is none.
    (--set-json: --set a={} gives a list of one empty string, not an empty list.)"""
    aggregator = main_container(
        render(extra=("--set-json", f"aggregator.exports={exports}") if exports else ()), "aggregator"
    )
    assert arg(aggregator, "--exports") == expected


@pytest.mark.parametrize("kube, failure_policy", [("1.25.0", False), ("1.26.0", True), ("1.28.0", True)])
def test_trainer_failure_handling_on_older_clusters(kube, failure_policy):
    spec = one(render(kube_version=kube), "Job", "trainer")["spec"]
    assert "backoffLimitPerIndex" not in spec and "podReplacementPolicy" not in spec and "maxFailedIndexes" not in spec
    assert spec["backoffLimit"] == 6
    assert ("podFailurePolicy" in spec) == failure_policy


def test_aggregator_gate_args_come_from_values(defaults_manifest):
    aggregator = stage_container(defaults_manifest, "aggregator")
    assert arg(aggregator, "--max-drop-vs-best-worker") == "1" and arg(aggregator, "--max-regression") == "1"
    assert arg(aggregator, "--min-gain-vs-trivial") == "1" and arg(aggregator, "--min-relative-gain-vs-trivial") == "1"
    # every run has its own directory: the model published last is in an earlier run's final/
    assert arg(aggregator, "--published") == "/workdir/run-*/final/model.keras"
    assert "--force" not in aggregator["args"]
    aggregator = main_container(
        render(
            sets=(
                "aggregator.gate.maxDropVsBestWorker=2.5",
                "aggregator.gate.maxRegression=0",
                "aggregator.gate.minGainVsTrivial=0.5",
                "aggregator.gate.minRelativeGainVsTrivial=3",
                "aggregator.gate.force=true",
            )
        ),
        "aggregator",
    )
    assert arg(aggregator, "--max-drop-vs-best-worker") == "2.5" and arg(aggregator, "--max-regression") == "0"
    assert (
        arg(aggregator, "--min-gain-vs-trivial") == "0.5" and arg(aggregator, "--min-relative-gain-vs-trivial") == "3"
    )
    assert "--force" in aggregator["args"]


@pytest.mark.parametrize(
    "kube, failure_policy", [("1.25.0", False), ("1.26.0", True), ("1.29.0", True), ("1.35.0", True)]
)
def test_a_gate_refusal_fails_the_aggregator_job_at_once(kube, failure_policy):
    """Exit 4 (the gate refused the model) is not retried: the same models would be refused again."""
    job = one(render(kube_version=kube), "Job", "aggregator")
    assert ("podFailurePolicy" in job["spec"]) == failure_policy
    if failure_policy:
        rules = job["spec"]["podFailurePolicy"]["rules"]
        assert rules[0] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
        assert rules[1]["action"] == "FailJob"
        assert rules[1]["onExitCodes"] == {"containerName": "aggregator", "operator": "In", "values": [4]}
        assert pod_spec(job)["restartPolicy"] == "Never"  # podFailurePolicy requires it
    container = main_container([job], "aggregator")
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"  # the refusal's one line, in describe


def test_job_deadlines_and_ttl_come_from_values():
    docs = render("external-nfs", sets=("trainer.activeDeadlineSeconds=1234", "copier.activeDeadlineSeconds=99"))
    assert one(docs, "Job", "trainer")["spec"]["activeDeadlineSeconds"] == 1234
    assert one(docs, "Job", "copier")["spec"]["activeDeadlineSeconds"] == 99
    for stage in ("copier", "trainer", "aggregator"):
        assert one(docs, "Job", stage)["spec"]["ttlSecondsAfterFinished"] == 3600
    for job in find(render(), "Job"):
        assert "ttlSecondsAfterFinished" not in job["spec"]  # null = keep


def test_workers_prefer_different_nodes(eight_workers_manifest, one_worker_manifest):
    spec = pod_spec(eight_workers_manifest.get(NAMES["trainer"]))
    (term,) = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "trainer"
    assert "affinity" not in pod_spec(one_worker_manifest.get(NAMES["trainer"]))
    off = pod_spec(one(render(sets=("trainer.spreadWorkers=false",)), "Job", "trainer"))
    assert "affinity" not in off


def test_user_affinity_is_kept_and_spread_added():
    docs = render(
        sets=(
            "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=gpu",
            "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
        )
    )
    trainer = pod_spec(one(docs, "Job", "trainer"))["affinity"]
    assert "nodeAffinity" in trainer and "podAntiAffinity" in trainer
    copier = pod_spec(one(docs, "Job", "copier"))["affinity"]
    assert "nodeAffinity" in copier and "podAntiAffinity" not in copier


# -------------------------------------------------------------- ordering and runs


def test_every_stage_waits_for_the_previous_marker_of_this_run():
    docs = render()
    waits = {}
    for doc in workloads(docs):
        for c in wait_containers(doc):
            waits[stage_of(doc)] = [a for a in c["command"] if a.endswith("_SUCCESS")]
            assert c["command"][:2] == ["python", "-c"]
            assert c["image"] == next(x["image"] for x in pod_spec(doc)["containers"])  # the stage's own image
    assert waits == {
        "trainer": ["/workdir/run-1/data/_SUCCESS"],
        "aggregator": ["/workdir/run-1/train/worker-00000/_SUCCESS", "/workdir/run-1/train/worker-00001/_SUCCESS"],
        "server": ["/workdir/run-1/final/_SUCCESS"],
    }
    assert "initContainers" not in pod_spec(one(docs, "Job", "copier"))


def test_wait_timeouts_come_from_values():
    docs = render(
        sets=("trainer.waitTimeoutSeconds=111", "aggregator.waitTimeoutSeconds=222", "server.waitTimeoutSeconds=333")
    )
    got = {}
    for doc in workloads(docs):
        for c in wait_containers(doc):
            got[stage_of(doc)] = c["command"][3]
    assert got == {"trainer": "111", "aggregator": "222", "server": "333"}
    assert arg(main_container(docs, "trainer"), "--wait-timeout") == "111"
    assert arg(main_container(docs, "aggregator"), "--timeout") == "222"


def test_peer_wait_comes_from_values(defaults_manifest):
    assert arg(stage_container(defaults_manifest, "trainer"), "--peer-wait") == "600"
    assert arg(main_container(render(sets=("trainer.peerWaitSeconds=0",)), "trainer"), "--peer-wait") == "0"


def test_the_heartbeat_timeout_comes_from_values_for_the_all_reduce_strategies():
    for strategy in ("multiworker", "localsgd"):
        assert arg(main_container(render(sets=(f"strategy={strategy}",)), "trainer"), "--heartbeat-timeout") == "120"
    trainer = main_container(render(sets=("strategy=localsgd", "trainer.heartbeatTimeoutSeconds=300")), "trainer")
    assert arg(trainer, "--heartbeat-timeout") == "300"
    # average never joins a cluster; the parameter server's strategy does not use the coordination service
    for strategy in ("average", "parameterserver"):
        assert "--heartbeat-timeout" not in main_container(render(sets=(f"strategy={strategy}",)), "trainer")["args"]
    assert "heartbeatTimeoutSeconds" in render_error(sets=("trainer.heartbeatTimeoutSeconds=0",))


def test_malloc_comes_from_values_and_only_the_trainers_modes_pass_the_schema(defaults_manifest):
    from disttrain_trainer.malloc_settings import MODES

    assert arg(stage_container(defaults_manifest, "trainer"), "--malloc") == "tuned"
    docs = render(sets=("trainer.malloc=glibc", "advisor.enabled=true"))
    trainer_pod = pod_spec(one(docs, "Job", "trainer"))
    # the advisor's probe steps cost what the trainer's do: the same setting
    assert [
        arg(c, "--malloc")
        for c in trainer_pod["initContainers"] + trainer_pod["containers"]
        if c["name"] in ("advisor", "trainer")
    ] == ["glibc", "glibc"]
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["properties"]["trainer"]["properties"]["malloc"]["enum"] == list(MODES)  # the trainer's choices
    assert "malloc" in render_error(sets=("trainer.malloc=jemalloc",))


def test_jobs_and_workdir_carry_the_revision(defaults_manifest):
    for stage in ("copier", "trainer", "aggregator"):
        job = defaults_manifest.get(
            f"Job/{RELEASE}-disttrain-{stage}-r1"
        )  # KeyError naming the Jobs there are otherwise
        assert job["spec"]["template"]["metadata"]["labels"]["disttrain.io/run"] == "r1"
    for stage in STAGES:
        c = stage_container(defaults_manifest, stage)
        assert arg(c, "--workdir") == "/workdir/run-1"
        assert {"name": "DISTTRAIN_WORKDIR", "value": "/workdir/run-1"} in c["env"]
    assert arg(stage_container(defaults_manifest, "copier"), "--cache-dir") == "/workdir/.cache"  # shared by all runs
    assert arg(stage_container(defaults_manifest, "server"), "--model") == "/workdir/run-1/final/model.keras"
    assert arg(stage_container(defaults_manifest, "aggregator"), "--savefile") == "/workdir/run-1/final/model.keras"
    deployment = defaults_manifest.get(NAMES["server"])
    assert (
        deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    )  # the old model serves until the new is ready


@pytest.mark.parametrize(
    "live, dashboard, runs_dir, progress_run",
    [
        (
            True,
            True,
            "/workdir",
            None,
        ),  # defaults: the dashboard lists the runs, the page shows the newest one training
        (False, True, "/workdir", "served"),  # the runs listed, the progress of the served run only
        (True, False, "/workdir", None),  # issue 18's setting alone still passes the volume
        (False, False, None, None),  # neither: the served run only, on the page and on the dashboard
    ],
)
def test_the_dashboard_and_live_progress_read_the_runs_on_the_volume(live, dashboard, runs_dir, progress_run):
    """Issue 13 point 4: --runs-dir (the volume, whose run-N directories the dashboard lists) whenever either
    needs it; --progress-run served keeps liveProgress false meaning what it meant."""
    server = main_container(
        render(sets=(f"server.liveProgress={str(live).lower()}", f"server.dashboard.enabled={str(dashboard).lower()}")),
        "server",
    )
    assert (arg(server, "--runs-dir") if "--runs-dir" in server["args"] else None) == runs_dir
    assert (arg(server, "--progress-run") if "--progress-run" in server["args"] else None) == progress_run
    # every run on the volume is visible to the server: the whole volume is mounted, not the run's directory
    mount = next(m for m in server["volumeMounts"] if m["name"] == "workdir")
    assert mount["mountPath"] == "/workdir" and "subPath" not in mount


# -------------------------------------------------------------------- storage


def claim_of(docs):
    names = set()
    for doc in workloads(docs):
        if is_nfs_server(doc):
            continue
        for v in pod_spec(doc)["volumes"]:
            if "persistentVolumeClaim" in v:
                names.add(v["persistentVolumeClaim"]["claimName"])
    (name,) = names
    return name


def test_storage_class_reaches_the_claim():
    docs = render(sets=("storage.size=33Gi",))
    pvc = one(docs, "PersistentVolumeClaim")
    assert pvc["spec"]["storageClassName"] == "nfs-client"
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "33Gi"
    assert claim_of(docs) == pvc["metadata"]["name"]
    assert not find(docs, "PersistentVolume")


def test_dash_storage_class_means_no_class(no_class_manifest):
    pvc = no_class_manifest.get(NAMES["claim"])
    assert pvc["spec"]["storageClassName"] == ""
    assert pvc["spec"]["resources"]["requests"]["storage"] == "5Gi"


def test_one_worker_may_use_read_write_once(one_worker_manifest):
    pvc = one_worker_manifest.get(NAMES["claim"])
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert pvc["spec"]["storageClassName"] == "standard"


def test_existing_claim_is_used_and_nothing_is_created():
    docs = render("existing-claim")
    assert not find(docs, "PersistentVolumeClaim") and not find(docs, "PersistentVolume")
    assert claim_of(docs) == "my-shared-claim"


def test_external_nfs_makes_a_static_volume_bound_to_the_claim():
    docs = render("external-nfs", sets=("storage.size=7Gi",))
    pv = one(docs, "PersistentVolume")
    pvc = one(docs, "PersistentVolumeClaim")
    assert pv["spec"]["nfs"] == {"server": "10.0.0.5", "path": "/exports/disttrain"}
    assert pv["spec"]["mountOptions"] == ["nfsvers=4.1", "hard"]
    assert pv["spec"]["capacity"]["storage"] == pvc["spec"]["resources"]["requests"]["storage"] == "7Gi"
    assert pv["spec"]["accessModes"] == pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pv["spec"]["storageClassName"] == pvc["spec"]["storageClassName"] == ""
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pv["spec"]["claimRef"] == {"namespace": NAMESPACE, "name": pvc["metadata"]["name"]}
    assert NAMESPACE in pv["metadata"]["name"]  # cluster-scoped: unique per namespace
    assert claim_of(docs) == pvc["metadata"]["name"]
    assert not [d for d in docs if is_nfs_server(d)]


def test_in_chart_nfs_server_is_off_by_default():
    for variant in VARIANTS:
        if variant != "nfs-server":
            assert not [d for d in render(variant) if is_nfs_server(d)], variant


def test_in_chart_nfs_server_backs_the_volume():
    docs = render("nfs-server")
    deployment = one([d for d in docs if is_nfs_server(d)], "Deployment")
    service = one([d for d in docs if is_nfs_server(d)], "Service")
    pv = one(docs, "PersistentVolume")
    assert pv["spec"]["nfs"] == {"server": "10.96.200.10", "path": "/"}
    assert service["spec"]["clusterIP"] == "10.96.200.10"
    assert {p["port"] for p in service["spec"]["ports"]} == {2049, 20048, 111}
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    (server,) = pod_spec(deployment)["containers"]
    assert server["securityContext"] == {"privileged": True}
    export = one(docs, "PersistentVolumeClaim", "nfs-export")
    assert export["spec"]["accessModes"] == ["ReadWriteOnce"]
    # without a fixed ClusterIP the nodes mount it by its cluster DNS name
    pv = one(render("nfs-server", sets=("nfsServer.service.clusterIP=",)), "PersistentVolume")
    assert pv["spec"]["nfs"]["server"] == f"{RELEASE}-disttrain-nfs.{NAMESPACE}.svc.cluster.local"


# -------------------------------------------------------------------- security


HARDENED = {
    "runAsNonRoot": True,
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_container_is_hardened_and_bounded(variant):
    docs = render(variant)
    seen = set()
    for doc in workloads(docs):
        spec = pod_spec(doc)
        assert spec["automountServiceAccountToken"] is False, doc["metadata"]["name"]
        if is_nfs_server(doc):
            continue  # the opted-in privileged pod, checked below
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == 10001
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in containers(spec):
            where = f"{doc['kind']}/{doc['metadata']['name']}/{c['name']}"
            seen.add(c["name"])
            for key, value in HARDENED.items():
                assert c["securityContext"].get(key) == value, f"{where}: securityContext.{key}"
            assert c["securityContext"].get("privileged") is not True, where
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"].get(kind, {})), f"{where}: resources.{kind}"
            mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
            assert mounts.get("/tmp") == "tmp", where
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            assert env.get("HOME") == "/tmp" and env.get("MPLCONFIGDIR") == "/tmp", where
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert "emptyDir" in volumes["tmp"]
    assert {
        "copier",
        "trainer",
        "aggregator",
        "server",
        "test",
        "wait-for-copier",
        "wait-for-trainers",
        "wait-for-model",
    } <= seen


def test_only_the_nfs_server_is_privileged_and_it_says_so():
    docs = render("nfs-server")
    privileged = [
        (doc["metadata"]["name"], c["name"])
        for doc in workloads(docs)
        for c in containers(pod_spec(doc))
        if c.get("securityContext", {}).get("privileged")
    ]
    assert privileged == [(f"{RELEASE}-disttrain-nfs", "nfs-server")]
    values = (pod_spec.__globals__["CHART"] / "values.yaml").read_text()
    assert "ONLY privileged pod" in values
    assert "PRIVILEGED" in (pod_spec.__globals__["CHART"] / "templates" / "NOTES.txt").read_text()


def test_service_account_mounts_no_token():
    docs = render()
    accounts = {sa["metadata"]["name"]: sa for sa in find(docs, "ServiceAccount")}
    assert set(accounts) == {"dt-disttrain", "dt-disttrain-serving"}  # the stages', the server's (test_chart_security)
    assert all(sa["automountServiceAccountToken"] is False for sa in accounts.values())
    for doc in workloads(docs):
        assert pod_spec(doc)["serviceAccountName"] in accounts


def test_resources_per_stage_come_from_values():
    docs = render(
        sets=("trainer.resources.limits.memory=9Gi", "copier.resources.requests.cpu=3", "server.resources.limits.cpu=5")
    )
    assert main_container(docs, "trainer")["resources"]["limits"]["memory"] == "9Gi"
    assert main_container(docs, "copier")["resources"]["requests"]["cpu"] == 3
    assert main_container(docs, "server")["resources"]["limits"]["cpu"] == 5


# -------------------------------------------------------------------- server


@pytest.mark.parametrize(
    "variant, kind",
    [
        ("defaults", "LoadBalancer"),
        ("multiworker", "ClusterIP"),
        ("existing-claim", "NodePort"),
        ("no-class", "LoadBalancer"),
    ],
)
def test_server_service_type_follows_values(variant, kind):
    docs = render(variant)
    service = one(docs, "Service", "server")
    assert service["spec"]["type"] == kind
    deployment = one(docs, "Deployment", "server")
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    port = service["spec"]["ports"][0]
    assert port["targetPort"] == "http"
    if variant == "existing-claim":
        assert port["nodePort"] == 30080
    if variant == "no-class":
        assert service["spec"]["loadBalancerSourceRanges"] == ["203.0.113.0/24"]
    else:
        assert "loadBalancerSourceRanges" not in service["spec"]


def test_server_probes_and_args():
    docs = render(sets=("server.modelName=imdb", "server.port=9000"))
    server = main_container(docs, "server")
    assert server["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert server["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert server["ports"][0]["containerPort"] == 9000
    assert arg(server, "--port") == "9000" and arg(server, "--host") == "0.0.0.0"
    assert arg(server, "--model-name") == "imdb"


def test_server_front_and_its_limits_come_from_values():
    """nginx fronts gunicorn in the server container (--front nginx) with the values' deadlines and
    connection limit; it listens on the container port the Service and the probes use, so the
    probes, like the clients, reach gunicorn only through it, never behind slow clients."""
    server = main_container(render(), "server")
    assert arg(server, "--front") == "nginx"
    assert (arg(server, "--header-timeout"), arg(server, "--body-timeout"), arg(server, "--max-connections")) == (
        "10",
        "30",
        "1024",
    )
    # the front listens on the API's port; the metrics port is gunicorn's own (its ClusterIP Service is the scrape's)
    port, metrics = server["ports"]
    assert port["name"] == "http" and str(port["containerPort"]) == arg(server, "--port")
    assert metrics["name"] == "metrics" and str(metrics["containerPort"]) == arg(server, "--metrics-port")
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert server[probe]["httpGet"]["port"] == "http", probe
    assert server["livenessProbe"]["timeoutSeconds"] == 5
    # non-root with a read-only root: nginx's files go to the /tmp emptyDir
    for key, value in HARDENED.items():
        assert server["securityContext"][key] == value, key
    assert {"name": "tmp", "mountPath": "/tmp"} in server["volumeMounts"]

    server = main_container(
        render(
            sets=(
                "server.front.headerTimeoutSeconds=3",
                "server.front.bodyTimeoutSeconds=7",
                "server.front.maxConnections=4096",
            )
        ),
        "server",
    )
    assert (arg(server, "--header-timeout"), arg(server, "--body-timeout"), arg(server, "--max-connections")) == (
        "3",
        "7",
        "4096",
    )

    server = main_container(render(sets=("server.front.enabled=false",)), "server")
    assert arg(server, "--front") == "none"
    assert not {"--header-timeout", "--body-timeout", "--max-connections"} & set(server["args"])


@pytest.mark.parametrize(
    "bad", ["server.front.maxConnections=8", "server.front.headerTimeoutSeconds=0", "server.front.nginx=true"]
)
def test_server_front_values_are_checked(bad):
    assert "front" in render_error(sets=(bad,))


def test_helm_test_pod_checks_readyz_and_predict_on_the_service():
    docs = render(sets=("server.modelName=imdb", "server.service.port=8081"))
    pod = one(docs, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (c,) = pod_spec(pod)["containers"]
    assert c["image"] == main_container(docs, "server")["image"]
    script, url, name = c["command"][2], c["command"][3], c["command"][4]
    assert "/readyz" in script and ":predict" in script
    service = one(docs, "Service", "server")
    assert url == f"http://{service['metadata']['name']}.{NAMESPACE}:8081"
    assert name == "imdb"
    assert not find(render(sets=("tests.enabled=false",)), "Pod")


# -------------------------------------------------------------------- images, labels


def test_images_default_to_app_version_under_the_registry():
    import yaml

    app_version = yaml.safe_load((pod_spec.__globals__["CHART"] / "Chart.yaml").read_text())["appVersion"]
    docs = render()
    for stage in STAGES:
        assert main_container(docs, stage)["image"] == f"disttrain-{stage}:{app_version}"
        assert main_container(docs, stage)["imagePullPolicy"] == "IfNotPresent"
    docs = render("nfs-server", sets=("trainer.image.tag=canary", "server.image.pullPolicy=Always"))
    assert main_container(docs, "copier")["image"] == "registry.example.com/disttrain/disttrain-copier:1.2.3"
    assert main_container(docs, "trainer")["image"] == "registry.example.com/disttrain/disttrain-trainer:canary"
    assert main_container(docs, "server")["imagePullPolicy"] == "Always"
    for doc in workloads(docs):
        if not is_nfs_server(doc):
            assert pod_spec(doc)["imagePullSecrets"] == [{"name": "regcred"}]
            assert pod_spec(doc)["nodeSelector"] == {"kubernetes.io/os": "linux"}
            assert pod_spec(doc)["tolerations"][0]["key"] == "dedicated"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_resource_has_the_standard_labels(variant):
    for doc in render(variant):
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "disttrain"
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert re.fullmatch(r"disttrain-\d+\.\d+\.\d+.*", labels["helm.sh/chart"])
        if doc["kind"] in ("Job", "Deployment", "Pod"):
            assert labels.get("app.kubernetes.io/component")


def test_notes_tell_how_to_follow_read_and_open():
    from chartlib import CHART, helm

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
    for needle in (
        "kubectl logs -n ml -f job/dt-disttrain-copier-r1",
        "job-name=dt-disttrain-trainer-r1",
        "kubectl logs -n ml -f job/dt-disttrain-aggregator-r1",
        "kubectl wait -n ml --for=condition=complete --timeout=100800s job/dt-disttrain-copier-r1 job/dt-disttrain-trainer-r1 job/dt-disttrain-aggregator-r1",
        ".status.containerStatuses[*].state.terminated.message",
        "/workdir/run-1/final/report.json",
        "/report",
        "kubectl port-forward -n ml svc/dt-disttrain-server",
        "loadBalancer.ingress",
        "helm test",
    ):
        assert needle in notes, needle


def test_notes_count_every_trainer_pod_of_a_parameter_server_group():
    from chartlib import CHART, helm

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
        "--set",
        "strategy=parameterserver",
        "--set",
        "parameterServers=2",
        "--set",
        "workers=3",
    )
    notes = out.stdout.split("NOTES:", 1)[1]
    assert "3 worker(s) + 2 parameter server(s) + the chief" in notes
    assert "COMPLETIONS 6/6 when done" in notes and "i = 0..5: 0 the chief" in notes
    assert "--max-log-requests 6 " in notes


# -------------------------------------------------------------------- shared clusters


def test_kueue_labels_every_job_and_only_jobs():
    docs = render("shared-cluster")
    for job in find(docs, "Job"):
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a", job["metadata"]["name"]
        assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "batch-low"
        assert "kueue.x-k8s.io/queue-name" not in job["spec"]["template"]["metadata"]["labels"]
    assert len(find(docs, "Job")) == 3
    assert "kueue.x-k8s.io/queue-name" not in one(docs, "Deployment")["metadata"]["labels"]
    for job in find(render(), "Job"):
        assert not [k for k in job["metadata"]["labels"] if k.startswith("kueue.x-k8s.io/")]


@pytest.mark.parametrize("kind", ["required", "preferred"])
def test_kueue_topology_annotates_the_trainer_pods_only(kind):
    docs = render(sets=(f"kueue.trainerTopology.{kind}=example.com/rack", "podAnnotations.team=a"))
    annotations = one(docs, "Job", "trainer")["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {f"kueue.x-k8s.io/podset-{kind}-topology": "example.com/rack", "team": "a"}
    for stage in ("copier", "aggregator"):
        assert one(docs, "Job", stage)["spec"]["template"]["metadata"]["annotations"] == {"team": "a"}


def test_kueue_topology_is_one_of_required_or_preferred():
    from chartlib import render_error

    err = render_error(
        sets=("storage.storageClass=x", "kueue.trainerTopology.required=a", "kueue.trainerTopology.preferred=b")
    )
    assert "set at most one of kueue.trainerTopology.required and kueue.trainerTopology.preferred" in err


def test_pod_classes_global_and_per_stage():
    docs = render("shared-cluster")
    classes = {
        stage_of(d): {k: pod_spec(d).get(k) for k in ("priorityClassName", "runtimeClassName", "schedulerName")}
        for d in workloads(docs)
    }
    assert (
        classes["copier"]
        == classes["aggregator"]
        == {"priorityClassName": "batch-low", "runtimeClassName": "runc", "schedulerName": None}
    )
    assert classes["trainer"] == {
        "priorityClassName": "batch-low",
        "runtimeClassName": "runc",
        "schedulerName": "volcano",
    }
    assert (
        classes["server"]
        == classes["test"]
        == {"priorityClassName": "serving-high", "runtimeClassName": "runc", "schedulerName": None}
    )
    for doc in workloads(render()):
        assert not {"priorityClassName", "runtimeClassName", "schedulerName"} & set(pod_spec(doc))


def test_extra_env_volumes_and_mounts_per_stage():
    docs = render("shared-cluster")
    trainer = main_container(docs, "trainer")
    env = {e["name"]: e for e in trainer["env"]}
    assert (
        env["TF_CPP_MIN_LOG_LEVEL"]["value"] == "1"
        and env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    )
    assert "DISTTRAIN_WORKDIR" in env  # the chart's own stay
    assert {"name": "dshm", "mountPath": "/dev/shm"} in trainer["volumeMounts"]
    volumes = {v["name"]: v for v in pod_spec(one(docs, "Job", "trainer"))["volumes"]}
    assert (
        volumes["dshm"] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "256Mi"}}
        and "workdir" in volumes
    )
    copier = main_container(docs, "copier")
    assert {"name": "DISTTRAIN_EXAMPLE", "value": "shared-cluster"} in copier["env"]
    assert {"name": "scratch", "mountPath": "/scratch"} in copier["volumeMounts"]
    for stage in ("aggregator", "server"):
        names = [e["name"] for e in main_container(docs, stage)["env"]]
        assert "DISTTRAIN_EXAMPLE" not in names and "TF_CPP_MIN_LOG_LEVEL" not in names
    # the init containers keep only the chart's env and mounts
    (wait,) = pod_spec(one(docs, "Job", "trainer"))["initContainers"]
    assert [m["name"] for m in wait["volumeMounts"]] == ["workdir", "tmp"]


def test_a_gpu_per_worker():
    docs = render("gpu")
    trainer = main_container(docs, "trainer")
    assert trainer["resources"]["limits"]["nvidia.com/gpu"] == trainer["resources"]["requests"]["nvidia.com/gpu"] == 1
    assert trainer["image"].startswith("disttrain-trainer-gpu:")
    assert pod_spec(one(docs, "Job", "trainer"))["runtimeClassName"] == "nvidia"
    assert "nvidia.com/gpu" not in main_container(docs, "aggregator")["resources"]["limits"]


# ------------------------------------------------------------------ quorum (issue 19)


@pytest.mark.parametrize(
    "kube, success_policy", [("1.29.0", False), ("1.31.0", True), ("1.33.0", True), ("1.35.0", True)]
)
def test_trainer_quorum_tolerates_lost_indexes_and_succeeds_with_min_workers(kube, success_policy):
    docs = render(sets=("workers=4", "trainer.minWorkers=3"), kube_version=kube)
    job = one(docs, "Job", "trainer")
    spec = job["spec"]
    assert spec["backoffLimitPerIndex"] == 3 and spec["maxFailedIndexes"] == 1
    assert spec.get("successPolicy") == ({"rules": [{"succeededCount": 3}]} if success_policy else None)
    # finished workers linger for the others: the success policy would stop them
    assert arg(main_container(docs, "trainer"), "--linger-for-peers") == "600"
    aggregator = main_container(docs, "aggregator")
    assert arg(aggregator, "--min-workers") == "3" and arg(aggregator, "--straggler-wait") == "600"
    for doc in docs:
        kubernetes_validate.validate(doc, kube, strict=True)


def test_aggregator_quorum_can_be_set_alone_and_the_default_has_none():
    docs = render(sets=("workers=4", "aggregator.minWorkers=2", "aggregator.stragglerWaitSeconds=30"))
    assert arg(main_container(docs, "aggregator"), "--min-workers") == "2"
    assert arg(main_container(docs, "aggregator"), "--straggler-wait") == "30"
    assert "--linger-for-peers" not in main_container(docs, "trainer")["args"]
    assert "successPolicy" not in one(docs, "Job", "trainer")["spec"]
    defaults = render()
    assert "--min-workers" not in main_container(defaults, "aggregator")["args"]
    assert one(defaults, "Job", "trainer")["spec"]["maxFailedIndexes"] == 0


@pytest.mark.parametrize(
    "strategy, why",
    [
        ("multiworker", "multiworker and localsgd all-reduce across every worker"),
        ("localsgd", "multiworker and localsgd all-reduce across every worker"),
        ("parameterserver", "a parameterserver chief already carries on without a lost worker"),
    ],
)
def test_quorum_is_refused_for_strategies_whose_workers_end_together(strategy, why):
    error = render_error("defaults", sets=(f"strategy={strategy}", "workers=3", "trainer.minWorkers=2"))
    assert "trainer.minWorkers below workers applies to strategy average only" in error and why in error


@pytest.mark.parametrize("value", ["0", "5"])
def test_min_workers_outside_1_to_workers_is_refused(value):
    error = render_error("defaults", sets=("workers=4", f"aggregator.minWorkers={value}"))
    assert f"aggregator.minWorkers must be in 1..workers (4), got {value}" in error or "minimum" in error


def test_data_validation_flags_come_from_values():
    """Issue 18: the copier's checks are errors by default; each data.validation value turns into its flag."""
    default = main_container(render(), "copier")["args"]
    assert arg({"name": "copier", "args": default}, "--max-label-skew") == "0.2"
    assert not {"--allow-duplicates", "--allow-label-skew", "--allow-missing-classes", "--schema"} & set(default)
    sets = (
        "data.validation.allowDuplicates=true",
        "data.validation.allowLabelSkew=true",
        "data.validation.allowMissingClasses=true",
        "data.validation.maxLabelSkew=0.35",
        "data.validation.schema=/workdir/schemas/reviews.json",
    )
    copier = main_container(render(sets=sets), "copier")
    assert {"--allow-duplicates", "--allow-label-skew", "--allow-missing-classes"} <= set(copier["args"])
    assert arg(copier, "--max-label-skew") == "0.35" and arg(copier, "--schema") == "/workdir/schemas/reviews.json"
