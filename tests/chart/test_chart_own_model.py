"""Your own model and data (values.yaml, section Your own model): model.file, model.module,
model.code / model.codeConfigMap, data.labelColumn and data.problem reach the right flags, env and
volumes in the right pods only; the schema and the templates refuse what cannot work."""

import pytest

from chartlib import (
    CHART,
    containers,
    find,
    helm,
    main_container,
    one,
    pod_spec,
    render,
    render_error,
    stage_of,
    workloads,
)

STORAGE = ("storage.storageClass=nfs-client", "server.allowedHosts={demo.example.com}")
TABLE = ("data.source=table:/workdir/own/cancer.csv",)
CODE_DIR = "/opt/disttrain/user-code"
MODULE_STAGES = ("trainer", "aggregator", "server")
CODE = ("model.module=tabular:build", "model.code.tabular\\.py=import keras\ndef build(spec):\n    pass\n")


def own(*sets):
    return render(sets=STORAGE + TABLE + tuple(sets))


def workload(docs, stage):
    kinds = {"copier": "Job", "sweep": "Job", "trainer": "Job", "aggregator": "Job", "server": "Deployment"}
    return one([d for d in docs if stage_of(d) == stage], kinds[stage])


def env_of(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


# ------------------------------------------------------------------ flags


def test_defaults_pass_no_own_model_flag_anywhere():
    docs = render(sets=STORAGE)
    for doc in workloads(docs):
        for c in containers(pod_spec(doc)):
            for flag in ("--model-file", "--model-module", "--label-column", "--problem"):
                assert flag not in (c.get("args") or []), f"{doc['metadata']['name']}/{c['name']}: {flag}"
            assert "PYTHONPATH" not in env_of(c)
        assert "user-code" not in [v["name"] for v in pod_spec(doc).get("volumes", [])]
    assert not find(docs, "ConfigMap")


def test_model_file_reaches_the_trainer_only():
    docs = own("model.file=/workdir/models/mine.keras")
    trainer = main_container(docs, "trainer")
    assert trainer["args"][trainer["args"].index("--model-file") + 1] == "/workdir/models/mine.keras"
    for stage in ("copier", "aggregator", "server"):
        assert "--model-file" not in main_container(docs, stage)["args"]
    assert "--model-module" not in trainer["args"]
    assert not find(docs, "ConfigMap")  # a file needs no code


def test_model_module_reaches_trainer_aggregator_and_server():
    docs = own("model.module=mymodels.tabular:build")
    for stage in MODULE_STAGES:
        args = main_container(docs, stage)["args"]
        assert args[args.index("--model-module") + 1] == "mymodels.tabular:build", stage
    assert "--model-module" not in main_container(docs, "copier")["args"]
    # without a ConfigMap the module comes from the image (a derived one): nothing mounted, PYTHONPATH left alone
    for stage in MODULE_STAGES:
        assert "PYTHONPATH" not in env_of(main_container(docs, stage))
        assert "user-code" not in [v["name"] for v in pod_spec(workload(docs, stage))["volumes"]]


def test_file_and_module_together():
    docs = own("model.file=/workdir/models/mine.keras", "model.module=layers")
    args = main_container(docs, "trainer")["args"]
    assert args[args.index("--model-file") + 1] == "/workdir/models/mine.keras"
    assert args[args.index("--model-module") + 1] == "layers"


def test_wait_containers_get_no_model_flags_or_code():
    docs = own(*CODE)
    for stage in MODULE_STAGES:
        for c in pod_spec(workload(docs, stage)).get("initContainers", []):
            assert "--model-module" not in (c.get("args") or []) + (c.get("command") or [])
            assert "user-code" not in [m["name"] for m in c.get("volumeMounts", [])], c["name"]
            assert "PYTHONPATH" not in env_of(c)


# ------------------------------------------------------------------ the code ConfigMap


def check_code_mounted(docs, configmap):
    for stage in MODULE_STAGES:
        spec = pod_spec(workload(docs, stage))
        (volume,) = [v for v in spec["volumes"] if v["name"] == "user-code"]
        assert volume == {"name": "user-code", "configMap": {"name": configmap, "defaultMode": 0o444}}, stage
        c = main_container(docs, stage)
        (mount,) = [m for m in c["volumeMounts"] if m["name"] == "user-code"]
        assert mount == {"name": "user-code", "mountPath": CODE_DIR, "readOnly": True}, stage
        env = env_of(c)
        assert env["PYTHONPATH"] == CODE_DIR and env["PYTHONDONTWRITEBYTECODE"] == "1", stage
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
    copier = pod_spec(workload(docs, "copier"))
    assert "user-code" not in [v["name"] for v in copier["volumes"]]
    assert "PYTHONPATH" not in env_of(main_container(docs, "copier"))


def test_the_sweep_trains_the_users_model_too():
    docs = own("model.file=/workdir/models/mine.keras", *CODE, "sweep.enabled=true")
    sweep = main_container(docs, "sweep")
    assert sweep["args"][sweep["args"].index("--model-file") + 1] == "/workdir/models/mine.keras"
    assert sweep["args"][sweep["args"].index("--model-module") + 1] == "tabular:build"
    assert env_of(sweep)["PYTHONPATH"] == "/opt/disttrain/user-code"
    assert "user-code" in [v["name"] for v in pod_spec(workload(docs, "sweep"))["volumes"]]


def test_model_code_is_rendered_into_a_configmap_and_mounted_read_only():
    docs = own(*CODE)
    cm = one(docs, "ConfigMap", "model-code")
    assert cm["metadata"]["name"] == "dt-disttrain-model-code" and cm["metadata"]["namespace"] == "ml"
    assert cm["metadata"]["labels"]["app.kubernetes.io/component"] == "model-code"
    assert cm["data"] == {"tabular.py": "import keras\ndef build(spec):\n    pass\n"}
    check_code_mounted(docs, "dt-disttrain-model-code")


def test_an_existing_configmap_is_mounted_as_it_is():
    docs = own("model.module=tabular", "model.codeConfigMap=my-model-code")
    assert not find(docs, "ConfigMap")
    check_code_mounted(docs, "my-model-code")


def test_the_user_env_comes_after_the_charts_so_extra_env_can_extend_pythonpath():
    docs = own(
        "model.module=tabular",
        "model.codeConfigMap=my-model-code",
        "trainer.extraEnv[0].name=PYTHONPATH",
        f"trainer.extraEnv[0].value={CODE_DIR}:/opt/mymodels",
    )
    names = [e["name"] for e in main_container(docs, "trainer")["env"]]
    assert names.index("PYTHONPATH") < len(names) - 1 and names[-1] == "PYTHONPATH"  # the last one wins


def test_tfserving_gets_no_code():
    docs = own(
        *CODE,
        "server.backend=tfserving",
        "server.auth.enabled=false",
        "server.service.type=ClusterIP",
        "server.allowedHosts=null",
    )
    spec = pod_spec(workload(docs, "server"))
    assert "user-code" not in [v["name"] for v in spec["volumes"]]
    for c in containers(spec):
        assert "--model-module" not in (c.get("args") or [])
        assert "PYTHONPATH" not in env_of(c)
    # the aggregator, which exports the SavedModel, still imports the code
    check_code_mounted(
        [d for d in docs if stage_of(d) != "server"] + [workload(own(*CODE), "server")], "dt-disttrain-model-code"
    )


def test_user_code_is_a_taken_volume_name():
    err = render_error(
        sets=STORAGE
        + ("aggregator.extraVolumes[0].name=user-code", "aggregator.extraVolumes[0].emptyDir.medium=Memory")
    )
    assert 'aggregator.extraVolumes: the volume name "user-code" is the chart\'s own' in err


def test_the_own_model_opens_no_new_path():
    plain, mine = render(sets=STORAGE), own(*CODE)
    assert [d["spec"] for d in find(plain, "NetworkPolicy")] == [d["spec"] for d in find(mine, "NetworkPolicy")]


# ------------------------------------------------------------------ the copier's table flags


def test_label_column_and_problem_reach_the_copier_only_when_set():
    args = main_container(own(), "copier")["args"]
    assert "--label-column" not in args and "--problem" not in args  # the copier's defaults: label, classification
    docs = own("data.labelColumn=diagnosis", "data.problem=regression")
    args = main_container(docs, "copier")["args"]
    assert args[args.index("--label-column") + 1] == "diagnosis"
    assert args[args.index("--problem") + 1] == "regression"
    assert args[args.index("--source") + 1] == "table:/workdir/own/cancer.csv"
    for stage in MODULE_STAGES:
        assert "--label-column" not in main_container(docs, stage)["args"]


def test_regression_takes_npz_too():
    args = main_container(
        render(sets=STORAGE + ("data.source=npz:/workdir/x.npz", "data.problem=regression")), "copier"
    )["args"]
    assert args[args.index("--problem") + 1] == "regression"


def test_schema_accepts_a_table_source():
    helm(
        "template",
        "dt",
        str(CHART),
        "--set",
        STORAGE[0],
        "--set",
        STORAGE[1],
        "--set",
        "data.source=table:/workdir/own/x.parquet",
    )


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    "module", ["tabular:build:x", "1tabular", "my-models", "tabular:", "a..b", "tabular build", "tabular:build()"]
)
def test_schema_rejects_a_bad_module_string(module):
    err = render_error(sets=STORAGE + TABLE + (f"model.module={module}",))
    assert "/model/module" in err, err


@pytest.mark.parametrize("module", ["tabular", "tabular:build", "my_models.tabular:make_model", "_x.y2"])
def test_schema_accepts_module_strings(module):
    helm("template", "dt", str(CHART), *sum((["--set", s] for s in STORAGE + TABLE + (f"model.module={module}",)), []))


@pytest.mark.parametrize(
    "sets, expected",
    [
        (["model.file=models/mine.keras"], "/model/file"),
        (["model.file=/workdir/models/mine.h5"], "/model/file"),
        (["model.codeConfigMap=My_Code", "model.module=x"], "/model/codeConfigMap"),
        (["model.code.my-model\\.py=x", "model.module=x"], "/model/code"),
        (["model.code.tabular\\.txt=x", "model.module=x"], "/model/code"),
        (["model.bogus=1"], "bogus"),
        (["data.problem=ranking"], "/data/problem"),
        (["model.module=x", "data.task=faces"], "faces trains its built-in embedding"),
        (
            ["model.code.x\\.py=y", "model.module=x", "model.codeConfigMap=c"],
            "set at most one of model.code and model.codeConfigMap",
        ),
        (["model.codeConfigMap=c"], "imported through model.module"),
    ],
)
def test_schema_rejects_own_model_nonsense(sets, expected):
    err = render_error(sets=STORAGE + TABLE + tuple(sets))
    assert expected in err, err


@pytest.mark.parametrize(
    "sets, expected",
    [
        (["model.module=x", "data.source=sample:faces"], "faces trains its built-in embedding"),
        (
            ["data.source=sample:digits", "data.labelColumn=y"],
            "data.labelColumn applies to data.source table:PATH only",
        ),
        (
            ["data.source=csv:/workdir/x.csv", "data.problem=regression"],
            "data.problem regression needs a numeric target",
        ),
    ],
)
def test_schema_rejects_data_nonsense(sets, expected):
    err = render_error(sets=STORAGE + tuple(sets))
    assert expected in err, err


# the same rules in the templates, one line each (--skip-schema-validation)
@pytest.mark.parametrize(
    "sets, expected",
    [
        (
            TABLE + ("model.file=/workdir/m.keras", "data.task=faces"),
            "disttrain: model.file and model.module train the table, array, image and text tasks; faces trains its built-in embedding",
        ),
        (("data.source=sample:faces", "model.module=x"), "faces trains its built-in embedding"),
        (TABLE + ("model.module=a:b:c",), 'disttrain: model.module "a:b:c" is not MODULE[:FUNCTION]'),
        (
            TABLE + ("model.file=mine.keras",),
            'disttrain: model.file "mine.keras" must be the absolute path of a .keras file',
        ),
        (
            TABLE + ("model.module=x", "model.codeConfigMap=c", "model.code.x\\.py=y"),
            "disttrain: set at most one of model.code and model.codeConfigMap",
        ),
        (
            TABLE + ("model.code.x\\.py=y",),
            "disttrain: model.code and model.codeConfigMap are imported through model.module",
        ),
        (
            ("data.source=sample:digits", "data.labelColumn=y"),
            "disttrain: data.labelColumn applies to data.source table:PATH only, not sample:digits",
        ),
        (
            ("data.source=sample:digits", "data.problem=regression"),
            "disttrain: data.problem regression needs a numeric target",
        ),
        (TABLE + ("data.problem=ranking",), 'disttrain: unknown data.problem "ranking"'),
    ],
)
def test_template_refusals(sets, expected):
    err = render_error(sets=STORAGE + tuple(sets), extra=("--skip-schema-validation",))
    assert expected in err, err
    assert len([line for line in err.splitlines() if "disttrain:" in line]) == 1, f"one line, got:\n{err}"
