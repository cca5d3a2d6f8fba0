"""Prometheus metrics: GET /metrics, and what the server counts to fill it.

Exported (Prometheus text format 0.0.4, or OpenMetrics when the scraper's Accept header asks for it):
  disttrain_http_requests_total{method,route,status}     counter: requests answered
  disttrain_http_request_duration_seconds{method,route}  histogram: time in the app, first hook to last
  disttrain_model_call_instances                         histogram: instances per model call, after
                                                         micro-batching (batching.py) and in gallery fills
  disttrain_model_version{model,pid}                     gauge: the version each live worker serves
  disttrain_model_load_seconds{model,pid}                gauge: how long that worker's last load took
  disttrain_gallery_faces                                gauge: entries in the gallery folder

`route` is the URL rule (`/v1/models/<model_name:model_name>:predict`), never the path, and
`unmatched` for a 404 or 405; methods outside the HTTP set are `other`: a client cannot create new
label values, so the number of series stays bounded. Nothing in a label comes from a request body,
and no series names a gallery entry, a person or an input: /metrics exposes counts, times, the
model's version and the gallery's size, as /readyz already does.

Multiprocess mode (gunicorn runs several worker processes, and a scrape reaches one of them): main.py
sets PROMETHEUS_MULTIPROC_DIR before gunicorn forks; each worker writes its values to its own files
there, and the worker answering a scrape reads every process's files (MultiProcessCollector). A
dead worker's counters stay (totals never go down); main.py's child_exit hook drops its gauges.
Without the variable (one process, e.g. a Flask test client) the values live in the app's registry.
prometheus_client is imported inside functions only: it chooses its mode when first imported, by
that variable, and main.py imports this module before it sets it.

Gauge modes, chosen for what each value means across workers: model_version and model_load_seconds
are `liveall`, one series per live worker (label pid). Each worker loads a newly published model on
its own, so during a reload they disagree, which is what an operator wants to see; `max` would hide
a worker stuck on the old model, and the non-live modes keep dead workers' values. The gallery size
is not a per-process value at all: the folder is shared, so it is counted at scrape time by the
process that answers (a custom collector in the scrape's registry; prometheus_client's limitation on
custom collectors in multiprocess mode is about values held in other processes' memory).

Shared by request threads: the ServerMetrics object (created by create_app, never changed after but
for its deque of model-call sizes and its cache of series, each thread-safe and saying why), and
prometheus_client's metric objects, which lock every update (one lock per value in a single process,
one process-wide lock around the file writes in multiprocess mode). The start time of a request is
in flask.g, which belongs to that request alone.
"""

import collections
import socket
import time

from flask import Blueprint, Response, current_app, g, request

from disttrain_contract import ContractError
from disttrain_server.batching import rows
from disttrain_server.errors import ApiError
from disttrain_server.shared import GALLERY_KEY

bp = Blueprint("metrics", __name__)

METRICS_KEY = "disttrain_metrics"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# Seconds: a text :predict answers in 1-10 ms under load, a face search in 20-200 ms, an enrolment in up to seconds.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Instances: powers of two up to model_store.CALL_CHUNK; --max-batch-size is 32 by default.
INSTANCE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"))
UNMATCHED = "unmatched"
SCRAPE_PATH = "/metrics"
# PENDING_CALL_SIZES: a model call's size is appended to a deque on the micro-batcher's thread and
# observed by the request threads (record) and scrapes. That thread is the one every request of a
# worker waits for, and an observe() there takes prometheus_client's process-wide lock and writes
# the memory-mapped files. In the runs of bench/metrics_bench.py that led here (24 Nov, never
# scraped, 2-3 sessions each, and sessions vary from 1.4 % to 11 %: a direction, not a measured
# gain) metrics cost 4.9 % and 8.3 % of requests/s with the observe() on that thread and 1.9 % with
# no instance counting at all. Handing all the counting to a background thread instead cost 9.6 %
# (scraped every second, against 5.4 % for this design): a CPU-bound thread keeps the GIL from the
# request threads and the batcher for 5 ms at a time (CPython's switch interval), so the counting
# stays on the request threads, after each response is built. deque.append and popleft are
# atomic: no lock.


class ServerMetrics:
    """This app's metric objects; also the ModelStore's observer (model_loaded, count_instances)."""

    def __init__(self, app):
        import os

        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.model_name = app.config["MODEL_NAME"]
        self.registry = CollectorRegistry()  # what GET /metrics exports
        multiprocess_dir = os.environ.get(MULTIPROC_ENV)
        if multiprocess_dir:
            from prometheus_client.multiprocess import MultiProcessCollector

            # The values go to this process's files whatever registry holds the objects; holding them
            # in none keeps the scrape from exporting this process's values twice.
            MultiProcessCollector(self.registry, path=multiprocess_dir)
            holder = None
        else:
            holder = self.registry
        self.requests = Counter(
            "disttrain_http_requests",
            "HTTP requests answered, by method, route (the URL rule) and status",
            ("method", "route", "status"),
            registry=holder,
        )
        self.latency = Histogram(
            "disttrain_http_request_duration_seconds",
            "Time from the request's first hook to its response, by route",
            ("method", "route"),
            buckets=LATENCY_BUCKETS,
            registry=holder,
        )
        self.call_instances = Histogram(
            "disttrain_model_call_instances",
            "Instances per model call (concurrent requests share calls)",
            buckets=INSTANCE_BUCKETS,
            registry=holder,
        )
        self.model_version = Gauge(
            "disttrain_model_version",
            "Version (publication time, Unix seconds) of the model each worker serves",
            ("model",),
            multiprocess_mode="liveall",
            registry=holder,
        )
        self.model_load_seconds = Gauge(
            "disttrain_model_load_seconds",
            "Seconds the worker's last model load took",
            ("model",),
            multiprocess_mode="liveall",
            registry=holder,
        )
        self.registry.register(GalleryCollector(app))
        self.pending_call_sizes = collections.deque()  # PENDING_CALL_SIZES
        self._series = {}  # request_series

    # -- the ModelStore's observer
    def model_loaded(self, loaded, seconds):
        self.model_version.labels(self.model_name).set(loaded.version)
        self.model_load_seconds.labels(self.model_name).set(seconds)

    def count_instances(self, call):
        """`call` (batch -> outputs), noting each batch's size for the call_instances histogram: see
        PENDING_CALL_SIZES."""
        pending = self.pending_call_sizes

        def counted(batch):
            pending.append(rows(batch))
            return call(batch)

        return counted

    def request_series(self, method, route, status):
        """The requests counter's and latency histogram's children for one (method, route, status),
        from a dict after the first request: labels() converts and checks the values and takes a lock
        on every call, work repeated per request that the cache skips. Thread-safe without a lock: a
        dict read or write is atomic under the GIL, and two threads missing at once both store the
        same children (labels() returns one child per label set). Bounded like the label values
        (module docstring): methods x URL rules x the status codes the app answers."""
        key = (method, route, status)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = (
                self.requests.labels(method, route, str(status)),
                self.latency.labels(method, route),
            )
        return series

    def observe_call_sizes(self):
        """Observe the model calls' sizes noted since the last time (request threads, after their
        response is built, and a scrape)."""
        pending, observe = self.pending_call_sizes, self.call_instances.observe
        while True:
            try:
                size = pending.popleft()
            except IndexError:
                return
            observe(size)


class GalleryCollector:
    """disttrain_gallery_faces, counted when scraped from the shared gallery folder (Gallery.entries
    re-reads its index only after a writer replaced it)."""

    def __init__(self, app):
        self.app = app

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        gallery = self.app.extensions.get(GALLERY_KEY)
        try:
            count = len(gallery.entries()) if gallery is not None else 0
        except (ContractError, OSError):
            return  # an unreadable index: the gallery API says why; the scrape still answers the rest
        yield GaugeMetricFamily(
            "disttrain_gallery_faces",
            "Faces enrolled in the gallery (its folder is shared by all workers)",
            value=count,
        )


def init_app(app):
    """Metrics on (config METRICS): the timing hooks and GET /metrics; returns the ServerMetrics for
    the ModelStore, or None when off. Call it before security.init_app: the first before_request
    hook runs first and the first after_request hook last, so a refused request is timed too and
    the status counted is the one sent."""
    if not app.config["METRICS"]:
        return None
    ours = ServerMetrics(app)
    app.extensions[METRICS_KEY] = ours
    if app.config["METRICS_PORT"]:
        app.before_request(keep_to_its_port)
    app.before_request(start_timer)
    app.after_request(record)
    app.register_blueprint(bp)
    return ours


def local_port():
    """The port the request's connection came in on: gunicorn's socket (SERVER_PORT is the Host
    header's port there, which a client chooses), else the WSGI server's SERVER_PORT (test clients)."""
    sock = request.environ.get("gunicorn.socket")
    if sock is not None:  # (a Unix socket's name is its path: the front's socket, never the metrics port)
        return sock.getsockname()[1] if sock.family != socket.AF_UNIX else 0
    return int(request.environ.get("SERVER_PORT") or 0)


def keep_to_its_port():
    """--metrics-port: /metrics answers there only, and nothing else does, so a Service or Ingress that
    publishes the API port never publishes the scrape, and the metrics port serves no API."""
    on_metrics_port = local_port() == current_app.config["METRICS_PORT"]
    if on_metrics_port != (request.path == SCRAPE_PATH):
        raise ApiError(
            404,
            f"{request.path} is not served on this port"
            + (f" (/metrics is on port {current_app.config['METRICS_PORT']})" if request.path == SCRAPE_PATH else ""),
        )


def start_timer():
    g.metrics_started = time.perf_counter()


def record(response):
    started = g.pop("metrics_started", None)
    if started is not None:
        ours = current_app.extensions[METRICS_KEY]
        method = request.method if request.method in METHODS else "other"
        route = request.url_rule.rule if request.url_rule is not None else UNMATCHED
        counter, histogram = ours.request_series(method, route, response.status_code)
        counter.inc()
        histogram.observe(time.perf_counter() - started)
        ours.observe_call_sizes()
    return response


@bp.get(SCRAPE_PATH)
def scrape():
    """Prometheus' text format. Open like /readyz: no token and any Host (see security.py). Not in
    /openapi.json: a scraper's text, not a JSON API operation (like /favicon.ico)."""
    from prometheus_client.exposition import choose_encoder

    # What the scraper's Accept header asks for (Prometheus prefers OpenMetrics); else text format 0.0.4
    encode, content_type = choose_encoder(request.headers.get("Accept"))
    ours = current_app.extensions[METRICS_KEY]
    ours.observe_call_sizes()  # this worker's model calls since its last request (other workers' are in their files)
    response = Response(encode(ours.registry), content_type=content_type)
    response.headers["Cache-Control"] = "no-store"
    return response
