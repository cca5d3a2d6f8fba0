"""The aggregator's arithmetic and its compatibility checks."""

import numpy as np
import pytest

from disttrain_aggregator.main import average_weights, check_compatible
from disttrain_contract import ContractError
from disttrain_contract.artifact import weights_fingerprint


def test_weighted_mean_per_array():
    a = [np.array([[0.0, 2.0]], np.float32), np.array([1.0], np.float32)]
    b = [np.array([[4.0, 6.0]], np.float32), np.array([3.0], np.float32)]
    avg = average_weights([a, b], [1, 3])  # b counts three times as much
    np.testing.assert_allclose(avg[0], [[3.0, 5.0]])
    np.testing.assert_allclose(avg[1], [2.5])
    assert avg[0].dtype == np.float32


def test_equal_counts_give_the_plain_mean_and_one_model_is_identity():
    rng = np.random.default_rng(0)
    models = [[rng.normal(size=(3, 4)), rng.normal(size=4)] for _ in range(5)]
    avg = average_weights(models, [10] * 5)
    np.testing.assert_allclose(avg[0], np.mean([m[0] for m in models], axis=0))
    single = average_weights(models[:1], [7])
    np.testing.assert_array_equal(single[0], models[0][0])


def test_integer_state_is_taken_from_the_first_model():
    avg = average_weights([[np.array([1, 2], np.uint32)], [np.array([9, 9], np.uint32)]], [1, 1])
    np.testing.assert_array_equal(avg[0], [1, 2])


def test_mismatches_are_errors():
    with pytest.raises(ValueError, match="shapes differ"):
        average_weights([[np.zeros(2)], [np.zeros(3)]], [1, 1])
    with pytest.raises(ValueError):
        average_weights([[np.zeros(2)], [np.zeros(2), np.zeros(1)]], [1, 1])
    with pytest.raises(ValueError, match="positive"):
        average_weights([[np.zeros(2)]], [0])


class FakeConfigModel:
    """Only get_config() is consulted by the architecture check."""

    def __init__(self, config):
        self.config = config

    def get_config(self):
        return self.config


def marker(index, sha, strategy="average", workers=2):
    return {"worker_index": index, "init_weights_sha256": sha, "strategy": strategy, "workers": workers, "examples": 10}


def test_mismatched_initial_weights_are_refused():
    sha_a = weights_fingerprint([np.zeros(3)])
    sha_b = weights_fingerprint([np.ones(3)])
    assert sha_a != sha_b
    models = [FakeConfigModel({"layers": 1})] * 2
    with pytest.raises(ContractError, match="same initial weights"):
        check_compatible([marker(0, sha_a), marker(1, sha_b)],
                         [{"init_weights_sha256": sha_a}, {"init_weights_sha256": sha_b}], models, 2)


def test_other_incompatibilities_are_refused():
    sha = "abc"
    metas = [{"init_weights_sha256": sha}] * 2
    same = [FakeConfigModel({"layers": 1})] * 2
    with pytest.raises(ContractError, match="different strategies"):
        check_compatible([marker(0, sha), marker(1, sha, strategy="multiworker")], metas, same, 2)
    with pytest.raises(ContractError, match="different architectures"):
        check_compatible([marker(0, sha), marker(1, sha)], metas, [FakeConfigModel({"layers": 1}), FakeConfigModel({"layers": 2})], 2)
    with pytest.raises(ContractError, match="expected 3"):
        check_compatible([marker(0, sha), marker(1, sha)], metas, same, 3)
    check_compatible([marker(0, sha), marker(1, sha)], metas, same, 2)  # and a matching pair passes


def test_fingerprint_sees_shape_dtype_and_values():
    base = [np.zeros((2, 3), np.float32)]
    assert weights_fingerprint(base) == weights_fingerprint([np.zeros((2, 3), np.float32)])
    assert weights_fingerprint(base) != weights_fingerprint([np.zeros((3, 2), np.float32)])
    assert weights_fingerprint(base) != weights_fingerprint([np.zeros((2, 3), np.float64)])
    assert weights_fingerprint(base) != weights_fingerprint([np.full((2, 3), 1e-9, np.float32)])
