"""Completion markers: waiting for one stage's marker, or for all of several workers'."""

import io
import threading

import pytest

import time

from disttrain_contract import (
    StageTimeout,
    read_marker,
    wait_for_marker,
    wait_for_markers,
    wait_for_quorum,
    write_marker,
)


def test_wait_for_markers_returns_every_marker_in_order(tmp_path):
    dirs = [tmp_path / f"worker-{i}" for i in range(3)]
    for i, d in enumerate(dirs):
        d.mkdir()
        write_marker(d, "trainer", worker_index=i)
    assert [m["worker_index"] for m in wait_for_markers(dirs, 0)] == [0, 1, 2]


def test_wait_for_markers_names_every_missing_worker(tmp_path):
    dirs = [tmp_path / f"worker-{i:05d}" for i in range(3)]
    dirs[0].mkdir()
    write_marker(dirs[0], "trainer")
    with pytest.raises(StageTimeout) as err:
        wait_for_markers(dirs, 0, log=None)
    message = str(err.value)
    assert message.startswith("timed out after 0s: 2 of 3 workers did not finish (missing ")
    assert f"{dirs[1]}/_SUCCESS, {dirs[2]}/_SUCCESS)" in message and "worker-00000" not in message
    assert err.value.exit_code == 3


def test_wait_for_markers_waits_for_a_late_worker_and_announces_once(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        d.mkdir()
    write_marker(dirs[0], "trainer")
    late = threading.Timer(0.3, write_marker, (dirs[1], "trainer"))
    late.start()
    log = io.StringIO()
    try:
        markers = wait_for_markers(dirs, 30, poll=0.05, log=log)
    finally:
        late.join()
    assert [m["stage"] for m in markers] == ["trainer", "trainer"]
    assert log.getvalue() == "waiting up to 30s for 1 of 2 workers ...\n"


def test_wait_for_marker_keeps_its_message(tmp_path):
    with pytest.raises(
        StageTimeout,
        match=r"timed out after 0\.1s waiting for the copier's dataset "
        r"\(no marker at .*/data/_SUCCESS\); did the previous stage run and succeed\?",
    ):
        wait_for_marker(tmp_path / "data", 0.1, "the copier's dataset", poll=0.02, log=None)
    write_marker(tmp_path, "copier", rows=5)
    assert wait_for_marker(tmp_path, 0, "the copier's dataset") == read_marker(tmp_path)


def workers_with_markers(tmp_path, n, finished):
    dirs = [tmp_path / f"worker-{i:05d}" for i in range(n)]
    for i, d in enumerate(dirs):
        d.mkdir()
        if i in finished:
            write_marker(d, "trainer", worker_index=i)
    return dirs


def test_quorum_settles_for_the_minimum_after_the_straggler_wait_naming_the_missing(tmp_path):
    dirs = workers_with_markers(tmp_path, 4, {0, 1, 3})
    log = io.StringIO()
    markers = wait_for_quorum(dirs, 60, 3, 0, poll=0.01, log=log)
    assert [m and m["worker_index"] for m in markers] == [0, 1, None, 3]
    assert (
        f"3 of 4 workers finished (at least 3 needed); waiting up to 0s more for {dirs[2]}/_SUCCESS" in log.getvalue()
    )


def test_quorum_not_reached_by_the_deadline_is_a_timeout_naming_the_missing(tmp_path):
    dirs = workers_with_markers(tmp_path, 3, {0})
    with pytest.raises(StageTimeout) as err:
        wait_for_quorum(dirs, 0, 2, 600, log=None)
    assert str(err.value).startswith(
        "timed out after 0s: only 1 of 3 workers finished, fewer than the 2 required (missing "
    )
    assert err.value.exit_code == 3


def test_quorum_takes_a_straggler_that_finishes_within_the_wait(tmp_path):
    """The straggler's marker is written only after the quorum was announced (the barrier):
    the wait must return it, long before its 60 s are up."""
    dirs = workers_with_markers(tmp_path, 3, {0, 1})
    announced = threading.Event()

    class Log(io.StringIO):
        def write(self, text):
            if "waiting up to 60s more" in text:
                announced.set()
            return super().write(text)

    def straggler():
        announced.wait(30)
        write_marker(dirs[2], "trainer", worker_index=2)

    thread = threading.Thread(target=straggler)
    thread.start()
    started = time.monotonic()
    markers = wait_for_quorum(dirs, 600, 2, 60, poll=0.01, log=Log())
    thread.join()
    assert [m["worker_index"] for m in markers] == [0, 1, 2] and time.monotonic() - started < 30


def test_quorum_straggler_wait_never_passes_the_overall_timeout(tmp_path):
    dirs = workers_with_markers(tmp_path, 2, {0})
    started = time.monotonic()
    assert wait_for_quorum(dirs, 0.2, 1, 600, poll=0.01, log=None)[1] is None
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("minimum", [0, 4])
def test_an_impossible_quorum_is_refused(tmp_path, minimum):
    with pytest.raises(ValueError, match=f"a quorum of {minimum} out of 3 workers is impossible"):
        wait_for_quorum(workers_with_markers(tmp_path, 3, set()), 0, minimum, 0)
