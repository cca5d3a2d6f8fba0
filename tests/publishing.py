"""What the publishing tests share (aggregator --publish-to, disttrain_aggregator.publish): a small real
run, and what a reader of a published prefix must never see."""

import json
import os
import sys

from stages import stage

# digits (8x8 images, 1 shard, 1 epoch): a real SavedModel with variables, a model.keras and a
# model.tflite in seconds; the model's accuracy is not the subject
SOURCE, EPOCHS, BATCH = "sample:digits", 1, 32
PUBLISH = [sys.executable, "-m", "disttrain_aggregator.publish"]  # the small uploader: FINAL_DIR s3://...


def trained_run(root):
    """copier -> one trainer in `root`, ready for the aggregator (done once per root)."""
    if not os.path.exists(os.path.join(root, "train", "worker-0", "_SUCCESS")):
        stage("copier", "--source", SOURCE, "--n-shards", 1, "--workdir", root)
        stage("trainer", "--workdir", root, "--epochs", EPOCHS, "--batch", BATCH)
    return root


def local_saved_model(final_dir):
    """{relative path: size} of the SavedModel the aggregator exported in `final_dir`."""
    with open(os.path.join(final_dir, "report.json")) as fh:
        path = os.path.join(final_dir, json.load(fh)["exports"]["saved_model"]["path"])
    return {
        os.path.relpath(os.path.join(r, n), path): os.path.getsize(os.path.join(r, n))
        for r, _, names in os.walk(path)
        for n in names
    }


def split_listing(objects):
    """A listing {key: size} of a published prefix as (versions, releases, other):
    {N: {path inside saved_model/N/: size}}, {N: {path inside releases/N/: size}}, [other keys]."""
    versions, releases, other = {}, {}, []
    for key, size in objects.items():
        top, _, rest = key.partition("/")
        number, _, inside = rest.partition("/")
        if top in ("saved_model", "releases") and number.isascii() and number.isdigit() and inside:
            (versions if top == "saved_model" else releases).setdefault(int(number), {})[inside] = size
        else:
            other.append(key)
    return versions, releases, other


def partial_versions(versions, saved_model):
    """The versions a reader would take for whole and are not: a folder under saved_model/ that holds
    saved_model.pb but lacks a file of the complete set `saved_model` ({path: size}), or has one at
    another size. A folder without saved_model.pb is no version to TF Serving (its load fails with
    NOT_FOUND and is retried), so it is not one of them."""
    return {
        n: sorted(set(saved_model.items()) - set(files.items()))
        for n, files in versions.items()
        if "saved_model.pb" in files and set(saved_model.items()) - set(files.items())
    }


def partial_releases(releases, manifests):
    """Releases with RELEASE.json whose listing lacks an object RELEASE.json names (or has it at another
    size); `manifests`: {N: RELEASE.json's content}."""
    bad = {}
    for n, files in releases.items():
        if "RELEASE.json" in files and n in manifests:
            missing = sorted(set(manifests[n]["objects"].items()) - set(files.items()))
            if missing:
                bad[n] = missing
    return bad
