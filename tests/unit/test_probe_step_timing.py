"""The advisor probe's step timer (probe.time_steps): the median seconds per step of its calls, ending at
its time or, for short steps, once it has timed ENOUGH_CALLS calls; timing together, the workers agree before
each call."""

import time

from disttrain_advisor import probe as advise_probe
from disttrain_advisor.probe import ENOUGH_CALLS, time_steps


class Call:
    """A train call whose steps each take `step` seconds (slept): what time_steps sees of a real one."""

    def __init__(self, step):
        self.step, self.calls = step, []

    def __call__(self, iterator, steps):
        self.calls.append(steps)
        time.sleep(self.step * steps)


def test_short_steps_end_the_phase_after_enough_calls_long_before_its_time():
    call = Call(0.0001)
    started = time.perf_counter()
    seconds = time_steps(call, None, 4, seconds=30.0)
    assert time.perf_counter() - started < 10  # not the 30 s it was given
    assert len(call.calls) == 1 + ENOUGH_CALLS  # the untimed first call, then the timed ones
    assert set(call.calls) == {4}
    assert 0.0001 <= seconds < 0.01


def test_long_steps_end_the_phase_at_its_time_with_at_least_two_calls():
    call = Call(0.02)
    seconds = time_steps(call, None, 2, seconds=0.0)
    assert len(call.calls) == 1 + 2
    assert 0.02 <= seconds < 0.2


def test_together_the_workers_agree_before_each_call_and_stop_when_any_is_done(monkeypatch):
    """`together(done)` is the collective both workers call before each call: one worker done stops both."""
    monkeypatch.setattr(advise_probe, "ENOUGH_CALLS", 10**6)
    asked, call = [], Call(0.0001)
    other_done_after = 5

    def together(done):
        asked.append(done)
        return done or len(asked) > other_done_after  # the other worker is done after its 5th call

    time_steps(call, None, 1, seconds=30.0, together=together)
    assert len(call.calls) == 1 + other_done_after and len(asked) == other_done_after + 1
    assert not any(asked)  # this worker was not done: the other's answer ended the phase
