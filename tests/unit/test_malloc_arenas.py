"""The trainer's glibc arena limit: counted in glibc's own report (malloc_info), in a fresh process each time."""

import os
import subprocess
import sys
import textwrap

import pytest

from disttrain_trainer import malloc_arenas

# A process that sets the limit, then has four threads allocate at once (each held at a barrier until all
# four have), and prints what limit() returned and how many arenas glibc's malloc_info reports.
CHILD = textwrap.dedent("""
    import ctypes, ctypes.util, sys, tempfile, threading
    from disttrain_trainer import malloc_arenas

    set_to = malloc_arenas.limit(int(sys.argv[1]))
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
    libc.fopen.restype, libc.fopen.argtypes = ctypes.c_void_p, (ctypes.c_char_p, ctypes.c_char_p)
    libc.malloc_info.argtypes, libc.fclose.argtypes = (ctypes.c_int, ctypes.c_void_p), (ctypes.c_void_p,)
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
    print(set_to, arenas)
""")

pytestmark = pytest.mark.skipif(malloc_arenas.glibc() is None, reason="arenas are glibc's")


def arenas_after(threads, **env):
    result = subprocess.run([sys.executable, "-c", CHILD, str(threads)], capture_output=True, text=True, timeout=60,
                            env={**{k: v for k, v in os.environ.items() if k not in ("MALLOC_ARENA_MAX", "GLIBC_TUNABLES")}, **env})
    assert result.returncode == 0, result.stderr
    set_to, arenas = result.stdout.split()
    return (None if set_to == "None" else int(set_to)), int(arenas)


def test_one_thread_one_arena():
    assert arenas_after(1) == (1, 1)


@pytest.mark.parametrize("threads", [0, 2])
def test_other_thread_counts_keep_glibcs_default(threads):
    # glibc's default gives each of the four threads an arena of its own, beside the main one
    assert arenas_after(threads) == (None, 5)


@pytest.mark.parametrize("env", [{"MALLOC_ARENA_MAX": "3"}, {"GLIBC_TUNABLES": "glibc.malloc.check=0:glibc.malloc.arena_max=3"}])
def test_the_users_own_limit_stands(env):
    assert arenas_after(1, **env) == (None, 3)


def test_user_limit_reading(monkeypatch):
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1:glibc.malloc.arena_max=2")
    assert malloc_arenas.user_limit() == "2"
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1")
    assert malloc_arenas.user_limit() is None
