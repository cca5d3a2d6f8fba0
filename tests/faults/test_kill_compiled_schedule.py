"""kill -9 mid-epoch of a worker training a user's model compiled with AdamW on a CosineDecay schedule, with
weight decay and clipnorm (own_models.adamw_schedule_classifier), on the breast-cancer table: the restarted run
resumes after the last saved epoch, redoes the killed epoch from its first batch, and ends as an undisturbed run
with the same flags does, bit for bit (one thread: the same arithmetic in the same order): the same final weights,
and in the last checkpoint the same optimizer state, its iteration count (the schedule's position) and moments.

Under `average`, whose workers train alone: worker 0 of 2 is run (the other would train its own shard beside it
and prove nothing here), killed and restarted alone. The group strategies restore the same optimizer state from
the chief's checkpoint (tests/faults/test_kill_trainer.py kills a multiworker group of the built-in model).

Batch 4 and one step per train call: 58 steps an epoch, and progress.json rewritten after about every one of them
(--progress-interval 0.001), so that the victim can be frozen (SIGSTOP, then SIGKILL) where its progress says it
is a quarter to half of the way through an epoch; 3 epochs are 174 steps, inside the schedule's 200 decay steps,
so every step's learning rate is its own."""

import json
import re
import signal
import time

import numpy as np
import pytest
import tensorflow as tf

from own_models import adamw_schedule_classifier, breast_cancer_csv, copied_table, saved, workdir_with
from stages import free_port_block, latest_saved_epoch, start_stage

pytestmark = pytest.mark.faults

WORKERS, EPOCHS, BATCH, SEED = 2, 3, 4, 42
VICTIM = 0
# the trainer's optimizer's step count in a checkpoint ("model/optimizer/...": the file's compiled one, unused)
ITERATIONS = "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    """(the cancer table's data directory, the compiled model file)."""
    root = tmp_path_factory.mktemp("cancer")
    data = copied_table(root, "cancer", breast_cancer_csv)
    return data, saved(adamw_schedule_classifier(data), root / "adamw-cosine.keras")


@pytest.fixture
def trainers(recipe):
    """trainers(work, label): {VICTIM: process}, the compiled model's trainer with the test's flags, logging to
    WORK/worker-<index>-<label>.log; any still running when the test ends is killed."""
    started = []

    def start(work, label):
        port = free_port_block(WORKERS)
        procs = {
            i: start_stage(
                "trainer",
                *(
                    "--workdir",
                    work,
                    "--worker-index",
                    i,
                    "--workers",
                    WORKERS,
                    "--strategy",
                    "average",
                    "--port",
                    port,
                ),
                *("--model-file", recipe[1], "--epochs", EPOCHS, "--batch", BATCH, "--seed", SEED, "--threads", 1),
                *("--steps-per-call", 1, "--progress-interval", 0.001),
                log=work / f"worker-{i}-{label}.log",
            )
            for i in (VICTIM,)
        }
        started.extend(procs.values())
        return procs

    yield start
    for proc in started:
        if proc.poll() is None:  # (a failed assertion left it running, or frozen)
            proc.kill()
            proc.wait()


def log_of(work, i, label):
    return (work / f"worker-{i}-{label}.log").read_text(errors="replace")


def finish(work, procs, label):
    for i, proc in procs.items():
        assert proc.wait(timeout=600) == 0, log_of(work, i, label)[-3000:]


def read_progress(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # (not written yet)
        return {}


def mid_epoch(progress):
    """Training, in epoch 2 or later, a quarter to half of the way through it: epoch - 1 is saved, and this one
    is not (the file lags the process by a step or so; half of the epoch is still ahead)."""
    steps = progress.get("steps_per_epoch", 0)
    return (
        progress.get("state") == "training" and progress["epoch"] >= 2 and steps // 4 <= progress["step"] <= steps // 2
    )


def freeze_mid_epoch(proc, progress_path, timeout=300):
    """SIGSTOP `proc` where its progress.json says it is mid_epoch; returns that progress, read again once the
    process is frozen (the file is rewritten every step: a freeze that came too late is undone, and the next epoch
    tried)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the trainer exited before it could be killed"
        if mid_epoch(read_progress(progress_path)):
            proc.send_signal(signal.SIGSTOP)
            frozen = read_progress(progress_path)
            if mid_epoch(frozen):
                return frozen
            proc.send_signal(signal.SIGCONT)
        time.sleep(0.002)
    raise AssertionError(f"{progress_path} was never mid-epoch after the first epoch")


def last_optimizer_state(checkpoints):
    """{key: array} of the trainer's optimizer in the last epoch's checkpoint."""
    reader = tf.train.load_checkpoint(str(checkpoints / f"ckpt-{EPOCHS}"))
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map() if key.startswith("optimizer/")}


def final_weights(work, workers):
    return [json.load(open(work / "train" / f"worker-{i:05d}" / "_SUCCESS"))["final_weights_sha256"] for i in workers]


def test_a_compiled_schedule_resumes_bit_exact_after_kill_9_mid_epoch(recipe, trainers, tmp_path, measure):
    calm, work = workdir_with(recipe[0], tmp_path / "undisturbed"), workdir_with(recipe[0], tmp_path / "killed")
    checkpoints = f"worker-{VICTIM:05d}/checkpoints"
    started = time.monotonic()
    undisturbed = trainers(calm, "first")  # beside the killed one, with the same flags
    first = trainers(work, "first")
    at = freeze_mid_epoch(first[VICTIM], work / "train" / f"worker-{VICTIM:05d}" / "progress.json")
    first[VICTIM].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    assert first[VICTIM].wait(timeout=30) == -signal.SIGKILL
    saved_epoch = at["epoch"] - 1
    assert latest_saved_epoch(work / "train" / checkpoints) == saved_epoch

    restarted = trainers(work, "second")
    finish(work, restarted, "second")
    restart_to_done_sec = time.monotonic() - killed_at
    finish(calm, undisturbed, "first")
    total_sec = time.monotonic() - started

    steps = int(re.search(r"(\d+) steps/epoch", log_of(calm, VICTIM, "first")).group(1))
    log = log_of(work, VICTIM, "second")
    # resumed after the last saved epoch: the killed one is redone from its first batch
    assert re.search(rf"resumed from \S+ after epoch {saved_epoch}\n", log), log[-3000:]
    assert f"epochs {saved_epoch + 1}..{EPOCHS}" in log, log[-3000:]
    assert final_weights(work, [VICTIM]) == final_weights(calm, [VICTIM])
    resumed, straight = (
        last_optimizer_state(work / "train" / checkpoints),
        last_optimizer_state(calm / "train" / checkpoints),
    )
    # every step counted once by the schedule: none of the killed epoch's twice, none of the lost ones missing
    assert int(resumed[ITERATIONS]) == int(straight[ITERATIONS]) == EPOCHS * steps, (resumed[ITERATIONS], steps)
    assert sorted(resumed) == sorted(straight) and len(straight) > 1  # (iterations, and the moments)
    for key in straight:
        np.testing.assert_array_equal(resumed[key], straight[key], err_msg=key)
    measure(
        steps_per_epoch=steps,
        killed_in_epoch=at["epoch"],
        killed_after_steps=at["step"],
        restart_to_done_sec=round(restart_to_done_sec, 1),
        test_sec=round(total_sec, 1),
    )
