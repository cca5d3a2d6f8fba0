"""The trainer's live progress file (disttrain_trainer.progress): rate limit, forced writes, atomicity."""

import json
import threading

import pytest

from disttrain_trainer.progress import MAX_HISTORY, ProgressFile


class Clock:
    """The writer's time source, advanced by the test (the file I/O is real)."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def writer(path, interval=1.0, clock=None, **kwargs):
    clock = clock or Clock()
    options = dict(worker=1, tag="worker 1/2", strategy="average", epochs=3, steps_per_epoch=100)
    return ProgressFile(
        str(path), interval, clock=clock, wall_clock=lambda: clock.now + 1e9, **{**options, **kwargs}
    ), clock


def read(path):
    with open(path) as fh:
        return json.load(fh)


def record(epoch, loss=0.5, accuracy=0.8):
    return {
        "epoch": epoch,
        "loss": loss,
        "accuracy": accuracy,
        "examples": 6400,
        "examples_per_sec": 3200.0,
        "wall_time_sec": 2.0,
        "test_accuracy": 0.75,
        "cycle_sec": 2.5,
    }


def test_at_most_one_write_per_interval_and_always_the_epoch_end(tmp_path):
    path = tmp_path / "progress.json"
    progress, clock = writer(path, interval=1.0)
    progress.start_epoch(1)  # the first write: nothing written before
    seen = [(clock.now, read(path)["writes"])]
    for step in range(1, 101):  # 100 calls of one step, 0.07 s apart: 7 s
        clock.now += 0.07
        progress.update(step, [0.5 * step * 64, 0.8 * step * 64, step * 64])
        written = read(path)["writes"]
        if written != seen[-1][1]:
            assert written == seen[-1][1] + 1
            seen.append((clock.now, written))
    gaps = [b[0] - a[0] for a, b in zip(seen, seen[1:])]
    assert len(seen) == 7 and all(gap >= 1.0 for gap in gaps), gaps  # 7 s of updates: the start + 6 more
    state = read(path)
    assert state["step"] < 100  # the last update was less than a second after the last write: not written yet
    clock.now += 0.01
    progress.end_epoch(record(1))  # forced, 0.01 s after the last update
    state = read(path)
    assert state["writes"] == 8 and state["step"] == 100 and state["global_step"] == 100
    assert state["history"] == [
        {"epoch": 1, "loss": 0.5, "accuracy": 0.8, "test_accuracy": 0.75, "examples_per_sec": 3200.0}
    ]
    assert state["time"] == clock.now + 1e9  # the wall clock at the write
    assert state["state"] == "training" and (state["epoch"], state["epochs"], state["total_steps"]) == (1, 3, 300)
    assert state["eta_sec"] == pytest.approx(200 * 7.0 / 100)  # 200 steps left at 7 s per 100 steps


def test_running_numbers_and_the_finished_states(tmp_path):
    path = tmp_path / "progress.json"
    progress, clock = writer(path, interval=1.0, start_epoch=1, history=[record(1, loss=0.9)])
    progress.start_epoch(2)
    clock.now += 2.0
    progress.update(50, [25.0, 40.0, 50 * 64])  # loss and hits sums, examples
    state = read(path)
    assert (state["epoch"], state["step"], state["global_step"]) == (2, 50, 150)
    assert state["loss"] == pytest.approx(25.0 / 3200) and state["accuracy"] == pytest.approx(40.0 / 3200)
    assert state["examples_per_sec"] == pytest.approx(3200 / 2.0)
    assert state["eta_sec"] == pytest.approx(150 * 2.0 / 50)  # this process's pace: 50 steps (a resumed run) in 2 s
    assert [h["loss"] for h in state["history"]] == [0.9]  # metrics.json's epochs before the resume
    clock.now += 0.1
    progress.evaluating()  # rate-limited: 0.1 s after the last write
    assert read(path)["state"] == "training"
    clock.now += 1.0
    progress.evaluating()
    assert read(path)["state"] == "evaluating"
    progress.finish("done")
    state = read(path)
    assert state["state"] == "done" and state["eta_sec"] == 0
    progress.finish("failed", error="the parameter server is gone")
    assert read(path)["error"] == "the parameter server is gone"


def test_parameter_server_chief_without_running_sums(tmp_path):
    """parameterserver's chief knows no loss until the epoch's calls return: update(0, None) keeps it alive."""
    path = tmp_path / "progress.json"
    progress, clock = writer(path, strategy="parameterserver")
    progress.start_epoch(1)
    clock.now += 1.5
    progress.update(0, None)
    state = read(path)
    assert state["writes"] == 2 and state["loss"] is None and state["eta_sec"] is None and state["step"] == 0


def test_interval_zero_writes_nothing(tmp_path):
    progress, clock = writer(tmp_path / "progress.json", interval=0)
    progress.start_epoch(1)
    progress.update(10, [1.0, 1.0, 10.0])
    progress.end_epoch(record(1))
    progress.finish("done")
    assert not list(tmp_path.iterdir())


def test_history_keeps_the_newest_epochs(tmp_path):
    path = tmp_path / "progress.json"
    progress, clock = writer(path, epochs=MAX_HISTORY + 20, steps_per_epoch=1)
    for epoch in range(1, MAX_HISTORY + 11):
        progress.start_epoch(epoch)
        progress.end_epoch(record(epoch))
    history = read(path)["history"]
    assert len(history) == MAX_HISTORY and history[-1]["epoch"] == MAX_HISTORY + 10 and history[0]["epoch"] == 11
    assert path.stat().st_size < 256 * 1024  # what the server reads at most


def test_a_write_that_fails_warns_once_and_training_goes_on(tmp_path, capsys):
    (tmp_path / "not-a-directory").write_text("")
    progress, clock = writer(tmp_path / "not-a-directory" / "progress.json")
    progress.start_epoch(1)
    clock.now += 5
    progress.update(1, [1.0, 1.0, 1.0])
    progress.finish("done")
    err = capsys.readouterr().err
    assert err.count("warning: progress not written") == 1 and "not-a-directory" in err
    assert progress.writes == 0


def test_a_reader_never_sees_a_partial_file(tmp_path):
    """A reader in a loop while the writer rewrites the file 150 times: every read is whole JSON,
    and once the file exists it never disappears (the rename replaces it in one step)."""
    path = tmp_path / "progress.json"
    history = [record(e) for e in range(1, 201)]  # ~20 KB: a write is not one small block
    progress = ProgressFile(
        str(path),
        1e-9,
        worker=0,
        tag="worker 0/1",
        strategy="average",
        epochs=400,
        steps_per_epoch=1500,
        start_epoch=200,
        history=history,
    )  # (the real clocks: every update writes)
    progress.start_epoch(201)
    start, done = threading.Barrier(2), threading.Event()
    reads, failures = [], []

    def reader():
        start.wait()
        while not done.is_set():
            try:
                with open(path, "rb") as fh:
                    data = fh.read()
                reads.append(json.loads(data)["writes"])
            except (OSError, ValueError) as err:
                failures.append(repr(err))

    thread = threading.Thread(target=reader)
    thread.start()
    start.wait()
    for step in range(1, 151):
        progress.update(step, [0.1 * step, 0.5 * step, 64.0 * step])
    done.set()
    thread.join()
    assert not failures, failures[:3]
    assert progress.writes == 151 and len(reads) > 50
    assert reads == sorted(reads)  # each read is a whole file, never an older one after a newer
    assert [e["epoch"] for e in read(path)["history"]] == list(range(1, 201))
