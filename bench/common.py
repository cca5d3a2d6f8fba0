"""Shared helpers for the benchmarks: machine facts, child processes with peak RSS, result files.

Every benchmark writes bench/results/<name>.json:
  {"benchmark", "quick", "provisional", "note", "machine": {"before": ..., "after": ...}, "config", "results"}
"""

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
RESULTS = os.path.join(BENCH, "results")
# the venv's console scripts (disttrain-copier, ...): the python running the benchmark is the venv's
BIN = os.environ.get("BENCH_BIN") or os.path.dirname(sys.executable)
QUICK = os.environ.get("BENCH_QUICK", "0") not in ("", "0")
# Other processes' CPU use during a benchmark above this many cores (on average) marks its
# numbers provisional. (The load average cannot say it: the benchmark's own trainers and
# servers are most of it.)
BUSY_CPU = float(os.environ.get("BENCH_BUSY_CPU", "0.1"))


def reps(full, quick=1):
    """Repetitions: BENCH_REPS overrides; BENCH_QUICK=1 uses `quick`."""
    if os.environ.get("BENCH_REPS"):
        return int(os.environ["BENCH_REPS"])
    return quick if QUICK else full


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def steady_epoch_sec(per_worker_epochs):
    """Steady seconds per epoch of a run: each worker's MEAN over epochs 2.. (epoch 1 includes
    tf.function tracing), the slower worker's. A mean, not a median: a cost that lands in some
    epochs only (local SGD's averages when H is not a divisor of an epoch's steps; with H >= the
    run's steps, its one average in the last epoch) belongs in the figure, and a median drops it
    (it made one final average over 50 Mbit/s look free)."""
    return max(statistics.fmean(e[1:]) if len(e) > 1 else e[0] for e in per_worker_epochs)


def _versions():
    out = {"python": platform.python_version()}
    for dist in ("tensorflow-cpu", "tensorflow", "keras", "numpy", "flask", "gunicorn", "werkzeug", "matplotlib"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _git_commit():
    try:
        return subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return None


def _busy_processes(n=5):
    """The top CPU users right now (to say what else was running)."""
    try:
        out = subprocess.run(
            ["ps", "-eo", "pcpu,comm", "--sort=-pcpu", "--no-headers"], capture_output=True, text=True
        ).stdout
        return [line.strip() for line in out.splitlines()[:n]]
    except OSError:
        return []


def _machine_cpu_sec():
    """CPU seconds every process on the machine has used since boot (user, nice, system, irq, softirq)."""
    with open("/proc/stat") as fh:
        fields = [int(v) for v in fh.readline().split()[1:8]]
    user, nice, system, _idle, _iowait, irq, softirq = fields
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _own_cpu_sec():
    """CPU seconds of this process and of its children that have been waited for (servers and
    stages a benchmark starts are always stopped and waited for inside it)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def cpu_mark():
    """Now, for other_processes_cores: (monotonic time, machine CPU seconds, this process's and its waited children's)."""
    return time.monotonic(), _machine_cpu_sec(), _own_cpu_sec()


def other_processes_cores(mark):
    """What every other process on the machine used since `mark` (cpu_mark()), in cores on average."""
    wall = time.monotonic() - mark[0]
    machine_cpu, own_cpu = _machine_cpu_sec() - mark[1], _own_cpu_sec() - mark[2]
    return max(0.0, machine_cpu - own_cpu) / max(wall, 1e-9)


def machine_snapshot():
    with open("/proc/meminfo") as fh:
        mem = {
            line.split(":")[0]: int(line.split()[1])
            for line in fh
            if line.split(":")[0] in ("MemTotal", "MemAvailable")
        }
    return {
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "loadavg_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "mem_available_mb": mem.get("MemAvailable", 0) // 1024,
        "top_cpu_processes": _busy_processes(),
    }


def machine_facts():
    return {
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "mem_total_mb": None
        if not os.path.exists("/proc/meminfo")
        else int(open("/proc/meminfo").readline().split()[1]) // 1024,
        "kernel": platform.release(),
        "versions": _versions(),
        "git_commit": _git_commit(),
    }


class Bench:
    """with Bench("name", config) as b: ... b.results = {...}  -> writes results/name.json"""

    def __init__(self, name, config=None):
        self.name, self.config, self.results, self.notes = name, config or {}, {}, []

    def __enter__(self):
        self.started = time.monotonic()
        self.before = machine_snapshot()
        self.cpu_before = cpu_mark()
        print(
            f"[{self.name}] start {self.before['time_utc']} load {self.before['loadavg_1_5_15']} quick={QUICK}",
            file=sys.stderr,
            flush=True,
        )
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            return False
        after = machine_snapshot()
        wall = time.monotonic() - self.started
        machine_cpu = _machine_cpu_sec() - self.cpu_before[1]
        own_cpu = _own_cpu_sec() - self.cpu_before[2]
        other_cores = other_processes_cores(self.cpu_before)  # what everything else on the machine used meanwhile
        busy = other_cores > BUSY_CPU
        provisional = QUICK or busy
        why = []
        if QUICK:
            why.append("quick mode, BENCH_QUICK=1")
        if busy:
            why.append(
                f"machine busy: other processes used {other_cores:.2f} cores on average during the run "
                f"(limit {BUSY_CPU}), on {os.cpu_count()} cores"
            )
        doc = {
            "benchmark": self.name,
            "quick": QUICK,
            "provisional": provisional,
            "provisional_reason": "; ".join(why) or None,
            "notes": self.notes,
            "duration_sec": round(wall, 1),
            "machine": {
                **machine_facts(),
                "before": self.before,
                "after": after,
                "cpu_sec": {
                    "machine": round(machine_cpu, 1),
                    "benchmark": round(own_cpu, 1),
                    "other_processes_cores": round(other_cores, 3),
                },
            },
            "config": self.config,
            "results": self.results,
        }
        path = write_result(self.name, doc)
        print(
            f"[{self.name}] done in {doc['duration_sec']}s -> {os.path.relpath(path, ROOT)}",
            file=sys.stderr,
            flush=True,
        )
        return False


def write_result(name, doc):
    """results/<name>.json, atomically (temp name, then rename): the tables are built from it."""
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"{name}.json")
    with open(path + ".tmp", "w") as fh:
        json.dump(doc, fh, indent=1)
    os.replace(path + ".tmp", path)
    return path


def run_measured(cmd, log=None, env=None, cwd=None, timeout=1800):
    """Run cmd; return {"rc", "wall_sec", "max_rss_mb", "user_sec", "sys_sec"} of that child (os.wait4)."""
    # Peak RSS comes from /usr/bin/time (%M): a child forked from this Python process would
    # inherit this process's high-water mark in its own ru_maxrss; time's child starts from time's.
    out = open(log, "w") if log else subprocess.DEVNULL
    fd, time_file = tempfile.mkstemp(prefix="bench-time-")
    os.close(fd)
    started = time.monotonic()
    proc = subprocess.Popen(
        ["/usr/bin/time", "-o", time_file, "-f", "%M %U %S", *[str(c) for c in cmd]],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=cwd,
    )
    peak = {"RssAnon": 0, "RssFile": 0}

    def sample():
        for key, kb in _rss_parts(_first_child(proc.pid)).items():
            peak[key] = max(peak[key], kb)

    status, usage = _wait(proc, timeout, sample)
    wall = time.monotonic() - started
    if log:
        out.close()
    # max_rss_mb: the kernel's peak resident set (ru_maxrss; includes touched pages of memory-mapped
    # files); peak_anon_mb / peak_file_mb: sampled every 20 ms from /proc/PID/status (heap vs file pages)
    try:
        with open(time_file) as fh:
            max_rss_kb, user, system = fh.read().split()[-3:]
        max_rss_mb, user, system = int(max_rss_kb) / 1024, float(user), float(system)
    except (OSError, ValueError):
        max_rss_mb, user, system = None, usage.ru_utime, usage.ru_stime
    finally:
        os.remove(time_file)
    return {
        "rc": proc.returncode,
        "wall_sec": wall,
        "max_rss_mb": max_rss_mb,
        "peak_anon_mb": peak["RssAnon"] / 1024,
        "peak_file_mb": peak["RssFile"] / 1024,
        "user_sec": user,
        "sys_sec": system,
    }


def process_tree_cpu_sec(pid):
    """CPU seconds (user + system) of a live process and of its live descendants: e.g. a gunicorn
    master and its workers, read from /proc while they run (RUSAGE_CHILDREN counts a child only
    after it has been waited for)."""
    tick, total, todo = os.sysconf("SC_CLK_TCK"), 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()  # after "pid (comm)": comm may hold spaces
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime (fields 14 and 15 of stat)
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
        except (OSError, ValueError):
            continue  # gone between listing and reading
    return total


def _first_child(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            kids = fh.read().split()
        return int(kids[0]) if kids else pid
    except OSError:
        return pid


def _rss_parts(pid):
    try:
        with open(f"/proc/{pid}/status") as fh:
            return {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in fh) if k in ("RssAnon", "RssFile")}
    except (OSError, ValueError):
        return {}


def start(cmd, log, env=None):
    return subprocess.Popen([str(c) for c in cmd], stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env)


def _wait(proc, timeout, on_tick=None, tick=0.02):
    """Wait for proc (killed after timeout seconds), calling on_tick meanwhile; return (status, rusage)."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            break
        if on_tick:
            on_tick()
        time.sleep(tick)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return status, usage


def wait_measured(proc, timeout=1800):
    """Wait for a Popen child; return rc, CPU seconds and ru_maxrss (which starts from this process's
    own RSS at fork: fine for TensorFlow children far larger than this small process)."""
    _, usage = _wait(proc, timeout, tick=0.05)
    return {
        "rc": proc.returncode,
        "max_rss_mb": usage.ru_maxrss / 1024,
        "user_sec": usage.ru_utime,
        "sys_sec": usage.ru_stime,
    }


def load_result(name):
    """bench/results/NAME.json, or None."""
    path = os.path.join(RESULTS, f"{name}.json")
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        return json.load(fh)


def stop_and_remove(procs, base, keep=False):
    """A benchmark's end: stop its servers (SIGTERM, then SIGKILL after 30 s) and remove its
    scratch directory unless BENCH_KEEP is set or `keep` (servers stopped mid-benchmark)."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    if not (keep or os.environ.get("BENCH_KEEP")):
        shutil.rmtree(base, ignore_errors=True)


def tmpdir(prefix):
    """A new scratch directory under $BENCH_TMP (made when missing: a path named for one sitting) or the system's."""
    base = os.environ.get("BENCH_TMP") or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    return tempfile.mkdtemp(prefix=f"disttrain-bench-{prefix}-", dir=base)


def tail(path, n=3000):
    try:
        with open(path) as fh:
            return fh.read()[-n:]
    except OSError:
        return ""


sys.path.insert(0, os.path.join(ROOT, "tests"))  # stages.free_port_block


def command_line(doc, configure=None):
    """A benchmark script's arguments, parsed before it starts anything: --help prints `doc` (its module
    docstring) and exits. configure(parser) adds the script's own; without it the script takes none
    (BENCH_QUICK and the other knobs are environment variables: run_all.sh)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if configure is not None:
        configure(parser)
    return parser.parse_args()
