"""When localsgd syncs (no TensorFlow: the trainer's Strategy follows it, and the advisor's cost model counts a run's
syncs and re-estimations with it, the same rule on both sides).

Invariants, S steps an epoch, E epochs, H = --sync-every:
  * every H steps of the run, and at the run's last step (S * E): ceil(S * E / H) syncs; H longer than the run
    syncs once, at its end (one-shot averaging);
  * with --sync-at-epoch-end, every H steps counted from each epoch's start and at each epoch's end:
    E * ceil(S / H) syncs, and every epoch's evaluation and checkpoint read the group's model;
  * the batch-norm statistics are re-estimated after a sync whose statistics something reads before the next
    sync replaces them (an epoch's end, the run's end): one sync an epoch where H is shorter than an epoch,
    every sync where H is an epoch or more (statistics.py does the re-estimation).
Every worker computes the same schedule from the same numbers: the syncs (collectives) meet.
"""


def next_sync(step, every, steps_per_epoch, at_epoch_end=False):
    """The step of localsgd's first sync after `step`: every H steps of the run; with --sync-at-epoch-end, every
    H steps counted from each epoch's start and at the epoch's end (where it comes first). (The run's last step
    is a sync as well: the caller's.)"""
    if not at_epoch_end:
        return (step // every + 1) * every
    start = step // steps_per_epoch * steps_per_epoch
    return min(start + ((step - start) // every + 1) * every, start + steps_per_epoch)


def sync_steps(every, steps_per_epoch, epochs, at_epoch_end=False):
    """Every sync of a localsgd run, in order: those of next_sync and the run's last step. The trainer follows
    next_sync; the advisor counts a run's syncs (cost.py) with this list."""
    last, steps, step = steps_per_epoch * epochs, [], 0
    while (step := next_sync(step, every, steps_per_epoch, at_epoch_end)) < last:
        steps.append(step)
    return [*steps, last]


def statistics_read_after_sync(step, following, steps_per_epoch, last_step):
    """Whether anything reads the batch-norm statistics of localsgd's sync at `step` before the next sync (at
    `following`) replaces them: an epoch's end (its held-out evaluation and its checkpoint) or the run's end
    (the published model) comes first. Training normalizes with each batch's own statistics, so only these
    syncs need theirs re-estimated (statistics.py): with H shorter than an epoch, one sync an epoch, the last
    before its end (or the one at its end). The advisor (cost.refreshes) counts them with this rule too."""
    if step >= last_step:
        return True
    next_end = -(-step // steps_per_epoch) * steps_per_epoch  # (the step itself when it ends an epoch)
    return next_end < min(following, last_step)  # (a sync at that end, or the run's last, re-estimates instead)
