"""disttrain-server: serve the final model with gunicorn.

    disttrain-server --workdir workdir --port 8080

Runs gunicorn in-process through its Python API. There is deliberately no
preload: the master process never imports TensorFlow. Each worker builds the
Flask app after the fork and loads the model in post_worker_init, so the first
request does not pay for it; a model published later is picked up by every
worker on its own (see model_store).
"""

import argparse
import gc
import importlib.util
import logging
import os
import re
import shutil
import signal
import socket
import sys
import tempfile

from gunicorn.app.base import BaseApplication

from disttrain_contract import ContractError, Workdir, default_workdir, run_cli
from disttrain_contract.user_model import parse_module_spec
from disttrain_server.app import create_app
from disttrain_server.errors import ModelUnavailable
from disttrain_server.faces import MAX_TOP_K
from disttrain_server.front import FRONT_ENV, FRONTS, Front
from disttrain_server.metrics import MULTIPROC_ENV
from disttrain_server.shared import STORE_KEY

# OpenCV's decompression-bomb guard defaults to 2^30 pixels (GBs of RAM for a
# few-KB PNG). It is read once, when cv2 loads, so it must be in the environment
# before the workers import it; an operator's own setting wins.
MAX_IMAGE_PIXELS = 40_000_000
# All encoded images of one request, summed, checked from their headers before any is
# decoded. 16 Mpx takes a 12-Mpx phone photo (4000x3000) for face search and thousands of
# the image task's small pictures; decoding it in colour is 48 MB per request thread.
MAX_REQUEST_PIXELS = 16_000_000


def read_token(path):
    """The API token in `path`, surrounding whitespace removed; ValueError saying why it cannot be used."""
    try:
        with open(path, "rb") as fh:
            token = fh.read().strip()
    except OSError as err:
        raise ValueError(f"--api-token-file {path}: cannot read it ({err.strerror})") from None
    if not token:
        raise ValueError(f"--api-token-file {path} is empty")
    if any(not 0x21 <= byte <= 0x7E for byte in token):
        # It travels in an HTTP header: spaces, control characters or non-ASCII would not arrive as written.
        raise ValueError(f"--api-token-file {path}: the token must be printable ASCII without spaces")
    return token


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="disttrain-server",
        description="Serve the final model (stage 4 of disttrain): a web demo at / and a TensorFlow-Serving-shaped "
        "JSON API (GET /v1/models/NAME, GET /v1/models/NAME/metadata, POST /v1/models/NAME:predict), "
        "plus /healthz, /readyz, /report, /progress.json (the run in training), /runs (the run dashboard), /openapi.json and /metrics (Prometheus).",
        epilog="A model published later at --model (the aggregator replaces the file atomically) is loaded without a "
        "restart; until a model exists the server runs and /readyz answers 503. "
        "Security: with --api-token-file, the face gallery and face search (or, with --token-required-for all, every /v1 call) need "
        "'Authorization: Bearer <token>'; /healthz, /readyz (probes), the page, /static, /openapi.json, /report and the run dashboard (/runs) stay open. "
        "POST bodies must be application/json or multipart/form-data, and multipart needs an X-Requested-With header "
        "(any value) unless a browser says it comes from this server's own page; cross-site browser requests are refused.",
    )
    # in --help's order: its usage line lists every flag as added, those of the argument groups included
    add_model_flags(p)
    add_worker_flags(p)
    add_request_flags(p)
    add_run_flags(p)
    add_gallery_flags(p)
    add_no_metrics_flag(p)
    add_front_flags(p)
    add_metrics_port_flag(p)
    add_security_flags(p)
    args = p.parse_args(argv)
    check_numbers(p, args)
    read_access_rules(p, args)
    check_model_and_gallery(p, args)
    return args


def add_model_flags(p):
    """What is served: the run's directory, the model file, its name in the API, its own module."""
    p.add_argument(
        "--workdir",
        default=default_workdir(),
        help="shared working directory (default $DISTTRAIN_WORKDIR or ./workdir)",
    )
    p.add_argument("--model", help="the model file to serve (default WORKDIR/final/model.keras)")
    p.add_argument("--model-name", default="disttrain", help="the NAME in /v1/models/NAME (default disttrain)")
    p.add_argument(
        "--model-module",
        metavar="MODULE[:FUNCTION]",
        help="the Python module of a model trained with --model-module "
        "(the trainer's): each worker imports it before loading the model, so that the custom layers it registers "
        "load in Keras safe mode. It must be importable (PYTHONPATH, or installed in a derived image); this runs its "
        "code in the server. A model that needs a module and was not given it is not served (/readyz says why)",
    )


def add_worker_flags(p):
    """Where gunicorn listens, and its processes and threads."""
    p.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 in a container)"
    )
    p.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    p.add_argument(
        "--workers", type=int, default=2, help="gunicorn worker processes, each with its own model copy (default 2)"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=8,
        help="threads per worker; its concurrent predict calls share model calls (see --max-batch-size) (default 8)",
    )
    p.add_argument(
        "--keepalive",
        type=int,
        default=75,
        metavar="SECONDS",
        help="how long an idle keep-alive connection stays "
        "open (default 75). Behind a proxy that keeps connections to the server (an Ingress, a cloud L7 load "
        "balancer) it must be longer than the proxy's own idle timeout (60 s for ingress-nginx and AWS ALB), "
        "or a request the proxy sends as the server closes the connection fails",
    )


def add_request_flags(p):
    """The limits of one request, and how concurrent predict calls share model calls."""
    p.add_argument(
        "--max-upload-mb", type=float, default=8, help="largest request body in MB; larger is a 413 (default 8)"
    )
    p.add_argument(
        "--max-text-chars", type=int, default=10000, help="longest text instance in characters (default 10000)"
    )
    p.add_argument("--max-instances", type=int, default=256, help="most instances in one predict request (default 256)")
    p.add_argument(
        "--max-batch-size",
        type=int,
        default=32,
        help="concurrent predict requests of one worker (its --threads) share "
        "one model call of up to this many instances; 1 turns batching off (default 32)",
    )
    p.add_argument(
        "--batch-timeout-ms",
        type=float,
        default=0,
        help="how long a batch waits for more requests; 0 never waits: a lone "
        "request runs at once and batches form from requests that queue during a model call (default 0)",
    )


def add_run_flags(p):
    """The runs the dashboard and the progress show, and how often a new model is looked for."""
    p.add_argument(
        "--runs-dir",
        metavar="DIR",
        help="a directory of run-N runs (the chart's volume, one run-N per release "
        "revision): the run dashboard (/runs) lists and compares them, and the page shows the training progress "
        "of the newest one (see --progress-run); default: neither, only the served run's (--workdir)",
    )
    p.add_argument(
        "--progress-run",
        choices=("newest", "served"),
        default="newest",
        help="with --runs-dir: whose training "
        "progress the page shows, the newest run-N's (default) or the served model's own run's",
    )
    p.add_argument(
        "--reload-interval",
        type=float,
        default=5,
        help="seconds between checks for a newly published model (default 5)",
    )


def add_gallery_flags(p):
    """Face search: the gallery's folder, the photos it starts with, the matches answered."""
    p.add_argument(
        "--gallery", help="folder of enrolled faces for face search, shared by all workers (default WORKDIR/gallery)"
    )
    p.add_argument(
        "--gallery-seed",
        help="enrol the photos in this folder at start-up unless already enrolled: one sub-folder "
        "per person, or files named PERSON.jpg/.png",
    )
    p.add_argument(
        "--top-k",
        type=int,
        default=3,
        help=f"matches a face search returns unless it asks for k (default 3, at most {MAX_TOP_K})",
    )


def add_no_metrics_flag(p):
    """--no-metrics. Its --metrics-port comes after the front's flags (add_metrics_port_flag), where --help lists it."""
    p.add_argument(
        "--no-metrics",
        action="store_true",
        help="no GET /metrics and no counting behind it. With metrics on, the "
        f"workers share their values through files in ${MULTIPROC_ENV} (emptied of *.db files at start) or, "
        "unset, in a new temporary directory removed at exit",
    )


def add_front_flags(p):
    """The nginx front that reads slow clients' requests before gunicorn sees them."""
    front = p.add_argument_group("front (slow clients)")
    front.add_argument(
        "--front",
        default=os.environ.get(FRONT_ENV, "none"),
        help="'nginx': nginx listens on --host/--port, "
        "reads each request whole (headers within --header-timeout) and hands only complete requests to "
        "gunicorn, on a Unix socket in a private directory under $TMPDIR: clients that send slowly cannot hold "
        "gunicorn's threads, and the probes stay answered. 'none': gunicorn listens itself "
        f"(default ${FRONT_ENV}, else none; the server image sets nginx)",
    )
    front.add_argument(
        "--header-timeout",
        type=int,
        default=10,
        metavar="SECONDS",
        help="with --front nginx: a client "
        "must send its whole request header within this time, or nginx closes the connection unanswered (default 10)",
    )
    front.add_argument(
        "--body-timeout",
        type=int,
        default=30,
        metavar="SECONDS",
        help="with --front nginx: longest pause between two reads of a request body, past which nginx closes the "
        "connection unanswered (default 30)",
    )
    front.add_argument(
        "--max-connections",
        type=int,
        default=1024,
        help="with --front nginx: most open connections, the "
        "clients' and nginx's own to gunicorn together; more wait in the kernel's accept queue (default 1024)",
    )


def add_metrics_port_flag(p):
    """A port of its own for /metrics, so that publishing the API never publishes them."""
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="answer /metrics on this port (bound on --host too) and "
        "nowhere else, and nothing but /metrics on it: the API's port, which a Service or Ingress publishes, "
        "then never publishes the scrape (the chart's default; with --front nginx gunicorn answers it "
        "itself, not behind nginx). Default: /metrics on --port",
    )


def add_security_flags(p):
    """The API token and what it guards, the gallery's bounds, the hosts and pixels accepted."""
    security = p.add_argument_group("security")
    security.add_argument(
        "--api-token-file",
        metavar="PATH",
        help="a file holding the API token (surrounding whitespace removed); "
        "clients send it as 'Authorization: Bearer <token>'. Default: no token (anyone may call everything)",
    )
    security.add_argument(
        "--token-required-for",
        choices=("writes", "all"),
        default="writes",
        help="with --api-token-file: 'writes' = the face gallery needs the token (enrol, delete, and, unless "
        "--public-face-search, its list, thumbnails and :search); 'all' = every /v1 call "
        "(predict, metadata too) does. /healthz and /readyz stay open for Kubernetes probes (default writes)",
    )
    security.add_argument(
        "--public-face-search",
        action="store_true",
        help="with --api-token-file and --token-required-for "
        "writes: the gallery's list and thumbnails and :search answer without the token, so anyone who "
        "reaches the server sees the enrolled people's names and faces and learns which of them a photo "
        "matches (default: they need the token)",
    )
    security.add_argument(
        "--show-heldout-examples",
        action="store_true",
        help="the page of a table or array model "
        "prefills its form with up to 20 held-out rows of the served run's data and their true labels, "
        "and /metadata gives each feature's training minimum and maximum (single records' values); the served "
        "reports (/report, the dashboard) keep a regression's held-out (actual, predicted) pairs and a face "
        "run's people's names, and analysis.png, which draws them, is served (the names, being face data, also "
        "need the API token where it guards face data, as every held-out value does under "
        "--token-required-for all). Default: the page prefills the training mean, /metadata gives means and "
        "variances only, and the served reports leave those out (the files on disk keep them)",
    )
    security.add_argument(
        "--read-only-gallery",
        action="store_true",
        help="enrol and delete answer 403; search still works (public demos)",
    )
    security.add_argument(
        "--gallery-max-entries",
        type=int,
        default=1000,
        help="most gallery entries; enrolling past it answers 507 (default 1000)",
    )
    security.add_argument(
        "--gallery-max-mb",
        type=float,
        default=200,
        help="most MB the gallery folder may hold; enrolling past it answers 507 (default 200)",
    )
    security.add_argument(
        "--allowed-hosts",
        metavar="H1,H2",
        default="",
        help="comma-separated host names this server answers to (the Host "
        "header's port is ignored; '.example.com' also takes its subdomains); other Host headers get 400 "
        "(DNS rebinding). /healthz and /readyz answer any Host (the kubelet sends the pod IP). "
        "Default empty: any host",
    )
    security.add_argument(
        "--max-request-pixels",
        type=int,
        default=MAX_REQUEST_PIXELS,
        help="pixels of all images of one request "
        f"together, read from their headers before decoding; more is a 413 (default {MAX_REQUEST_PIXELS:,}). "
        "Only PNG and JPEG uploads are accepted (415 otherwise)",
    )


def check_numbers(p, args):
    """Ports, counts, sizes and durations in range (p.error: exit 2 with the usage)."""
    if not 0 <= args.port <= 65535:
        p.error(f"--port must be between 0 and 65535, got {args.port}")
    if args.front not in FRONTS:
        p.error(f"--front (or ${FRONT_ENV}) must be one of {', '.join(FRONTS)}, got {args.front!r}")
    if args.max_connections < 64:
        p.error(f"--max-connections must be at least 64, got {args.max_connections}")
    for flag in (
        "workers",
        "threads",
        "keepalive",
        "header_timeout",
        "body_timeout",
        "max_text_chars",
        "max_instances",
        "max_batch_size",
        "gallery_max_entries",
        "max_request_pixels",
    ):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be at least 1, got {getattr(args, flag)}")
    if args.metrics_port is not None:
        if not 1 <= args.metrics_port <= 65535 or args.metrics_port == args.port:
            p.error(f"--metrics-port must be between 1 and 65535 and not --port ({args.port}), got {args.metrics_port}")
        if args.no_metrics:
            p.error("--metrics-port and --no-metrics exclude each other")
    if args.max_upload_mb <= 0 or args.reload_interval < 0 or args.batch_timeout_ms < 0:
        p.error("--max-upload-mb must be positive, --reload-interval and --batch-timeout-ms not negative")
    if args.gallery_max_mb <= 0:
        p.error(f"--gallery-max-mb must be positive, got {args.gallery_max_mb}")


def read_access_rules(p, args):
    """args.allowed_hosts made a list of lower-case names; args.api_token read from --api-token-file (None without)."""
    args.allowed_hosts = [h.strip().lower() for h in args.allowed_hosts.split(",") if h.strip()]
    if any("/" in h or " " in h for h in args.allowed_hosts):
        p.error(f"--allowed-hosts takes host names separated by commas, got {','.join(args.allowed_hosts)!r}")
    args.api_token = None
    if args.api_token_file:
        try:
            args.api_token = read_token(args.api_token_file)
        except ValueError as err:
            p.error(str(err))


def check_model_and_gallery(p, args):
    """--top-k, --gallery-seed, --model, --model-name and --model-module usable; what needs the model's volume
    (the model file, the module on the path, --runs-dir) main() checks."""
    if not 1 <= args.top_k <= MAX_TOP_K:
        p.error(f"--top-k must be between 1 and {MAX_TOP_K}, got {args.top_k}")
    if args.gallery_seed and not os.path.isdir(args.gallery_seed):
        p.error(f"--gallery-seed {args.gallery_seed} is not a directory")
    if args.model and re.match(
        r"^[A-Za-z][A-Za-z0-9+.-]*://", args.model
    ):  # (it would wait for a local path of that name)
        p.error(
            f"--model {args.model}: the server serves a model file on its own volume, not a URL; a release the "
            "aggregator published to object storage is served by TF Serving or KServe from the store, or copy its "
            "model.keras to the server's volume (docs: Object storage)"
        )
    if "/" in args.model_name or ":" in args.model_name or not args.model_name:
        p.error(f"--model-name must be non-empty without '/' or ':', got {args.model_name!r}")
    if args.model_module is not None:
        try:
            parse_module_spec(args.model_module)
        except ContractError as err:
            p.error(str(err))


def app_config(args):
    return {
        "MODEL_PATH": os.path.abspath(args.model or Workdir(args.workdir).final_model),
        "MODEL_NAME": args.model_name,
        "MODEL_MODULE": args.model_module,
        "WORKDIR": os.path.abspath(args.workdir),
        "RUNS_DIR": args.runs_dir and os.path.abspath(args.runs_dir),
        "PROGRESS_RUN": args.progress_run,
        "MAX_CONTENT_LENGTH": int(args.max_upload_mb * 1024 * 1024),
        "MAX_TEXT_CHARS": args.max_text_chars,
        "MAX_INSTANCES": args.max_instances,
        "RELOAD_INTERVAL": args.reload_interval,
        "MAX_BATCH_SIZE": args.max_batch_size,
        "BATCH_TIMEOUT_MS": args.batch_timeout_ms,
        "GALLERY_DIR": os.path.abspath(args.gallery or os.path.join(Workdir(args.workdir).root, "gallery")),
        "GALLERY_SEED": args.gallery_seed and os.path.abspath(args.gallery_seed),
        "TOP_K": args.top_k,
        "API_TOKEN": args.api_token,
        "TOKEN_REQUIRED_FOR": args.token_required_for,
        "PUBLIC_FACE_SEARCH": args.public_face_search,
        "READ_ONLY_GALLERY": args.read_only_gallery,
        "GALLERY_MAX_ENTRIES": args.gallery_max_entries,
        "GALLERY_MAX_BYTES": int(args.gallery_max_mb * 1024 * 1024),
        "ALLOWED_HOSTS": args.allowed_hosts,
        "MAX_REQUEST_PIXELS": args.max_request_pixels,
        "SHOW_HELDOUT_EXAMPLES": args.show_heldout_examples,
        "METRICS": not args.no_metrics,
        "METRICS_PORT": args.metrics_port,
    }


def check_module_exists(spec):
    """--model-module names a module on the Python path: found without importing it (its code
    imports Keras, and so TensorFlow, which the gunicorn master must never do; the workers import
    it). Only the top-level package is looked up: finding a submodule would run its package's code."""
    top = parse_module_spec(spec)[0].split(".")[0]
    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise ContractError(
            f"--model-module {spec}: no module {top!r} on the Python path (PYTHONPATH="
            f"{os.environ.get('PYTHONPATH', '')!r}); mount its directory and add it to PYTHONPATH, "
            "or install it in a derived image"
        )


def post_worker_init(worker):
    """Load the model in the freshly forked worker, before it accepts requests."""
    try:
        worker.wsgi.extensions[STORE_KEY].get()
    except ModelUnavailable as err:
        worker.log.warning("worker %s starts without a model: %s", worker.pid, err.reason)


def worker_exit(server, worker):
    """In the worker, just before it exits: freeze its objects so Python's last garbage collection
    skips what TensorFlow made (as a finished stage does: disttrain_contract.run_cli)."""
    gc.freeze()


def child_exit(server, worker):
    """A worker exited (crashed, killed, or replaced): its gauges leave /metrics (the liveall
    modes); its counters and histograms stay, so totals never go down."""
    from prometheus_client import multiprocess  # in the master, after main() set MULTIPROC_ENV

    multiprocess.mark_process_dead(worker.pid)


def metrics_dir():
    """(directory, made here) where the workers share their metric values (prometheus_client's
    multiprocess mode), ready before gunicorn forks: $PROMETHEUS_MULTIPROC_DIR emptied of an earlier
    server's *.db files (its counts would otherwise carry on into this one's; the chart points it at the
    pod's /tmp emptyDir, which outlives a container restart), or a new private temporary directory."""
    path = os.environ.get(MULTIPROC_ENV)
    try:
        if not path:
            return tempfile.mkdtemp(prefix="disttrain-metrics-"), True
        os.makedirs(path, exist_ok=True)
        for name in os.listdir(path):
            if name.endswith(".db"):
                os.remove(os.path.join(path, name))
        return path, False
    except OSError as err:
        where = f"{MULTIPROC_ENV}={path}" if path else f"a temporary directory in {tempfile.gettempdir()}"
        raise ContractError(
            f"metrics: cannot prepare {where} ({err.strerror}): give {MULTIPROC_ENV} a writable "
            "directory, or --no-metrics"
        ) from None


def when_ready(server):
    front = server.app.front
    # (with the front, gunicorn's own listeners are its Unix socket, which no client reaches, and --metrics-port)
    addresses = [
        listener.sock.getsockname()[:2] for listener in server.LISTENERS if listener.sock.family != socket.AF_UNIX
    ]
    if front:
        addresses.insert(0, (front.host, front.port))
    for host, port in addresses:
        host = f"[{host}]" if ":" in host else host
        if port == server.app.app_config["METRICS_PORT"]:
            print(f"disttrain-server: metrics at http://{host}:{port}/metrics", flush=True)
        else:
            print(
                f"disttrain-server: serving {server.app.app_config['MODEL_NAME']!r} at http://{host}:{port}/"
                f"{' (nginx in front)' if front else ''}",
                flush=True,
            )


class ServerApplication(BaseApplication):
    """gunicorn's documented way to embed it: options in, our own app factory out."""

    def __init__(self, app_config, options, front=None):
        self.app_config = app_config
        self.options = options
        self.front = front
        super().__init__()

    def load_config(self):
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self):
        # Runs in each worker (no preload). Our loggers (model loads and reloads)
        # go where gunicorn's error log goes, at its level.
        gunicorn_log = logging.getLogger("gunicorn.error")
        package_log = logging.getLogger("disttrain_server")
        package_log.handlers[:] = gunicorn_log.handlers
        package_log.setLevel(gunicorn_log.level)
        return create_app(self.app_config)


def gunicorn_options(args, front=None):
    """gunicorn's settings; with a front it listens on the front's Unix socket only."""
    host = f"[{args.host}]" if ":" in args.host else args.host
    # behind the front the peer is nginx: the client's address is the one nginx adds to X-Forwarded-For
    client = "%({x-forwarded-for}i)s" if front else "%(h)s"
    return {
        "bind": [f"unix:{front.socket}" if front else f"{host}:{args.port}"]
        + ([f"{host}:{args.metrics_port}"] if args.metrics_port else []),
        "workers": args.workers,
        "threads": args.threads,  # > 1 makes gunicorn use its gthread worker
        "preload_app": False,  # TensorFlow must never be imported before the fork
        "timeout": 120,  # a worker loading TensorFlow and a model on a busy node is slow, not stuck
        "graceful_timeout": 10,
        # gunicorn's own default (2 s) closes a connection while a client or proxy may be sending on it
        "keepalive": args.keepalive,
        "accesslog": "-",
        # gunicorn's default format plus the worker's pid: which process answered (the gallery is per-process memory over shared files)
        "access_log_format": client + ' %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s" pid=%(p)s',
        "proc_name": "disttrain-server",
        "control_socket_disable": True,  # gunicorn's shared ~/.gunicorn control socket would clash between servers
        "post_worker_init": post_worker_init,
        "when_ready": when_ready,
        "worker_exit": worker_exit,
        **({"child_exit": child_exit} if not args.no_metrics else {}),
    }


def main(argv=None):
    args = parse_args(argv)
    config = app_config(args)
    os.environ.setdefault("OPENCV_IO_MAX_IMAGE_PIXELS", str(MAX_IMAGE_PIXELS))
    if not os.path.exists(config["MODEL_PATH"]):
        print(
            f"disttrain-server: no model at {config['MODEL_PATH']} yet; /readyz answers 503 until one is published",
            file=sys.stderr,
        )
    elif not os.path.isfile(config["MODEL_PATH"]):
        raise ContractError(f"--model {config['MODEL_PATH']} is not a file")
    # (checked here, not in parse_args: the chart's tests parse its args where its volume does not exist)
    if config["MODEL_MODULE"]:
        check_module_exists(config["MODEL_MODULE"])
    if config["RUNS_DIR"] and not os.path.isdir(config["RUNS_DIR"]):
        raise ContractError(f"--runs-dir {config['RUNS_DIR']} is not a directory")
    made = None
    if config["METRICS"]:
        # In the environment before the fork: each worker imports prometheus_client, which reads it then.
        os.environ[MULTIPROC_ENV], made_here = metrics_dir()
        made = os.environ[MULTIPROC_ENV] if made_here else None
        # child_exit's module, imported now (after the variable is set): the hook runs in the master's
        # SIGCHLD handling, no place for a first import
        from prometheus_client import multiprocess  # noqa: F401
    master = os.getpid()
    front = None
    if args.front == "nginx":
        front = Front(
            args.host,
            args.port,
            header_timeout=args.header_timeout,
            body_timeout=args.body_timeout,
            max_connections=args.max_connections,
            keepalive=args.keepalive,
            max_body_mb=args.max_upload_mb,
        )
    try:
        if front:
            # nginx gone, the server cannot be reached: stop gunicorn too (SIGTERM, its graceful halt), and
            # exit non-zero below, so that the container is restarted
            front.start(on_exit=lambda: os.kill(master, signal.SIGTERM))
        try:
            ServerApplication(config, gunicorn_options(args, front), front).run()
        except SystemExit:
            # gunicorn's halt ends the master by sys.exit (its workers leave this way too)
            if os.getpid() == master and front and front.died.is_set():
                raise ContractError("the front (nginx) exited: the server stopped with it") from None
            raise
    finally:
        # gunicorn's workers leave run() too, by SystemExit; only the master removes the directories
        if os.getpid() == master:
            if front:
                front.close()
            if made:
                shutil.rmtree(made, ignore_errors=True)
    return 0


def cli():
    run_cli(main)


if __name__ == "__main__":
    cli()
