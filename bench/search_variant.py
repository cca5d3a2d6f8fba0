#!/usr/bin/env python3
"""disttrain-server with another face-detector sharing policy, for search_bench.py only.

    python search_variant.py shared|lock|per-thread -- <disttrain-server arguments>

  per-thread  the shipped code: one CascadeClassifier per request thread (threading.local)
  lock        one cascade for the process, detectMultiScale serialised by a lock
  shared      one cascade for the process, no lock: the code before per-thread cascades (wrong answers)

The policy is swapped in the gunicorn master before it forks its workers (no preload: the
workers import nothing else of ours before), so each worker serves with it.
"""

import functools
import sys
import threading

from disttrain_contract import faces
from disttrain_server.main import cli


class LockedCascade:
    """A cascade whose detectMultiScale runs one call at a time."""

    def __init__(self, cascade):
        self._cascade, self._lock = cascade, threading.Lock()

    def detectMultiScale(self, *args, **kwargs):  # noqa: N802 - OpenCV's name
        with self._lock:
            return self._cascade.detectMultiScale(*args, **kwargs)

    def detectMultiScale3(self, *args, **kwargs):  # noqa: N802 - OpenCV's name; faces.detect_faces calls this one
        with self._lock:
            return self._cascade.detectMultiScale3(*args, **kwargs)


POLICIES = {
    "per-thread": None,  # faces._cascade as shipped
    "shared": functools.lru_cache(maxsize=1)(faces._load_cascade),
    "lock": functools.lru_cache(maxsize=1)(lambda: LockedCascade(faces._load_cascade())),
}

if __name__ == "__main__":
    usage = f"usage: search_variant.py {'|'.join(POLICIES)} -- <disttrain-server arguments>"
    if sys.argv[1:2] in (["-h"], ["--help"]):
        print(f"{usage}\n\n{__doc__.strip()}")
        sys.exit(0)
    if len(sys.argv) < 3:
        raise SystemExit(usage)
    policy, separator, *server_args = sys.argv[1:]
    if policy not in POLICIES or separator != "--":
        raise SystemExit(usage)
    if POLICIES[policy] is not None:
        faces._cascade = POLICIES[policy]
    sys.argv = ["disttrain-server", *server_args]
    cli()
