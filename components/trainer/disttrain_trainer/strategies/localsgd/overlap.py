"""Overlapped syncs (--outer-overlap delayed or eager): a sync's collective beside the next H inner steps.

A sync's collective is the only time a localsgd worker waits for the others, and over a slow link it is most of a
sync (its bytes x 8 / the link's bits per second). Overlapped, the collective (the exchange) runs on a second
thread beside the next H inner steps: at a sync a worker encodes its change and starts sending it, and applies the
exchange the previous sync started (waiting only for what is left of it). The outer step is then one sync late
(Kale, Douillard and Donchev 2025, "Eager updates for overlapped communication and computation in DiLoCo",
arXiv 2502.12996). With T_k the total of the workers' changes of sync k, c_k this worker's, N workers:
  delayed  sync k applies T_(k-1) / N: every worker still holds the same weights after a sync, but each change
           lands one round late, on weights that have moved on;
  eager    sync k applies (T_(k-1) - c_(k-1) + c_k) / N: this worker's own change of this round stands in for its
           stale one, so its own progress lands at once. The workers' weights then differ by their own changes
           until the end of the run.
The run ends (land) by waiting for the last exchange and adding the mean change it has not yet applied as it is
(no outer step: there are no inner steps after it for a momentum step to be corrected by); under `eager` the
workers then average their weights (one float32 all-reduce), so the published model is one model, the same on
every worker.
Invariants: one exchange in flight at a time (Background), keyed by its sync (exchange_key), on a collective group
of its own (collectives.SideChannel says why); no worker is more than 2H steps ahead of another. What is in flight
(this worker's last message, in its wire form, and whether it is still to apply) is checkpointed: a resumed group
sends it again, and goes on exactly as an undisturbed one.

OverlappedSyncs is a part of localsgd's Strategy (strategy.py): it reads the strategy's anchor, wire (wire.py),
outer step (outer.py) and cluster.
"""

import threading
import time

import tensorflow as tf

from disttrain_trainer.collectives import SideChannel, Wire


class OverlappedSyncs:
    """The overlapped syncs' state and functions, for localsgd's Strategy (`overlap`: "delayed" or "eager")."""

    def bind_overlap(self):
        """Called by bind, once the anchor and the wire exist."""
        # what this worker sent at the last sync, in its wire form, and whether its exchange is still to apply
        self.message = self.sync_wire.message_variable()
        self.in_flight = tf.Variable(False, trainable=False, name="sync_in_flight")
        self._send = tf.function(self._send_fn)
        self._land = tf.function(self._land_fn)
        self.side = SideChannel(self.cluster)
        self.exchange = Background(tf.function(self._exchange_fn, input_signature=[tf.TensorSpec([], tf.int32)]))

    def trace_overlap(self, step):
        """Trace the overlapped sync's functions (before_training), and send again what a resumed run had in flight."""
        self._send.get_concrete_function(tf.TensorSpec([sum(self.sizes)], tf.float32))
        self._land.get_concrete_function(tf.TensorSpec([sum(self.sizes)], tf.float32))
        self.exchange.fn.get_concrete_function()
        if bool(self.in_flight.numpy()):  # resumed between two syncs: send the message in flight again
            self.exchange.start(self.exchange_key(step // self.every * self.every))

    def _send_fn(self, stale_total):
        """An overlapped sync's own part (no collective): encode this round's change into the message (with the
        residual of a lossy wire), and take the outer step with the last sync's exchange, `stale_total` (zeros at
        the first sync). The exchange of the new message starts after it (sync)."""
        change = self.flatten() - self.anchor.value()
        if self.residual is None:
            message = change
        else:
            message, residual = self.sync_wire.encode(change, self.residual.value())
            self.residual.assign(residual)
            message = self.sync_wire.pack(message)
        if self.overlap == "eager":  # this worker's new change in place of its stale one
            decode = self.sync_wire.decode_message
            stale_total = stale_total - decode(self.message.value()) + decode(message)
        self.outer_step(stale_total / self.cluster.num_replicas_in_sync)
        self.message.assign(message)
        self.in_flight.assign(True)
        return self.anchor_checksum()

    def _exchange_fn(self, instance_key):
        """The collective of an overlapped sync, on the exchange's thread: the total of every worker's message
        (float32), as _sync_fn sums it, over the side channel (collectives.SideChannel says why)."""
        return self.sync_wire.sum_messages(self.side, self.message.value(), instance_key)

    def _land_fn(self, total):
        """The end of an overlapped run: the mean of the last exchange's part not applied yet (all of it under
        `delayed`, the others' changes under `eager`) added to the anchor, then under `eager` the workers' weights
        averaged (they differ by their own changes). Nothing is in flight after it."""
        if self.overlap == "eager":
            total = total - self.sync_wire.decode_message(self.message.value())
        landed = self.anchor + total / self.cluster.num_replicas_in_sync
        if self.overlap == "eager":
            # (tf.identity: handed a tensor made outside the replica function, the all-reduce finds no device to
            # send it to)
            summed = self.cluster.run(lambda: Wire("float32").all_reduce_sum([tf.identity(landed)])[0])
            landed = self.cluster.experimental_local_results(summed)[0] / self.cluster.num_replicas_in_sync
        self.anchor.assign(landed)
        self.assign_weights(landed)
        self.message.assign(tf.zeros_like(self.message))
        self.in_flight.assign(False)
        return self.anchor_checksum()

    def exchange_key(self, step):
        """The instance key of the exchange of the sync at `step`: the same on every worker, and a new one for
        each sync of a run (one exchange is in flight at a time; the range wraps after 2**31 syncs)."""
        return tf.constant(step // self.every % (2**31 - 1), tf.int32)

    def wait_for_exchange(self):
        """The total of the workers' messages of the last sync (float32), once its exchange is done."""
        started = time.monotonic()
        total = self.exchange.result()
        self.waited += time.monotonic() - started
        return total


class Background:
    """One call at a time on a thread of its own (an overlapped sync's exchange): start() runs it, result()
    waits for it and returns its value or raises its error. A daemon thread: a worker that fails or stops
    while a peer is gone exits without waiting for a collective that cannot end."""

    def __init__(self, fn):
        self.fn, self.thread = fn, None

    def start(self, *args):
        assert self.thread is None, "an exchange is already in flight"
        self.value = self.error = None

        def run():
            try:
                self.value = self.fn(*args)
            except BaseException as err:  # (raised again on the training thread, by result())
                self.error = err

        self.thread = threading.Thread(target=run, name="localsgd-exchange", daemon=True)
        self.thread.start()

    def result(self):
        self.thread.join()
        self.thread = None
        if self.error is not None:
            raise self.error
        return self.value
