"""localsgd's lossy wires and outer step, as pure functions (no cluster): the int8 codec's error
bound, error feedback's bookkeeping, the packing into the collective's int32, and Nesterov's
arithmetic against a hand computation."""

import numpy as np
import pytest
import tensorflow as tf

from disttrain_trainer import wire_codecs
from disttrain_trainer.strategies.localsgd import nesterov_step


def vector(size, seed=0, scale=1e-3):
    rng = np.random.default_rng(seed)
    x = rng.normal(scale=scale, size=size).astype("float32")
    x[: size // 10] *= 50  # a few large changes: the blocks' scales differ
    return x


@pytest.mark.parametrize("size", [1, 255, 256, 257, 3 * 256 + 5])
def test_int8_round_trip_is_within_half_a_step_of_its_block(size):
    x = vector(size, seed=size)
    x[-1] = 0.0
    values, scales = wire_codecs.int8_encode(tf.constant(x))
    assert values.dtype == tf.int8 and values.shape == (size,) and scales.shape == (wire_codecs.blocks_of(size),)
    decoded = wire_codecs.int8_decode(values, scales).numpy()
    per_element_scale = np.repeat(scales.numpy(), wire_codecs.BLOCK)[:size]
    error = np.abs(x - decoded)
    assert np.all(error <= per_element_scale / 2 * (1 + 1e-6)), (error / per_element_scale).max()
    assert np.abs(values.numpy()).max() <= 127
    # the largest element of each block is sent exactly (to float32 rounding)
    assert np.abs(decoded).max() == pytest.approx(np.abs(x).max(), rel=1e-6)


def test_int8_all_zero_blocks_come_back_as_zeros():
    x = np.zeros(600, "float32")
    x[300] = 2.5
    decoded = wire_codecs.int8_decode(*wire_codecs.int8_encode(tf.constant(x))).numpy()
    assert np.all(np.isfinite(decoded)) and decoded[300] == pytest.approx(2.5) and not decoded[:256].any()


@pytest.mark.parametrize("size", [1, 3, 4, 300])
def test_int8_packs_into_int32_and_back_bit_exact(size):
    values, scales = wire_codecs.int8_encode(tf.constant(vector(size)))
    packed = wire_codecs.pack_int8(values, scales)
    assert packed.dtype == tf.int32 and packed.shape == (wire_codecs.int8_packed_length(size),)
    back_values, back_scales = wire_codecs.unpack_int8(packed, size)
    np.testing.assert_array_equal(back_values.numpy(), values.numpy())
    np.testing.assert_array_equal(back_scales.numpy().view("int32"), scales.numpy().view("int32"))


@pytest.mark.parametrize("wire", ["float16", "int8"])
def test_error_feedback_sends_the_sum_of_the_changes_minus_the_last_residual(wire):
    """Over k syncs the receivers get sum(changes) - final residual: the rounding never accumulates
    beyond one sync's, where without feedback it grows with k."""
    encode, decode = wire_codecs.CODECS[wire]
    changes = [vector(1000, seed=k) for k in range(20)]
    residual = tf.zeros(1000)
    received = np.zeros(1000, "float64")
    for change in changes:
        message, residual = wire_codecs.with_error_feedback(tf.constant(change), residual, encode, decode)
        received += decode(message).numpy()
    expected = np.sum(changes, axis=0, dtype="float64") - residual.numpy()
    np.testing.assert_allclose(received, expected, rtol=0, atol=1e-6)
    without = sum(decode(encode(tf.constant(c))).numpy().astype("float64") for c in changes)
    true_sum = np.sum(changes, axis=0, dtype="float64")
    # the residual is at most one sync's rounding; without feedback the errors add up
    assert np.abs(received - true_sum).max() < np.abs(without - true_sum).max()


def test_nesterov_step_matches_a_hand_computation():
    """lr 0.7, mu 0.9 on two syncs whose mean changes are 1.0 and then 0.5:
    sync 1: m = 0.9*0 + 1.0 = 1.0;    step = 0.7 * (1.0 + 0.9*1.0)  = 1.33
    sync 2: m = 0.9*1.0 + 0.5 = 1.4;  step = 0.7 * (0.5 + 0.9*1.4)  = 1.232"""
    step, momentum = nesterov_step(tf.constant([1.0]), tf.constant([0.0]), 0.7, 0.9)
    assert (float(step[0]), float(momentum[0])) == (pytest.approx(1.33), pytest.approx(1.0))
    step, momentum = nesterov_step(tf.constant([0.5]), momentum, 0.7, 0.9)
    assert (float(step[0]), float(momentum[0])) == (pytest.approx(1.232), pytest.approx(1.4))
    step, _ = nesterov_step(tf.constant([0.25]), tf.constant([3.0]), 1.0, 0.0)
    assert float(step[0]) == 0.25  # lr 1, mu 0: the mean change itself (plain averaging)
