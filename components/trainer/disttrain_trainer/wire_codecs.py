"""The lossy wires of local SGD's syncs: int8 with a scale per block, and error feedback.

Pure TensorFlow functions of flat float32 tensors (no variables, no collectives): localsgd.py calls
them inside its sync, the unit tests call them eagerly.

int8: a flat float32 tensor is cut into blocks of BLOCK elements (the last one shorter); each
block is sent as BLOCK int8 values q = round(x / scale), scale = max|x| / 127 of the block,
plus its scale as one float32: 1 + 4/BLOCK bytes per weight instead of 4. Decoding is q * scale,
so |x - decode(encode(x))| <= scale / 2 for every element (rounding to the nearest integer), and
an all-zero block (scale 0) comes back as zeros. A scale per block, not per tensor: one large
change in a tensor then coarsens only its own block.

Error feedback (Seide et al. 2014; Karimireddy et al. 2019): what the wire loses is not dropped
but kept (the residual) and added to the next change sent, so the sum of what was sent over k
syncs equals the sum of the changes minus the last residual: the rounding does not accumulate.

float16 is TensorFlow's cast (round to nearest even); its all-reduce then also sums in float16,
a rounding of the sum that error feedback does not see (it is the same on every worker).
"""

import tensorflow as tf

BLOCK = 256  # int8 elements per scale: 1.6 % of the int8 bytes for the float32 scales
LEVELS = 127.0  # int8's symmetric range, -127..127 (-128 is never used, so negation is exact)


def blocks_of(size):
    """How many blocks a tensor of `size` elements is cut into."""
    return -(-size // BLOCK)


def int8_encode(flat):
    """A float32 vector -> (int8 values of the same length, float32 scale per block)."""
    size = int(flat.shape[0])
    padded = tf.reshape(tf.pad(flat, [[0, blocks_of(size) * BLOCK - size]]), [-1, BLOCK])
    scales = tf.reduce_max(tf.abs(padded), axis=1) / LEVELS
    safe = tf.where(scales > 0, scales, tf.ones_like(scales))  # an all-zero block: 0 / 1, not 0 / 0
    quantized = tf.clip_by_value(tf.round(padded / safe[:, None]), -LEVELS, LEVELS)
    return tf.reshape(tf.cast(quantized, tf.int8), [-1])[:size], scales


def int8_decode(values, scales):
    """(int8 values, scale per block) -> the float32 vector they stand for."""
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
    "int8": (int8_encode, lambda message: int8_decode(*message)),
}


def pack_int8(values, scales):
    """int8 values and float32 scales as one int32 vector (the collectives carry int32, not int8):
    the scales' bits, then the values, 4 per int32 (padded with zeros)."""
    size = int(values.shape[0])
    padded = tf.pad(values, [[0, -size % 4]])
    return tf.concat([tf.bitcast(scales, tf.int32), tf.bitcast(tf.reshape(padded, [-1, 4]), tf.int32)], 0)


def unpack_int8(packed, size):
    """pack_int8's inverse, for a vector of `size` elements."""
    blocks = blocks_of(size)
    scales = tf.bitcast(packed[:blocks], tf.float32)
    values = tf.reshape(tf.bitcast(packed[blocks:], tf.int8), [-1])[:size]
    return values, scales


def int8_packed_length(size):
    """int32 elements of pack_int8's vector for `size` values."""
    return blocks_of(size) + -(-size // 4)
