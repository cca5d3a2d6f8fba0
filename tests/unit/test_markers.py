"""Completion markers: waiting for one stage's marker, or for all of several workers'."""

import io
import threading

import pytest

from disttrain_contract import StageTimeout, read_marker, wait_for_marker, wait_for_markers, write_marker


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
    with pytest.raises(StageTimeout, match=r"timed out after 0\.1s waiting for the copier's dataset "
                                           r"\(no marker at .*/data/_SUCCESS\); did the previous stage run and succeed\?"):
        wait_for_marker(tmp_path / "data", 0.1, "the copier's dataset", poll=0.02, log=None)
    write_marker(tmp_path, "copier", rows=5)
    assert wait_for_marker(tmp_path, 0, "the copier's dataset") == read_marker(tmp_path)
