"""GET /metrics: Prometheus text from prometheus_client, in one process (Flask test client) and across
gunicorn's worker processes (multiprocess mode), with bounded labels and no secrets."""

import os
import signal
import threading
import time
import urllib.error
import urllib.request

import pytest

# Imported at collection, with PROMETHEUS_MULTIPROC_DIR unset: prometheus_client picks its mode at its
# first import, so this pytest process stays in single-process mode whatever a test's environment says.
from prometheus_client.parser import text_string_to_metric_families

from disttrain_contract import ContractError
from disttrain_server.gallery import Gallery
from disttrain_contract.ports import free_port_block
from disttrain_server.main import app_config, gunicorn_options, metrics_dir, parse_args
from server.face_photos import lfw_photos, png
from server.serving import (
    NEGATIVE,
    POSITIVE,
    access_log,
    answered_only_by,
    error_of,
    http,
    loaded_workers,
    make_client,
    predict_url,
    publish,
    running_server,
    worker_pids,
)

PREDICT_RULE = "/v1/models/<model_name:model_name>:predict"


def samples(text):
    """{(sample name, frozenset of label items): value} of a /metrics body."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(parsed, name, **labels):
    """The one sample `name` whose labels include `labels` (0 if there is none)."""
    found = [v for (n, ls), v in parsed.items() if n == name and set(labels.items()) <= ls]
    assert len(found) <= 1, f"{name} {labels}: {len(found)} samples"
    return found[0] if found else 0


def label_values(parsed, label):
    return {dict(ls).get(label) for _, ls in parsed} - {None}


def scrape(client):
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.content_type.startswith("text/plain; version=0.0.4")
    return samples(response.get_data(as_text=True))


# -- one process: the Flask test client


def test_requests_latency_and_batching_are_counted_by_route(text_model, tmp_path):
    client = make_client(text_model, tmp_path)
    for _ in range(3):
        assert client.post(predict_url(), json={"instances": [POSITIVE, NEGATIVE]}).status_code == 200
    error_of(
        client.post(predict_url("other"), json={"instances": [POSITIVE]}), 404
    )  # the rule matched, the model did not
    error_of(client.get("/v1/models/disttrain/versions/7/no/such/thing"), 404)  # no rule matched
    error_of(client.open("/healthz", method="BREW"), 405)  # a method nobody defined
    parsed = scrape(client)

    total = "disttrain_http_requests_total"
    assert value(parsed, total, method="POST", route=PREDICT_RULE, status="200") == 3
    assert value(parsed, total, method="POST", route=PREDICT_RULE, status="404") == 1
    assert value(parsed, total, method="GET", route="unmatched", status="404") == 1
    assert value(parsed, total, method="other", route="unmatched", status="405") == 1
    # The rule, never the path: no request can add a route value (bounded cardinality).
    routes = label_values(parsed, "route")
    assert routes <= {rule.rule for rule in client.application.url_map.iter_rules()} | {"unmatched"}
    assert not any("disttrain:predict" in r or "other:predict" in r or "versions/7" in r for r in routes)

    # Latency histogram: every bucket, cumulative, +Inf = count = the requests of that route.
    hist = "disttrain_http_request_duration_seconds"
    buckets = {
        dict(ls)["le"]: v
        for (n, ls), v in parsed.items()
        if n == hist + "_bucket" and dict(ls)["route"] == PREDICT_RULE
    }
    assert list(buckets) == [
        "0.001",
        "0.0025",
        "0.005",
        "0.01",
        "0.025",
        "0.05",
        "0.1",
        "0.25",
        "0.5",
        "1.0",
        "2.5",
        "5.0",
        "10.0",
        "+Inf",
    ]
    assert list(buckets.values()) == sorted(buckets.values()) and buckets["+Inf"] == 4
    assert value(parsed, hist + "_count", route=PREDICT_RULE) == 4
    assert 0 < value(parsed, hist + "_sum", route=PREDICT_RULE) < 60

    # Instances per model call: 3 calls of 2 instances (one request at a time: nothing to batch with).
    assert value(parsed, "disttrain_model_call_instances_count") == 3
    assert value(parsed, "disttrain_model_call_instances_sum") == 6
    assert value(parsed, "disttrain_model_call_instances_bucket", le="1.0") == 0
    assert value(parsed, "disttrain_model_call_instances_bucket", le="2.0") == 3

    # The model: version as /readyz says it, a load time; the gallery: empty.
    ready = client.get("/readyz").get_json()
    assert value(parsed, "disttrain_model_version", model="disttrain") == int(ready["version"])
    assert 0 < value(parsed, "disttrain_model_load_seconds", model="disttrain") < 120
    assert value(parsed, "disttrain_gallery_faces") == 0


def test_concurrent_requests_are_all_counted(text_model, tmp_path):
    """16 threads through a barrier, 10 times: every request counted once, and the batcher's
    model calls add up to the instances sent however they were grouped."""
    client = make_client(text_model, tmp_path)
    for _ in range(10):
        barrier = threading.Barrier(16)

        def call():
            barrier.wait()
            assert client.post(predict_url(), json={"instances": [POSITIVE]}).status_code == 200

        threads = [threading.Thread(target=call) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    parsed = scrape(client)
    assert value(parsed, "disttrain_http_requests_total", route=PREDICT_RULE, status="200") == 160
    assert value(parsed, "disttrain_http_request_duration_seconds_count", route=PREDICT_RULE) == 160
    assert value(parsed, "disttrain_model_call_instances_sum") == 160
    assert 10 <= value(parsed, "disttrain_model_call_instances_count") <= 160


def test_gallery_size_is_read_from_the_shared_folder(text_model, tmp_path):
    client = make_client(text_model, tmp_path)
    other_worker = Gallery(tmp_path / "gallery")  # what another process enrols shows up here too
    for i in (1, 2):
        other_worker.enrol(f"person {i}", png(lfw_photos()[i]))
    assert value(scrape(client), "disttrain_gallery_faces") == 2
    (tmp_path / "gallery" / "index.json").write_text("not json")  # a broken index: the rest is still scraped
    parsed = scrape(client)
    assert ("disttrain_gallery_faces", frozenset()) not in parsed
    assert (
        value(parsed, "disttrain_http_requests_total", route="/metrics") == 1
    )  # the first scrape (each is counted after it answers)


def test_metrics_are_open_like_the_probes_and_expose_no_secrets(text_model, tmp_path):
    """No token even with --token-required-for all, any Host (Prometheus scrapes the pod's IP), the
    security headers; nothing from a request, a token or a file path in the text."""
    token = b"s3cret-token-value"
    client = make_client(
        text_model, tmp_path, API_TOKEN=token, TOKEN_REQUIRED_FOR="all", ALLOWED_HOSTS=["demo.example.com"]
    )
    assert (
        client.post(
            predict_url(),
            json={"instances": [POSITIVE]},
            headers={"Authorization": "Bearer " + token.decode(), "Host": "demo.example.com"},
        ).status_code
        == 200
    )
    response = client.get("/metrics", headers={"Host": "10.1.2.3:8080"})
    assert response.status_code == 200
    assert response.headers["X-Content-Type-Options"] == "nosniff" and response.headers["Cache-Control"] == "no-store"
    text = response.get_data(as_text=True)
    for secret in (token.decode(), POSITIVE, str(tmp_path), "demo.example.com"):
        assert secret not in text
    error_of(
        client.get("/v1/models/disttrain", headers={"Host": "10.1.2.3:8080"}), 400
    )  # the API still checks the Host
    error_of(client.post("/metrics"), 405)


def test_no_metrics_means_no_endpoint_and_no_hooks(text_model, tmp_path):
    client = make_client(text_model, tmp_path, METRICS=False)
    assert client.post(predict_url(), json={"instances": [POSITIVE]}).status_code == 200
    error_of(client.get("/metrics"), 404)
    assert "disttrain_metrics" not in client.application.extensions
    assert client.application.extensions["disttrain_model_store"].observer is None
    assert "child_exit" not in gunicorn_options(parse_args(["--no-metrics"]))
    assert "child_exit" in gunicorn_options(parse_args([]))


def test_the_multiprocess_directory_is_emptied_before_the_fork(tmp_path, monkeypatch):
    folder = tmp_path / "metrics"
    folder.mkdir()
    (folder / "counter_4242.db").write_bytes(b"an earlier server's counts")
    (folder / "notes.txt").write_text("not ours")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(folder))
    assert metrics_dir() == (str(folder), False)
    assert sorted(os.listdir(folder)) == ["notes.txt"]
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(folder / "notes.txt" / "below-a-file"))
    with pytest.raises(ContractError, match="PROMETHEUS_MULTIPROC_DIR=.*--no-metrics"):
        metrics_dir()
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR")
    made, new = metrics_dir()
    assert new and os.path.isdir(made) and os.listdir(made) == []
    os.rmdir(made)


# -- gunicorn: two worker processes, one set of numbers


def answered_by(log, path):
    """The worker pids of the access log's lines for `path`."""
    return [int(line["pid"]) for line in access_log(log) if line["path"] == path]


def scrape_http(base):
    status, text = http("GET", base + "/metrics")
    assert status == 200
    return samples(text)


def test_gunicorn_workers_add_up_and_a_dead_workers_gauges_go(text_model, tmp_path, monkeypatch):
    publish(text_model, tmp_path)
    folder = tmp_path / "prometheus"
    folder.mkdir()
    (folder / "counter_1.db").write_bytes(b"\0" * 64)  # a crashed server's leftover: emptied at start
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(folder))  # the server inherits it (see the module's import)
    with running_server(tmp_path, "--workers", "2", "--threads", "4") as (base, proc, log):
        workers = loaded_workers(proc, log, 2)
        # Each worker in turn answers 8 concurrent requests (8 threads through a barrier) while the other is held.
        sent = 0
        for pid in sorted(workers):
            with answered_only_by(pid, workers):
                barrier = threading.Barrier(8)
                statuses = []

                def call():
                    barrier.wait()
                    statuses.append(
                        http("POST", base + predict_url(), {"instances": [POSITIVE, NEGATIVE, POSITIVE]})[0]
                    )

                threads = [threading.Thread(target=call) for _ in range(8)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            assert statuses == [200] * 8
            sent += 8
        time.sleep(0.5)  # the access log is written after the response
        assert sorted(answered_by(log, predict_url())) == sorted(list(workers) * 8)
        assert "counter_1.db" not in os.listdir(folder)
        assert {f"counter_{pid}.db" for pid in workers} <= set(os.listdir(folder))

        # Whichever worker answers a scrape, it reports both workers' counts.
        for pid in sorted(workers):
            with answered_only_by(pid, workers):
                parsed = scrape_http(base)
            assert (
                value(parsed, "disttrain_http_requests_total", method="POST", route=PREDICT_RULE, status="200") == sent
            )
            assert value(parsed, "disttrain_http_request_duration_seconds_count", route=PREDICT_RULE) == sent
            assert (
                value(parsed, "disttrain_http_request_duration_seconds_bucket", route=PREDICT_RULE, le="+Inf") == sent
            )
            assert value(parsed, "disttrain_model_call_instances_sum") == 3 * sent
        time.sleep(0.5)
        assert sorted(answered_by(log, "/metrics")) == sorted(workers)
        assert {dict(ls).get("route") for (n, ls) in parsed if n == "disttrain_http_requests_total"} <= {
            PREDICT_RULE,
            "/readyz",
            "/metrics",
        }
        # liveall: one model_version series per live worker (label pid), each the version /readyz gives
        version = int(http("GET", base + "/readyz")[1]["version"])
        versions = {int(dict(ls)["pid"]): v for (n, ls), v in parsed.items() if n == "disttrain_model_version"}
        assert versions == {pid: version for pid in workers}

        # A worker killed: gunicorn replaces it; child_exit drops its gauges, its counts stay.
        dead = min(workers)
        os.kill(dead, signal.SIGKILL)
        deadline = time.monotonic() + 90
        while True:
            current = worker_pids(proc.pid)
            parsed = scrape_http(base)
            pids = {int(dict(ls)["pid"]) for (n, ls) in parsed if n == "disttrain_model_version"}
            if len(current) == 2 and dead not in current and pids == current:
                break  # the new worker has loaded the model
            assert time.monotonic() < deadline, f"gauges of {pids}, workers {current}"
            time.sleep(0.5)
        assert value(parsed, "disttrain_http_requests_total", method="POST", route=PREDICT_RULE, status="200") == sent
        assert value(parsed, "disttrain_model_call_instances_sum") == 3 * sent


def test_metrics_port_serves_the_scrape_only_and_the_api_port_never_does(text_model, tmp_path):
    """--metrics-port on real gunicorn: the scrape on its own port (the port a Service or Ingress publishes
    never answers it, whatever Host a client sends), and the API on the other only."""
    publish(text_model, tmp_path)
    metrics_port = free_port_block(1)
    with running_server(tmp_path, "--workers", "1", "--metrics-port", metrics_port) as (base, _proc, log):
        scrape = f"http://127.0.0.1:{metrics_port}"
        assert http("POST", base + predict_url(), {"instances": [POSITIVE]})[0] == 200
        status, text = http("GET", scrape + "/metrics")
        assert (
            status == 200
            and 'disttrain_http_requests_total{method="POST",route="/v1/models/<model_name:model_name>:predict",status="200"} 1.0'
            in text
        )
        status, body = http("GET", base + "/metrics")
        assert status == 404 and body == {
            "error": f"/metrics is not served on this port (/metrics is on port {metrics_port})"
        }
        # the Host header names the metrics port: the connection's own port decides
        request = urllib.request.Request(base + "/metrics", headers={"Host": f"127.0.0.1:{metrics_port}"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 404
        for path in ("/", "/readyz", "/v1/models/disttrain"):
            assert http("GET", scrape + path)[0] == 404, path
        assert http("GET", base + "/readyz")[0] == 200
        with open(log) as fh:
            assert f"metrics at http://127.0.0.1:{metrics_port}/metrics" in fh.read()


def test_metrics_port_flags(capsys):
    assert app_config(parse_args(["--metrics-port", "9090"]))["METRICS_PORT"] == 9090
    assert app_config(parse_args([]))["METRICS_PORT"] is None  # /metrics on --port (make demo: loopback)
    for argv, words in [
        (["--metrics-port", "8080"], "not --port (8080)"),
        (["--metrics-port", "0"], "between 1 and 65535"),
        (["--metrics-port", "9090", "--no-metrics"], "exclude each other"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            parse_args(argv)
        assert exit_info.value.code == 2 and words in capsys.readouterr().err
