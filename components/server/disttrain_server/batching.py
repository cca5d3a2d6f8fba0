"""Micro-batching: the predict calls that arrive together in one process run as one model call.

A model call has a large fixed cost and a small cost per instance (see bench/README.md:
one instance and 32 instances cost nearly the same), so under concurrent load it is
cheaper to answer several requests with one call than to make one call each.

Request threads (gunicorn --threads) hand their batch to a single batching thread and
wait. That thread takes the first waiting batch, then everything else already queued,
up to max_batch_size instances (and, if timeout > 0, whatever arrives within `timeout`
seconds), concatenates them, calls the model once and hands each thread its own rows.
With timeout 0 nothing waits on purpose: a lone request runs at once, and batches grow
by themselves when requests arrive faster than the model answers them (the ones that
queue up during one call form the next batch). This is TF Serving's max_batch_size and
batch_timeout_micros, in-process.

The batching thread starts on the first request (so never in a gunicorn master before
the fork) and ends after `idle_exit` seconds without work, so a replaced model's batcher
does not keep the old model alive.
"""

import queue
import threading
import time

import numpy as np


def rows(batch):
    """How many instances a batch holds: an array's rows, or those of each array of a dict (a model
    with several named inputs, whose arrays have one row per instance each)."""
    return len(next(iter(batch.values()))) if isinstance(batch, dict) else len(batch)


def concatenate(batches):
    """One batch of the instances of `batches`, in order (dicts: input by input)."""
    if isinstance(batches[0], dict):
        return {name: np.concatenate([batch[name] for batch in batches]) for name in batches[0]}
    return np.concatenate(batches)


class _Pending:
    """One request's batch, waiting for its rows of the answer."""

    __slots__ = ("batch", "done", "result", "error")

    def __init__(self, batch):
        self.batch = batch
        self.done = threading.Event()
        self.result = None
        self.error = None


class MicroBatcher:
    def __init__(self, call, max_batch_size, timeout=0.0, idle_exit=30.0):
        """call(batch) -> array with one row per instance of batch (a numpy array)."""
        if max_batch_size < 1 or timeout < 0:
            raise ValueError("max_batch_size must be at least 1 and timeout not negative")
        self._call = call
        self.max_batch_size = int(max_batch_size)
        self.timeout = float(timeout)
        self.idle_exit = float(idle_exit)
        self._queue = queue.SimpleQueue()
        self._lock = threading.Lock()  # guards _thread: start one, and only one, when there is work
        self._thread = None
        # What batching achieved: model calls, requests and instances they answered. Written
        # only by the batching thread (one at a time, under _lock's start/stop protocol), so
        # the += are not racing; request threads only read them.
        self.calls = self.requests = self.instances = 0

    def predict(self, batch):
        """The model's answer for `batch`, computed together with whatever else is waiting."""
        if rows(batch) >= self.max_batch_size:
            return self._call(batch)  # a full batch on its own: no reason to queue it
        pending = _Pending(batch)
        self._queue.put(pending)
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="disttrain-batcher", daemon=True)
                self._thread.start()
        pending.done.wait()
        if pending.error is not None:
            raise pending.error
        return pending.result

    def _serve(self):
        carried = None  # a batch that did not fit into the previous group goes first in the next
        while True:
            first = carried
            carried = None
            if first is None:
                try:
                    first = self._queue.get(timeout=self.idle_exit)
                except queue.Empty:
                    with self._lock:  # a request queued meanwhile sees _thread set, or we see its batch
                        if self._queue.empty():
                            self._thread = None
                            return
                    continue
            group, size = [first], rows(first.batch)
            deadline = time.monotonic() + self.timeout
            while size < self.max_batch_size:
                try:
                    left = deadline - time.monotonic()
                    item = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                if size + rows(item.batch) > self.max_batch_size:
                    carried = item
                    break
                group.append(item)
                size += rows(item.batch)
            self._answer(group)

    def _answer(self, group):
        try:
            if len(group) == 1:
                outputs = [self._call(group[0].batch)]
            else:
                answer = self._call(concatenate([p.batch for p in group]))
                ends = np.cumsum([rows(p.batch) for p in group])
                outputs = np.split(answer, ends[:-1])
        except BaseException as err:  # noqa: BLE001 - handed to the waiting threads, which must never wait forever
            if len(group) == 1:
                group[0].error = err
                group[0].done.set()
                return
            # One request's instances must not fail the others': answer each on its own.
            for pending in group:
                self._answer([pending])
            return
        self.calls += 1
        self.requests += len(group)
        self.instances += sum(rows(p.batch) for p in group)
        for pending, output in zip(group, outputs):
            pending.result = output
            pending.done.set()
