"""An overlapped localsgd sync agrees on stopping before its exchange starts, and the loop's question at that
step is answered from that agreement: asked after the exchange had started, the agreement's collective
queued behind the exchange's bytes on the one connection between two workers, and on a slow link the steps
then overlapped little of it (the benchmark measures the effect: docs/strategies.md). The strategy's
collaborators that talk to other workers are replaced by recorders here: what is checked is the order."""

import types

import pytest

from disttrain_trainer.strategies.localsgd import Strategy as LocalSGD


class Recorder:
    def __init__(self, calls, answer=False):
        self.calls, self.answer = calls, answer

    def any_worker(self, flag):
        self.calls.append(("agree", flag))
        return self.answer or flag

    def start(self, key):
        self.calls.append(("exchange", int(key)))


def strategy(calls, overlap, requested=False, answer=False):
    s = LocalSGD.__new__(LocalSGD)  # (no cluster: only the sync's order is exercised)
    recorder = Recorder(calls, answer)
    s.every, s.overlap, s.sizes, s.waited, s.syncs, s.sync_seconds = 4, overlap, [3], 0.0, 0, 0.0
    s.at_epoch_end, s.steps_per_epoch = False, 100  # (syncs every H steps of the run)
    s.notice, s.agreed, s._refresh = types.SimpleNamespace(requested=requested), None, None
    s.in_flight = types.SimpleNamespace(numpy=lambda: False)
    s._send = s._sync = lambda *total: 7  # the synced weights' checksum
    s.exchange = types.SimpleNamespace(start=recorder.start)
    s.any_worker = recorder.any_worker
    return s


@pytest.mark.parametrize("requested", [False, True])
def test_an_overlapped_sync_agrees_before_its_exchange_and_the_loop_asks_no_one_again(requested):
    calls = []
    s = strategy(calls, "eager", requested)
    s.after_steps(8)
    assert calls == [("agree", requested), ("exchange", 2)]
    assert s.agree_to_stop(requested, 8) is requested
    assert calls == [("agree", requested), ("exchange", 2)]  # no second collective behind the exchange
    assert s.agree_to_stop(False, 9) is False and len(calls) == 2  # between syncs: nobody is asked


def test_another_workers_request_at_the_sync_stops_this_one_too():
    calls = []
    s = strategy(calls, "eager", requested=False, answer=True)
    s.after_steps(4)
    assert s.agree_to_stop(False, 4) is True


def test_a_sync_step_with_no_agreement_of_its_own_asks_the_workers():
    # the first step of a run (or of a resumed one): no sync has agreed at it
    calls = []
    s = strategy(calls, "eager")
    assert s.agree_to_stop(True, 0) is True and calls == [("agree", True)]


def test_a_waiting_sync_leaves_the_agreement_to_the_loop():
    # without overlap the sync's collective is over when the loop asks: the link is free
    calls = []
    s = strategy(calls, None)
    s.after_steps(4)
    assert calls == []
    assert s.agree_to_stop(True, 4) is True and calls == [("agree", True)]
