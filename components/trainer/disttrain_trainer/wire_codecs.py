"""The lossy wires of local SGD's syncs: int8 and int4 with a scale per block, and error feedback.

Pure TensorFlow functions of flat float32 tensors (no variables, no collectives): localsgd/wire.py calls
them inside its sync, the unit tests call them eagerly.

The block wires (BLOCK_WIRES: int8, int4): a flat float32 tensor is cut into blocks of BLOCK elements
(the last one shorter); each block is sent as BLOCK signed integers q = round(x / scale) in -L..L,
scale = max|x| / L of the block (L = 127 for int8, 7 for int4: the most negative code is never used,
so negation is exact), plus its scale as one float32: 1 + 4/BLOCK bytes per weight for int8, 1/2 +
4/BLOCK for int4, instead of 4. Decoding is q * scale, so |x - decode(encode(x))| <= scale / 2 for
every element (rounding to the nearest integer), and an all-zero block (scale 0) comes back as zeros.
A scale per block, not per tensor: one large change in a tensor then coarsens only its own block.
int4 is the 4-bit outer gradient of Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512, which
found no loss from it); here a signed integer grid, with error feedback (below) carrying what it rounds off.

Error feedback (Seide et al. 2014; Karimireddy et al. 2019): what the wire loses is not dropped
but kept (the residual) and added to the next change sent, so the sum of what was sent over k
syncs equals the sum of the changes minus the last residual: the rounding does not accumulate.

float16 is TensorFlow's cast (round to nearest even); its all-reduce then also sums in float16,
a rounding of the sum that error feedback does not see (it is the same on every worker).
"""

import tensorflow as tf

BLOCK = 256  # elements per scale: 1.6 % of the int8 bytes for the float32 scales (3.1 % of int4's)
# a block wire -> (its symmetric range -L..L, bits per value on the wire)
BLOCK_WIRES = {"int8": (127.0, 8), "int4": (7.0, 4)}


def blocks_of(size):
    """How many blocks a tensor of `size` elements is cut into."""
    return -(-size // BLOCK)


def block_encode(flat, wire):
    """A float32 vector -> (its values on `wire` as int8 of the same length, float32 scale per block)."""
    levels = BLOCK_WIRES[wire][0]
    size = int(flat.shape[0])
    padded = tf.reshape(tf.pad(flat, [[0, blocks_of(size) * BLOCK - size]]), [-1, BLOCK])
    scales = tf.reduce_max(tf.abs(padded), axis=1) / levels
    safe = tf.where(scales > 0, scales, tf.ones_like(scales))  # an all-zero block: 0 / 1, not 0 / 0
    quantized = tf.clip_by_value(tf.round(padded / safe[:, None]), -levels, levels)
    return tf.reshape(tf.cast(quantized, tf.int8), [-1])[:size], scales


def block_decode(values, scales):
    """(values, scale per block) -> the float32 vector they stand for (any block wire)."""
    size = int(values.shape[0])
    padded = tf.reshape(tf.pad(tf.cast(values, tf.float32), [[0, blocks_of(size) * BLOCK - size]]), [-1, BLOCK])
    return tf.reshape(padded * scales[:, None], [-1])[:size]


def float16_encode(flat):
    return tf.cast(flat, tf.float16)


def float16_decode(message):
    return tf.cast(message, tf.float32)


def with_error_feedback(change, residual, encode, decode):
    """(the message to send, the new residual): the change plus what the last sync did not send,
    encoded; and what this one does not send (that value minus what its receivers decode)."""
    corrected = change + residual
    message = encode(corrected)
    return message, corrected - decode(message)


CODECS = {  # lossy wire -> (encode, decode of what encode returns)
    "float16": (float16_encode, float16_decode),
    **{
        wire: (lambda flat, wire=wire: block_encode(flat, wire), lambda message: block_decode(*message))
        for wire in BLOCK_WIRES
    },
}


def pack(values, scales, wire):
    """A block wire's values and float32 scales as one int32 vector (the collectives carry int32, not int8):
    the scales' bits, then the values' bytes, 4 per int32 (padded with zeros); int4 two values a byte."""
    if BLOCK_WIRES[wire][1] == 4:
        values = _nibble_pairs(values)
    length = int(values.shape[0])
    padded = tf.pad(values, [[0, -length % 4]])
    return tf.concat([tf.bitcast(scales, tf.int32), tf.bitcast(tf.reshape(padded, [-1, 4]), tf.int32)], 0)


def unpack(packed, size, wire):
    """pack's inverse, for a vector of `size` elements: (values as int8, scales)."""
    blocks = blocks_of(size)
    scales = tf.bitcast(packed[:blocks], tf.float32)
    data = tf.reshape(tf.bitcast(packed[blocks:], tf.int8), [-1])[: _data_bytes(size, wire)]
    return (_split_pairs(data, size) if BLOCK_WIRES[wire][1] == 4 else data), scales


def packed_length(size, wire):
    """int32 elements of pack's vector for `size` values."""
    return blocks_of(size) + -(-_data_bytes(size, wire) // 4)


def _data_bytes(size, wire):
    """The bytes `size` values take on a block wire (int4: two a byte), before the padding to int32."""
    return -(-size * BLOCK_WIRES[wire][1] // 8)


def _nibble_pairs(values):
    """int8 values in -7..7 -> one byte per two (the first in the low 4 bits, two's complement in each half)."""
    pairs = tf.reshape(tf.pad(tf.cast(values, tf.int32), [[0, int(values.shape[0]) % 2]]), [-1, 2])
    # 16 * high + the low half's 4 bits: -112..127, an int8 whose bits are the two halves
    return tf.cast(16 * pairs[:, 1] + tf.bitwise.bitwise_and(pairs[:, 0], 15), tf.int8)


def _split_pairs(data, size):
    """_nibble_pairs' inverse: `size` int8 values."""
    byte = tf.cast(data, tf.int32)
    high = tf.math.floordiv(byte, 16)  # (floor: the high half, sign and all)
    low = byte - 16 * high  # 0..15, the low half's bits
    low = tf.where(low >= 8, low - 16, low)
    return tf.cast(tf.reshape(tf.stack([low, high], axis=1), [-1])[:size], tf.int8)
