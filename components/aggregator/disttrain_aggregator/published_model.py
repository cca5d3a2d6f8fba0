"""The model already published, which the quality gate (gate.py) compares the new one with: found
(--published, a path or a glob) and evaluated on this run's held-out split."""

import gc
import glob
import os

from disttrain_aggregator import gate
from disttrain_aggregator.checks import load_checked
from disttrain_contract import ContractError, read_marker
from disttrain_contract.artifact import read_meta
from disttrain_contract.metrics import primary_metric


def newest_published(path_or_glob):
    """The published model `path_or_glob` names: the path itself, or of a glob's matches the one
    whose _SUCCESS marker is the newest (the chart's runs: the last one that published is the one
    served). None when there is none; a match without a readable marker was never published."""
    candidates = glob.glob(path_or_glob) if glob.has_magic(path_or_glob) else [path_or_glob]
    published = []
    for path in candidates:
        try:
            marker = read_marker(os.path.dirname(os.path.abspath(path)))
        except ContractError:
            continue
        if isinstance(marker, dict) and marker.get("model") == os.path.basename(path) and os.path.isfile(path):
            published.append((marker.get("finished_at") or 0, path))
    return max(published)[1] if published else None


def evaluate_published(path_or_glob, manifest, held_out, metric=None, model_module=None):
    """What the gate compares with: the published model's primary metric on this run's held-out split
    (an old report's number may be of other data). None: nothing published;
    comparable False: it cannot be measured on this split, or not loaded at all (then it
    protects nothing: the server cannot load it either)."""
    key = (metric or primary_metric(manifest.task, manifest.problem)).key
    path = newest_published(path_or_glob)
    if path is None:
        return None
    try:
        why = gate.comparable(read_meta(path), manifest)
        if why is None:
            model, meta = load_checked(path, model_module, manifest)
            value = held_out(model, meta)[key]
            del model
            gc.collect(1)
    except ContractError as err:
        why = f"cannot read it: {err}"
    if why:
        return {"path": path, "comparable": False, "why": why}
    return {"path": path, "comparable": True, key: value}
