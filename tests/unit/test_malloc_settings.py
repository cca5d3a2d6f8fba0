"""The trainer's glibc malloc settings, counted in glibc's own reports (malloc_info, mallinfo2), in a fresh
process each time."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from disttrain_trainer import malloc_settings

# A process that applies the settings, then has four threads allocate at once (each held at a barrier until
# all four have); it prints what apply() set and how many arenas glibc's malloc_info reports. Then, in the
# main thread, a 4 MiB block: whether glibc mapped it on its own (mallinfo2's hblks) and, once it is freed
# (into the heap's free top), whether the heap still holds its pages (the heap's size did not shrink).
CHILD = textwrap.dedent("""
    import ctypes, ctypes.util, json, sys, tempfile, threading
    from disttrain_trainer import malloc_settings

    applied = malloc_settings.apply(int(sys.argv[1]), sys.argv[2])
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
    libc.free.argtypes = (ctypes.c_void_p,)
    libc.fopen.restype, libc.fopen.argtypes = ctypes.c_void_p, (ctypes.c_char_p, ctypes.c_char_p)
    libc.malloc_info.argtypes, libc.fclose.argtypes = (ctypes.c_int, ctypes.c_void_p), (ctypes.c_void_p,)

    class Mallinfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc.mallinfo2.restype = Mallinfo2
    allocated, done = threading.Barrier(5), threading.Barrier(5)

    def allocate():
        libc.malloc(4096)  # (never freed: the arena stays this thread's)
        allocated.wait()
        done.wait()

    threads = [threading.Thread(target=allocate) for _ in range(4)]
    for thread in threads:
        thread.start()
    allocated.wait()
    with tempfile.NamedTemporaryFile(suffix=".xml") as report:
        stream = libc.fopen(report.name.encode(), b"w")
        libc.malloc_info(0, stream)
        libc.fclose(stream)
        arenas = open(report.name).read().count("<heap nr=")
    done.wait()
    mapped_before = libc.mallinfo2().hblks
    block = libc.malloc(4 << 20)
    mapped = libc.mallinfo2().hblks - mapped_before
    heap = libc.mallinfo2().arena
    libc.free(block)
    print(json.dumps({"applied": applied, "arenas": arenas, "mapped": mapped,
                      "kept": libc.mallinfo2().arena >= heap}))
""")

pytestmark = pytest.mark.skipif(malloc_settings.glibc() is None, reason="these are glibc's settings")
THRESHOLDS = {"mmap_threshold": 32 << 20, "trim_threshold": 64 << 20}


def after(threads, mode="tuned", **env):
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(threads), mode],
        capture_output=True,
        text=True,
        timeout=60,
        env={**{k: v for k, v in os.environ.items() if k not in malloc_settings.ENVIRONMENT}, **env},
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_one_thread_one_arena_and_large_blocks_in_the_heap():
    assert after(1) == {"applied": {"arena_max": 1, **THRESHOLDS}, "arenas": 1, "mapped": 0, "kept": True}


@pytest.mark.parametrize("threads", [0, 2])
def test_other_thread_counts_keep_glibcs_arenas(threads):
    # glibc's default gives each of the four threads an arena of its own, beside the main one; the large
    # blocks stay in the heap all the same
    assert after(threads) == {"applied": THRESHOLDS, "arenas": 5, "mapped": 0, "kept": True}


@pytest.mark.parametrize("threads", [0, 1])
def test_malloc_glibc_keeps_glibcs_defaults(threads):
    # a fresh process's mmap threshold is 128 KiB: the 4 MiB block gets a mapping of its own
    outcome = after(threads, "glibc")
    assert outcome["applied"] == {} and outcome["mapped"] == 1 and outcome["arenas"] == 5


@pytest.mark.parametrize(
    "env", [{"MALLOC_ARENA_MAX": "3"}, {"GLIBC_TUNABLES": "glibc.malloc.check=0:glibc.malloc.arena_max=3"}]
)
def test_the_users_own_arena_limit_stands(env):
    outcome = after(1, **env)
    assert outcome["applied"] == THRESHOLDS and outcome["arenas"] == 3


@pytest.mark.parametrize(
    "env",
    [
        {"MALLOC_MMAP_THRESHOLD_": "1048576"},
        {"MALLOC_TRIM_THRESHOLD_": "1048576"},
        {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=1048576"},
    ],
)
def test_the_users_own_thresholds_stand(env):
    # the user's 1 MiB mmap threshold (or glibc's 128 KiB, fixed by the user's trim threshold) maps the block
    outcome = after(1, **env)
    assert outcome["applied"] == {"arena_max": 1} and outcome["mapped"] == 1


def test_either_threshold_alone_is_not_enough():
    # the user's 8 MiB mmap threshold puts the block in the heap, but turns glibc's rule off for the trim
    # threshold too: left at its 128 KiB start, the freed block goes back to the kernel
    outcome = after(1, MALLOC_MMAP_THRESHOLD_=str(8 << 20))
    assert outcome["mapped"] == 0 and not outcome["kept"]


def test_reading_the_environment(monkeypatch):
    for name in malloc_settings.ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1:glibc.malloc.arena_max=2")
    assert malloc_settings.user_limit() == "2" and malloc_settings.user_thresholds()
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.check=0")
    assert malloc_settings.user_limit() is None and not malloc_settings.user_thresholds()
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1")
    assert malloc_settings.user_thresholds()
