"""Drift between the chart and the code it runs.

* Every stage container's args, in every rendered variant, are accepted by that
  component's real argument parser (disttrain_<stage>.main.parse_args) and mean
  what the values say.
* The wait-for-marker init containers' python is run here against a temporary
  directory: it waits for exactly the contract's marker files.
* The helm-test pod's python is run here against a local stand-in server whose
  request handling is the real server's (disttrain_server.instances).
"""

import http.server
import inspect
import importlib
import json
import pathlib
import subprocess
import sys
import threading
import time

import pytest

from chartlib import (
    ROOT,
    VARIANTS,
    arg,
    containers,
    is_nfs_server,
    load_values,
    main_container,
    one,
    pod_spec,
    render,
    stage_of,
    wait_containers,
    workloads,
)

STAGES = ("copier", "trainer", "aggregator", "server")


def import_main(stage):
    """disttrain_<stage>.main, from the installed package or else from components/<stage>."""
    name = f"disttrain_{stage}.main"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name not in (f"disttrain_{stage}", name):
            raise
    for component in ("contract", stage):
        path = str(ROOT / "components" / component)
        if path not in sys.path:
            sys.path.insert(0, path)
    return importlib.import_module(name)


def parse(stage, args, monkeypatch, env=None):
    module = import_main(stage)
    for key in ("JOB_COMPLETION_INDEX", "DISTTRAIN_JOB", "DISTTRAIN_SERVICE", "DISTTRAIN_WORKDIR"):
        monkeypatch.delenv(key, raising=False)
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    try:
        return module.parse_args(list(args))
    except SystemExit as exit:
        pytest.fail(f"disttrain-{stage} rejects the chart's args {args} (exit {exit.code})")


@pytest.mark.parametrize("stage", STAGES)
def test_every_parser_is_importable(stage):
    assert callable(import_main(stage).parse_args)


# Flags the chart renders that a stage's CLI gains on a branch of its own (the copier's table flags,
# the aggregator's and the server's --model-module, the aggregator's --publish-to): until that branch is
# merged, a rendering passing one is an expected failure that names it; once merged, the whole rendering
# is checked as any other.
OWN_MODEL_FLAGS = {
    "copier": ("--label-column", "--problem"),
    "aggregator": ("--model-module", "--publish-to"),
    "server": ("--model-module",),
}


def pending_own_model_flags(docs):
    pending = []
    for doc in workloads(docs):
        for c in pod_spec(doc)["containers"]:
            for flag in OWN_MODEL_FLAGS.get(c["name"], ()):
                if (
                    flag in (c.get("args") or [])
                    and flag not in pathlib.Path(import_main(c["name"]).__file__).read_text()
                ):
                    pending.append(f"disttrain-{c['name']} {flag}")
    return pending


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_rendered_args_are_accepted_by_the_real_clis(variant, monkeypatch, tmp_path):
    docs = render(variant)
    values = load_values(variant)
    if pending := pending_own_model_flags(docs):
        pytest.xfail(f"not on this branch's stages yet (their own branches add them): {', '.join(pending)}")
    seen = set()
    for doc in workloads(docs):
        if is_nfs_server(doc):
            continue
        for c in pod_spec(doc)["containers"]:
            if c["name"] not in STAGES:
                continue
            if c["name"] == "server" and values["server"]["backend"] == "tfserving":
                check_tfserving(c, values)  # not our CLI: TF Serving's flags, checked against the values
                seen.add(c["name"])
                continue
            assert "command" not in c, f"{c['name']}: the image ENTRYPOINT is the CLI; pass only args"
            env = {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}
            if c["name"] == "trainer":
                env["JOB_COMPLETION_INDEX"] = "1"  # set by the Indexed Job
            args = list(c["args"])
            if "--api-token-file" in args:  # the server reads it at start-up: the Secret's file, here
                i = args.index("--api-token-file") + 1
                assert args[i] == "/etc/disttrain/api-token/token"
                args[i] = str(tmp_path / "token")
                (tmp_path / "token").write_text("t" * 43 + "\n")
            parsed = parse(c["name"], args, monkeypatch, env)
            seen.add(c["name"])
            check_meaning(c["name"], parsed, values, docs)
    assert seen == set(STAGES)


def check_tfserving(container, values):
    """server.backend tfserving: tensorflow_model_server's flags say what the values say."""
    server = values["server"]
    assert container["command"] == ["/usr/bin/tensorflow_model_server"]
    flags = dict(a.removeprefix("--").split("=", 1) for a in container["args"])
    assert flags["model_name"] == server["modelName"]
    assert flags["model_base_path"] == "/workdir/run-1/final/saved_model"  # the version directories' parent
    assert int(flags["rest_api_port"]) == server["port"] and int(flags["port"]) == server["tfserving"]["grpcPort"]
    assert int(flags["file_system_poll_wait_seconds"]) == server["reloadIntervalSeconds"]
    assert ("monitoring_config_file" in flags) is values["metrics"]["enabled"]


def check_meaning(stage, parsed, values, docs):
    """The parsed options say what the values say."""
    assert parsed.workdir == "/workdir/run-1"
    workers = values["workers"]
    if stage in ("trainer", "aggregator", "server"):  # your own model's code (values.yaml, section Your own model)
        assert (getattr(parsed, "model_module", None) or "") == values["model"]["module"]
    if stage == "copier":
        assert (getattr(parsed, "label_column", None) or "label") == (values["data"]["labelColumn"] or "label")
        assert getattr(parsed, "problem", "classification") == values["data"]["problem"]
        assert parsed.n_shards == workers
        assert parsed.source == values["data"]["source"]
        assert parsed.test_fraction == pytest.approx(float(values["data"]["testFraction"]))
        assert parsed.cache_dir == "/workdir/.cache"
    elif stage == "trainer":
        assert (parsed.model_file or "") == values["model"]["file"]
        assert parsed.workers == workers
        assert parsed.worker_index == 1  # from $JOB_COMPLETION_INDEX
        assert (parsed.strategy, parsed.epochs, parsed.batch) == (values["strategy"], values["epochs"], values["batch"])
        if values["learningRate"] is None:  # the trainer's per-task default
            assert parsed.learning_rate is None
        else:
            assert parsed.learning_rate == pytest.approx(float(values["learningRate"]))
        own = parsed.strategy_settings  # (the chosen strategy's own flags: disttrain_trainer.config)
        assert getattr(own, "sync_every", None) == values.get("syncEvery")
        if values["strategy"] == "localsgd" and values["outerOptimizer"] == "nesterov":
            assert (own.outer_optimizer, own.outer_lr, own.outer_momentum) == (
                "nesterov",
                pytest.approx(float(values["outerLearningRate"])),
                pytest.approx(float(values["outerMomentum"])),
            )
        else:  # plain averaging (localsgd's default), or not localsgd
            assert getattr(own, "outer_optimizer", None) == ("none" if values["strategy"] == "localsgd" else None)
        localsgd = values["strategy"] == "localsgd"
        assert getattr(own, "outer_overlap", None) == (values["outerOverlap"] if localsgd else None)
        assert getattr(own, "sync_at_epoch_end", None) == (bool(values["syncAtEpochEnd"]) if localsgd else None)
        assert getattr(own, "sync_batch_norm_batches", None) == (
            values.get("syncBatchNormBatches") if localsgd else None
        )
        assert own.validation_fraction == pytest.approx(float(values["trainer"]["validationFraction"] or 0))
        assert parsed.progress_interval == pytest.approx(float(values["trainer"]["progressIntervalSeconds"]))
        assert parsed.optimizer == values["optimizer"]
        # only the strategies whose workers all-reduce get it; the others keep the trainer's default
        connected = values["strategy"] in ("multiworker", "localsgd")
        assert getattr(own, "allreduce_dtype", "float32") == (values["allreduceDtype"] if connected else "float32")
        job = one(docs, "Job", "trainer")
        assert parsed.job == job["metadata"]["name"]
        assert parsed.service == pod_spec(job)["subdomain"]
        assert parsed.port == values["trainer"]["port"]
        if values["strategy"] in ("multiworker", "localsgd"):
            # the addresses the trainer will put into TF_CONFIG
            from disttrain_trainer.cluster import build_tf_config, default_host_pattern

            config = build_tf_config(
                workers, 1, default_host_pattern(parsed.service), parsed.job, parsed.service, parsed.port
            )
            assert config["cluster"]["worker"][1] == f"{job['metadata']['name']}-1.{parsed.service}:{parsed.port}"
        if values["strategy"] == "parameterserver":  # pod 1 is the first parameter server
            from disttrain_trainer.cluster import build_ps_tf_config, default_host_pattern

            assert own.ps == values["parameterServers"]
            config = build_ps_tf_config(
                own.ps, workers, 1, default_host_pattern(parsed.service), parsed.job, parsed.service, parsed.port
            )
            assert config["task"] == {"type": "ps", "index": 0}
            assert config["cluster"]["ps"] == [f"{job['metadata']['name']}-1.{parsed.service}:{parsed.port}"]
            assert job["spec"]["completions"] == job["spec"]["parallelism"] == 1 + own.ps + workers
    elif stage == "aggregator":
        assert parsed.expect == workers
        assert parsed.dir == "/workdir/run-1/train"
        assert parsed.savefile == "/workdir/run-1/final/model.keras"
        assert parsed.combine == values["aggregator"]["combine"]
        assert (getattr(parsed, "publish_to", None) or "") == values["aggregator"]["publishTo"]
    elif stage == "server":
        assert parsed.model == "/workdir/run-1/final/model.keras"
        assert parsed.host == "0.0.0.0"
        assert parsed.port == values["server"]["port"]
        assert parsed.model_name == values["server"]["modelName"]
        # issue 18: the page shows the newest run-N on the volume while it trains; issue 13: the dashboard lists them
        live, dashboard = values["server"]["liveProgress"], values["server"]["dashboard"]["enabled"]
        assert parsed.runs_dir == ("/workdir" if live or dashboard else None)
        assert parsed.progress_run == ("served" if dashboard and not live else "newest")
        # issue 11: the gallery on its own writable mount, its caps, the token (flags of the server half)
        server = values["server"]
        assert parsed.gallery == "/var/lib/disttrain/gallery"
        assert parsed.gallery_max_entries == server["gallery"]["maxEntries"]
        assert float(parsed.gallery_max_mb) == pytest.approx(float(server["gallery"]["maxMB"]))
        assert parsed.max_request_pixels == server["maxRequestPixels"]
        assert parsed.no_metrics is not values["metrics"]["enabled"]  # issue 13: /metrics
        assert bool(parsed.read_only_gallery) == server["gallery"]["readOnly"]
        hosts = parsed.allowed_hosts
        hosts = hosts.split(",") if isinstance(hosts, str) else list(hosts or [])
        assert hosts[: len(server["allowedHosts"])] == server["allowedHosts"]
        if server["auth"]["enabled"]:
            assert parsed.api_token_file.endswith("/token") and getattr(parsed, "api_token", "t" * 43) in (
                "t" * 43,
                b"t" * 43,
            )
            assert parsed.token_required_for == server["auth"]["requiredFor"]
        else:
            assert parsed.api_token_file is None


def test_worker_index_is_left_to_the_indexed_job(monkeypatch):
    trainer = main_container(render(), "trainer")
    assert parse("trainer", trainer["args"], monkeypatch, {"JOB_COMPLETION_INDEX": "0"}).worker_index == 0
    assert parse("trainer", trainer["args"], monkeypatch, {"JOB_COMPLETION_INDEX": "7"}).worker_index == 7


def test_markers_are_the_contracts():
    sys.path.insert(0, str(ROOT / "components" / "contract"))
    from disttrain_contract.layout import Workdir, marker_path

    wd = Workdir("/workdir/run-1")
    docs = render("eight-workers")
    waits = {stage_of(d): c["command"] for d in workloads(docs) for c in wait_containers(d)}
    assert waits["trainer"][6:] == [marker_path(wd.data)]
    assert waits["aggregator"][6:] == [marker_path(wd.worker(i)) for i in range(8)]
    assert waits["server"][6:] == [marker_path(wd.final)]
    assert arg(main_container(docs, "server"), "--model") == wd.final_model


# ------------------------------------------------------------ the init containers' python


def wait_command(stage, tmp_path, timeout=None, poll="0.05"):
    docs = render()
    (doc,) = [d for d in workloads(docs) if stage_of(d) == stage and d["kind"] in ("Job", "Deployment")]
    (c,) = wait_containers(doc)
    command = list(c["command"])
    assert command[:2] == ["python", "-c"]
    if timeout is not None:
        command[3] = timeout
    command[4] = poll
    paths = [str(tmp_path / p.removeprefix("/workdir/")) for p in command[6:]]
    return [sys.executable] + command[1:6] + paths, [pathlib.Path(p) for p in paths]


def touch(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")


@pytest.mark.parametrize("stage", ["trainer", "aggregator", "server"])
def test_wait_container_passes_once_every_marker_exists(stage, tmp_path):
    command, markers = wait_command(stage, tmp_path)
    for m in markers:
        touch(m)
    out = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "ready" in out.stdout


def test_wait_container_times_out_with_exit_3_naming_what_is_missing(tmp_path):
    command, markers = wait_command("aggregator", tmp_path, timeout="0.3")
    touch(markers[0])
    out = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert out.returncode == 3
    assert str(markers[1]) in out.stderr and str(markers[0]) not in out.stderr
    assert "timed out" in out.stderr


def test_wait_container_waits_for_a_marker_that_comes_later(tmp_path):
    command, (marker,) = wait_command("trainer", tmp_path, timeout="20")
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    assert proc.poll() is None  # still waiting
    touch(marker)
    assert proc.wait(timeout=20) == 0


# ------------------------------------------------------------ the helm test pod's python


class StandIn(http.server.BaseHTTPRequestHandler):
    """/readyz and :predict, answering as the real server does; the body goes through its real parser."""

    spec = {"kind": "text"}
    labels = ["negative", "positive"]
    ready_after = 0.0
    started = 0.0
    probabilities = None
    embedding_size = None  # set: a faces model (metadata has embedding_size; :predict answers embeddings)
    token = None  # set: /v1 calls need `Authorization: Bearer <token>` (401 otherwise), as --token-required-for all
    tfserving = False  # set: answers as TF Serving (no /readyz; the model status says LOADING until ready_after)
    regression = None  # set: a table/array regression model's answer per instance (a number or [number])
    signatures = {"serving_default": {"inputs": {"text": {"dtype": "DT_STRING"}}}}
    received = []
    authorizations = []

    def refused(self):
        """The API token check of /v1 calls; True when it answered 401."""
        if not self.path.startswith("/v1/"):
            return False
        sent = self.headers.get("Authorization")
        type(self).authorizations.append(sent)
        if self.token and sent != f"Bearer {self.token}":
            self.reply(401, {"error": "this call needs the API token"})
            return True
        return False

    def log_message(self, *args):
        pass

    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        loading = time.monotonic() - self.started < self.ready_after
        if self.tfserving:
            if self.path == "/v1/models/disttrain":
                return self.reply(
                    200, {"model_version_status": [{"version": "1", "state": "LOADING" if loading else "AVAILABLE"}]}
                )
            if self.path == "/v1/models/disttrain/metadata" and not loading:
                return self.reply(
                    200,
                    {
                        "model_spec": {"name": "disttrain", "version": "1"},
                        "metadata": {"signature_def": {"signature_def": self.signatures}},
                    },
                )
            return self.reply(404, {"error": f"Malformed request: GET {self.path}"})
        if self.path == "/readyz":
            if time.monotonic() - self.started < self.ready_after:
                return self.reply(503, {"status": "unavailable"})
            return self.reply(200, {"status": "ready"})
        if self.refused():
            return None
        if self.path == "/v1/models/disttrain":
            return self.reply(200, {"model_version_status": [{"state": "AVAILABLE"}]})
        if self.path == "/v1/models/disttrain/metadata" and self.embedding_size:
            return self.reply(
                200, {"metadata": {"disttrain": {"task": "faces", "embedding_size": self.embedding_size}}}
            )
        self.reply(404, {"error": "not found"})

    def do_POST(self):
        if self.refused():
            return None
        if self.path != "/v1/models/disttrain:predict":
            return self.reply(404, {"error": f"unknown path {self.path}"})
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.spec.get("kind") in ("table", "array"):  # numeric instances: recorded as sent (the server's own
            instances = json.loads(body)["instances"]  # numeric parsing arrives with its own-model branch)
            type(self).received.append(instances)
            if self.regression is not None:
                return self.reply(200, {"predictions": [self.regression for _ in instances]})
            n = len(self.labels)
            return self.reply(200, {"predictions": [self.probabilities or [1.0 / n] * n for _ in instances]})
        from disttrain_server.errors import ApiError
        from disttrain_server.instances import read_predict, to_batch

        try:
            # issue 11's server adds a per-request pixel budget to to_batch (the chart's default, 16 Mpx)
            budget = [16_000_000] if "pixel_budget" in inspect.signature(to_batch).parameters else []
            # the input's name is the kind for text and image models; the pod sends unnamed instances anyway
            instances, _ = read_predict(body, self.spec["kind"], 64)
            batch = to_batch(instances, self.spec, 10000, *budget)
        except ApiError as err:
            return self.reply(422, {"error": str(err)})
        type(self).received.append(batch)
        if self.embedding_size:
            value = self.probabilities or [1.0 / self.embedding_size**0.5] * self.embedding_size
            return self.reply(200, {"predictions": [value for _ in range(len(batch))]})
        n = len(self.labels)
        self.reply(200, {"predictions": [self.probabilities or [1.0 / n] * n for _ in range(len(batch))]})


@pytest.fixture
def stand_in():
    import_main("server")
    StandIn.received = []
    StandIn.authorizations = []
    StandIn.started = time.monotonic()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    # shutdown() waits for the serving loop's next poll: the default half second, once per test, was 15 s of make test
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    for key, value in (
        ("spec", {"kind": "text"}),
        ("labels", ["negative", "positive"]),
        ("ready_after", 0.0),
        ("probabilities", None),
        ("embedding_size", None),
        ("token", None),
        ("tfserving", False),
        ("regression", None),
        ("signatures", {"serving_default": {"inputs": {"text": {"dtype": "DT_STRING"}}}}),
    ):
        setattr(StandIn, key, value)


def run_test_pod(
    server, tmp_path, manifest=None, timeout="10", sets=(), token="s3cret-token", manifest_name="manifest.json"
):
    pod = one(render(sets=sets), "Pod")
    (c,) = pod_spec(pod)["containers"]
    command = list(c["command"])
    assert command[:2] == ["python", "-c"]
    command[2 + 1] = f"http://127.0.0.1:{server.server_address[1]}"  # the Service URL, here
    command[2 + 3] = timeout
    manifest_path = tmp_path / manifest_name
    if manifest is not None:
        manifest_path.parent.mkdir(parents=True, exist_ok=True)
        manifest_path.write_text(json.dumps(manifest))
    command[2 + 4] = str(manifest_path)
    if command[2 + 6]:  # server.auth.enabled: the token file the Secret volume holds, here
        (tmp_path / "token").write_text(token + "\n")
        command[2 + 6] = str(tmp_path / "token")
    return subprocess.run([sys.executable] + command[1:], capture_output=True, text=True, timeout=60)


def test_helm_test_predicts_a_text(stand_in, tmp_path):
    out = run_test_pod(
        stand_in, tmp_path, {"task": "text", "labels": ["negative", "positive"], "input": {"kind": "text"}}
    )
    assert out.returncode == 0, out.stdout + out.stderr
    (batch,) = StandIn.received
    assert batch.shape == (1, 1) and "moving" in batch[0, 0]
    assert "OK" in out.stdout


def test_helm_test_predicts_a_blank_image(stand_in, tmp_path):
    spec = {"kind": "image", "height": 8, "width": 8, "channels": 1}
    StandIn.spec = spec
    StandIn.labels = [str(i) for i in range(10)]
    out = run_test_pod(stand_in, tmp_path, {"task": "image", "labels": StandIn.labels, "input": spec})
    assert out.returncode == 0, out.stdout + out.stderr
    (batch,) = StandIn.received
    assert batch.shape == (1, 8, 8, 1)


FACES_MANIFEST = {
    "task": "faces",
    "labels": [f"lfw-{i:03d}" for i in range(99)],
    "input": {"kind": "image", "height": 32, "width": 32, "channels": 1},
}


def test_helm_test_checks_a_faces_embedding(stand_in, tmp_path):
    """A faces model answers an embedding (found by make test-cluster: the test pod expected probabilities)."""
    StandIn.spec, StandIn.embedding_size = FACES_MANIFEST["input"], 64
    out = run_test_pod(stand_in, tmp_path, FACES_MANIFEST)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "embedding of 64 values" in out.stdout


@pytest.mark.parametrize("embedding", [[0.5] * 64, [0.125] * 63])
def test_helm_test_fails_on_a_wrong_embedding(stand_in, tmp_path, embedding):
    StandIn.spec, StandIn.embedding_size, StandIn.probabilities = FACES_MANIFEST["input"], 64, embedding
    out = run_test_pod(stand_in, tmp_path, FACES_MANIFEST)
    assert out.returncode != 0 and "unit-length embedding of 64 values" in out.stderr


def test_helm_test_waits_for_readyz(stand_in, tmp_path):
    StandIn.ready_after = 1.0
    out = run_test_pod(stand_in, tmp_path, {"task": "text", "labels": ["n", "p"]})
    assert out.returncode == 0, out.stdout + out.stderr


def test_helm_test_fails_when_never_ready(stand_in, tmp_path):
    StandIn.ready_after = 3600
    out = run_test_pod(stand_in, tmp_path, {"task": "text", "labels": ["n", "p"]}, timeout="1")
    assert out.returncode != 0 and "not ready" in out.stderr


def test_helm_test_fails_on_a_wrong_answer(stand_in, tmp_path):
    StandIn.probabilities = [0.9, 0.9]
    out = run_test_pod(stand_in, tmp_path, {"task": "text", "labels": ["n", "p"]})
    assert out.returncode != 0 and "sum to 1" in out.stderr


def test_helm_test_reports_a_rejected_request(stand_in, tmp_path):
    StandIn.spec = {"kind": "image", "height": 8, "width": 8, "channels": 1}
    out = run_test_pod(stand_in, tmp_path, {"task": "text", "labels": ["n", "p"]})  # manifest and model disagree
    assert out.returncode != 0 and "HTTP 422" in out.stderr


TABLE_INPUT = {
    "kind": "table",
    "name": "features",
    "shape": [3],
    "dtype": "float32",
    "features": ["age", "bmi", "bp"],
    "statistics": {"mean": [40.0, 25.5, 120.0], "variance": [1.0, 1.0, 1.0], "min": [0, 0, 0], "max": [99, 50, 200]},
}


def test_helm_test_sends_a_table_model_a_row_of_the_feature_means(stand_in, tmp_path):
    StandIn.spec, StandIn.labels = TABLE_INPUT, ["benign", "malignant"]
    out = run_test_pod(
        stand_in,
        tmp_path,
        {"task": "table", "problem": "classification", "labels": StandIn.labels, "input": TABLE_INPUT},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert StandIn.received == [[[40.0, 25.5, 120.0]]]
    assert "OK" in out.stdout


def test_helm_test_sends_an_array_model_its_shape(stand_in, tmp_path):
    spec = {"kind": "array", "name": "x", "shape": [2, 3], "dtype": "float32", "statistics": {"mean": [1.0, 2.0, 3.0]}}
    StandIn.spec, StandIn.labels = spec, ["a", "b", "c"]
    out = run_test_pod(stand_in, tmp_path, {"task": "array", "labels": StandIn.labels, "input": spec})
    assert out.returncode == 0, out.stdout + out.stderr
    assert StandIn.received == [[[[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]]]


def test_helm_test_sends_named_inputs_to_a_multi_input_model(stand_in, tmp_path):
    """A model with one input per feature column (its disttrain.json `inputs`, inside final/model.keras)."""
    import zipfile

    StandIn.spec, StandIn.labels = TABLE_INPUT, ["no", "yes"]
    (tmp_path / "final").mkdir()
    inputs = [
        {"name": "age", "shape": [1], "dtype": "float32"},
        {"name": "bmi", "shape": [], "dtype": "float32"},
        {"name": "bp", "shape": [1], "dtype": "float32"},
    ]
    with zipfile.ZipFile(tmp_path / "final" / "model.keras", "w") as archive:
        archive.writestr("disttrain.json", json.dumps({"inputs": inputs}))
    out = run_test_pod(
        stand_in,
        tmp_path,
        {"task": "table", "labels": StandIn.labels, "input": TABLE_INPUT},
        manifest_name="data/manifest.json",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert StandIn.received == [[{"age": [40.0], "bmi": 25.5, "bp": [120.0]}]]


@pytest.mark.parametrize("answer, ok", [(3.25, True), ([3.25], True), ([0.5, 0.5], False), (None, False)])
def test_helm_test_checks_a_regression_answers_one_number(stand_in, tmp_path, answer, ok):
    StandIn.spec, StandIn.regression = TABLE_INPUT, answer if answer is not None else "NaN"
    manifest = {"task": "table", "problem": "regression", "target": "charges", "labels": [], "input": TABLE_INPUT}
    out = run_test_pod(stand_in, tmp_path, manifest)
    assert (out.returncode == 0) is ok, out.stdout + out.stderr
    if ok:
        assert "charges 3.25: OK" in out.stdout
    else:
        assert "expected one finite number (the predicted charges)" in out.stderr


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_container_keeps_its_termination_message_where_the_stages_write_it(variant):
    """run_cli writes the one-line error to disttrain_contract's TERMINATION_LOG; the kubelet must read it from there."""
    sys.path.insert(0, str(ROOT / "components" / "contract"))
    from disttrain_contract.errors import TERMINATION_LOG

    seen = 0
    for doc in workloads(render(variant)):
        if is_nfs_server(doc):
            continue
        for c in containers(pod_spec(doc)):
            assert c.get("terminationMessagePath") == TERMINATION_LOG, f"{doc['metadata']['name']}/{c['name']}"
            assert c.get("terminationMessagePolicy") == "FallbackToLogsOnError", (
                f"{doc['metadata']['name']}/{c['name']}"
            )
            seen += 1
    assert seen >= 8


TEXT_MANIFEST = {"task": "text", "labels": ["negative", "positive"], "input": {"kind": "text"}}


def test_helm_test_sends_the_token(stand_in, tmp_path):
    StandIn.token = "s3cret-token"  # the server checks it on this call (writes: only when told to, here always)
    out = run_test_pod(stand_in, tmp_path, TEXT_MANIFEST)
    assert out.returncode == 0, out.stdout + out.stderr
    assert StandIn.authorizations == ["Bearer s3cret-token"]
    out = run_test_pod(stand_in, tmp_path, TEXT_MANIFEST, token="wrong")
    assert out.returncode != 0 and "HTTP 401" in out.stdout + out.stderr


def test_helm_test_checks_that_requiredfor_all_refuses_a_call_without_the_token(stand_in, tmp_path):
    StandIn.token = "s3cret-token"
    out = run_test_pod(stand_in, tmp_path, TEXT_MANIFEST, sets=("server.auth.requiredFor=all",))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "without the token: 401: OK" in out.stdout
    assert StandIn.authorizations == [None, "Bearer s3cret-token"]
    StandIn.token = None  # a server that answers anyone although requiredFor=all
    out = run_test_pod(stand_in, tmp_path, TEXT_MANIFEST, sets=("server.auth.requiredFor=all",))
    assert out.returncode != 0 and "should refuse it" in out.stdout + out.stderr


def test_helm_test_without_auth_sends_no_token(stand_in, tmp_path):
    out = run_test_pod(
        stand_in,
        tmp_path,
        TEXT_MANIFEST,
        sets=("server.auth.enabled=false", "server.gallery.readOnly=true", "server.auth.publicFaceSearch=true"),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert StandIn.authorizations == [None]


# ---------------------------------------------- the helm test pod's python, server.backend tfserving

TFSERVING = (
    "server.backend=tfserving",
    "server.auth.enabled=false",
    "server.service.type=ClusterIP",
    "server.allowedHosts=null",
)


def test_helm_test_against_tfserving_waits_for_available_then_predicts_a_text(stand_in, tmp_path):
    StandIn.tfserving, StandIn.ready_after = True, 1.0
    out = run_test_pod(stand_in, tmp_path, TEXT_MANIFEST, sets=TFSERVING)
    assert out.returncode == 0, out.stdout + out.stderr
    assert '"LOADING"' in out.stdout and "serving_default inputs ['text']: OK" in out.stdout
    (batch,) = StandIn.received
    assert batch.shape == (1, 1) and "moving" in batch[0, 0]
    assert StandIn.authorizations == [None]  # no token: TF Serving checks none


def test_helm_test_against_tfserving_fails_while_the_model_is_loading(stand_in, tmp_path):
    StandIn.tfserving, StandIn.ready_after = True, 3600
    out = run_test_pod(stand_in, tmp_path, TEXT_MANIFEST, timeout="1", sets=TFSERVING)
    assert out.returncode != 0 and "not ready" in out.stderr and "no version AVAILABLE" in out.stderr


def test_helm_test_against_tfserving_needs_the_serving_default_signature(stand_in, tmp_path):
    StandIn.tfserving, StandIn.signatures = True, {"predict": {"inputs": {}}}
    out = run_test_pod(stand_in, tmp_path, TEXT_MANIFEST, sets=TFSERVING)
    assert out.returncode != 0 and "no serving_default signature, only ['predict']" in out.stderr
    assert not StandIn.received


def test_helm_test_against_tfserving_predicts_a_blank_image(stand_in, tmp_path):
    StandIn.tfserving = True
    StandIn.signatures = {"serving_default": {"inputs": {"image": {"dtype": "DT_UINT8"}}}}
    StandIn.spec = spec = {"kind": "image", "height": 8, "width": 8, "channels": 1}
    StandIn.labels = [str(i) for i in range(10)]
    out = run_test_pod(stand_in, tmp_path, {"task": "image", "labels": StandIn.labels, "input": spec}, sets=TFSERVING)
    assert out.returncode == 0, out.stdout + out.stderr
    (batch,) = StandIn.received
    assert batch.shape == (1, 8, 8, 1)


@pytest.mark.parametrize("embedding, ok", [([0.125] * 64, True), ([0.5] * 64, False)])
def test_helm_test_against_tfserving_checks_a_unit_embedding_without_our_metadata(stand_in, tmp_path, embedding, ok):
    """TF Serving's /metadata has no embedding_size (the stand-in's has none either): the unit length is checked."""
    StandIn.tfserving, StandIn.spec, StandIn.embedding_size, StandIn.probabilities = (
        True,
        FACES_MANIFEST["input"],
        64,
        embedding,
    )
    StandIn.signatures = {"serving_default": {"inputs": {"face": {"dtype": "DT_UINT8"}}}}
    out = run_test_pod(stand_in, tmp_path, FACES_MANIFEST, sets=TFSERVING)
    if ok:
        assert out.returncode == 0 and "an embedding of 64 values, norm 1.0000: OK" in out.stdout, (
            out.stdout + out.stderr
        )
    else:
        assert out.returncode != 0 and "unit-length embedding of 64 values" in out.stderr
