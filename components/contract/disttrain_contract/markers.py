"""Completion markers: how one stage tells the next that its output is whole.

A stage writes its marker last, atomically, after every artifact is in place
under its final name. The next stage waits for the marker, never for the
artifacts themselves, so it cannot start on half of them.
"""

import socket
import sys
import time

from disttrain_contract.atomic import atomic_write_json, read_json
from disttrain_contract.errors import StageTimeout
from disttrain_contract.layout import marker_path


def write_marker(directory, stage, **info):
    atomic_write_json(
        marker_path(directory),
        {"stage": stage, "finished_at": time.time(), "host": socket.gethostname(), **info},
    )


def read_marker(directory):
    path = marker_path(directory)
    return read_json(path, None, what=f"marker {path}")


def wait_for_marker(directory, timeout, what, poll=1.0, log=sys.stderr):
    """Block until `directory/_SUCCESS` exists; return its contents.

    Raises StageTimeout naming the stage and the path after `timeout` seconds
    (0 means: check once, do not wait)."""
    path = marker_path(directory)
    deadline = time.monotonic() + timeout
    announced = False
    while True:
        marker = read_marker(directory)
        if marker is not None:
            return marker
        if time.monotonic() >= deadline:
            raise StageTimeout(
                f"timed out after {timeout:g}s waiting for {what} (no marker at {path}); "
                f"did the previous stage run and succeed?"
            )
        if not announced and log is not None:
            print(f"waiting up to {timeout:g}s for {what} ({path}) ...", file=log, flush=True)
            announced = True
        time.sleep(min(poll, max(0.0, deadline - time.monotonic())))

