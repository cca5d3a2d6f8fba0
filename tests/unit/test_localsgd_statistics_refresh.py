"""localsgd re-estimates the batch-norm statistics only after a sync whose statistics something reads before
the next sync replaces them: the last sync before an epoch's end (its held-out evaluation and checkpoint)
and the run's last (the published model). With --sync-at-epoch-end the syncs restart at each epoch's
start and one falls on its end, which re-estimates. Training normalizes with each batch's own statistics, and each
re-estimation replaces the last whole, so the ones in between changed nothing anyone read. The rule is
one function, which the trainer follows and the advisor counts with; here it is checked step by step, the
trainer's sync loop with its collaborators replaced by recorders, and the advisor's count against both."""

import pytest

from disttrain_trainer.strategies.localsgd import cost as localsgd_cost
from disttrain_trainer.strategies.localsgd import Strategy as LocalSGD
from disttrain_trainer.strategies.localsgd.schedule import next_sync, statistics_read_after_sync, sync_steps


def refreshed(every, steps_per_epoch, epochs, at_epoch_end=False):
    last = steps_per_epoch * epochs
    return [
        s
        for s in sync_steps(every, steps_per_epoch, epochs, at_epoch_end)
        if statistics_read_after_sync(s, next_sync(s, every, steps_per_epoch, at_epoch_end), steps_per_epoch, last)
    ]


def test_one_sync_an_epoch_the_last_before_its_end_and_the_runs_last():
    # MobileNetV2 on distorted digits: 125 steps an epoch per worker, H = 50; epochs end at 125, 250, 375, 500
    assert refreshed(50, 125, 4) == [100, 250, 350, 500]
    # an epoch that ends between syncs, and a run whose last step is no multiple of H: the final sync re-estimates,
    # the one before it (45, no epoch's end before 46) does not
    assert refreshed(5, 23, 2) == [20, 46]


def test_a_sync_on_the_epochs_end_re_estimates_and_the_one_before_it_does_not():
    # 100 = 2 * 50 ends epoch 1 with a sync of its own: the sync at 50 is read by nobody
    assert refreshed(50, 100, 2) == [100, 200]


@pytest.mark.parametrize("every, steps_per_epoch", [(23, 23), (250, 125), (1000, 100)])
def test_every_sync_re_estimates_where_h_is_an_epoch_or_longer(every, steps_per_epoch):
    epochs = 4 * every // steps_per_epoch
    assert refreshed(every, steps_per_epoch, epochs) == [*range(every, steps_per_epoch * epochs + 1, every)]


def test_syncs_at_each_epochs_end_count_h_from_the_epochs_start():
    # 125 steps an epoch, H = 50: 50, 100, the end at 125, then 175, 225, 250 ...; the end's sync re-estimates
    assert sync_steps(50, 125, 3, at_epoch_end=True) == [50, 100, 125, 175, 225, 250, 300, 350, 375]
    assert refreshed(50, 125, 3, at_epoch_end=True) == [125, 250, 375]
    # H of an epoch or more: once an epoch, at its end; H dividing the epoch: the same syncs as without
    assert sync_steps(500, 125, 3, at_epoch_end=True) == [125, 250, 375]
    assert sync_steps(25, 100, 2, at_epoch_end=True) == sync_steps(25, 100, 2) == [*range(25, 201, 25)]
    # without: every H steps of the run and the run's last
    assert sync_steps(50, 125, 2) == [50, 100, 150, 200, 250]
    assert sync_steps(1000, 100, 5) == [500]


@pytest.mark.parametrize(
    "every, steps_per_epoch, epochs, at_epoch_end",
    [
        (50, 125, 16, False),
        (5, 23, 2, False),
        (1, 7, 3, False),
        (250, 125, 16, False),
        (32, 250, 10, False),
        (100, 100, 5, False),
        (50, 125, 16, True),
        (5, 23, 2, True),
        (250, 125, 4, True),
        (30, 100, 3, True),
    ],
)
def test_the_advisor_counts_the_syncs_the_trainer_re_estimates_at(every, steps_per_epoch, epochs, at_epoch_end):
    calls, syncs = [], []
    s = LocalSGD.__new__(LocalSGD)  # (no cluster: the sync's own steps are replaced by recorders)
    s.every, s.overlap, s.epochs, s.estimations, s.notice, s.synced_at = every, None, epochs, 0, None, None
    s.syncs, s.sync_seconds = 0, 0.0
    s.at_epoch_end = at_epoch_end
    s._sync = lambda: syncs.append(s.synced_at_call) or 7  # the synced weights' checksum
    s._refresh = object()
    s.refresh = lambda: calls.append(s.synced_at_call) or 8
    per_epoch, step = [], 0
    for _ in range(epochs):
        # the loop's train calls: cut at each sync (steps_to_sync) and at the epoch's end, as base.train_epoch does
        s.steps_per_epoch, done = steps_per_epoch, 0
        before = len(calls)
        while done < steps_per_epoch:
            steps = min(3, steps_per_epoch - done, s.steps_to_sync(step))
            done, step = done + steps, step + steps
            s.synced_at_call = step
            s.after_steps(step)
        if len(per_epoch) == epochs - 1:
            s.finish(step)
        per_epoch.append(len(calls) - before)
    assert syncs == sync_steps(
        every, steps_per_epoch, epochs, at_epoch_end
    )  # the trainer's syncs, as the advisor lists them
    assert s.syncs == len(syncs) and s.sync_seconds > 0  # (no epoch's record was taken: all the run's, timed)
    assert calls == refreshed(every, steps_per_epoch, epochs, at_epoch_end)
    assert localsgd_cost.refreshes(steps_per_epoch, every, epochs, at_epoch_end) == len(calls)
    if every < steps_per_epoch or at_epoch_end:
        assert per_epoch == [1] * epochs  # one an epoch


def test_the_epoch_record_counts_its_re_estimations():
    s = LocalSGD.__new__(LocalSGD)
    s.overlap, s._refresh, s.synced_at, s.synced_checksum, s.estimations = None, object(), 100, 7, 1
    s.syncs, s.sync_seconds = 3, 1.23456
    facts = s.epoch_facts()
    assert facts["batch_norm_re_estimations"] == 1 and s.estimations == 0
    # and its syncs, with the seconds training stood still for them; the next epoch counts its own
    assert (facts["syncs"], facts["sync_sec"], s.syncs, s.sync_seconds) == (3, 1.235, 0, 0.0)
    s._refresh = None  # a model without batch normalisation: nothing to count
    assert "batch_norm_re_estimations" not in s.epoch_facts()
