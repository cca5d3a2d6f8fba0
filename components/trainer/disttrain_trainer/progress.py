"""A worker's live progress: WORKER_DIR/progress.json, and the bar on a terminal.

The server's page polls the progress files of every worker (disttrain_server.progress) to show a
run before its final model exists. The trainer calls ProgressFile.update after every compiled call
of steps (strategy.train_epoch's progress callback, so every strategy has it); the file is written
at most once per `interval` seconds, and always at the end of an epoch and when the worker is done
or fails (flush). Every write is atomic (a temporary name, then a rename: disttrain_contract.atomic):
a reader sees the previous file or the next one, never half of one. It is not fsynced: a crash may
lose the newest second of progress, which the next write replaces anyway.

The file's fields, and their one definition: disttrain_contract.progress.Progress.
"""

import json
import math
import sys
import time

from disttrain_contract import ContractError, atomic_write_bytes
from disttrain_contract.progress import MAX_HISTORY, Progress, history_entry


class ProgressFile:
    """progress.json of one worker. Used by the training thread only (no locking needed)."""

    def __init__(
        self,
        path,
        interval,
        *,
        worker,
        tag,
        strategy,
        epochs,
        steps_per_epoch,
        start_epoch=0,
        history=(),
        clock=time.monotonic,
        wall_clock=time.time,
        score="accuracy",
    ):
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
        self.progress = Progress(
            worker=worker,
            tag=tag,
            strategy=strategy,
            score=score,
            epoch=start_epoch,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            global_step=done,
            history=[history_entry(record) for record in history][-MAX_HISTORY:],
        )

    # ------------------------------------------------------------------ the trainer's calls
    def start_epoch(self, epoch):
        self.epoch_started = self.clock()
        state = self.progress
        state.epoch, state.step, state.state = epoch, 0, "training"
        state.loss = state.score_value = state.examples_per_sec = None
        self.update(0, None)

    def update(self, step, sums):
        """`step` steps of this epoch done; `sums` = [loss sum, hits, examples] so far, or None when not
        known yet. Writes if the last write is `interval` seconds old."""
        now = self.clock()
        state = self.progress
        state.step = step
        state.global_step = (state.epoch - 1) * state.steps_per_epoch + step
        if sums is not None and sums[2] > 0:
            state.loss, state.score_value = sums[0] / sums[2], sums[1] / sums[2]
            elapsed = now - self.epoch_started
            state.examples_per_sec = sums[2] / elapsed if elapsed > 0 else None
        done_here = state.global_step - self.run_start_step
        if done_here > 0:
            state.eta_sec = (state.total_steps - state.global_step) * (now - self.run_started) / done_here
        if now - self.last_write >= self.interval:
            self._write(now)

    def evaluating(self):
        """The epoch's steps are done; the held-out evaluation and the checkpoint follow (rate-limited write)."""
        self.progress.state = "evaluating"
        self.update(self.progress.step, None)

    def end_epoch(self, record):
        """The epoch's record (metrics.json's): into the history, and always written."""
        state = self.progress
        state.history = (state.history + [history_entry(record)])[-MAX_HISTORY:]
        state.loss, state.score_value, state.examples_per_sec = (
            record["loss"],
            record[self.score],
            record["examples_per_sec"],
        )
        self.flush()

    def finish(self, state, error=None):
        """The worker is done (its marker is written) or failed: always written."""
        self.progress.state = state
        if state == "done":
            self.progress.eta_sec = 0.0
        if error is not None:
            self.progress.error = error
        self.flush()

    def flush(self):
        self._write(self.clock())

    # ------------------------------------------------------------------ the file
    def _write(self, now):
        if not self.enabled:
            return
        self.last_write = now
        self.progress.time = self.wall_clock()
        self.progress.writes = self.writes + 1  # (the benchmark and the tests count them)
        try:
            # (no fsync: a second later the file is outdated anyway; the rename alone keeps readers whole)
            atomic_write_bytes(
                self.path, json.dumps(self.progress.to_json(), separators=(",", ":")).encode(), fsync=False
            )
            self.writes += 1
        except ContractError as err:
            # The page is a view of the run, not part of it: a full or read-only volume stops the
            # progress, not the training (the checkpoints and the model fail loudly on their own).
            if not self.warned:
                print(f"{self.progress.tag}: warning: progress not written: {err}", file=sys.stderr, flush=True)
                self.warned = True


class TerminalBar:
    """tqdm's bar for one epoch when stdout is a terminal; nothing otherwise (logs and `kubectl logs`
    get the one line per epoch the trainer prints either way, which the bar leaves room for)."""

    def __init__(self, label, total, score="accuracy"):
        from tqdm import tqdm

        self.score = score
        self.bar = tqdm(
            total=total,
            desc=label,
            unit="step",
            file=sys.stdout,
            leave=False,
            mininterval=0.1,
            dynamic_ncols=True,
            disable=not sys.stdout.isatty(),
        )

    def update(self, step, sums):
        if self.bar.disable:
            return
        if sums is not None and sums[2] > 0:
            self.bar.set_postfix(
                {"loss": f"{sums[0] / sums[2]:.4f}", self.score: f"{sums[1] / sums[2]:.4f}"}, refresh=False
            )
        self.bar.update(step - self.bar.n)

    def close(self):
        self.bar.close()  # leave=False: the bar's line is cleared for the epoch's line
