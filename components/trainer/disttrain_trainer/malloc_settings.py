"""The trainer's glibc malloc settings (--malloc tuned, the default): made before TensorFlow starts its threads.

1. One arena at --threads 1. glibc gives each new thread its own arena (up to 8 per core), and memory freed in
   one arena is handed back to the kernel and faulted in again when a step allocates it anew. A worker of a
   connected strategy has more threads than its compute (the collective executor's, gRPC's), and its step's
   tensors pass between them: perf showed 30 % of a multiworker worker's CPU in the kernel (page faults),
   against 7 % with one arena; a multiworker epoch of MobileNetV2 took 22 % less time on two hosts
   (bench/malloc_settings.py). With two compute threads one arena was 12 % slower on one host and no faster
   on another, so other --threads values keep glibc's arenas.
2. Large blocks kept in the heap, at every thread count. glibc serves a block over its mmap threshold with a
   mapping of its own and gives the heap's free top back to the kernel past its trim threshold; the kernel
   zero-fills those pages again when the next step allocates them. Both thresholds start small (128 KiB)
   and follow the largest mapped block the process has freed so far, so what a step costs in the kernel
   depends on the process's history. The advisor's probe of the text model at --threads 1 spent as much
   CPU in the kernel as in TensorFlow, its steps 7-15 ms from one probe to the next (seven probes), where
   the trainer's own run stepped at about 6 ms. With the mmap threshold fixed at 32 MiB (the highest
   glibc's own rule would raise it to on a 64-bit host) and the trim threshold at twice that (the ratio
   glibc's rule keeps), the probe's steps took 5.5-6.0 ms (three probes), with a twentieth of the CPU in the kernel and the same peak
   memory; and side by side (bench/malloc_settings.py) a text epoch took 20 % less time under multiworker
   and 10 % less under the parameter server, a MobileNetV2 multiworker epoch 3 % less, with independent
   processes unchanged within the noise. Either setting alone is no faster: setting one turns glibc's rule
   off for both, and the other stays at its small start.
The environment wins over each: an arena limit (MALLOC_ARENA_MAX, or arena_max in GLIBC_TUNABLES), and the
thresholds (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, or mmap_threshold / trim_threshold in
GLIBC_TUNABLES; either leaves both alone). --malloc glibc keeps all of glibc's defaults.

mallopt through ctypes rather than GLIBC_TUNABLES: the variable is read when the process starts, so it would
have to be in every way the trainer is started (the images, the chart, a user's shell); the call is in the
trainer itself. It changes only arenas made after it, so it runs before TensorFlow is imported.
"""

import ctypes
import ctypes.util
import os

MODES = ("tuned", "glibc")
# the environment variables through which the user sets these settings (each wins over the trainer's)
ENVIRONMENT = ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")
# glibc's malloc.h
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024  # DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: the ceiling of glibc's own rule
TRIM_THRESHOLD_BYTES = 2 * MMAP_THRESHOLD_BYTES  # glibc's rule keeps the trim threshold at twice the mmap threshold


def tunables():
    """{name: value} of the glibc.malloc.* tunables GLIBC_TUNABLES sets (without the prefix)."""
    found = {}
    for tunable in os.environ.get("GLIBC_TUNABLES", "").replace(":", " ").split():
        name, _, value = tunable.partition("=")
        if name.startswith("glibc.malloc."):
            found[name.removeprefix("glibc.malloc.")] = value
    return found


def user_limit():
    """The arena limit the environment already sets (MALLOC_ARENA_MAX or GLIBC_TUNABLES), else None."""
    return os.environ.get("MALLOC_ARENA_MAX") or tunables().get("arena_max")


def user_thresholds():
    """Whether the environment sets the mmap or the trim threshold itself."""
    return any(os.environ.get(name) for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")) or bool(
        {"mmap_threshold", "trim_threshold"} & set(tunables())
    )


def glibc():
    """The C library when it is glibc (mallopt's parameter numbers are glibc's), else None (musl has no arenas)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
    except (OSError, TypeError):
        return None
    return libc if hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt") else None


def apply(threads, mode="tuned"):
    """The settings above for a run of `threads` (its --threads) in `mode` (its --malloc). Returns what was
    set, {"arena_max": 1, "mmap_threshold": bytes, "trim_threshold": bytes} or part of it: nothing for
    --malloc glibc, for what the environment sets, or for a C library that is not glibc."""
    libc = glibc() if mode == "tuned" else None
    if libc is None:
        return {}
    libc.mallopt.argtypes, libc.mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    wanted = {}
    if threads == 1 and user_limit() is None:
        wanted["arena_max"] = (M_ARENA_MAX, 1)
    if not user_thresholds():
        wanted["mmap_threshold"] = (M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        wanted["trim_threshold"] = (M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    return {name: value for name, (parameter, value) in wanted.items() if libc.mallopt(parameter, value) == 1}
