"""What a localsgd sync sends (--allreduce-dtype): every floating-point weight of the model (batch-norm statistics
included) as its change since the last sync, `w - anchor` (the anchor being the last sync's weights, the same on
every worker), all the weights end to end as one float32 vector of n values, so that a narrow wire rounds the
small change, not the weight itself.

  float32, float16  by all-reduce (collectives.Wire); float16 is summed in float16, then read back as float32
  int8, int4        wire_codecs.py's blocks: a float32 scale per block of 256 values (running across the weights'
                    boundaries: the change is one vector), sent by one all-gather (TensorFlow's collectives refuse
                    int8), decoded and summed in worker order (collectives.sum_block_rows)
Every worker sums the same messages in the same order: the same total on every worker, to the bit.

Error feedback on the lossy wires (float16, int8, int4: options_base.LOSSY_WIRES): what the wire rounded off this sync
(the residual, r' = change + r - decode(encode(change + r))) is added to the next sync's change, and kept in the
checkpoints, so the changes sent add up to the changes made, short of the last residual (Seide et al. 2014, "1-Bit
Stochastic Gradient Descent and its Application to Data-Parallel Distributed Training of Speech DNNs";
Karimireddy et al. 2019, "Error Feedback Fixes SignSGD and other Gradient Compression Schemes").

Bytes one worker sends a sync (its payload): 4 * wire_codecs.packed_length(n) on the block wires, 2n on float16,
4n on float32 (an all-reduce ring sends about twice this over all its hops, an all-gather sends it to each other
worker: strategies/cost_base.py prices both).
"""

import tensorflow as tf

from disttrain_trainer import wire_codecs
from disttrain_trainer.collectives import WIRE_DTYPES, sum_block_rows
from disttrain_trainer.strategies.options_base import LOSSY_WIRES


class SyncWire:
    """The wire of a run's syncs: its `dtype`, for changes of `size` values (the model's float weights)."""

    def __init__(self, dtype, size):
        self.dtype, self.size = dtype, size
        self.lossy = dtype in LOSSY_WIRES  # (with error feedback: a residual to keep)
        self.block = dtype in wire_codecs.BLOCK_WIRES

    def encode(self, change, residual):
        """(the message of `change` with the last sync's `residual` added, the new residual): a lossy wire's."""
        encode, decode = wire_codecs.CODECS[self.dtype]
        return wire_codecs.with_error_feedback(change, residual, encode, decode)

    def sum_changes(self, wire, change, residual):
        """In a replica context, the sync waited for: (the workers' changes summed as this wire carries them, in
        float32; this worker's new residual, empty on float32). `wire`: the strategy's collectives.Wire."""
        if not self.lossy:  # float32
            (total,) = wire.all_reduce_sum([change])
            return total, tf.zeros([0])
        message, residual = self.encode(change, residual)
        if self.dtype == "float16":  # (summed in float16 by the all-reduce, then back to float32)
            (total,) = wire.all_reduce_sum([message])
            return wire_codecs.CODECS[self.dtype][1](total), residual
        (total,) = wire.sum_blocks([message], [self.size])
        return total, residual

    # ------------------------------------------------------------------ a message in flight (overlap.py)
    def message_variable(self):
        """A variable for a message in its wire form (zeros): what an overlapped sync has in flight."""
        if self.block:
            return tf.Variable(
                tf.zeros([wire_codecs.packed_length(self.size, self.dtype)], tf.int32),
                trainable=False,
                name="sync_message",
            )
        return tf.Variable(tf.zeros([self.size], WIRE_DTYPES[self.dtype]), trainable=False, name="sync_message")

    def pack(self, message):
        """An encoded message in its wire form (the block wires': one int32 vector of values and scales)."""
        return wire_codecs.pack(*message, self.dtype) if self.block else message

    def decode_message(self, message):
        """A message in its wire form (message_variable's) -> the float32 change it stands for."""
        if self.block:
            return wire_codecs.block_decode(*wire_codecs.unpack(message, self.size, self.dtype))
        return tf.cast(message, tf.float32)

    def sum_messages(self, side, message, instance_key):
        """The total of every worker's `message` (float32), summed as sum_changes sums them, over the side channel
        (collectives.SideChannel), as exchange `instance_key`."""
        if self.block:
            (total,) = sum_block_rows(side.gather(message, instance_key), side.size, [self.size], self.dtype)
            return total
        return tf.cast(side.sum(message, instance_key), tf.float32)

    @property
    def bytes_per_sync(self):
        """What each worker sends at a sync (the module's docstring)."""
        if self.block:
            return 4 * wire_codecs.packed_length(self.size, self.dtype)  # (one vector)
        return self.size * (2 if self.dtype == "float16" else 4)
