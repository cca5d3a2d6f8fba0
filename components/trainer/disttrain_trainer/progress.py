"""A worker's live progress: WORKER_DIR/progress.json, and the bar on a terminal.

The server's page polls the progress files of every worker (disttrain_server.progress) to show a
run before its final model exists. The trainer calls ProgressFile.update after every compiled call
of steps (strategy.train_epoch's progress callback, so every strategy has it); the file is written
at most once per `interval` seconds, and always at the end of an epoch and when the worker is done
or fails (flush). Every write is atomic (a temporary name, then a rename: disttrain_contract.atomic):
a reader sees the previous file or the next one, never half of one. It is not fsynced: a crash may
lose the newest second of progress, which the next write replaces anyway.

The file (one JSON object):
    worker, tag, strategy     which worker this is ("worker 1/2", "chief (task 0)")
    state                     starting | training | evaluating | done | failed (error: the message)
    epoch, epochs             the epoch under way (1-based; 0 before the first) and the last one
    step, steps_per_epoch     steps done in this epoch, and in a whole epoch
    global_step, total_steps  steps done over the whole run (all epochs), and at the end
    loss, accuracy            running means over this epoch's steps so far (null when not known yet:
                              parameterserver's chief learns them when the epoch's calls return)
    examples_per_sec          this epoch's examples so far / its seconds so far
    eta_sec                   seconds to the end of training at this run's pace so far (evaluations
                              and checkpoints included), null before the first step
    time                      wall-clock time of this write (Unix seconds): how fresh it is
    writes                    this write's number, counted from the process's first
    history                   one entry per finished epoch: loss, accuracy, held-out and validation
                              accuracy, examples/s (the page's curves)
"""

import json
import math
import sys
import time

from disttrain_contract import ContractError, atomic_write_bytes

# An epoch's record keys the page draws, when the worker has them (faces: no accuracy on the held-out split).
# Regression: the training MAE and the held-out RMSE in place of the accuracies ("score" names the running one).
HISTORY_KEYS = ("loss", "accuracy", "test_accuracy", "validation_accuracy", "mae", "test_rmse", "validation_rmse",
                "examples_per_sec")
# The newest epochs kept in the file, so that it stays small (the server reads at most 256 KiB of it).
MAX_HISTORY = 500


class ProgressFile:
    """progress.json of one worker. Used by the training thread only (no locking needed)."""

    def __init__(self, path, interval, *, worker, tag, strategy, epochs, steps_per_epoch, start_epoch=0, history=(),
                 clock=time.monotonic, wall_clock=time.time, score="accuracy"):
        self.path, self.interval = path, interval
        self.enabled = interval > 0
        self.clock, self.wall_clock = clock, wall_clock
        self.writes = 0
        self.last_write = -math.inf
        self.warned = False
        done = start_epoch * steps_per_epoch
        self.run_started, self.run_start_step = clock(), done  # this process's pace (a resumed run starts later)
        self.epoch_started = self.run_started
        self.score = score  # the step's second running sum: "accuracy", or "mae" for a regression
        self.state = {
            "worker": worker, "tag": tag, "strategy": strategy, "state": "starting", "score": score,
            "epoch": start_epoch, "epochs": epochs, "step": 0, "steps_per_epoch": steps_per_epoch,
            "global_step": done, "total_steps": epochs * steps_per_epoch,
            "loss": None, score: None, "examples_per_sec": None, "eta_sec": None, "time": None,
            "history": [history_entry(record) for record in history][-MAX_HISTORY:],
        }

    # ------------------------------------------------------------------ the trainer's calls
    def start_epoch(self, epoch):
        self.epoch_started = self.clock()
        self.state.update({"epoch": epoch, "step": 0, "state": "training", "loss": None, self.score: None,
                           "examples_per_sec": None})
        self.update(0, None)

    def update(self, step, sums):
        """`step` steps of this epoch done; `sums` = [loss sum, hits, examples] so far, or None when not
        known yet. Writes if the last write is `interval` seconds old."""
        now = self.clock()
        state = self.state
        state["step"] = step
        state["global_step"] = (state["epoch"] - 1) * state["steps_per_epoch"] + step
        if sums is not None and sums[2] > 0:
            state["loss"], state[self.score] = sums[0] / sums[2], sums[1] / sums[2]
            elapsed = now - self.epoch_started
            state["examples_per_sec"] = sums[2] / elapsed if elapsed > 0 else None
        done_here = state["global_step"] - self.run_start_step
        if done_here > 0:
            state["eta_sec"] = (state["total_steps"] - state["global_step"]) * (now - self.run_started) / done_here
        if now - self.last_write >= self.interval:
            self._write(now)

    def evaluating(self):
        """The epoch's steps are done; the held-out evaluation and the checkpoint follow (rate-limited write)."""
        self.state["state"] = "evaluating"
        self.update(self.state["step"], None)

    def end_epoch(self, record):
        """The epoch's record (metrics.json's): into the history, and always written."""
        self.state["history"] = (self.state["history"] + [history_entry(record)])[-MAX_HISTORY:]
        self.state.update({"loss": record["loss"], self.score: record[self.score],
                           "examples_per_sec": record["examples_per_sec"]})
        self.flush()

    def finish(self, state, error=None):
        """The worker is done (its marker is written) or failed: always written."""
        self.state["state"] = state
        if state == "done":
            self.state["eta_sec"] = 0.0
        if error is not None:
            self.state["error"] = error
        self.flush()

    def flush(self):
        self._write(self.clock())

    # ------------------------------------------------------------------ the file
    def _write(self, now):
        if not self.enabled:
            return
        self.last_write = now
        self.state["time"] = self.wall_clock()
        self.state["writes"] = self.writes + 1  # (the benchmark and the tests count them)
        try:
            # (no fsync: a second later the file is outdated anyway; the rename alone keeps readers whole)
            atomic_write_bytes(self.path, json.dumps(self.state, separators=(",", ":")).encode(), fsync=False)
            self.writes += 1
        except ContractError as err:
            # The page is a view of the run, not part of it: a full or read-only volume stops the
            # progress, not the training (the checkpoints and the model fail loudly on their own).
            if not self.warned:
                print(f"{self.state['tag']}: warning: progress not written: {err}", file=sys.stderr, flush=True)
                self.warned = True


def history_entry(record):
    return {"epoch": record["epoch"], **{key: record[key] for key in HISTORY_KEYS if key in record}}


class TerminalBar:
    """tqdm's bar for one epoch when stdout is a terminal; nothing otherwise (logs and `kubectl logs`
    get the one line per epoch the trainer prints either way, which the bar leaves room for)."""

    def __init__(self, label, total, score="accuracy"):
        from tqdm import tqdm

        self.score = score
        self.bar = tqdm(total=total, desc=label, unit="step", file=sys.stdout, leave=False, mininterval=0.1,
                        dynamic_ncols=True, disable=not sys.stdout.isatty())

    def update(self, step, sums):
        if self.bar.disable:
            return
        if sums is not None and sums[2] > 0:
            self.bar.set_postfix({"loss": f"{sums[0] / sums[2]:.4f}", self.score: f"{sums[1] / sums[2]:.4f}"},
                                 refresh=False)
        self.bar.update(step - self.bar.n)

    def close(self):
        self.bar.close()  # leave=False: the bar's line is cleared for the epoch's line
