"""Micro-batching: concurrent predict calls share model calls, each caller gets exactly its own rows."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from disttrain_contract.artifact import load_model
from disttrain_contract.evaluation import as_model_input, predict
from disttrain_contract.faces import FACE_PREPROCESSING, preprocess, preprocessing_of
from disttrain_server.batching import MicroBatcher
from disttrain_server.model_store import ModelStore
from server.serving import NEGATIVE, POSITIVE, http, publish, running_server


class SlowDouble:
    """A stand-in model call (the batcher's own logic is under test): rows * 2, with a delay so
    that requests queue up behind a running call, and a record of every batch it saw."""

    def __init__(self, delay=0.2):
        self.delay, self.batches, self.started = delay, [], threading.Event()

    def __call__(self, batch):
        self.batches.append(batch.copy())
        self.started.set()
        time.sleep(self.delay)
        if (batch < 0).any():
            raise ValueError("negative input")
        return batch * 2


def rows(*values):
    return np.array([[v] for v in values], dtype=np.float64)


def submit_behind_a_running_call(batcher, call, later):
    """Start one request, and once its model call is running, the `later` ones: they queue up together."""
    with ThreadPoolExecutor(len(later) + 1) as pool:
        first = pool.submit(batcher.predict, rows(0))
        assert call.started.wait(5)
        futures = [pool.submit(batcher.predict, batch) for batch in later]
        return first, futures


def test_requests_that_queue_during_a_call_share_the_next_call_and_get_their_own_rows():
    call = SlowDouble()
    batcher = MicroBatcher(call, max_batch_size=32)
    later = [rows(i, 100 + i) for i in range(1, 6)]
    first, futures = submit_behind_a_running_call(batcher, call, later)
    np.testing.assert_array_equal(first.result(), rows(0))
    for batch, future in zip(later, futures):
        np.testing.assert_array_equal(future.result(), batch * 2)
    # One call for the first request, one for the five that waited: 10 instances.
    assert [len(b) for b in call.batches] == [1, 10]
    assert (batcher.calls, batcher.requests, batcher.instances) == (2, 6, 11)


def test_a_call_never_exceeds_max_batch_size():
    call = SlowDouble(delay=0.1)
    batcher = MicroBatcher(call, max_batch_size=4)
    later = [rows(i, i) for i in range(1, 6)]  # 5 requests of 2 instances
    _, futures = submit_behind_a_running_call(batcher, call, later)
    for batch, future in zip(later, futures):
        np.testing.assert_array_equal(future.result(), batch * 2)
    assert max(len(b) for b in call.batches) <= 4
    assert sum(len(b) for b in call.batches) == 11


def test_a_request_of_max_batch_size_or_more_runs_on_its_own_without_queueing():
    call = SlowDouble(delay=0)
    batcher = MicroBatcher(call, max_batch_size=4)
    np.testing.assert_array_equal(batcher.predict(rows(1, 2, 3, 4, 5)), rows(2, 4, 6, 8, 10))
    assert batcher._thread is None and batcher.calls == 0


def test_one_bad_request_fails_alone_the_others_in_its_batch_are_answered():
    call = SlowDouble(delay=0.1)
    batcher = MicroBatcher(call, max_batch_size=32)
    later = [rows(1), rows(-1), rows(3)]
    _, futures = submit_behind_a_running_call(batcher, call, later)
    np.testing.assert_array_equal(futures[0].result(), rows(2))
    with pytest.raises(ValueError, match="negative input"):
        futures[1].result()
    np.testing.assert_array_equal(futures[2].result(), rows(6))


def test_with_a_timeout_a_batch_waits_for_requests_that_arrive_soon_after():
    call = SlowDouble(delay=0)
    batcher = MicroBatcher(call, max_batch_size=32, timeout=0.5)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(batcher.predict, rows(1))
        time.sleep(0.05)
        second = pool.submit(batcher.predict, rows(2))
        np.testing.assert_array_equal(first.result(), rows(2))
        np.testing.assert_array_equal(second.result(), rows(4))
    assert [len(b) for b in call.batches] == [2]


def test_the_batching_thread_ends_when_idle_and_a_new_request_starts_another():
    call = SlowDouble(delay=0)
    batcher = MicroBatcher(call, max_batch_size=8, idle_exit=0.1)
    np.testing.assert_array_equal(batcher.predict(rows(1)), rows(2))
    thread = batcher._thread
    thread.join(5)
    assert not thread.is_alive() and batcher._thread is None
    np.testing.assert_array_equal(batcher.predict(rows(3)), rows(6))


def test_many_threads_hammering_the_batcher_each_get_exactly_their_answer():
    batcher = MicroBatcher(lambda batch: batch * 2, max_batch_size=16)
    batches = [rows(*range(i, i + 1 + i % 5)) for i in range(400)]
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(batcher.predict, batches))
    for batch, answer in zip(batches, answers):
        np.testing.assert_array_equal(answer, batch * 2)
    assert batcher.requests == 400


def test_the_served_model_answers_as_the_eager_keras_model_does(text_model, tmp_path):
    """The compiled serving graph (and the batcher in front of it) change nothing in the numbers."""
    texts = [POSITIVE, NEGATIVE, "", "an uneven but often charming comedy " * 50]
    batch = as_model_input("text", texts)
    model, _ = load_model(text_model)
    eager = predict(model, batch)
    for max_batch_size in (1, 32):
        store = ModelStore(publish(text_model, tmp_path), max_batch_size=max_batch_size)
        np.testing.assert_allclose(store.get().predict(batch), eager, atol=1e-6)


def test_face_model_embeddings_through_the_compiled_graph_match_eager(face_model, tmp_path):
    """The served model preprocesses the crops as its artifact says (disttrain_contract.faces), so
    the eager model is given the crops preprocessed the same way."""
    crops = np.random.default_rng(0).integers(0, 256, size=(5, 32, 32, 1), dtype=np.uint8)
    model, meta = load_model(face_model)
    assert preprocessing_of(meta) == FACE_PREPROCESSING  # a model of today's trainer
    store = ModelStore(publish(face_model, tmp_path), max_batch_size=32)
    np.testing.assert_allclose(
        store.get().predict(crops), predict(model, preprocess(crops, FACE_PREPROCESSING)), atol=1e-5
    )


def test_gunicorn_with_batching_answers_each_of_many_concurrent_requests_with_its_own_prediction(text_model, tmp_path):
    publish(text_model, tmp_path)
    texts = [f"{POSITIVE} {i}" if i % 2 else f"{NEGATIVE} {i}" for i in range(64)]
    model, _ = load_model(text_model)
    expected = predict(model, as_model_input("text", texts))
    with running_server(tmp_path, "--workers", "1", "--threads", "16", "--max-batch-size", "8") as (base, _, _):
        url = base + "/v1/models/disttrain:predict"
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda text: http("POST", url, {"instances": [text]}), texts))
    for (status, body), want in zip(answers, expected):
        assert status == 200
        np.testing.assert_allclose(body["predictions"][0], want, atol=1e-6)


def test_gunicorn_worker_batches_concurrent_requests_and_reports_it_in_readyz(text_model, tmp_path):
    publish(text_model, tmp_path)
    # A 20 ms window makes the grouping certain here; the default (0) only groups what queues up.
    with running_server(
        tmp_path, "--workers", "1", "--threads", "16", "--max-batch-size", "16", "--batch-timeout-ms", "20"
    ) as (base, _, _):
        url = base + "/v1/models/disttrain:predict"
        before = http("GET", base + "/readyz")[1]["batching"]
        with ThreadPoolExecutor(16) as pool:
            statuses = [
                status for status, _ in pool.map(lambda i: http("POST", url, {"instances": [POSITIVE]}), range(64))
            ]
        after = http("GET", base + "/readyz")[1]["batching"]
    assert statuses == [200] * 64
    assert after["max_batch_size"] == 16
    assert after["requests"] - before["requests"] == 64
    assert after["model_calls"] - before["model_calls"] <= 32  # at least two requests per model call on average
