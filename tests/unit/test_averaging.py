"""The aggregator's arithmetic and its compatibility checks."""

import numpy as np
import pytest

from disttrain_aggregator.checks import check_compatible, check_model, model_signature
from disttrain_aggregator.combine import WeightedSum
from disttrain_contract import ContractError
from disttrain_contract.artifact import weights_fingerprint
from disttrain_contract.trainer_records import TrainerMarker


def average(weight_lists, example_counts):
    """The aggregator's way: one model's weights at a time into a running sum."""
    total = WeightedSum()
    for weights, examples in zip(weight_lists, example_counts, strict=True):
        total.add(weights, examples)
    return total.mean()


def test_weighted_mean_per_array():
    a = [np.array([[0.0, 2.0]], np.float32), np.array([1.0], np.float32)]
    b = [np.array([[4.0, 6.0]], np.float32), np.array([3.0], np.float32)]
    avg = average([a, b], [1, 3])  # b counts three times as much
    np.testing.assert_array_equal(avg[0], [[3.0, 5.0]])
    np.testing.assert_array_equal(avg[1], [2.5])
    assert avg[0].dtype == np.float32


def test_equal_counts_give_the_plain_mean_and_one_model_is_identity():
    rng = np.random.default_rng(0)
    # float32, as Keras holds them: examples * weight is exact in the float64 sum
    models = [[rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=4).astype(np.float32)] for _ in range(5)]
    avg = average(models, [10] * 5)
    np.testing.assert_allclose(avg[0], np.mean([m[0] for m in models], axis=0, dtype=np.float64), rtol=1e-6)
    single = average(models[:1], [7])
    np.testing.assert_array_equal(single[0], models[0][0])
    np.testing.assert_array_equal(single[1], models[0][1])


def test_the_weighted_mean_is_the_float64_one_rounded_once():
    rng = np.random.default_rng(1)
    models = [[rng.normal(size=1000).astype(np.float32)] for _ in range(8)]
    counts = [int(c) for c in rng.integers(1, 10_000, size=8)]
    expected = (sum(c * m[0].astype(np.float64) for c, m in zip(counts, models)) / sum(counts)).astype(np.float32)
    np.testing.assert_array_equal(average(models, counts)[0], expected)


def test_integer_state_is_taken_from_the_first_model():
    avg = average([[np.array([1, 2], np.uint32)], [np.array([9, 9], np.uint32)]], [1, 1])
    np.testing.assert_array_equal(avg[0], [1, 2])
    assert avg[0].dtype == np.uint32


def test_mismatches_are_errors():
    with pytest.raises(ValueError, match=r"shapes differ: array 0 is \(3,\), the first model's is \(2,\)"):
        average([[np.zeros(2)], [np.zeros(3)]], [1, 1])
    with pytest.raises(ValueError, match="weight lists differ: 2 arrays, the first model has 1"):
        average([[np.zeros(2)], [np.zeros(2), np.zeros(1)]], [1, 1])
    with pytest.raises(ValueError, match="positive"):
        average([[np.zeros(2)]], [0])
    with pytest.raises(ValueError, match="no model"):
        WeightedSum().mean()


class FakeConfigModel:
    """Only get_config() is consulted by the architecture check."""

    def __init__(self, config):
        self.config = config

    def get_config(self):
        return self.config


def marker(index, sha, strategy="average", workers=2):
    return TrainerMarker(
        worker_index=index, init_weights_sha256=sha, strategy=strategy, workers=workers, epochs=2, examples=10
    )


def signature(sha, config=None, vocab="v"):
    return model_signature(
        FakeConfigModel(config or {"layers": 1}), {"init_weights_sha256": sha, "vocab_sha256": vocab}
    )


def test_mismatched_initial_weights_are_refused():
    sha_a = weights_fingerprint([np.zeros(3)])
    sha_b = weights_fingerprint([np.ones(3)])
    assert sha_a != sha_b
    # the markers disagree: refused before any model is loaded
    with pytest.raises(ContractError, match="same initial weights .* same --seed"):
        check_compatible([marker(0, sha_a), marker(1, sha_b)], 2)
    # the markers agree, a model's own record does not
    with pytest.raises(
        ContractError, match=f"same initial weights \\(worker 1: marker {sha_a[:12]}, model {sha_b[:12]}\\)"
    ):
        check_model(marker(1, sha_a), signature(sha_b), signature(sha_a))
    with pytest.raises(ContractError, match="same initial weights"):
        check_model(marker(0, sha_a), model_signature(FakeConfigModel({}), {}), None)


def test_other_incompatibilities_are_refused():
    sha = "abc"
    with pytest.raises(ContractError, match="different strategies"):
        check_compatible([marker(0, sha), marker(1, sha, strategy="multiworker")], 2)
    with pytest.raises(ContractError, match="expected 3"):
        check_compatible([marker(0, sha), marker(1, sha)], 3)
    check_compatible([marker(0, sha), marker(1, sha)], 2)  # and a matching pair passes

    first = signature(sha)
    check_model(marker(0, sha), first, None)  # the first model is checked against its marker only
    with pytest.raises(ContractError, match="different architectures"):
        check_model(marker(1, sha), signature(sha, {"layers": 2}), first)
    with pytest.raises(ContractError, match="different vocabularies"):
        check_model(marker(1, sha), signature(sha, vocab="w"), first)
    check_model(marker(1, sha), signature(sha), first)  # and a matching second model passes


def test_fingerprint_sees_shape_dtype_and_values():
    base = [np.zeros((2, 3), np.float32)]
    assert weights_fingerprint(base) == weights_fingerprint([np.zeros((2, 3), np.float32)])
    assert weights_fingerprint(base) != weights_fingerprint([np.zeros((3, 2), np.float32)])
    assert weights_fingerprint(base) != weights_fingerprint([np.zeros((2, 3), np.float64)])
    assert weights_fingerprint(base) != weights_fingerprint([np.full((2, 3), 1e-9, np.float32)])


def test_a_scalar_weight_is_averaged_like_any_other():
    """A 0-d variable (a counter a model's own train_step keeps, a learned temperature) is summed too: `total +=`
    on a numpy scalar rebound the loop's name, and the mean kept the first model's value."""
    import numpy as np

    from disttrain_aggregator.combine import WeightedSum

    weighted = WeightedSum()
    weighted.add([np.array(2.0, np.float32), np.ones(2, np.float32)], 1)
    weighted.add([np.array(4.0, np.float32), np.full(2, 3.0, np.float32)], 3)
    scalar, vector = weighted.mean()
    assert scalar.shape == () and scalar.dtype == np.float32 and float(scalar) == 3.5
    assert vector.tolist() == [2.5, 2.5]
