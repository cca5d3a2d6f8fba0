"""trainer.privacy: the chart passes DP-SGD's three flags to every trainer, as the trainer's own parser reads
them, and refuses half a configuration or the parameterserver strategy at render time; copier.privateVocabulary:
likewise the copier's private-vocabulary flags."""

import pytest
from chartlib import containers, one, pod_spec, render, render_error
from test_chart_drift import parse

STORAGE = ["--set", "storage.storageClass=nfs-client"]
PRIVATE = ("trainer.privacy.l2Clip=1.5", "trainer.privacy.noiseMultiplier=1.1", "trainer.privacy.delta=0.00001")


def trainer_args(sets):
    job = one(render(sets=tuple(sets), extra=tuple(STORAGE)), "Job", "trainer")
    return next(c for c in containers(pod_spec(job), init=False) if c["name"] == "trainer")["args"]


@pytest.mark.parametrize("strategy", ["average", "multiworker", "localsgd"])
def test_privacy_values_become_the_trainers_flags(strategy, monkeypatch):
    args = trainer_args((f"strategy={strategy}", *PRIVATE))
    parsed = parse("trainer", args, monkeypatch, {"JOB_COMPLETION_INDEX": "1"})
    assert (parsed.dp_l2_clip, parsed.dp_noise_multiplier, parsed.dp_delta) == (1.5, 1.1, 1e-5)


def test_no_privacy_values_no_flags():
    assert not [a for a in trainer_args(()) if a.startswith("--dp-")]


@pytest.mark.parametrize(
    "sets, expected",
    [
        (
            PRIVATE[:2],
            "trainer.privacy needs l2Clip, noiseMultiplier and delta together (set: l2Clip, noiseMultiplier)",
        ),
        (("strategy=parameterserver", *PRIVATE), "trainer.privacy (DP-SGD) does not support strategy parameterserver"),
        (("trainer.privacy.l2Clip=-1", *PRIVATE[1:]), "/trainer/privacy/l2Clip"),
        (("trainer.privacy.delta=1", *PRIVATE[:2]), "/trainer/privacy/delta"),
        (("trainer.privacy.epsilon=3",), "epsilon"),
    ],
)
def test_bad_privacy_values_are_refused(sets, expected):
    assert expected in render_error(sets=tuple(sets), extra=tuple(STORAGE))


VOCABULARY = ("copier.privateVocabulary.epsilon=1", "copier.privateVocabulary.delta=0.000001")


def copier_args(sets):
    job = one(render(sets=tuple(sets), extra=tuple(STORAGE)), "Job", "copier")
    return next(c for c in containers(pod_spec(job), init=False) if c["name"] == "copier")["args"]


@pytest.mark.parametrize(
    "sets, k", [(VOCABULARY, 32), ((*VOCABULARY, "copier.privateVocabulary.maxTokensPerExample=16"), 16)]
)
def test_private_vocabulary_values_become_the_copiers_flags(sets, k, monkeypatch):
    parsed = parse("copier", copier_args(sets), monkeypatch)
    assert (parsed.dp_vocab_epsilon, parsed.dp_vocab_delta, parsed.dp_vocab_max_tokens_per_example) == (1.0, 1e-6, k)


def test_no_private_vocabulary_values_no_flags():
    assert not [a for a in copier_args(()) if a.startswith("--dp-")]


@pytest.mark.parametrize(
    "sets, expected",
    [
        (VOCABULARY[:1], "copier.privateVocabulary needs epsilon and delta together"),
        (
            ("copier.privateVocabulary.maxTokensPerExample=8",),
            "copier.privateVocabulary.maxTokensPerExample needs epsilon",
        ),
        (("copier.privateVocabulary.epsilon=-1", VOCABULARY[1]), "/copier/privateVocabulary/epsilon"),
        ((VOCABULARY[0], "copier.privateVocabulary.delta=1"), "/copier/privateVocabulary/delta"),
        (
            (*VOCABULARY, "copier.privateVocabulary.maxTokensPerExample=0"),
            "/copier/privateVocabulary/maxTokensPerExample",
        ),
    ],
)
def test_bad_private_vocabulary_values_are_refused(sets, expected):
    assert expected in render_error(sets=tuple(sets), extra=tuple(STORAGE))
