"""One glibc malloc arena for a one-thread trainer (--threads 1): set before TensorFlow starts its threads.

glibc gives each new thread its own arena (up to 8 per core), and memory freed in one arena is handed
back to the kernel and faulted in again when a step allocates it anew. A worker of a connected strategy
has more threads than its compute (the collective executor's, gRPC's), and its step's tensors pass
between them: perf showed 30 % of a multiworker worker's CPU in the kernel (page faults), against 7 %
with one arena. With one arena a multiworker epoch of MobileNetV2 took 22 % less time on two hosts; the
text model's strategies ran within 5 % either way, and two independent MobileNetV2 processes within
-5 to +2 % (bench/malloc_arenas.py; docs/strategies.md gives the figures).
Only --threads 1 gets the limit: with two compute threads one arena was 12 % slower on one host and no
faster on another, and two arenas slower than both there; so any other --threads (0: TensorFlow decides) keeps
glibc's default, and so does an arena limit the user set (MALLOC_ARENA_MAX, or arena_max in GLIBC_TUNABLES).

mallopt through ctypes rather than GLIBC_TUNABLES: the variable is read when the process starts, so it
would have to be in every way the trainer is started (the images, the chart, a user's shell); the call is
in the trainer itself. It changes only arenas made after it, so it runs before TensorFlow is imported.
"""

import ctypes
import ctypes.util
import os

M_ARENA_MAX = -8  # glibc's malloc.h


def user_limit():
    """The arena limit the environment already sets (MALLOC_ARENA_MAX or GLIBC_TUNABLES), else None."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return os.environ["MALLOC_ARENA_MAX"]
    for tunable in os.environ.get("GLIBC_TUNABLES", "").replace(":", " ").split():
        name, _, value = tunable.partition("=")
        if name == "glibc.malloc.arena_max":
            return value
    return None


def glibc():
    """The C library when it is glibc (mallopt's parameter numbers are glibc's), else None (musl has no arenas)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
    except (OSError, TypeError):
        return None
    return libc if hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt") else None


def limit(threads):
    """One arena when `threads` is 1 (the run's --threads). Returns the limit set, or None when none was:
    another thread count, the user's own limit, or a C library that is not glibc."""
    libc = glibc() if threads == 1 and user_limit() is None else None
    if libc is None:
        return None
    libc.mallopt.argtypes, libc.mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return 1 if libc.mallopt(M_ARENA_MAX, 1) == 1 else None
