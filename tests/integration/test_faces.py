"""Faces: OpenCV detection, triplet-loss training and retrieval through the real pipeline."""

import json

import numpy as np
import pytest

from disttrain_contract.faces import NoFaceFound, augment, detect_faces, find_face
from stages import run_pipeline

EPOCHS, BATCH = 30, 32


def test_detection_finds_the_astronaut_and_nothing_in_a_blank_image():
    from skimage.data import astronaut

    image = astronaut()[..., ::-1].copy()  # skimage gives RGB, OpenCV works in BGR
    candidates = detect_faces(image)
    assert candidates, "no face found in the astronaut image"
    x, y, w, h = candidates[0].box
    # Eileen Collins' face is in the upper middle of the 512 x 512 picture
    assert 150 < x + w / 2 < 300 and 60 < y + h / 2 < 200 and 60 < w < 160
    assert candidates[0].eyes >= 1 and candidates[0].confidence > 2
    face = find_face(image)
    assert face.crop.shape == (32, 32, 1) and face.crop.dtype == np.uint8 and face.box == candidates[0].box
    assert face.found == len(candidates) and face.confidence == candidates[0].confidence
    with pytest.raises(NoFaceFound, match="no face"):
        find_face(np.full((300, 300, 3), 128, np.uint8))


def test_augmented_views_differ_but_keep_the_shape():
    face = np.random.default_rng(0).integers(0, 256, (32, 32, 1), dtype=np.uint8)
    a, b = augment(face, np.random.default_rng(1)), augment(face, np.random.default_rng(2))
    assert a.shape == face.shape and a.dtype == np.uint8
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(a, augment(face, np.random.default_rng(1)))  # seeded: repeatable


def test_semi_hard_triplet_loss_on_known_embeddings():
    import tensorflow as tf

    from disttrain_trainer.triplets import semi_hard_triplet_loss

    # two people, two views each, perfectly separated by more than the margin
    good = tf.constant([[1.0, 0.0], [0.995, 0.0998], [0.0, 1.0], [0.0998, 0.995]])
    labels = tf.constant([0, 0, 1, 1])
    loss, hits = semi_hard_triplet_loss(labels, good, margin=0.2)
    assert float(tf.reduce_max(loss)) == 0.0 and float(tf.reduce_sum(hits)) == 4.0
    # swap: each view is nearer the other person -> positive loss, no hits
    bad = np.array([[1.0, 0.0], [0.0, 1.0], [0.995, 0.0998], [0.0998, 0.995]], np.float32)
    loss, hits = semi_hard_triplet_loss(labels, tf.constant(bad), margin=0.2)
    assert float(tf.reduce_sum(hits)) == 0.0
    d = np.linalg.norm(bad[:, None] - bad[None], axis=-1)
    # anchor 0: positive 1 at d01; no negative is farther, so the farthest one (3) is used
    # anchor 2: positive 3 at d23; negative 1 is farther than that: the semi-hard choice
    expected = [d[0, 1] - d[0, 3] + 0.2, d[1, 0] - d[1, 2] + 0.2, d[2, 3] - d[2, 1] + 0.2, d[3, 2] - d[3, 0] + 0.2]
    np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.long  # 37 s per strategy on 2 cores: make test-long (make test's budget is ~15 minutes)
@pytest.mark.parametrize("strategy", ["average", "multiworker"])
def test_face_pipeline_learns_embeddings_that_separate_unseen_people(tmp_path, strategy):
    # average: the averaged model finds 3 of the 19 held-out people fewer than worker 0 (0.842 vs 1.000),
    # so the quality gate refuses it; the embeddings are this test's subject, the gate is not
    report = run_pipeline(
        str(tmp_path),
        "sample:faces",
        2,
        strategy,
        EPOCHS,
        BATCH,
        aggregator_args=("--force",) if strategy == "average" else (),
    )
    manifest = json.load(open(tmp_path / "data" / "manifest.json"))
    assert manifest["task"] == "faces" and len(manifest["labels"]) >= 90  # detection found (almost) every face
    assert all(s["reason"] == "no face found" for s in manifest["skipped"])
    final = report["final"]
    print(f"faces {strategy}: {final}")
    assert final["test_people"] == manifest["test"]["examples"] >= 10
    # on people never seen in training, the same person is clearly nearer than anyone else
    assert final["test_different_person_distance"] - final["test_same_person_distance"] > 0.3
    assert final["test_top1_accuracy"] >= 0.6  # chance is 1 / (held-out people), about 0.05
    for i in range(2):
        metrics = json.load(open(tmp_path / "train" / f"worker-{i:05d}" / "metrics.json"))
        first, last = np.mean([m["loss"] for m in metrics[:3]]), np.mean([m["loss"] for m in metrics[-3:]])
        assert last < 0.7 * first, f"triplet loss did not fall: {first:.3f} -> {last:.3f}"
