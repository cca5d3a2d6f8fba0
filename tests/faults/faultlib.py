"""Helpers for the fault tests (imported as `faults.faultlib`).

* `Watcher`: a thread that keeps scanning a working directory while stages run
  and checks that every file under a final (non-temporary) name is complete.
* `tmpfs` / `read_only_dir`: a full disk and an unwritable directory, for real.
* `assert_failed_cleanly`: non-zero exit, a message naming the problem, no
  traceback, no final-named output and no temporary leftovers.
"""

import contextlib
import glob
import json
import os
import re
import stat
import subprocess
import sys
import threading
import time
import zipfile

import numpy as np
import pytest

# Our own temporary names (disttrain_contract.atomic: ".NAME.tmp-XXXX").
OUR_TEMP = ".tmp-"
# TensorFlow's own temporaries in a checkpoint directory: the `checkpoint` state file is written as
# `checkpoint.tmp<32 hex>` and renamed (file_io.atomic_write_string_to_file); the data shards are
# written into `<prefix>_temp/` and renamed to `<prefix>.data-*` by MergeV2Checkpoints.
TF_TEMP = re.compile(r"(\.tmp[0-9a-f]{32}$|_temp(/|$))")
# The last 8 bytes of a TensorFlow table file (a checkpoint `.index`): kTableMagicNumber, little-endian.
TF_TABLE_MAGIC = (0xDB4775248B80FB57).to_bytes(8, "little")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_END = b"IEND\xaeB`\x82"


class Incomplete(Exception):
    pass


def check_complete(path):
    """Raise Incomplete if the file at `path` is not a whole file of its kind; return its kind.

    FileNotFoundError propagates: a file deleted between listing and reading (an old
    checkpoint pruned, a scratch directory removed) is not a torn file."""
    name = os.path.basename(path)
    try:
        if name == "_SUCCESS":
            with open(path, "rb") as fh:
                marker = json.loads(fh.read())
            if not isinstance(marker, dict) or "stage" not in marker:
                raise Incomplete(f"marker without a stage: {marker!r}")
            return "marker"
        if name.endswith(".json"):
            with open(path, "rb") as fh:
                json.loads(fh.read())
            return "json"
        if name.endswith(".jsonl"):
            with open(path, "rb") as fh:
                data = fh.read()
            if data and not data.endswith(b"\n"):
                raise Incomplete("last line not terminated")
            for line in data.splitlines():
                json.loads(line)
            return "jsonl"
        if name.endswith(".npy"):
            np.load(path, allow_pickle=False)
            return "npy"
        if name.endswith(".keras"):
            with zipfile.ZipFile(path) as archive:
                bad = archive.testzip()  # reads every member, checks every CRC
                if bad is not None:
                    raise Incomplete(f"member {bad} fails its CRC")
                json.loads(archive.read("disttrain.json"))
            return "keras"
        if name.endswith(".png"):
            with open(path, "rb") as fh:
                data = fh.read()
            if not (data.startswith(PNG_SIGNATURE) and data.endswith(PNG_END)):
                raise Incomplete("not a whole PNG (signature or IEND chunk missing)")
            return "png"
        if name in ("saved_model.pb", "fingerprint.pb"):  # the aggregator's SavedModel export
            from tensorflow.core.protobuf import fingerprint_pb2, saved_model_pb2

            with open(path, "rb") as fh:
                data = fh.read()
            if name == "saved_model.pb":
                message = saved_model_pb2.SavedModel.FromString(data)
                if not message.meta_graphs:
                    raise Incomplete("a SavedModel without a meta graph")
            elif not fingerprint_pb2.FingerprintDef.FromString(data).saved_model_checksum:
                raise Incomplete("a fingerprint without the SavedModel's checksum")
            return "savedmodel-proto"
        if name.endswith(".tflite"):
            # TFLite verifies the FlatBuffer as it loads it; a torn file can crash the interpreter
            # (a segfault seen here), so it loads in a process of its own, once per file version
            done = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import sys, tensorflow as tf; tf.lite.Interpreter(model_path=sys.argv[1])",
                    path,
                ],
                capture_output=True,
                text=True,
                timeout=300,
                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
            )
            if done.returncode != 0:
                if not os.path.exists(path):
                    raise FileNotFoundError(path)
                raise Incomplete(
                    f"TFLite cannot load it (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}"
                )
            return "tflite"
        if name.endswith(".txt"):
            with open(path, "rb") as fh:
                data = fh.read()
            data.decode("utf-8")
            if data and not data.endswith(b"\n"):
                raise Incomplete("last line not terminated")
            return "txt"
    except FileNotFoundError:
        raise
    except Incomplete:
        raise
    except Exception as err:  # json, zip, numpy: each has its own zoo of errors for a torn file
        raise Incomplete(f"{type(err).__name__}: {err}") from None
    raise Incomplete("unknown kind of file: the watcher does not know how to check it")


def tf_checkpoint_state(path):
    """(latest, all) checkpoint prefixes a TensorFlow `checkpoint` state file names (a text proto)."""
    with open(path) as fh:
        text = fh.read()
    latest = re.findall(r'^model_checkpoint_path: "([^"]+)"$', text, re.M)
    if not text.endswith("\n") or len(latest) != 1:
        raise Incomplete(f"not a whole checkpoint state file: {text!r}")
    return latest[0], set(re.findall(r'^all_model_checkpoint_paths: "([^"]+)"$', text, re.M))


def tf_index_complete(path):
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell() < 48:  # a table footer is 48 bytes
            return False
        fh.seek(-8, os.SEEK_END)
        return fh.read(8) == TF_TABLE_MAGIC


class Watcher(threading.Thread):
    """Scan `root` over and over until stopped; record every file seen under a final
    name that is not complete.

    A file is (re)checked whenever its (inode, size, mtime) changes, so every version
    of a file that a scan can see is checked once, and scanning stays cheap.

    Checkpoint directories hold TensorFlow's own files, checked by TensorFlow's rules:
    the `checkpoint` state file must be whole and every checkpoint it names must have a
    complete `.index` (table footer present) and its data file. An `.index` that the state
    file does not name yet may be in the middle of being written: TensorFlow writes it in
    place (MergeV2Checkpoints), so such sightings are counted, not failed. TensorBoard event
    files are append-only logs that TensorFlow writes in place by design; they are skipped.
    """

    def __init__(self, root, interval=0.02, ignore=()):
        super().__init__(daemon=True)
        self.root, self.interval, self.ignore = os.fspath(root), interval, tuple(ignore)
        self.stop_event = threading.Event()
        self.violations = []  # (seconds since start, relative path, reason)
        self.scans = 0
        self.checked = {}  # kind -> number of file versions checked
        self.our_temps = set()  # our temporary names seen (as relative paths)
        self.tf_temps = set()
        self.tf_index_in_flight = 0  # times an unreferenced, not yet complete .index was seen
        self.tf_stale_references = 0  # times `checkpoint` named an older checkpoint already deleted
        self.errors = []  # exceptions of the watcher itself
        self._seen = {}
        self._start = time.monotonic()

    def run(self):
        try:
            while not self.stop_event.is_set():
                self.scan()
                self.stop_event.wait(self.interval)
            self.scan()  # one last look at the final state
        except Exception as err:  # a bug in the watcher must fail the test, not vanish with the thread
            self.errors.append(repr(err))

    def stop(self):
        self.stop_event.set()
        self.join(timeout=120)
        assert not self.is_alive(), "the watcher did not stop"

    def _violation(self, rel, reason):
        self.violations.append((round(time.monotonic() - self._start, 2), rel, reason))

    def scan(self):
        self.scans += 1
        for dirpath, dirnames, filenames in os.walk(self.root):
            rel_dir = os.path.relpath(dirpath, self.root)
            parts = rel_dir.split(os.sep)
            if "tensorboard" in parts:
                continue
            if any(OUR_TEMP in p for p in parts):
                self.our_temps.add(rel_dir)
                continue
            if "saved_model" in parts and parts[-1] == "variables":
                # a SavedModel's variables are a TensorFlow checkpoint named `variables`: whole by the
                # checkpoint rules (index footer, every data shard); the version directory they are in
                # is renamed into place whole, so here they must always be
                if filenames and self._tf_checkpoint_whole(dirpath, "variables") is not True:
                    if os.path.isdir(dirpath):  # not an old version being removed meanwhile
                        self._violation(rel_dir, "a SavedModel's variables are not a whole checkpoint")
                dirnames[:] = []
                continue
            if any(p.endswith("checkpoints") for p in parts):
                self._scan_checkpoints(dirpath, rel_dir, filenames)
                self.tf_temps.update(os.path.join(rel_dir, d) for d in dirnames if TF_TEMP.search(d))
                dirnames[:] = []
                continue
            for name in filenames:
                rel = os.path.normpath(os.path.join(rel_dir, name))
                if OUR_TEMP in name:
                    self.our_temps.add(rel)
                    continue
                if rel.startswith(self.ignore):
                    continue
                self._check(os.path.join(dirpath, name), rel)

    def _changed(self, path):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return False
        if not stat.S_ISREG(st.st_mode):
            return False
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if self._seen.get(path) == key:
            return False
        self._seen[path] = key
        return True

    def _check(self, path, rel):
        if not self._changed(path):
            return
        try:
            kind = check_complete(path)
        except FileNotFoundError:
            return
        except Incomplete as err:
            self._violation(rel, str(err))
            return
        self.checked[kind] = self.checked.get(kind, 0) + 1

    def _scan_checkpoints(self, dirpath, rel_dir, filenames):
        if TF_TEMP.search(rel_dir + "/"):
            self.tf_temps.add(rel_dir)
            return
        names = set(filenames)
        latest, referenced = None, set()
        for name in sorted(names):
            rel = os.path.normpath(os.path.join(rel_dir, name))
            path = os.path.join(dirpath, name)
            if OUR_TEMP in name:
                self.our_temps.add(rel)
            elif TF_TEMP.search(name):
                self.tf_temps.add(rel)
            elif name == "checkpoint":
                try:
                    latest, referenced = tf_checkpoint_state(path)
                except FileNotFoundError:
                    continue
                except Incomplete as err:
                    self._violation(rel, str(err))
                    continue
                self.checked["tf-checkpoint-state"] = self.checked.get("tf-checkpoint-state", 0) + 1
            elif name == "run.json":
                self._check(path, rel)
        if latest is not None and not self._tf_checkpoint_whole(dirpath, latest):
            # what a restore reads (tf.train.latest_checkpoint) must be whole, always; unless a newer
            # save replaced the state file since we read it (then that one is checked next scan)
            try:
                still_latest = tf_checkpoint_state(os.path.join(dirpath, "checkpoint"))[0] == latest
            except (FileNotFoundError, Incomplete):
                still_latest = True
            if still_latest and not self._tf_checkpoint_whole(dirpath, latest):
                self._violation(
                    os.path.join(rel_dir, latest), "the latest checkpoint named by `checkpoint` is not whole"
                )
        for prefix in referenced - {latest}:
            # older ones: CheckpointManager records the state naming them, then deletes the oldest
            # (max_to_keep), then records the state again, so a deleted one can be named for a moment
            whole = self._tf_checkpoint_whole(dirpath, prefix)
            if whole is None:
                self.tf_stale_references += 1
            elif whole is False:
                self._violation(os.path.join(rel_dir, prefix), "a checkpoint named by `checkpoint` is incomplete")
        for name in names - {p + ".index" for p in referenced | {latest} if p}:
            if name.endswith(".index"):
                with contextlib.suppress(FileNotFoundError):
                    if not tf_index_complete(os.path.join(dirpath, name)):
                        self.tf_index_in_flight += 1

    def _tf_checkpoint_whole(self, dirpath, prefix):
        """True: index complete and data present; False: torn; None: (being) deleted."""
        index = os.path.join(dirpath, prefix + ".index")
        try:
            if not tf_index_complete(index):
                return False if os.path.exists(index) else None
        except FileNotFoundError:
            return None
        # one data file per device that holds variables (parameterserver: one per parameter server)
        shards = glob.glob(os.path.join(glob.escape(dirpath), glob.escape(prefix) + ".data-*-of-*"))
        total = int(shards[0].rsplit("-of-", 1)[1]) if shards else 0
        if not shards or len(shards) != total:
            return None
        self.checked["tf-checkpoint"] = self.checked.get("tf-checkpoint", 0) + 1
        return True

    def summary(self):
        return {
            "scans": self.scans,
            "file_versions_checked": dict(sorted(self.checked.items())),
            "violations": self.violations,
            "our_temporaries_seen": len(self.our_temps),
            "tf_temporaries_seen": sorted(self.tf_temps),
            "tf_index_writes_in_flight_seen": self.tf_index_in_flight,
            "tf_deleted_checkpoints_still_named_seen": self.tf_stale_references,
        }

    def assert_clean(self):
        assert not self.errors, f"the watcher crashed: {self.errors}"
        assert self.scans >= 10, f"the watcher only scanned {self.scans} times"
        assert not self.violations, f"incomplete files under final names: {self.violations}"


@contextlib.contextmanager
def watching(root, **kwargs):
    watcher = Watcher(root, **kwargs)
    watcher.start()
    try:
        yield watcher
    finally:
        watcher.stop()


# --------------------------------------------------------------- full disk, read-only dir


def _mount(*args):
    return subprocess.run(["mount", *args], capture_output=True, text=True)


def _umount(path):
    result = subprocess.run(["umount", path], capture_output=True, text=True)
    if result.returncode != 0:  # something still holds it open: detach it now, it goes when released
        subprocess.run(["umount", "-l", path], capture_output=True, text=True)


@contextlib.contextmanager
def tmpfs(path, size="2m", options=""):
    """Mount a small tmpfs at `path` (created if needed): a disk that fills up for real.
    Skips the test (with the reason) where mounting is not permitted; always unmounts."""
    os.makedirs(path, exist_ok=True)
    opts = f"size={size}" + (f",{options}" if options else "")
    result = _mount("-t", "tmpfs", "-o", opts, "tmpfs", os.fspath(path))
    if result.returncode != 0:
        pytest.skip(
            f"cannot mount a tmpfs to simulate a full disk (needs root / CAP_SYS_ADMIN): {result.stderr.strip()}"
        )
    try:
        yield path
    finally:
        _umount(os.fspath(path))


@contextlib.contextmanager
def read_only_dir(path):
    """`path` as a directory nobody can write to. As root, permission bits do not stop
    writes, so it is a read-only mount; otherwise mode 0555."""
    os.makedirs(path, exist_ok=True)
    if os.geteuid() == 0:
        with tmpfs(path, size="1m", options="ro"):
            yield path
    else:
        os.chmod(path, 0o555)
        try:
            yield path
        finally:
            os.chmod(path, 0o755)


# ------------------------------------------------------------------------ clean failures


def temp_leftovers(root):
    return sorted(
        os.path.relpath(os.path.join(d, name), root)
        for d, dirs, files in os.walk(root)
        for name in dirs + files
        if OUR_TEMP in name
    )


def assert_failed_cleanly(result, message, root, absent=(), exit_code=None):
    """The stage failed with `message` in an `error:` line, no traceback, nothing of
    `absent` (final names) exists and no temporary is left anywhere under `root`."""
    assert result.returncode != 0, f"expected a failure, got exit 0:\n{result.stdout}\n{result.stderr}"
    if exit_code is not None:
        assert result.returncode == exit_code, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors, f"no 'error:' line:\n{result.stderr[-2000:]}"
    assert re.search(message, errors[-1]), f"{message!r} not in {errors[-1]!r}"
    present = [p for p in absent if os.path.exists(p)]
    assert present == [], f"output left behind: {present}"
    assert temp_leftovers(root) == []
    return errors[-1]


# ------------------------------------------------------------------------ untrusted models

SENTINEL_ENV = "DISTTRAIN_FAULTS_SENTINEL"


def lambda_model(path, meta):
    """Save a `.keras` with a Python-lambda `Lambda` layer, plus `disttrain.json` the way
    disttrain_contract.artifact.save_model adds it. Loaded without safe mode and called,
    the lambda creates the file named by $DISTTRAIN_FAULTS_SENTINEL: proof that code ran."""
    import keras

    from disttrain_contract.artifact import META_MEMBER

    inputs = keras.Input((4,))
    hidden = keras.layers.Lambda(
        lambda t: (
            (open(__import__("os").environ["DISTTRAIN_FAULTS_SENTINEL"], "w").close() or t)
            if __import__("os").environ.get("DISTTRAIN_FAULTS_SENTINEL")
            else t
        )
    )(inputs)
    model = keras.Model(inputs, keras.layers.Dense(2, activation="softmax", name="probabilities")(hidden))
    model.save(path)
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr(META_MEMBER, json.dumps(meta, indent=2, sort_keys=True))
    return path
