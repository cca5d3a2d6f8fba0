"""HTTP hardening for every request: Host allowlist, cross-site refusal, API token, security headers.

Registered by the app factory (init_app) as one before_request and one
after_request hook, so no view can forget them. The order of the checks is the
order of the questions: is this request for us (Host), could a page on another
site have sent it (Origin, Sec-Fetch-Site, Content-Type, X-Requested-With), is
the caller allowed (token). Every refusal is our JSON error (errors.ApiError).

Paths that stay open whatever --token-required-for says, and why:
  /healthz, /readyz,        the kubelet's probes cannot send a token (they also skip the Host
  /v2/health/live|ready     allowlist: the kubelet sends the pod IP as Host)
  /, /static/*, /favicon.ico the page must load before it can ask for the token
  /openapi.json, /report    the API's description and the training report: no gallery data,
                            no predictions (the same model facts as the page shows)
  /progress.json, /progress/report.png   the run in training and its plots (the page shows them)
  /runs, /runs.json, /runs/*  the run dashboard: the runs' reports and plots (read-only files of a
                            fixed allow-list; the same facts as /report, for every run on --runs-dir)
                            Their reports leave out single held-out values and people's names, and
                            analysis.png that draws them, unless the operator's opt-in and, where these
                            rules guard that data, the request's token say otherwise (heldout.py)
  /metrics                  Prometheus scrapes: counts, latencies, the model's version and the
                            gallery's size, no names, ids or inputs (metrics.py). Like the probes it
                            skips the Host allowlist: Prometheus scrapes pods by IP, which is the Host
Everything under /v1/ and /v2 (TF Serving's and KServe's APIs) is the API, which
--token-required-for all protects. Under --token-required-for writes the token still guards gallery
writes and every read of face data (the gallery's list and thumbnails, and :search, which answers the
names of the enrolled people a photo matches) unless --public-face-search opens the reads.

The body types a POST may declare. Writes (the gallery) and :search: JSON or multipart only, because
text/plain and application/x-www-form-urlencoded are what an HTML form on another site can send
without asking the browser first (CSRF). The prediction calls (PREDICTION_ENDPOINTS: TF Serving's
:predict and :classify, KServe V2's infer) also read a JSON body declared as either, or undeclared:
TF Serving's and KServe's own docs call them with `curl -d '{"instances": ...}'`, which curl sends as
application/x-www-form-urlencoded. They change nothing, and the cross-site check still runs first:
a browser names the page that started a request (Origin, and Sec-Fetch-Site since 2020-2023), and
one from another origin is refused with a 403 before its body is looked at. Sec-Fetch-Site:
same-site is refused too, as for writes: it means another origin on the same registrable domain
(a sibling subdomain, another port), whose pages are not this server's page; a dashboard there
can call the API from its own server. What is left: a browser old enough to send neither header
could let another site's form start a prediction. It gets nothing back (no CORS, so the answer
is not readable), it changes nothing, and under --token-required-for all it has no token.

Shared by request threads: only app.config (read-only after create_app). The
token is bytes in app.config, compared with hmac.compare_digest (constant
time) and never logged.
"""

import hmac
from urllib.parse import urlsplit

from flask import current_app, request
from werkzeug.sansio.utils import host_is_trusted

from disttrain_server.errors import ApiError

# The page and its script/style come from this server only; nothing is fetched from outside,
# and no other site may frame it (clickjacking) or submit forms into it.
CSP = (
    "default-src 'self'; img-src 'self' data: blob:; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",  # a JSON error or a thumbnail is never run as a script or page
    "Referrer-Policy": "no-referrer",  # URLs name models and gallery ids: do not hand them to other sites
    "X-Frame-Options": "DENY",  # frame-ancestors for browsers that predate it
    "Cross-Origin-Resource-Policy": "same-origin",  # another site's <img> cannot load a face thumbnail
}

# Probes: open to any Host and to callers without a token.
PROBE_PATHS = ("/healthz", "/readyz", "/v2/health/live", "/v2/health/ready")
SCRAPE_PATH = "/metrics"  # open the same way (metrics.py; with --metrics-port only on that port)
STATE_CHANGING = ("POST", "PUT", "PATCH", "DELETE")
BODY_TYPES = ("application/json", "multipart/form-data")
# Read-only model calls that read their body as JSON whatever it is declared as (docstring above):
# Flask endpoint names (blueprint.view), checked against the app's routes by the tests.
PREDICTION_ENDPOINTS = ("api.predict", "api.classify", "v2.infer")
# curl -d's default, a form's other type, and none ("" is request.mimetype without Content-Type).
JSON_AS_OTHER_TYPES = ("application/x-www-form-urlencoded", "text/plain", "")
# A custom header makes a cross-origin request non-simple: the browser asks first (CORS
# preflight), which this server never approves. Any value; the page sends "fetch".
CUSTOM_HEADER = "X-Requested-With"
# Sec-Fetch-Site values a browser sends for requests another site did not start.
SAME_SITE_FETCH = ("same-origin", "none")


def init_app(app):
    app.before_request(check_request)
    app.after_request(add_security_headers)


def check_request():
    if request.path in PROBE_PATHS or request.path == SCRAPE_PATH:
        return
    check_host()
    if request.method in STATE_CHANGING:
        check_not_cross_site()
        if request.method != "DELETE":  # DELETE has no body; it is never a simple request either
            check_body_type()
    if needs_token():
        check_token()


def check_host():
    """--allowed-hosts: a Host header outside the list is a 400 (DNS rebinding: a page on evil.example
    whose name now points at this server sends Host: evil.example)."""
    allowed = current_app.config["ALLOWED_HOSTS"]
    if allowed and not host_is_trusted(request.host, allowed):
        raise ApiError(400, f"host {request.host!r} is not served here (--allowed-hosts {','.join(allowed)})")


def same_origin():
    """True if the browser says the request comes from this server's own page."""
    if request.headers.get("Sec-Fetch-Site") in SAME_SITE_FETCH:
        return True
    origin = request.headers.get("Origin")
    # Host, not the URL scheme: behind a TLS-terminating proxy the page is https and we see http.
    return bool(origin) and urlsplit(origin).netloc.lower() == request.host.lower()


def is_browser():
    """Browsers send Origin on every POST and DELETE (and Sec-Fetch-Site, since 2020-2023); other clients do not."""
    return "Origin" in request.headers or "Sec-Fetch-Site" in request.headers


def check_not_cross_site():
    """A browser names the page that started a request; refuse those from other sites."""
    site = request.headers.get("Sec-Fetch-Site")
    origin = request.headers.get("Origin")
    if site is not None and site not in SAME_SITE_FETCH:
        raise ApiError(
            403,
            f"cross-site request refused (Sec-Fetch-Site: {site}): this API answers only its own page and non-browser clients",
        )
    if origin is not None and not same_origin():
        raise ApiError(
            403,
            f"cross-site request refused (Origin: {origin} is not this server): this API answers only its own page and non-browser clients",
        )


def check_body_type():
    """Only JSON or multipart (or, from a non-browser client, no Content-Type, read as JSON): text/plain
    and urlencoded bodies are what a cross-site HTML form (or a no-cors fetch) can send without a preflight. Multipart can be sent that way too, so it also needs
    the custom header or a same-origin browser. The prediction calls also take text/plain, urlencoded or
    untyped bodies as JSON (module docstring): check_not_cross_site has already refused other sites."""
    kind = request.mimetype
    prediction = request.endpoint in PREDICTION_ENDPOINTS
    if prediction and kind in JSON_AS_OTHER_TYPES:
        return  # read as JSON, e.g. TF Serving's documented `curl -d '{"instances": ...}'`
    if not kind and not is_browser():
        return  # read as JSON: TF Serving clients do not always send a Content-Type (a browser always names its page)
    if kind not in BODY_TYPES:
        got = f"Content-Type {kind}" if kind else "no Content-Type"
        if prediction:
            raise ApiError(
                415,
                f"request body must be application/json (or JSON sent as text/plain, "
                f"application/x-www-form-urlencoded or without a Content-Type), got {got}",
            )
        raise ApiError(
            415,
            f"request body must be application/json or multipart/form-data, got {got} "
            "(curl: --json DATA, or -H 'Content-Type: application/json')",
        )
    if kind == "multipart/form-data" and CUSTOM_HEADER not in request.headers and not same_origin():
        raise ApiError(
            403,
            f"a multipart/form-data request needs an {CUSTOM_HEADER} header (any value, e.g. curl -H "
            f"'{CUSTOM_HEADER}: curl') so that a form on another site cannot send it",
        )


def is_api(path):
    """TF Serving's API under /v1/, KServe's V2 under /v2 (its server metadata is /v2 itself)."""
    return path.startswith(("/v1/", "/v2/")) or path == "/v2"


def is_gallery_write():
    return request.method in STATE_CHANGING and request.path.startswith("/v1/gallery")


def is_face_data():
    """The gallery (its list, entries, thumbnails) and face search: enrolled people's names and faces.
    A search answers the names a photo matches, so it reads the gallery like its list does."""
    return request.path.startswith("/v1/gallery") or (
        request.path.startswith("/v1/models/") and request.path.endswith(":search")
    )


def needs_token():
    """With a token: every API call under 'all'; under 'writes', gallery writes and (unless
    PUBLIC_FACE_SEARCH, --public-face-search) every read of face data too."""
    config = current_app.config
    if config["API_TOKEN"] is None:
        return False
    if config["TOKEN_REQUIRED_FOR"] == "all":
        return is_api(request.path)
    return is_gallery_write() or (is_face_data() and not config["PUBLIC_FACE_SEARCH"])


def check_token():
    """`Authorization: Bearer <token>`, compared in constant time; 401 with WWW-Authenticate otherwise."""
    scheme, _, sent = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not sent.strip():
        raise Unauthorized("this call needs the API token: send Authorization: Bearer <token>", None)
    # Header values arrive as latin-1 text (WSGI): back to their bytes, whatever they contain.
    if not hmac.compare_digest(sent.strip().encode("latin-1", "replace"), current_app.config["API_TOKEN"]):
        raise Unauthorized("wrong API token", "invalid_token")


class Unauthorized(ApiError):
    """401 with the WWW-Authenticate challenge RFC 6750 asks for."""

    def __init__(self, message, error):
        super().__init__(401, message)
        self.challenge = 'Bearer realm="disttrain"' + (f', error="{error}"' if error else "")

    def get_headers(self, environ=None, scope=None):
        return [*super().get_headers(environ, scope), ("WWW-Authenticate", self.challenge)]


def add_security_headers(response):
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    if is_api(request.path) and "Cache-Control" not in response.headers:
        response.headers["Cache-Control"] = "no-store"  # gallery lists, matches, predictions: never kept by a cache
    return response
