"""Publishing the final model to object storage: disttrain-aggregator --publish-to s3://BUCKET/PREFIX.

Only a model that passed the quality gate is uploaded (--force: one published anyway). Under PREFIX:

    releases/<N>/saved_model/<N>/  the SavedModel (saved_model.pb, variables/, assets/, fingerprint.pb)
    releases/<N>/model.keras       the Keras model (it loads in safe mode)
    releases/<N>/model.tflite      when the run exported one
    releases/<N>/report.json       the run's report; its `published` names this release
    releases/<N>/RELEASE.json      every object of the release with its size: written last, so a release
                                   without it is an interrupted upload
    saved_model/<N>/               the same SavedModel, for TF Serving polling the store
    latest.json                    the newest complete release (its version and URLs): written last of all

Who reads what:
  TF Serving   --model_base_path=s3://BUCKET/PREFIX/saved_model; it polls that prefix and serves the
               highest numeric version.
  KServe       storageUri: s3://BUCKET/PREFIX/releases/<N>/saved_model (latest.json's "storage_uri"): its
               storage initializer downloads the prefix once, when the pod starts, and its TF Serving
               runtime serves /mnt/models/<N>/. A release never changes once latest.json names it.
  anyone else  latest.json, then the objects it names (model.keras, report.json: always one release's pair).

The protocol, and why. S3 has no rename and no transaction over several objects: the local exports'
"write under a temporary name, then rename" does not carry over. What S3 does give: one object
appears whole or not at all (a single PUT is atomic, and a multipart upload becomes visible only when
it completes), and a listing shows every object whose write finished before it (strong read-after-write
consistency). So each step makes exactly one object the switch:

1. Probe (probe(), when the aggregator starts, before it waits for or evaluates anything): list the
   prefix, write and delete one small object under .publish/. A wrong key, a missing bucket, an
   unreachable endpoint or a key without write or delete permission is one line and exit 2 then,
   not after training.
2. Version N = max(the local export's version (the publish time in seconds), 1 + the highest number
   the store shows anywhere: saved_model/<n>/ (complete or not), releases/<n>/ (complete or not),
   latest.json). A number is never reused, not even an interrupted upload's: a version TF Serving
   failed to load ends in its error state and is not loaded again (ServerCore's
   enable_reload_servables_with_error is false by default: tensorflow_serving/model_servers/
   server_core.h), and a KServe pod may have downloaded it.
3. Upload the release to releases/<N>/ (a non-numeric prefix outside TF Serving's base path, so no
   poll sees it), SavedModel files in key order with saved_model.pb last, then the model, the report,
   and RELEASE.json.
4. Clean up what interrupted publishes left (only now, after releases/<N>/ exists: the highest number
   ever handed out stays visible in the store, so step 2 never hands it out again): numeric folders
   under saved_model/ without saved_model.pb, releases without RELEASE.json, .publish/ leftovers, and
   multipart uploads under the prefix started before this publish.
5. Copy the SavedModel into saved_model/<N>/ (server-side copies), in key order, saved_model.pb LAST.
   TensorFlow loads a directory as a SavedModel only if it holds saved_model.pb (or .pbtxt): in
   tensorflow/cc/saved_model/loader.cc, LoadSavedModel returns NOT_FOUND "SavedModel not found in
   export directory" unless MaybeSavedModelDirectory finds one of them, before it reads anything else.
   TF Serving's poll aspires every numeric child without checking its contents
   (tensorflow_serving/sources/storage_path/file_system_storage_path_source.cc: AspireLatestVersions),
   so a poll during this copy aspires <N>, its load fails with NOT_FOUND while it keeps serving the
   version before (AvailabilityPreservingPolicy), and it retries the load (--max_num_load_retries,
   default 5, every --load_retry_interval_micros, default one minute: tensorflow_serving/
   model_servers/server.h): the copy takes seconds, so the retry loads the whole version. A listing
   that shows saved_model.pb shows every other file of the version: they were written before it, and
   in key order, so even a listing paged across requests cannot show saved_model.pb without an
   earlier-sorting file (assets/, fingerprint.pb) that a previous page missed.
6. Write latest.json (one PUT): the switch for every reader that does not poll TF Serving's base.
7. Keep the newest KEEP_VERSIONS versions under saved_model/ and KEEP_RELEASES releases; an older one
   is removed switch first (its saved_model.pb, its RELEASE.json), so it stops being a loadable version
   or a complete release before any of its other files go.

What an interrupted publish (kill -9, a lost node) leaves: a release without RELEASE.json (nobody
reads it: latest.json does not name it) and possibly saved_model/<N>/ without saved_model.pb. A
running TF Serving that saw the latter keeps serving the version before; a TF Serving started on the
base path before the next publish would aspire only <N> and serve nothing, so the next publish (or
`python -m disttrain_aggregator.publish FINAL_DIR URL` re-publishing the local final directory)
removes it. A failure this process sees (an error, not a kill) removes its own partial objects at once.

One publisher per prefix at a time: two aggregators publishing to one prefix at the same moment
could pick the same version number (S3's conditional writes would settle it, but not every
S3-compatible store has them).
"""

import argparse
import datetime
import json
import os
import shutil
import tempfile
import time
import uuid

from disttrain_contract import ContractError, read_json, run_cli
from disttrain_contract import objectstore
from disttrain_contract.layout import whole_number
from disttrain_contract.objectstore import ObjectStoreError

SAVED_MODEL_DIR = "saved_model"  # exports.SAVED_MODEL_DIR: the local and the published layout agree
TFLITE_FILE = "model.tflite"  # exports.TFLITE_FILE
SAVED_MODEL_PB = "saved_model.pb"  # the file that makes a directory a SavedModel (see above)
RELEASES = "releases"
RELEASE_MANIFEST = "RELEASE.json"
LATEST = "latest.json"
WORK = ".publish"  # probe objects
LOCAL_TEMP_PREFIX = ".publish.tmp-"  # the model saved for the upload, inside the final directory
KEEP_VERSIONS = 2  # exports.KEEP_VERSIONS: TF Serving's base keeps the new version and the one before
KEEP_RELEASES = 3  # an InferenceService may still name the one or two before: rolling back keeps working


def parse_url(text):
    """--publish-to: s3://BUCKET[/PREFIX], without a trailing slash."""
    if not objectstore.is_url(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not an s3:// URL (s3://BUCKET/PREFIX)")
    try:
        bucket, key = objectstore.split(text)
    except ObjectStoreError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    key = key.strip("/")
    if key and any(part in ("", ".", "..") for part in key.split("/")):
        raise argparse.ArgumentTypeError(f"{text!r}: the prefix has an empty, '.' or '..' part")
    return f"{objectstore.SCHEME}{bucket}/{key}" if key else f"{objectstore.SCHEME}{bucket}"


def join(*parts):
    return "/".join(str(p).strip("/") for p in parts if str(p).strip("/"))


def probe(url):
    """Check early that `url` can be published to: list it, write and delete one small object."""
    target = join(url, WORK, f"probe-{uuid.uuid4().hex}")
    try:
        objectstore.listing(url)
        objectstore.write_bytes(target, b"disttrain publish probe\n")
        objectstore.remove([target])
    except ObjectStoreError as err:
        raise ObjectStoreError(f"--publish-to {url}: cannot publish there: {err}") from None


class Store:
    """What the prefix holds now: versions under saved_model/, releases, latest.json, .publish/ leftovers."""

    def __init__(self, url):
        self.url = url
        self.base, self.releases, self.other = {}, {}, []  # version -> {relative path: size}
        self.latest = None
        for key, size in objectstore.listing(url).items():
            top, _, rest = key.partition("/")
            number, _, inside = rest.partition("/")
            version = whole_number(number)
            if top == SAVED_MODEL_DIR and version is not None and inside:
                self.base.setdefault(version, {})[inside] = size
            elif top == RELEASES and version is not None and inside:
                self.releases.setdefault(version, {})[inside] = size
            elif top == WORK:
                self.other.append(key)
            elif key == LATEST:
                try:
                    self.latest = json.loads(objectstore.read_bytes(join(url, LATEST)))
                except (ValueError, ObjectStoreError):
                    self.latest = None  # replaced by this publish's

    def complete_versions(self):
        return sorted(n for n, files in self.base.items() if SAVED_MODEL_PB in files)

    def complete_releases(self):
        return sorted(n for n, files in self.releases.items() if RELEASE_MANIFEST in files)

    def highest(self):
        """The highest version number the store shows, or 0."""
        recorded = self.latest.get("version") if isinstance(self.latest, dict) else None
        numbers = [*self.base, *self.releases, *([recorded] if isinstance(recorded, int) else [])]
        return max(numbers, default=0)


def saved_model_order(files):
    """A SavedModel's relative paths in upload order: key order, saved_model.pb last (see the docstring)."""
    return sorted(f for f in files if f != SAVED_MODEL_PB) + ([SAVED_MODEL_PB] if SAVED_MODEL_PB in files else [])


def local_files(directory):
    """{relative path: local path} of every file under `directory`."""
    found = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            found[os.path.relpath(path, directory).replace(os.sep, "/")] = path
    return found


def upload_release(url, report, model_path, saved_model_dir=None, tflite_path=None, version=None, say=print):
    """Upload one release to `url` (the protocol in the module docstring) and return report.json's
    `published` entry; `report` (a dict) is uploaded with that entry in it. `version`: the local
    export's version, used when it is above every number the store shows."""
    started = datetime.datetime.now(datetime.timezone.utc)
    store = Store(url)
    n = max(int(version or time.time()), store.highest() + 1)
    release = join(url, RELEASES, n)
    files = local_files(saved_model_dir) if saved_model_dir else {}  # relative path -> local path
    entry = {
        "url": url,
        "version": n,
        "published_at": time.time(),
        "release": release,
        "model": join(release, "model.keras"),
        "report": join(release, "report.json"),
    }
    if files:
        entry.update(
            storage_uri=join(release, SAVED_MODEL_DIR),
            saved_model=join(url, SAVED_MODEL_DIR, n),
            tf_serving_base_path=join(url, SAVED_MODEL_DIR),
        )
    report_bytes = (
        json.dumps({**report, "published": [*(report.get("published") or []), entry]}, indent=2, sort_keys=True) + "\n"
    ).encode()
    written, copied = [], []  # what to remove if this process sees the publish fail
    pb_copied = False
    try:
        # 3. the release: the SavedModel (saved_model.pb last), the models, the report, RELEASE.json
        objects = {}
        uploads = [(join(SAVED_MODEL_DIR, n, rel), files[rel]) for rel in saved_model_order(files)]
        uploads += [
            (name, path)
            for name, path in (("model.tflite", tflite_path), ("model.keras", model_path))
            if path and os.path.exists(path)
        ]
        for key, path in uploads:
            objectstore.upload(path, join(release, key))
            written.append(join(release, key))
            objects[key] = os.path.getsize(path)
            say(f"publish: put {join(release, key)}")
        objectstore.write_bytes(join(release, "report.json"), report_bytes)
        written.append(join(release, "report.json"))
        objects["report.json"] = len(report_bytes)
        say(f"publish: put {join(release, 'report.json')}")
        manifest = {"version": n, "objects": objects, "published_at": entry["published_at"]}
        objectstore.write_bytes(
            join(release, RELEASE_MANIFEST), json.dumps(manifest, indent=2, sort_keys=True).encode()
        )
        written.append(join(release, RELEASE_MANIFEST))
        say(f"publish: put {join(release, RELEASE_MANIFEST)} (release {n} complete)")
        # 4. what interrupted publishes left
        clean_up(store, exclude=n, started=started, say=say)
        # 5. TF Serving's base, saved_model.pb last
        for rel in saved_model_order(files):
            target = join(url, SAVED_MODEL_DIR, n, rel)
            objectstore.copy(join(release, SAVED_MODEL_DIR, n, rel), target)
            copied.append(target)
            pb_copied = rel == SAVED_MODEL_PB
            say(f"publish: copy {target}")
        # 6. the switch for everyone else
        latest = {"version": n, **{k: v for k, v in entry.items() if k not in ("url", "version")}}
        objectstore.write_bytes(join(url, LATEST), json.dumps(latest, indent=2, sort_keys=True).encode())
        say(f"publish: put {join(url, LATEST)} (version {n})")
    except BaseException:
        # a failure seen here (not a kill): remove the partial version at once, unless TF Serving may
        # already load it (saved_model.pb copied: it is whole). The next publish cleans up otherwise.
        leftovers = [] if pb_copied else copied + written
        try:
            objectstore.remove(leftovers)
        except Exception:  # noqa: BLE001  the store is unreachable: the first error is the one to report
            pass
        raise
    # 7. retention
    prune(Store(url), say)
    return entry


def clean_up(store, exclude, started, say=print):
    """Remove what interrupted publishes left (module docstring, step 4)."""
    url = store.url
    gone = [
        join(url, SAVED_MODEL_DIR, n, rel)
        for n, files in store.base.items()
        if n != exclude and SAVED_MODEL_PB not in files
        for rel in files
    ]
    gone += [
        join(url, RELEASES, n, rel)
        for n, files in store.releases.items()
        if n != exclude and RELEASE_MANIFEST not in files
        for rel in files
    ]
    gone += [join(url, key) for key in store.other]
    if gone:
        objectstore.remove(gone)
        say(f"publish: removed {len(gone)} object(s) an interrupted publish left in {url}")
    aborted = objectstore.abort_uploads(url, started)
    if aborted:
        say(f"publish: aborted {len(aborted)} incomplete multipart upload(s) in {url}")


def prune(store, say=print):
    """Keep KEEP_VERSIONS versions in TF Serving's base and KEEP_RELEASES releases (step 7)."""
    url = store.url
    for n in store.complete_versions()[:-KEEP_VERSIONS]:
        objectstore.remove([join(url, SAVED_MODEL_DIR, n, SAVED_MODEL_PB)])
        objectstore.remove([join(url, SAVED_MODEL_DIR, n, rel) for rel in store.base[n] if rel != SAVED_MODEL_PB])
        say(f"publish: removed version {n} from {join(url, SAVED_MODEL_DIR)}")
    for n in store.complete_releases()[:-KEEP_RELEASES]:
        objectstore.remove([join(url, RELEASES, n, RELEASE_MANIFEST)])
        objectstore.remove([join(url, RELEASES, n, rel) for rel in store.releases[n] if rel != RELEASE_MANIFEST])
        say(f"publish: removed release {n}")


def publish_model(url, model, meta, report, staged, final_dir):
    """The aggregator's upload of the model it is about to publish in `final_dir`, before it does
    (a failed upload publishes nothing there either): `report` (a contract Report) goes with it,
    `staged` (exports.Staged, or None for --exports none) has the checked SavedModel and TFLite
    model. Returns the report's Publication of it."""
    from disttrain_contract.artifact import save_model
    from disttrain_contract.report import Publication

    try:
        os.makedirs(final_dir, exist_ok=True)
        for leftover in (n for n in os.listdir(final_dir) if n.startswith(LOCAL_TEMP_PREFIX)):  # a killed run's
            shutil.rmtree(os.path.join(final_dir, leftover), ignore_errors=True)
        scratch = tempfile.mkdtemp(prefix=LOCAL_TEMP_PREFIX, dir=final_dir)
    except OSError as err:
        raise ContractError(
            f"--publish-to {url}: cannot write the model for the upload in {final_dir}: {err}"
        ) from None
    try:
        model_path = os.path.join(scratch, "model.keras")
        save_model(model, model_path, meta)
        with_saved_model = staged is not None and "saved_model" in staged.kinds
        entry = publish(
            url,
            report.to_json(),
            model_path,
            staged.saved_model_path if with_saved_model else None,
            staged.tflite_path if staged is not None else None,
            staged.version if with_saved_model else None,
            say=lambda line: None,
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(
        f"aggregator: uploaded release {entry['version']} to {entry['release']}"
        + (
            f" (TF Serving --model_base_path={entry['tf_serving_base_path']}, KServe storageUri: "
            f"{entry['storage_uri']})"
            if "storage_uri" in entry
            else ""
        ),
        flush=True,
    )
    details = {key: value for key, value in entry.items() if key not in ("url", "version", "published_at")}
    return Publication(entry["url"], entry["version"], entry["published_at"], details)


def publish(url, report, model_path, saved_model_dir, tflite_path, version, say=print):
    """upload_release() with its store errors as one line naming --publish-to."""
    try:
        return upload_release(url, report, model_path, saved_model_dir, tflite_path, version, say)
    except ObjectStoreError as err:
        raise ObjectStoreError(f"--publish-to {url}: the upload failed, nothing was published: {err}") from None


def publish_final_dir(final_dir, url, say=print):
    """Upload what the aggregator published in `final_dir` (its report.json names the SavedModel
    version and the model file): re-publishing a run, or cleaning up after an interrupted upload."""
    report = read_json(os.path.join(final_dir, "report.json"), what=f"{final_dir}/report.json")
    if not isinstance(report, dict):
        raise ContractError(f"no report.json in {final_dir}: is it an aggregator's final directory?")
    marker = read_json(os.path.join(final_dir, "_SUCCESS"), default={}, what=f"{final_dir}/_SUCCESS")
    model_path = os.path.join(final_dir, marker.get("model") or "model.keras")
    if not os.path.isfile(model_path):
        raise ContractError(f"no model at {model_path}")
    section = (report.get("exports") or {}).get("saved_model") or {}
    saved_model_dir = os.path.join(final_dir, section["path"]) if section.get("path") else None
    if saved_model_dir and not os.path.isfile(os.path.join(saved_model_dir, SAVED_MODEL_PB)):
        raise ContractError(f"{saved_model_dir} is not a SavedModel (no {SAVED_MODEL_PB}); report.json names it")
    return publish(
        url, report, model_path, saved_model_dir, os.path.join(final_dir, TFLITE_FILE), section.get("version"), say
    )


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m disttrain_aggregator.publish",
        description="Upload what disttrain-aggregator published in FINAL_DIR (the SavedModel, model.keras, "
        "model.tflite, report.json) to object storage as a new release, as --publish-to does, and remove what "
        "interrupted publishes left there. Credentials and endpoint: the standard AWS variables.",
    )
    p.add_argument("final_dir", metavar="FINAL_DIR", help="the aggregator's final directory (WORKDIR/final)")
    p.add_argument("url", metavar="s3://BUCKET/PREFIX", type=parse_url, help="where to publish")
    args = p.parse_args(argv)
    probe(args.url)
    entry = publish_final_dir(args.final_dir, args.url, say=lambda line: print(line, flush=True))
    print(f"published release {entry['version']}: {entry['release']}", flush=True)
    return 0


if __name__ == "__main__":
    run_cli(main)
