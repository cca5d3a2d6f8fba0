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
    return _wait(
        [directory],
        timeout,
        poll,
        log,
        waiting=lambda missing: f"waiting up to {timeout:g}s for {what} ({path}) ...",
        timed_out=lambda missing: (
            f"timed out after {timeout:g}s waiting for {what} (no marker at {path}); "
            "did the previous stage run and succeed?"
        ),
    )[0]


def wait_for_markers(directories, timeout, what="workers", poll=1.0, log=sys.stderr):
    """Block until every one of `directories` has its marker; return their contents, in order.

    One deadline for all of them. Raises StageTimeout after `timeout` seconds (0 means:
    check once) saying how many did not finish and naming each missing marker:
    "1 of 2 workers did not finish (missing .../worker-00001/_SUCCESS)"."""
    total = len(directories)
    return _wait(
        directories,
        timeout,
        poll,
        log,
        waiting=lambda missing: f"waiting up to {timeout:g}s for {len(missing)} of {total} {what} ...",
        timed_out=lambda missing: (
            f"timed out after {timeout:g}s: {len(missing)} of {total} {what} did not finish "
            f"(missing {', '.join(marker_path(d) for d in missing)})"
        ),
    )


def wait_for_quorum(directories, timeout, minimum, straggler_wait, what="workers", poll=1.0, log=sys.stderr):
    """Like wait_for_markers, but settles for `minimum` of them: once that many have
    finished, it waits at most `straggler_wait` seconds more for the rest (never past
    `timeout`). Returns every directory's marker in order, None for each one missing.
    Raises StageTimeout when fewer than `minimum` finished by `timeout`."""
    total = len(directories)
    if not 1 <= minimum <= total:
        raise ValueError(f"a quorum of {minimum} out of {total} {what} is impossible")
    if minimum == total:  # no quorum: every one, with wait_for_markers' messages
        return wait_for_markers(directories, timeout, what, poll, log)
    return _wait(
        directories,
        timeout,
        poll,
        log,
        waiting=lambda missing: (
            f"waiting up to {timeout:g}s for {len(missing)} of {total} {what} (at least {minimum} must finish) ..."
        ),
        timed_out=lambda missing: (
            f"timed out after {timeout:g}s: only {total - len(missing)} of {total} {what} "
            f"finished, fewer than the {minimum} required "
            f"(missing {', '.join(marker_path(d) for d in missing)})"
        ),
        quorum=(
            minimum,
            straggler_wait,
            lambda missing: (
                f"{total - len(missing)} of {total} {what} finished (at least {minimum} needed); "
                f"waiting up to {straggler_wait:g}s more for {', '.join(marker_path(d) for d in missing)}"
            ),
        ),
    )


def _wait(directories, timeout, poll, log, waiting, timed_out, quorum=None):
    """The one polling loop: read every marker (each once per round) until none is missing
    or the deadline passes. `waiting(missing)` is announced once (when `log` is not None),
    `timed_out(missing)` is the StageTimeout's message. quorum = (minimum, straggler_wait,
    announce(missing)): once `minimum` markers exist, end `straggler_wait` seconds later
    (or at the deadline) with the markers there are, None for the missing."""
    deadline = time.monotonic() + timeout
    announced, quorum_deadline = False, None
    while True:
        markers = [read_marker(d) for d in directories]
        missing = [d for d, marker in zip(directories, markers) if marker is None]
        if not missing:
            return markers
        now = time.monotonic()
        if quorum is not None and len(directories) - len(missing) >= quorum[0]:
            if quorum_deadline is None:
                quorum_deadline = min(deadline, now + quorum[1])
                if log is not None:
                    print(quorum[2](missing), file=log, flush=True)
            if now >= quorum_deadline:
                return markers
            end = quorum_deadline
        elif now >= deadline:
            raise StageTimeout(timed_out(missing))
        else:
            end = deadline
        if not announced and log is not None:
            print(waiting(missing), file=log, flush=True)
            announced = True
        time.sleep(min(poll, max(0.0, end - time.monotonic())))
