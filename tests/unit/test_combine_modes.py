"""--combine (issue 18): the ensemble artifact through the server's own loader, the best worker's
choice from known validation scores, and the refusals of modes a run cannot give."""

import subprocess
import sys

import numpy as np
import pytest

from disttrain_aggregator import combine
from disttrain_aggregator.main import parse_args
from disttrain_contract import ContractError
from disttrain_contract.artifact import save_model
from disttrain_contract.faces import FACE_PREPROCESSING, FACE_SIZE, preprocess
from disttrain_contract.tensorflow_import import import_tensorflow
from disttrain_contract.trainer_records import TrainerMarker

import_tensorflow()  # quietly, before keras imports it
import keras  # noqa: E402

from disttrain_server.model_store import ModelStore  # noqa: E402
from disttrain_trainer.models import (  # noqa: E402
    build_face_model,
    build_image_model,
    build_text_core,
    text_vectorizer,
    with_vectorizer,
)

VOCABULARY = ["good", "bad", "film", "plot", "great", "boring", "actor", "long"]


def members(build, n=3):
    """n models of one architecture with different weights (different seeds, as if trained apart)."""
    out = []
    for seed in range(n):
        keras.utils.set_random_seed(seed)
        out.append(build())
    return out


def text_member():
    return with_vectorizer(build_text_core(len(VOCABULARY) + 2, 2, width=8), text_vectorizer(VOCABULARY))


CASES = {
    "image": (
        lambda: build_image_model(8, 8, 1, 10, hidden=16),
        {
            "task": "image",
            "labels": [str(i) for i in range(10)],
            "input": {"kind": "image", "height": 8, "width": 8, "channels": 1},
        },
        lambda rng: rng.integers(0, 256, size=(16, 8, 8, 1), dtype=np.uint8),
    ),
    "text": (
        text_member,
        {"task": "text", "labels": ["negative", "positive"], "input": {"kind": "text"}},
        lambda rng: np.array(
            [[" ".join(rng.choice(VOCABULARY + ["unknown"], size=int(rng.integers(1, 9))))] for _ in range(16)],
            dtype=object,
        ),
    ),
    "faces": (
        lambda: build_face_model(FACE_SIZE, FACE_SIZE, 1, embedding_size=8),
        {
            "task": "faces",
            "labels": ["a", "b"],
            "embedding_size": 8,
            "face_preprocessing": FACE_PREPROCESSING,
            "input": {"kind": "image", "height": FACE_SIZE, "width": FACE_SIZE, "channels": 1},
        },
        lambda rng: rng.integers(0, 256, size=(6, FACE_SIZE, FACE_SIZE, 1), dtype=np.uint8),
    ),
}


@pytest.mark.parametrize("task", sorted(CASES))
def test_the_ensemble_round_trips_through_the_servers_loader_and_outputs_the_members_mean(task, tmp_path):
    build, meta, inputs = CASES[task]
    models = members(build)
    x = inputs(np.random.default_rng(0))
    path = str(tmp_path / "model.keras")
    save_model(combine.build_ensemble(models, task), path, dict(meta, combine="ensemble"))

    served = ModelStore(path).get()  # the server's loader: safe mode, its artifact checks, its compiled call
    got = served.predict(x)  # (faces: LoadedModel.predict preprocesses the crops the model's way)

    fed = preprocess(x, FACE_PREPROCESSING) if task == "faces" else x
    outputs = np.stack([np.asarray(m(fed, training=False), dtype=np.float64) for m in models])
    if task == "faces":  # the mean of the L2-normalised embeddings, normalised again
        unit = outputs / np.linalg.norm(outputs, axis=-1, keepdims=True)
        expected = unit.mean(axis=0)
        expected /= np.linalg.norm(expected, axis=-1, keepdims=True)
    else:
        expected = outputs.mean(axis=0)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)
    # not trivially equal to one member: the members differ, and the mean is none of them
    assert min(np.abs(got - o).max() for o in outputs) > 1e-3


def marker(index, **fields):
    """A trainer's marker (TrainerMarker) of an average run's worker, with `fields` (validation_accuracy ...)."""
    return TrainerMarker(
        worker_index=index, workers=2, strategy="average", epochs=2, init_weights_sha256="ab", examples=10, **fields
    )


def test_best_is_the_highest_validation_accuracy_and_a_tie_goes_to_the_lowest_index():
    assert combine.pick_best({0: 0.91, 1: 0.95, 2: 0.93}) == 1
    assert combine.pick_best({2: 0.9, 0: 0.8, 1: 0.9}) == 1
    assert combine.pick_best({3: 0.5}) == 3
    markers = [marker(0, validation_accuracy=0.7), marker(1, validation_accuracy=0.75)]
    assert combine.pick_best(combine.validation_scores(markers)) == 1
    assert combine.validation_scores(markers[:1] + [marker(1)]) is None


def test_modes_a_run_cannot_give_are_refused_by_name():
    with pytest.raises(ContractError, match="--combine ensemble needs one model per worker .*multiworker"):
        combine.check_mode("ensemble", "multiworker", [marker(0)])
    with pytest.raises(ContractError, match="--combine best .* kept no validation split: .*--validation-fraction"):
        combine.check_mode("best", "average", [marker(0, validation_accuracy=None)])
    combine.check_mode("average", "localsgd", [marker(0)])  # today's behaviour: fine for every strategy
    combine.check_mode("best", "average", [marker(0, validation_accuracy=0.5)])


def test_a_bad_combine_flag_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--combine", "median"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --combine: invalid choice: 'median' (choose from " in err
    assert all(mode in err.rsplit("choose from", 1)[1] for mode in ("average", "ensemble", "best"))
    assert parse_args([]).combine == "average"


def test_the_cli_refuses_ensemble_for_a_promoted_strategy_with_one_line(tmp_path):
    """The real program on a workdir whose markers say multiworker: exit 2, one error line, nothing published."""
    from disttrain_contract import write_marker
    from disttrain_contract.manifest import Manifest, SplitInfo

    data = tmp_path / "data"
    data.mkdir()
    Manifest(
        task="image",
        source="test",
        seed=0,
        test_fraction=0.2,
        labels=["0", "1"],
        input={"kind": "image", "height": 8, "width": 8, "channels": 1},
        storage="npy",
        shards=[SplitInfo("shard-00000", 10, {})],
        test=SplitInfo("test", 2, {}),
        vocab=None,
    ).write(str(data))
    write_marker(str(data), "copier")
    worker = tmp_path / "train" / "worker-00000"
    worker.mkdir(parents=True)
    write_marker(
        str(worker),
        "trainer",
        worker_index=0,
        workers=1,
        strategy="multiworker",
        epochs=1,
        init_weights_sha256="0" * 64,
        examples=10,
        model="model.keras",
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "disttrain_aggregator.main",
            "--workdir",
            str(tmp_path),
            "--combine",
            "ensemble",
            "--timeout",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "--combine ensemble needs one model per worker (--strategy average)" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "final").exists()
