"""localsgd's lossy wires and outer step, as pure functions (no cluster): the int8 and int4 codecs'
error bound, error feedback's bookkeeping, the packing into the collective's int32 (int4: two values a
byte), and Nesterov's arithmetic against a hand computation."""

import numpy as np
import pytest
import tensorflow as tf

from disttrain_trainer import wire_codecs
from disttrain_trainer.strategies.localsgd.outer import nesterov_step


def vector(size, seed=0, scale=1e-3):
    rng = np.random.default_rng(seed)
    x = rng.normal(scale=scale, size=size).astype("float32")
    x[: size // 10] *= 50  # a few large changes: the blocks' scales differ
    return x


@pytest.mark.parametrize("wire, levels", [("int8", 127), ("int4", 7)])
@pytest.mark.parametrize("size", [1, 255, 256, 257, 3 * 256 + 5])
def test_block_wire_round_trip_is_within_half_a_step_of_its_block(size, wire, levels):
    x = vector(size, seed=size)
    x[-1] = 0.0
    values, scales = wire_codecs.block_encode(tf.constant(x), wire)
    assert values.dtype == tf.int8 and values.shape == (size,) and scales.shape == (wire_codecs.blocks_of(size),)
    decoded = wire_codecs.block_decode(values, scales).numpy()
    per_element_scale = np.repeat(scales.numpy(), wire_codecs.BLOCK)[:size]
    error = np.abs(x - decoded)
    assert np.all(error <= per_element_scale / 2 * (1 + 1e-6)), (error / per_element_scale).max()
    assert np.abs(values.numpy()).max() <= levels
    # the largest element of each block is sent exactly (to float32 rounding)
    assert np.abs(decoded).max() == pytest.approx(np.abs(x).max(), rel=1e-6)
    # a step is the block's largest value / levels
    np.testing.assert_allclose(scales.numpy()[0], np.abs(x[: wire_codecs.BLOCK]).max() / levels, rtol=1e-6)


@pytest.mark.parametrize("wire", ["int8", "int4"])
def test_all_zero_blocks_come_back_as_zeros(wire):
    x = np.zeros(600, "float32")
    x[300] = 2.5
    decoded = wire_codecs.block_decode(*wire_codecs.block_encode(tf.constant(x), wire)).numpy()
    assert np.all(np.isfinite(decoded)) and decoded[300] == pytest.approx(2.5) and not decoded[:256].any()


@pytest.mark.parametrize("wire", ["int8", "int4"])
@pytest.mark.parametrize("size", [1, 2, 3, 4, 7, 8, 9, 300])
def test_block_wires_pack_into_int32_and_back_bit_exact(size, wire):
    values, scales = wire_codecs.block_encode(tf.constant(vector(size, seed=size)), wire)
    packed = wire_codecs.pack(values, scales, wire)
    assert packed.dtype == tf.int32 and packed.shape == (wire_codecs.packed_length(size, wire),)
    back_values, back_scales = wire_codecs.unpack(packed, size, wire)
    np.testing.assert_array_equal(back_values.numpy(), values.numpy())
    np.testing.assert_array_equal(back_scales.numpy().view("int32"), scales.numpy().view("int32"))


def test_int4_packs_every_code_two_a_byte():
    # every pair of the 15 codes -7..7, in both halves of a byte: the signs survive the packing
    codes = np.array([(a, b) for a in range(-7, 8) for b in range(-7, 8)], "int8").reshape(-1)
    scales = tf.ones([wire_codecs.blocks_of(codes.size)])
    packed = wire_codecs.pack(tf.constant(codes), scales, "int4")
    # 450 values: 225 bytes in 57 int32, after a scale per block (2 blocks)
    assert packed.shape == (2 + 57,) == (wire_codecs.packed_length(codes.size, "int4"),)
    np.testing.assert_array_equal(wire_codecs.unpack(packed, codes.size, "int4")[0].numpy(), codes)
    # an eighth of float32's bytes, and a scale per block
    assert wire_codecs.packed_length(2_275_000, "int4") * 4 == 2_275_000 // 2 + 4 * wire_codecs.blocks_of(2_275_000)


@pytest.mark.parametrize("wire", ["float16", "int8", "int4"])
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
