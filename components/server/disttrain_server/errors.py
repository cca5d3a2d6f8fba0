"""Every error leaves the server as JSON: {"error": "<message naming the problem>"}.

API clients (and the fuzzer run against /openapi.json) must never get Flask's
HTML error pages, so one handler covers all HTTPExceptions, including the ones
Werkzeug raises itself (404 routing, 405 method, 413 body size).
"""

from flask import current_app, jsonify, request
from werkzeug.exceptions import HTTPException, InternalServerError, RequestEntityTooLarge

# An oversized body is read and thrown away up to this many times the limit
# before the 413 goes out (see _drain_request_body); beyond it the client gets
# a connection reset, which is cheaper than reading an arbitrary upload.
DRAIN_FACTOR = 2


class ApiError(HTTPException):
    """An HTTP error whose message we wrote for the client: raise ApiError(422, "...")."""

    def __init__(self, code, message):
        super().__init__(description=message)
        self.code = code


class ModelUnavailable(ApiError):
    """No model is loaded in this process (file missing or unreadable): 503."""

    def __init__(self, reason):
        super().__init__(503, f"model not available: {reason}")
        self.reason = reason


def json_type(value):
    """The JSON name of a decoded value's type, for messages like 'got number'."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _message(err):
    """Werkzeug's stock descriptions are generic prose; say what was wrong with this request."""
    if isinstance(err, ApiError):
        return err.description
    if err.code == 404:
        return f"no such endpoint: {request.method} {request.path} (the API is described at /openapi.json)"
    if err.code == 405:
        allowed = ", ".join(sorted(err.valid_methods or ()))
        return f"method {request.method} is not allowed for {request.path}; allowed: {allowed}"
    if err.code == 413:
        limit = request.max_content_length
        return f"request body is larger than the {limit} byte limit (--max-upload-mb)"
    return err.description


def _drain_request_body():
    """Read and discard an unread oversized body so the client can read our 413.

    Closing a socket with unread data in it makes the kernel reset the
    connection, and the client then reports 'broken pipe' or 'connection reset'
    instead of the JSON error that says the file was too big."""
    stream = request.environ.get("wsgi.input")
    remaining = DRAIN_FACTOR * (request.max_content_length or 0)
    if stream is None or (request.content_length or 0) > remaining:
        return
    while remaining > 0:
        chunk = stream.read(min(1 << 16, remaining))
        if not chunk:
            break
        remaining -= len(chunk)


def handle_http_exception(err):
    if isinstance(err, RequestEntityTooLarge):
        _drain_request_body()
    response = jsonify(error=_message(err))
    response.status_code = err.code
    # Keep the headers Werkzeug attached for a reason (Allow on 405, Retry-After ...).
    for name, value in err.get_headers():
        if name.lower() != "content-type":
            response.headers[name] = value
    return response


def handle_unexpected(err):
    """A bug: log the traceback, answer JSON 500 without leaking internals."""
    current_app.logger.exception("unhandled error on %s %s", request.method, request.path)
    return handle_http_exception(ApiError(500, InternalServerError.description))


def register_error_handlers(app):
    app.register_error_handler(HTTPException, handle_http_exception)
    app.register_error_handler(Exception, handle_unexpected)
