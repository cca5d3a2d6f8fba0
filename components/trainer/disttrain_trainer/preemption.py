"""SIGTERM (a node drain, a Kueue preemption, a deleted pod): save, then exit with EXIT_CODE.

Kubernetes sends SIGTERM, waits the pod's terminationGracePeriodSeconds (chart value
trainer.terminationGracePeriodSeconds), then sends SIGKILL. A trainer killed outright loses
everything since its last checkpoint (the end of an epoch); one that saves first loses nothing
it trained. Each strategy stops where its workers can save one consistent state:

  average          after the train call in flight (at most --steps-per-call steps): it has no peers.
  multiworker      the workers agree between two train calls: after each call they all-reduce one
                   number, "has any of us had SIGTERM?", so all stop after the same call and save
                   one checkpoint together (the chief's, as every epoch).
  localsgd         the same question, asked at each average (--sync-every steps), where the workers
                   hold the same weights; each saves its own checkpoint of that step.
  parameterserver  the chief (the coordinator) lets the epoch's calls, already scheduled on the
                   workers, finish, saves its epoch checkpoint and exits; a parameter server or a
                   worker has nothing of its own to save and exits at once.
Whoever stopped exits with EXIT_CODE, which the chart's trainer Job does not count as a failure
(podFailurePolicy action Ignore): the pod is replaced and resumes from what was saved.

What the signal does depends on the phase (`Notice`): before the first step there is nothing to
save, so the process exits at once; during training the handler only sets a flag, which the loop
reads between two train calls (Python runs a signal handler only between bytecodes, so the call
in flight finishes either way); while the model and the marker are written the run finishes and
exits 0; after the marker it exits 0 at once.

A state saved mid-epoch goes to `<checkpoints>/preempted/ckpt-<step>`: the same tf.train.Checkpoint
as every epoch's (model, optimizer, epoch counter, dropout generators, strategy state) plus the
position in the epoch (`Position`: steps done, the epoch's running sums, seconds trained), in a
directory of its own so that the epoch checkpoints keep their meaning (ckpt-<epoch>: that many
epochs done). A resume takes it when it is newer than the last epoch's checkpoint (`newest`,
`group_step`); it skips the batches of those steps, so it sees the data an undisturbed run would.

Why not tf.distribute.experimental.PreemptionCheckpointHandler (TensorFlow 2.21): it restores the
newest checkpoint itself when it is created and saves with the manager's running numbering,
bypassing this trainer's resume rules (the run-config check, localsgd's last epoch every worker
saved, ckpt-<epoch>); the worker that had SIGTERM waits in the coordination service's key-value
store for every peer's acknowledgement with no deadline, so a peer that is gone leaves it waiting;
it stops at any run() call (localsgd must stop at an average); and ParameterServerStrategy is not
supported. The one-number all-reduce here costs one small
collective per train call and, when a peer is gone, fails like any collective (the group's
peer-loss path: exit instead of hanging).

Importing this module does not import TensorFlow (the signal logic is unit-tested without it).
"""

import os
import signal
import sys
import time

from disttrain_contract.errors import PREEMPTED_EXIT_CODE as EXIT_CODE
from disttrain_contract.errors import write_termination_message

PREEMPTED_DIR = "preempted"  # below a worker's checkpoint directory

SETUP, TRAINING, FINISHING, DONE = "setup", "training", "finishing", "done"


class Stop(Exception):
    """Raised by a strategy's train_epoch when the workers have agreed to stop: where they are.
    step: this run's steps over all epochs; done: steps done in the current epoch; sums: the
    epoch's [loss sum, score sum, examples] so far."""

    def __init__(self, step, done, sums):
        super().__init__(f"stopped at step {step}")
        self.step, self.done, self.sums = step, done, list(sums)


class Notice:
    """This process's SIGTERM: what the handler does in each phase, and what the loop reads.

    `steps_done` is set by the loop after each train call; the handler records it, so
    `step_at_signal` is the step count before the call in flight when the signal came."""

    def __init__(self, tag, clock=time.monotonic, exit=os._exit, err_fd=2):
        self.tag, self.clock, self._exit, self.err_fd = tag, clock, exit, err_fd
        self.phase = SETUP
        self.received_at = None
        self.step_at_signal = None
        self.steps_done = 0
        self.signum = None  # the signal `install` made ours

    def install(self, signum=signal.SIGTERM):
        """Make SIGTERM call `handle`. After TensorFlow has started a cluster: its coordination
        service's agent installs a SIGTERM handler of its own (TSL's SigtermNotifier), which
        swallows the signal; installing ours afterwards replaces it."""
        self.signum = signum
        signal.signal(signum, self.handle)
        return self

    @property
    def requested(self):
        return self.received_at is not None

    def handle(self, signum=signal.SIGTERM, frame=None):
        if self.requested:
            return  # a second SIGTERM changes nothing: the first one's stop is under way
        self.received_at, self.step_at_signal = self.clock(), self.steps_done
        if self.phase == SETUP:
            self._leave(
                EXIT_CODE,
                f"{self.tag}: SIGTERM with nothing of its own to save (before training, or a task that "
                f"only serves); exiting with code {EXIT_CODE} (to be started again)",
            )
        elif self.phase == DONE:
            self._leave(0, f"{self.tag}: SIGTERM after the marker: exiting")
        # TRAINING: the loop stops at the next point its strategy allows (train_epoch, agree_to_stop);
        # FINISHING: the run is writing its model and marker and finishes them.

    def exit(self, code=EXIT_CODE):
        """End the process once the stop is saved, without the interpreter's teardown: tearing down
        TensorFlow took 7 s (average) to 21 s (multiworker: its collective runtime reaching for a
        peer already gone) on a busy 2-core host, more than the stop itself (bench/preemption.py),
        and all of it would come out of the grace period. Everything the trainer writes is on disk
        by then (checkpoints are written synchronously, the JSON files atomically)."""
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, RuntimeError):
                pass
        self._exit(code)

    def _leave(self, code, line):
        # No print(): the handler can run while the main thread is inside a print to the same
        # buffered stream, which raises "reentrant call". A raw write to the descriptor cannot.
        os.write(self.err_fd, (line + "\n").encode())
        if code:
            write_termination_message(line)
        self._exit(code)

    # the phases, set by the trainer
    def training(self):
        self.phase = TRAINING
        if self.signum is not None:
            self.install(self.signum)  # (again: in case TensorFlow installed its own handler since)

    def finishing(self):
        self.phase = FINISHING

    def done(self):
        """The marker is written: a SIGTERM from now on (or one that came while finishing) ends the process."""
        self.phase = DONE
        if self.requested:
            sys.stdout.flush()
            self._leave(0, f"{self.tag}: SIGTERM came while the run finished: exiting")

    def stopped_line(self, stop, saved, now=None):
        """The line the trainer prints when it stops: the step at the signal against the step saved.
        Its seconds count from when the handler ran, after the compiled call running at the signal."""
        now = self.clock() if now is None else now
        if self.requested:
            cause = (
                f"SIGTERM at step {self.step_at_signal}, stopped at step {stop.step} "
                f"({stop.step - self.step_at_signal} steps and {now - self.received_at:.1f} s later)"
            )
        else:
            cause = f"a peer had SIGTERM: stopped with the group at step {stop.step}"
        where = f"saved {saved}" if saved else "nothing to save (the last checkpoint holds this state)"
        return f"{self.tag}: preempted: {cause}; {where}; exiting with code {EXIT_CODE}"


# ------------------------------------------------------------------ what a resume picks


def checkpoint_number(path):
    """ckpt-<N> -> N (CheckpointManager's names: the epoch, or for a preempted one the step)."""
    return int(path.rsplit("-", 1)[1])


def is_newer(preempted_step, epochs_saved, steps_per_epoch):
    """A state saved at `preempted_step` is newer than the checkpoint of `epochs_saved` epochs
    when it was taken after that epoch's end (one taken earlier is stale: later epochs superseded it)."""
    return preempted_step is not None and preempted_step > epochs_saved * steps_per_epoch


def group_step(preempted_steps, epochs_saved, steps_per_epoch):
    """localsgd: the step every worker saved at on the same stop, if that is newer than the last
    epoch every worker saved; else None (a worker killed before it saved: the group resumes from
    the epoch). `preempted_steps`: each worker's newest preempted step, None when it has none."""
    if not preempted_steps or len(set(preempted_steps)) != 1:
        return None
    step = preempted_steps[0]
    return step if is_newer(step, epochs_saved, steps_per_epoch) else None


def preempted_checkpoint(checkpoint_dir):
    """The newest preempted checkpoint below `checkpoint_dir`, or None."""
    import tensorflow as tf

    return tf.train.latest_checkpoint(os.path.join(checkpoint_dir, PREEMPTED_DIR))


def preempted_step(checkpoint_dir):
    path = preempted_checkpoint(checkpoint_dir)
    return checkpoint_number(path) if path else None


def newest(epoch_checkpoint, checkpoint_dir, steps_per_epoch):
    """The checkpoint to resume a worker from: `epoch_checkpoint` (ckpt-<epoch>, or None), or
    the preempted one in the same directory when it is newer."""
    preempted = preempted_checkpoint(checkpoint_dir)
    epochs = checkpoint_number(epoch_checkpoint) if epoch_checkpoint else 0
    if preempted and is_newer(checkpoint_number(preempted), epochs, steps_per_epoch):
        return preempted
    return epoch_checkpoint


def discard(checkpoint_dir):
    """Remove the preempted checkpoints once the run is done (later epochs superseded them).
    Renamed out of the way first, so that no reader sees a state file naming deleted files."""
    import shutil

    path = os.path.join(checkpoint_dir, PREEMPTED_DIR)
    if os.path.isdir(path):
        doomed = f"{path}.tmp-{os.getpid()}"
        os.replace(path, doomed)
        shutil.rmtree(doomed, ignore_errors=True)


# ------------------------------------------------------------------ saving


class Position:
    """Where in an epoch a checkpoint was taken: the steps done, and the epoch's [loss sum, score
    sum, examples, seconds trained] so far. Zero in every epoch's checkpoint (and in checkpoints
    written before this existed: a restore leaves what it does not find). Create it under the
    strategy's scope, with the epoch counter."""

    def __init__(self):
        import tensorflow as tf

        self.done = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch_steps_done")
        self.sums = tf.Variable(tf.zeros([4], tf.float64), trainable=False, name="epoch_sums")

    @property
    def variables(self):
        """What the tf.train.Checkpoint holds."""
        return [self.done, self.sums]

    def steps(self):
        return int(self.done.numpy())

    def take(self):
        """(steps done, [loss, score, examples] or None, seconds) of the epoch a restored state was
        saved in, then zero: the epoch's own checkpoint must not carry them."""
        done = self.steps()
        if not done:
            return 0, None, 0.0
        values = self.sums.numpy().tolist()
        self.hold(0, [0.0, 0.0, 0.0], 0.0)
        return done, values[:3], values[3]

    def hold(self, done, sums, seconds):
        self.done.assign(done)
        self.sums.assign([float(v) for v in sums] + [float(seconds)])


def save(checkpoint, position, write_dir, stop, seconds, start_step):
    """Save the state at `stop` (every worker of a connected strategy calls it: a
    MultiWorkerMirroredStrategy save needs all of them, so the decision depends only on what every
    worker shares). Returns the path, or None when a checkpoint holds this state already: at an
    epoch's start (the epoch's), or at `start_step`, where this run resumed (the one it restored;
    rewriting a checkpoint in place would not be atomic). TensorFlow's manager writes the data
    under a temporary name and names it in its `checkpoint` state file last, atomically."""
    if stop.done == 0 or stop.step == start_step:
        return None
    import tensorflow as tf

    position.hold(stop.done, stop.sums, seconds)
    manager = tf.train.CheckpointManager(checkpoint, os.path.join(write_dir, PREEMPTED_DIR), max_to_keep=1)
    return manager.save(checkpoint_number=stop.step)


def lost_peer(err):
    """A TensorFlow error of the kind a collective raises when a peer is gone."""
    import tensorflow as tf

    return isinstance(err, tf.errors.OpError)
