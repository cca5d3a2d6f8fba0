"""kill -9 of the uploader mid-publish, 20 times, while a reader lists the store in a loop.

The uploader is the small entry point of disttrain_aggregator.publish (FINAL_DIR s3://...), re-publishing
one real run's final directory: the protocol is the aggregator's, without a TensorFlow process per
attempt. It prints a line per object it wrote and waits for the test's go-ahead; the schedule kills it
right after its k-th line (k cycling over every step of a whole publish), or on every other attempt a
few milliseconds after letting it go on, so some kills land inside a request. A reader thread lists the prefix as TF Serving's poll
and KServe's storage initializer do, reads latest.json and each release's RELEASE.json, and records
every partial version it ever sees. Then one whole publish must remove what the 20 left and pick a
number above every number any of them used."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from disttrain_contract import objectstore
from disttrain_contract.objectstore import ObjectStoreError
from publishing import PUBLISH, local_saved_model, partial_releases, partial_versions, split_listing, trained_run
from stages import stage

pytestmark = pytest.mark.faults

ATTEMPTS = 20
DELAYS_MS = (0, 3, 0, 12)  # after the k-th line, per attempt in turn


class Reader(threading.Thread):
    """Lists `url` in a loop and keeps what a reader must never see."""

    def __init__(self, url, saved_model):
        super().__init__(daemon=True)
        self.url, self.saved_model = url, saved_model
        self.stop, self.listings, self.incomplete_seen, self.numbers = threading.Event(), 0, 0, set()
        self.violations, self.errors = [], []

    def run(self):
        while not self.stop.is_set():
            try:
                self.look()
            except ObjectStoreError as err:  # an object pruned between listing and reading it
                self.errors.append(str(err))

    def look(self):
        try:
            latest = json.loads(objectstore.read_bytes(f"{self.url}/latest.json"))
        except ObjectStoreError:
            latest = None  # none yet
        objects = objectstore.listing(self.url)
        versions, releases, _ = split_listing(objects)
        self.listings += 1
        self.numbers |= set(versions) | set(releases)
        self.incomplete_seen += sum("saved_model.pb" not in files for files in versions.values())
        manifests = {}
        for n, files in releases.items():
            if "RELEASE.json" in files:
                try:
                    manifests[n] = json.loads(objectstore.read_bytes(f"{self.url}/releases/{n}/RELEASE.json"))
                except ObjectStoreError:
                    pass  # pruned since the listing
        bad = {
            "versions": partial_versions(versions, self.saved_model),
            "releases": partial_releases(releases, manifests),
        }
        if latest is not None:
            n = latest["version"]  # named only once whole, and the newest: not pruned in between
            if "saved_model.pb" not in versions.get(n, {}) or "RELEASE.json" not in releases.get(n, {}):
                bad["latest"] = {n: sorted(versions.get(n, {})) + sorted(releases.get(n, {}))}
        if any(bad.values()):
            self.violations.append(bad)


# The uploader under a kill schedule waits for the test's go-ahead after each line: without it, a
# child that runs ahead of the test's reads (the reader thread holds the GIL) finishes before its kill.
STEPPED_PUBLISH = [
    sys.executable,
    "-c",
    """
import sys
from disttrain_aggregator import publish
def say(line):
    print(line, flush=True)
    sys.stdin.readline()
publish.probe(sys.argv[2])
publish.publish_final_dir(sys.argv[1], sys.argv[2], say=say)
""",
]


def publish(final_dir, url, env, kill_after=None, delay_ms=0):
    """Run the uploader; with kill_after, SIGKILL it delay_ms after letting it go on past its
    kill_after-th "publish:" line (it cannot pass the next one before the kill). Returns (returncode, its lines)."""
    if kill_after is None:
        proc = subprocess.run(
            [*PUBLISH, final_dir, url],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            timeout=120,
        )
        return proc.returncode, proc.stdout.splitlines()
    proc = subprocess.Popen(
        [*STEPPED_PUBLISH, final_dir, url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith("publish:"):
            last = sum(x.startswith("publish:") for x in lines) >= kill_after
            # past the switch (latest.json) only retention is left, which may not print: the kill lands
            # before it, with no go-ahead, so it cannot come after the uploader has exited
            if last and (delay_ms == 0 or "latest.json" in line):
                os.kill(proc.pid, signal.SIGKILL)
                break
            proc.stdin.write("\n")
            proc.stdin.flush()
            if last:
                time.sleep(delay_ms / 1000)  # the kill lands inside the next step, or right after its line
                os.kill(proc.pid, signal.SIGKILL)
                break
    proc.stdout.close()
    status = proc.wait(timeout=120)
    proc.stdin.close()
    return status, lines


def numbers_in(lines):
    return {int(n) for line in lines for n in re.findall(r"/(?:releases|saved_model)/(\d+)", line)}


def test_kill_9_mid_upload_never_shows_a_partial_version(object_store, tmp_path_factory, measure):
    root = trained_run(tmp_path_factory.mktemp("publish-kill"))
    stage("aggregator", "--workdir", root)
    final_dir = str(root / "final")
    saved_model = local_saved_model(final_dir)
    url = object_store.make_bucket("publish-kill") + "/model"
    env = object_store.env()

    # two whole publishes first: a reader has a version to keep, and the second shows every step a
    # publish with a predecessor takes (its pruning too once there are two)
    status, lines = publish(final_dir, url, env)
    assert status == 0, lines
    status, lines = publish(final_dir, url, env)
    assert status == 0, lines
    steps = sum(line.startswith("publish:") for line in lines)

    with object_store.configured():
        reader = Reader(url, saved_model)
        reader.start()
        killed, used = [], []
        try:
            for attempt in range(ATTEMPTS):
                k = 1 + (attempt * 7) % steps  # 7 is prime to the step count: every step is a kill point
                status, lines = publish(final_dir, url, env, kill_after=k, delay_ms=DELAYS_MS[attempt % len(DELAYS_MS)])
                killed.append(status == -signal.SIGKILL or (status, lines[-3:]))
                used.append(numbers_in(lines))
            # what a kill in the probe and one inside a multipart upload (a file past s3fs's chunk size) leave
            objectstore.write_bytes(f"{url}/.publish/probe-killed", b"probe\n")
            bucket, key = objectstore.split(f"{url}/releases/1/model.keras")
            fs = objectstore.filesystem()
            upload = fs.call_s3("create_multipart_upload", Bucket=bucket, Key=key)
            fs.call_s3(
                "upload_part", Bucket=bucket, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=b"x" * 1024
            )
            before, seen_before = objectstore.listing(url), set(reader.numbers)
            status, lines = publish(final_dir, url, env)
            assert status == 0, lines
            time.sleep(0.5)  # a few more listings of the cleaned store
        finally:
            reader.stop.set()
            reader.join(timeout=30)
        after = objectstore.listing(url)
        latest = json.loads(objectstore.read_bytes(f"{url}/latest.json"))
        pending = objectstore.filesystem().call_s3("list_multipart_uploads", Bucket=bucket).get("Uploads") or []

    assert all(k is True for k in killed), (
        f"attempts not ended by their kill: {[(i, k) for i, k in enumerate(killed) if k is not True]}"
    )
    assert reader.listings > ATTEMPTS and not reader.violations, reader.violations[:5]
    # each interrupted publish took a number no earlier one had used
    firsts = [min(n) for n in used if n]
    assert all(a < b for a, b in zip(firsts, firsts[1:])), firsts
    # the whole publish removed what they left, and its number is above all of them
    versions_before, releases_before, other_before = split_listing(before)
    versions, releases, other = split_listing(after)
    assert latest["version"] > max(seen_before | set(versions_before) | set(releases_before))
    assert all("saved_model.pb" in files for files in versions.values()), sorted(versions)
    assert all("RELEASE.json" in files for files in releases.values()), sorted(releases)
    assert other == ["latest.json"], other  # the probe object is gone
    assert not pending and any("aborted 1 incomplete multipart upload" in line for line in lines), (pending, lines)
    assert len(versions) == 2 and max(versions) == latest["version"]
    measure(
        kills=len(killed),
        steps_per_publish=steps,
        listings=reader.listings,
        partial_versions_seen=0,
        folders_without_saved_model_pb_seen=reader.incomplete_seen,
        left_before_cleanup={
            "folders_without_saved_model_pb": sum("saved_model.pb" not in f for f in versions_before.values()),
            "releases_without_manifest": sum("RELEASE.json" not in f for f in releases_before.values()),
            "other": sorted(set(other_before) - {"latest.json"}),
        },
        reader_read_races=len(reader.errors),
    )
