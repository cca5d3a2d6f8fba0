"""Do the worker models belong together? The aggregator's checks, before anything is combined.

wait_for_workers: the quorum (every worker's marker, or --min-workers of them for average), then
every task of a parameter-server group, and what the markers say: one strategy, one worker count,
the same initial weights (localsgd: the same final weights), the parameter-server roles.
check_model, check_meta, load_checked: each worker model against its marker, against the first
model (architecture, vocabulary, head, inputs, outputs, model code) and against the dataset. Every
refusal is a ContractError of one line, before anything is published.
"""

import json

from disttrain_contract import ContractError, wait_for_markers, wait_for_quorum
from disttrain_contract.artifact import load_model, read_meta
from disttrain_contract.evaluation import HEADS, head_of
from disttrain_contract.layout import marker_path
from disttrain_contract.strategies import STRATEGIES, names_where, strategy_of
from disttrain_contract.trainer_records import REQUIRED_MARKER_FIELDS, TrainerMarker


def wait_for_workers(workdir, train_dir, expect, min_workers, timeout, straggler_wait):
    """(worker directories, their markers (TrainerMarker), the indexes of the workers left out) once at least
    `min_workers` of `expect` workers have finished (and a parameter-server group's every task), checked to
    belong together."""
    worker_dirs = [workdir.worker(i, train_dir) for i in range(expect)]
    markers = wait_for_quorum(worker_dirs, timeout, min_workers, straggler_wait, "workers")
    missing = [i for i, m in enumerate(markers) if m is None]
    worker_dirs, markers = [d for d, m in zip(worker_dirs, markers) if m], [m for m in markers if m]
    markers = check_markers(markers, worker_dirs)
    strategy = strategy_of(markers[0])
    if missing and not strategy.model_per_worker:
        raise ContractError(
            f"worker(s) {', '.join(map(str, missing))} did not finish, and a {strategy.name} run has no result "
            "without every worker (all-reduce and parameter-server groups end together); --min-workers below the "
            f"worker count is for --strategy {' or '.join(names_where(lambda s: s.model_per_worker))}"
        )
    if strategy.parameter_servers:  # every task of the group: chief, ps, workers
        worker_dirs = [workdir.worker(i, train_dir) for i in range(ps_tasks(markers[0], expect))]
        markers = check_markers(wait_for_markers(worker_dirs, timeout, "parameter-server tasks"), worker_dirs)
        check_ps_roles(markers)
    check_compatible(markers, expect)
    return worker_dirs, markers, missing


def check_markers(markers, dirs):
    """The markers' JSON objects as TrainerMarkers. One that parses but is not a whole trainer's marker is
    refused naming every field it lacks, one of the wrong form naming its field (a RecordError)."""
    typed = []
    for d, marker in zip(dirs, markers):
        missing = [k for k in REQUIRED_MARKER_FIELDS if k not in marker] if isinstance(marker, dict) else ["everything"]
        if missing:
            raise ContractError(
                f"{marker_path(d)} is not a trainer's marker (missing {', '.join(missing)}); "
                "was that worker trained by another version of disttrain-trainer?"
            )
        typed.append(TrainerMarker.from_json(marker, marker_path(d)))
        if typed[-1].strategy not in STRATEGIES:
            raise ContractError(
                f"{marker_path(d)} names strategy {typed[-1].strategy!r}, which this aggregator "
                f"does not know ({', '.join(STRATEGIES)}); was that worker trained by another version "
                "of disttrain-trainer?"
            )
    return typed


def check_compatible(markers, expect):
    """Every reason the workers cannot be combined that their markers show, as one clear
    error, before any model is loaded."""
    strategies = {m.strategy for m in markers}
    if len(strategies) != 1:
        raise ContractError(f"workers used different strategies: {sorted(strategies)}")
    sizes = {m.workers for m in markers}
    if sizes != {expect}:
        raise ContractError(f"workers were started for {sorted(sizes)} workers, expected {expect}")
    if strategy_of(markers[0]).same_final_weights and len({m.final_weights_sha256 for m in markers}) != 1:
        # the last average gives every worker the same weights; if it did not, the
        # chief's model is not the group's
        raise ContractError(
            f"the {markers[0].strategy} workers did not end with the same weights: "
            + ", ".join(f"worker {m.worker_index}: {str(m.final_weights_sha256)[:12]}" for m in markers)
        )
    if len({m.init_weights_sha256 for m in markers}) != 1:
        raise different_initial_weights(
            ", ".join(f"worker {m.worker_index}: {m.init_weights_sha256[:12]}" for m in markers)
        )


def ps_tasks(chief, expect):
    """How many tasks a parameter-server group has, from its chief's marker."""
    if chief.role != "chief" or chief.ps is None or chief.ps < 1 or chief.tasks != 1 + chief.ps + expect:
        raise ContractError(
            f"worker-00000's marker is not a parameter-server chief's for {expect} workers "
            f"(role {chief.role!r}, ps {chief.ps!r}, tasks {chief.tasks!r})"
        )
    return chief.tasks


def check_ps_roles(markers):
    """Task 0 the chief, 1..ps the parameter servers, then the workers, each worker with the
    examples the chief says it drew from."""
    ps, by_worker = markers[0].ps, markers[0].examples_by_worker or []
    for i, marker in enumerate(markers):
        role = "chief" if i == 0 else "ps" if i <= ps else "worker"
        if marker.role != role or marker.worker_index != i:
            raise ContractError(
                f"task {i} of the parameter-server group should be the {role}; "
                f"its marker says {marker.role!r} (index {marker.worker_index})"
            )
        if role == "worker" and (i - 1 - ps >= len(by_worker) or marker.examples != by_worker[i - 1 - ps]):
            raise ContractError(
                f"worker task {i} reports {marker.examples} examples; the chief trained it on "
                f"{by_worker[i - 1 - ps] if i - 1 - ps < len(by_worker) else 'no examples'}"
            )


def different_initial_weights(detail):
    return ContractError(
        f"the workers did not start from the same initial weights ({detail}); averaging models from different "
        "initialisations gives a useless model -- start every worker with the same --seed"
    )


# what every worker model's disttrain.json must agree on (when recorded) for them to be combined:
# an average of models that read their output differently, take other inputs or were built
# from other code is no model at all
SHARED_META = ("task", "problem", "target", "labels", "head", "inputs", "outputs", "model_source", "model_code")


def layer_summary(model):
    """Each layer as "name (Class) weight shapes", for saying where two architectures differ."""
    return [
        f"{layer.name} ({type(layer).__name__}) {[tuple(w.shape) for w in layer.weights]}"
        for layer in getattr(model, "layers", [])
    ]


def model_signature(model, meta):
    """What must be the same in every worker's model for them to be combined."""
    return {
        "init_weights_sha256": meta.get("init_weights_sha256"),
        "architecture": json.dumps(model.get_config(), sort_keys=True, default=str),
        "layers": layer_summary(model),
        "vocab_sha256": meta.get("vocab_sha256"),
        "meta": {key: meta.get(key) for key in SHARED_META},
    }


def architecture_difference(signature, first):
    """Where two architectures differ, in a few words."""
    mine, theirs = signature["layers"], first["layers"]
    for i, (a, b) in enumerate(zip(mine, theirs)):
        if a != b:
            return f"layer {i}: {a} vs {b}"
    if len(mine) != len(theirs):
        return f"{len(mine)} layers vs {len(theirs)}"
    return "the same layers, configured differently"


def check_model(marker, signature, first):
    """One worker model's signature against its marker (which check_compatible found equal
    to every other marker) and against the first model's (`first`; None for the first)."""
    if signature["init_weights_sha256"] != marker.init_weights_sha256:
        raise different_initial_weights(
            f"worker {marker.worker_index}: marker {marker.init_weights_sha256[:12]}, "
            f"model {str(signature['init_weights_sha256'])[:12]}"
        )
    if first is None:
        return
    if signature["architecture"] != first["architecture"]:
        raise ContractError(
            f"the worker models have different architectures (worker {marker.worker_index} vs the "
            f"first: {architecture_difference(signature, first)}); averaging needs the same network on "
            "every worker: train them all from the same --model-file/--model-module and flags"
        )
    if signature["vocab_sha256"] != first["vocab_sha256"]:
        raise ContractError("the worker models were trained with different vocabularies")
    for key in SHARED_META:
        if signature["meta"][key] != first["meta"][key]:
            raise ContractError(
                f"the worker models differ in their {key}: worker {marker.worker_index}'s is "
                f"{json.dumps(signature['meta'][key], default=str)[:200]}, the first's "
                f"{json.dumps(first['meta'][key], default=str)[:200]}"
            )


def check_meta(meta, manifest, where):
    """A model's disttrain.json against this run's dataset: the same task, problem and labels, and a
    head that reads its output as the problem needs (evaluation.HEADS). Keys a model does not record
    (older trainers) are not checked; a missing head is the built-in classifiers' softmax."""
    if meta.get("task") is not None and meta["task"] != manifest.task:
        raise ContractError(f"{where} is a {meta['task']!r} model, the dataset's task is {manifest.task!r}")
    problem = meta.get("problem", "classification")
    if problem != manifest.problem:
        raise ContractError(f"{where} is a {problem} model, the dataset is a {manifest.problem} problem")
    if "labels" in meta and list(meta["labels"] or []) != list(manifest.labels or []):
        raise ContractError(
            f"{where} was trained with other labels ({meta['labels']}) than the dataset's ({manifest.labels})"
        )
    head = head_of(meta)
    if head not in HEADS:
        raise ContractError(f"{where} has the head {head!r}, not one of {', '.join(HEADS)} (evaluation.HEADS)")
    if "head" in meta and (head == "embedding") != (manifest.task == "faces"):
        raise ContractError(
            f"{where} has the head {head!r}; an embedding head is the faces task's, and the faces "
            f"task's model is an embedding (this dataset's task is {manifest.task})"
        )
    if manifest.problem == "regression" and head != "value":
        raise ContractError(
            f"{where} is for a regression dataset but its head is {head!r} (a regression model's "
            "disttrain.json says head \"value\")"
        )
    if manifest.problem == "classification" and head == "value":
        raise ContractError(f"{where} has a regression head (\"value\") but the dataset is a classification problem")
    if head in ("sigmoid", "sigmoid_logits") and len(manifest.labels) != 2:
        raise ContractError(
            f"{where} has a one-unit {head} head, which reads two labels; the dataset has {len(manifest.labels)}"
        )


def load_checked(path, model_module, manifest=None):
    """(model, meta) of a model artifact, with one-line errors for what loading it needs: the module
    its disttrain.json records (--model-module), and every custom class registered (Keras' own
    message for an unregistered class is a long dump of the config)."""
    from disttrain_contract.user_model import archive_config, check_archive_classes, check_code_matches

    where = f"the model {path}"
    check_code_matches(read_meta(path), model_module, where)
    try:
        config = archive_config(path)
    except ContractError:
        config = None  # load_model says what is wrong with the file
    if config is not None:
        try:
            check_archive_classes(path, config)
        except ContractError as err:
            raise ContractError(str(err).replace(f"--model-file {path}", where, 1)) from None
    model, meta = load_model(path)
    if manifest is not None:
        check_meta(meta, manifest, where)
    return model, meta
