"""The advisor's performance model (disttrain_trainer.perfmodel), number by number, and its recommendation."""

import math

import pytest

from disttrain_trainer import perfmodel as pm
from disttrain_trainer.strategies import cost_base
from disttrain_trainer.strategies.localsgd import cost as localsgd_cost
from disttrain_trainer.strategies.multiworker import cost as multiworker_cost
from disttrain_trainer.strategies.parameterserver import cost as parameterserver_cost


def probe(**changes):
    base = dict(
        step_seconds_alone=0.005,
        step_seconds_pair=0.006,
        weight_bytes=5_120_000,
        weight_tensors=4,
        gradient_bytes=5_120_000,
        gradient_sparse=False,
        latency_seconds=0.001,
        per_byte_seconds=0.0,
        link_measured="loopback",
        train_examples=12_800,
        batch=64,
        steps_per_call=32,
        cores=2,
        one_host=True,
        startup_seconds=8.0,
        join_seconds=1.0,
        eval_seconds=0.1,
    )
    base.update(changes)
    return pm.Probe(**base)


def test_a_ring_allreduce_between_two_workers_costs_the_bytes_over_the_link():
    link = cost_base.link_of(probe(latency_seconds=0.0), mbit=10)
    # 9.1 MB at 10 Mbit/s: 9.1e6 * 8 / 1e7 = 7.28 s
    assert cost_base.allreduce_seconds(9_100_000, 2, link) == pytest.approx(7.28)
    # 4 workers: each sends 2 (N-1)/N = 1.5 times the bytes
    assert cost_base.allreduce_seconds(9_100_000, 4, link) == pytest.approx(7.28 * 1.5)
    assert cost_base.allreduce_seconds(9_100_000, 1, link) == 0.0


def test_the_given_link_sets_the_cost_of_a_byte_where_it_is_slower_than_what_the_probe_measured():
    loop = probe(per_byte_seconds=1e-9, latency_seconds=0.002)
    link = cost_base.link_of(loop, mbit=100)
    assert link.per_byte_seconds == pytest.approx(8e-8)  # copying and sending pipelined: the slower stage
    assert link.latency_seconds == 0.002
    assert (
        cost_base.link_of(probe(per_byte_seconds=1e-8), mbit=10_000).per_byte_seconds == 1e-8
    )  # copying slower than the wire
    remote = probe(per_byte_seconds=1e-9, link_measured="peers")
    assert cost_base.link_of(remote, mbit=100).per_byte_seconds == pytest.approx(8e-8)
    assert cost_base.link_of(remote).per_byte_seconds == 1e-9  # none given: as measured
    with pytest.raises(cost_base.ModelError):
        cost_base.link_of(loop, mbit=0)


def test_int8_travels_by_allgather_at_a_quarter_of_the_bytes():
    p = probe(latency_seconds=0.0, weight_bytes=9_100_000, weight_tensors=100)
    link = cost_base.link_of(p, mbit=10)
    int8_bytes = 2_275_000 + 4 * -(-2_275_000 // 256)  # a byte per weight, a float32 scale per block of 256
    assert cost_base.sync_bytes(p, "int8") == int8_bytes
    assert cost_base.sync_seconds(p, link, 2, "int8") == pytest.approx(int8_bytes * 8 / 1e7)  # ~1.8 s
    assert cost_base.sync_seconds(p, link, 2, "float16") == pytest.approx(9_100_000 / 2 * 8 / 1e7)
    # 3 workers: an all-gather brings each worker the other two's bytes
    assert cost_base.sync_seconds(p, link, 3, "int8") == pytest.approx(2 * int8_bytes * 8 / 1e7)


def test_int4_sends_half_the_bytes_of_int8_and_a_scale_per_block():
    p = probe(latency_seconds=0.0, weight_bytes=9_100_000, weight_tensors=100)
    link = cost_base.link_of(p, mbit=10)
    int4_bytes = 2_275_000 // 2 + 4 * -(-2_275_000 // 256)
    assert cost_base.sync_bytes(p, "int4") == int4_bytes
    assert cost_base.sync_seconds(p, link, 2, "int4") == pytest.approx(int4_bytes * 8 / 1e7)  # ~0.9 s
    with pytest.raises(cost_base.ModelError, match="multiworker sends float32 or float16 gradients, not int4"):
        multiworker_cost.gradient_seconds(p, link, 2, "int4")


def test_the_block_wires_are_the_wire_codecs_ones():
    from disttrain_trainer import wire_codecs
    from disttrain_trainer.strategies.options_base import BLOCK_WIRES

    assert cost_base.WIRE_BLOCK == wire_codecs.BLOCK
    assert set(BLOCK_WIRES) == set(wire_codecs.BLOCK_WIRES)
    assert all(cost_base.WIRE_BYTES[wire] == bits / 8 for wire, (_, bits) in wire_codecs.BLOCK_WIRES.items())


def test_steps_per_epoch_follow_the_shards():
    assert cost_base.steps_per_epoch(12_800, 1, 64) == 200
    assert cost_base.steps_per_epoch(12_800, 2, 64) == 100
    assert cost_base.steps_per_epoch(1_437, 2, 64) == 12  # the larger shard, 719 examples


def test_step_time_on_one_host_and_on_many():
    p = probe(step_seconds_alone=0.010, step_seconds_pair=0.0125, cores=2)
    assert cost_base.step_seconds(p, 1) == 0.010
    assert cost_base.step_seconds(p, 2) == pytest.approx(0.0125)
    assert cost_base.step_seconds(p, 4) == pytest.approx(0.025)  # four workers take turns on two cores
    assert cost_base.step_seconds(probe(step_seconds_alone=0.010, step_seconds_pair=0.02, cores=1), 2) == pytest.approx(
        0.02
    )
    separate = probe(step_seconds_alone=0.010, step_seconds_pair=0.011, one_host=False)
    assert cost_base.step_seconds(separate, 8) == 0.011


def test_seconds_per_epoch_of_each_strategy():
    p = probe(latency_seconds=0.001, per_byte_seconds=0.0)
    link = cost_base.link_of(p, mbit=10)  # 8e-7 s per byte
    assert pm.epoch_seconds(p, link, "single", 1)[0] == pytest.approx(200 * 0.005)
    assert pm.epoch_seconds(p, link, "average", 2)[0] == pytest.approx(100 * 0.006)
    # localsgd H=50: 2 syncs per epoch of 5.12 MB float32 (4.096 s each + its latency) and one agreement each
    total, compute, comm, one = pm.epoch_seconds(p, link, "localsgd", 2, {"sync_every": 50}, epochs=1)
    assert one == pytest.approx(0.001 + 5_120_000 * 8e-7 + 0.001)
    assert comm == pytest.approx(2 * one) and compute == pytest.approx(0.6) and total == pytest.approx(0.6 + 2 * one)
    # H longer than the run: the one sync at the end, spread over the run's epochs
    assert pm.epoch_seconds(p, link, "localsgd", 2, {"sync_every": 10_000}, epochs=4)[2] == pytest.approx(one / 4)
    # multiworker: every step's exchange, an agreement per call of 32 steps (4 calls), one epoch-end sum
    total, _, comm, g = pm.epoch_seconds(p, link, "multiworker", 2, {"allreduce_dtype": "float16"})
    assert g == pytest.approx(0.001 + 2_560_000 * 8e-7)
    assert comm == pytest.approx(100 * g + 4 * 0.001 + 0.001)
    # parameterserver: 200 group steps, 100 per worker, each pulling the model and pushing its gradients, 5.12 MB
    # each; the one ps's link carries both workers' traffic, 200 * 5.12 MB each way, and is the bound
    total, _, _, exchange = pm.epoch_seconds(p, link, "parameterserver", 2)
    assert exchange == pytest.approx(2 * 0.001 + 2 * 5_120_000 * 8e-7)
    assert total == pytest.approx(max(100 * (0.006 + exchange), 200 * 5_120_000 * 8e-7))
    assert total == pytest.approx(100 * (0.006 + exchange))  # each worker's own pull and push, one after the other


def test_syncs_at_each_epochs_end_cost_one_short_interval_an_epoch():
    p = probe(latency_seconds=0.001, per_byte_seconds=0.0)
    link = cost_base.link_of(p, mbit=10)
    one = pm.epoch_seconds(p, link, "localsgd", 2, {"sync_every": 30}, epochs=3)[3]
    # 100 steps an epoch per worker, H = 30: 10 syncs in 3 epochs, against 4 an epoch (30, 60, 90 and the end)
    assert pm.epoch_seconds(p, link, "localsgd", 2, {"sync_every": 30}, epochs=3)[2] == pytest.approx(10 * one / 3)
    aligned = {"sync_every": 30, "sync_at_epoch_end": True}
    assert pm.epoch_seconds(p, link, "localsgd", 2, aligned, epochs=3)[2] == pytest.approx(4 * one)
    # an H that divides the epoch: the same syncs either way
    assert pm.epoch_seconds(p, link, "localsgd", 2, {"sync_every": 25, "sync_at_epoch_end": True}, epochs=3)[
        2
    ] == pytest.approx(pm.epoch_seconds(p, link, "localsgd", 2, {"sync_every": 25}, epochs=3)[2])
    assert pm.predict(p, link, "localsgd", 2, aligned).label() == "localsgd H=30 +epoch ends float32"
    with pytest.raises(cost_base.ModelError, match="does not go with outer_overlap"):
        pm.epoch_seconds(p, link, "localsgd", 2, {**aligned, "outer_optimizer": "nesterov", "outer_overlap": "eager"})


def test_a_parameter_server_step_pulls_the_whole_model_and_pushes_the_gradients_rows():
    # an embedding model: 5.12 MB of weights, 0.18 MB of sparse gradient rows per step (the text model's)
    p = probe(
        weight_bytes=5_120_000,
        gradient_bytes=180_000,
        gradient_sparse=True,
        latency_seconds=0.0,
        per_byte_seconds=0.0,
        train_examples=10_240,
        batch=64,
    )
    link = cost_base.link_of(p, mbit=100)
    workers_bound, server_bound, exchange = parameterserver_cost.parameterserver_bounds(p, link, 2)
    assert exchange == pytest.approx((5_120_000 + 180_000) * 8e-8)
    assert server_bound == pytest.approx(160 * 5_120_000 * 8e-8)  # the pulls, out of the server: 65.5 s
    assert pm.epoch_seconds(p, link, "parameterserver", 2)[0] == pytest.approx(max(workers_bound, server_bound))


def test_an_overlapped_sync_waits_only_for_what_the_next_steps_leave_of_its_exchange():
    p = probe(latency_seconds=0.001, per_byte_seconds=0.0)
    link = cost_base.link_of(p, mbit=10)
    options = {"sync_every": 50, "outer_optimizer": "nesterov"}
    # the exchange (4.097 s + the agreement) against 50 steps of 6 ms beside it: 0.3 s of it hidden per sync;
    # the run's end waits for the whole last one
    _, _, waited, exchange = pm.epoch_seconds(p, link, "localsgd", 2, options, epochs=4)
    total, compute, comm, exposed = pm.epoch_seconds(
        p, link, "localsgd", 2, {**options, "outer_overlap": "eager"}, epochs=4
    )
    assert exposed == pytest.approx(exchange - 50 * 0.006)
    # the end: the last exchange, and eager's float32 all-reduce of the weights that makes the workers' models one
    end = (exchange - exposed) + cost_base.allreduce_seconds(5_120_000, 2, link)
    assert comm == pytest.approx((8 * exposed + end) / 4) and total == pytest.approx(compute + comm)
    # H steps longer than the exchange hide it, but lose a third of its time beside it; the end waits for the rest
    _, _, comm, exposed = pm.epoch_seconds(
        p, link, "localsgd", 2, {"sync_every": 1000, "outer_overlap": "eager"}, epochs=100
    )
    # (100 steps an epoch: 10 syncs in 100 epochs, the last one's whole exchange waited for at the end)
    assert exposed == pytest.approx(exchange / 3)
    assert comm == pytest.approx(
        (10 * exchange / 3 + exchange * 2 / 3 + cost_base.allreduce_seconds(5_120_000, 2, link)) / 100
    )
    # delayed updates land the last exchange as it is: no average at the end
    _, _, comm, _ = pm.epoch_seconds(
        p, link, "localsgd", 2, {"sync_every": 1000, "outer_overlap": "delayed"}, epochs=100
    )
    assert comm == pytest.approx((10 * exchange / 3 + exchange * 2 / 3) / 100)
    # a model with batch normalisation re-estimates its statistics once more after the landing
    bn = probe(latency_seconds=0.001, per_byte_seconds=0.0, batch_norm=True, batch_norm_bytes=0)
    _, _, comm_bn, _ = pm.epoch_seconds(
        bn, link, "localsgd", 2, {"sync_every": 1000, "outer_overlap": "delayed"}, epochs=100
    )
    refresh = localsgd_cost.REFRESH_BATCHES * localsgd_cost.FORWARD_SHARE * 0.006 + cost_base.allreduce_seconds(
        0, 2, link
    )
    # 100 steps an epoch: 10 syncs in 100 epochs, each re-estimates, and the end once more
    assert comm_bn == pytest.approx((10 * exchange / 3 + exchange * 2 / 3 + 11 * refresh) / 100)
    label = pm.predict(p, link, "localsgd", 2, {**options, "allreduce_dtype": "int8", "outer_overlap": "eager"}).label()
    assert label == "localsgd H=50 int8 nesterov eager"
    # its outer step lands one sync late: H more steps (50 of the 100 an epoch) to the target than DiLoCo's own (one
    # worker crossing at 10.4 epochs: DiLoCo at 10.9, shown by the 11th evaluation; eager updates at 11.4, the 12th)
    waiting = pm.predict(p, link, "localsgd", 2, options, epochs=10, epochs_to_target=10.4)
    eager = pm.predict(p, link, "localsgd", 2, {**options, "outer_overlap": "eager"}, epochs=10, epochs_to_target=10.4)
    assert (waiting.epochs_to_target, eager.epochs_to_target) == (11, 12)
    # a candidate beside each DiLoCo configuration, and after it in the tie-break
    rows = pm.candidates([2])
    waiting_diloco = [
        o
        for s_, _, o in rows
        if o.get("outer_optimizer") == "nesterov" and not o.get("outer_overlap") and not o.get("sync_at_epoch_end")
    ]
    assert [o for s_, _, o in rows if o.get("outer_overlap")] == [
        {**o, "outer_overlap": "eager"} for o in waiting_diloco
    ]


def test_steps_beside_an_exchange_lose_a_third_of_its_time_and_a_longer_exchange_costs_what_they_leave():
    # the text model's int8 at 50 Mbit/s: 0.23 s on the wire beside 0.63 s of steps: the steps end 0.077 s later
    assert localsgd_cost.overlapped_sync_seconds(0.23, 0.63) == pytest.approx(0.23 / 3)
    # an exchange of 1.2 s beside the same steps: slowed by a third, they do 0.8 s of steps in its 1.2 s, all 0.63 of
    # them, so the exchange ends last and costs what the steps leave of it, as with no slowing
    assert localsgd_cost.overlapped_sync_seconds(1.2, 0.63) == pytest.approx(1.2 - 0.63)
    # where the two meet (0.945 s of exchange), the costs meet: no jump in the prediction
    assert localsgd_cost.overlapped_sync_seconds(0.945, 0.63) == pytest.approx(0.945 - 0.63) == pytest.approx(0.945 / 3)
    assert localsgd_cost.overlapped_sync_seconds(0.0, 0.63) == 0.0
    # in an epoch: 80 steps of 6 ms at H = 100 on a 100 Mbit/s link, float32's 5.12 MB exchange (0.41 s) hidden
    p = probe(latency_seconds=0.0, per_byte_seconds=0.0, train_examples=10_240)
    link = cost_base.link_of(p, mbit=100)
    options = {"sync_every": 100, "outer_optimizer": "nesterov", "outer_overlap": "eager"}
    exchange = localsgd_cost.sync_exchange_seconds(p, link, 2, "float32")
    assert exchange == pytest.approx(5_120_000 * 8e-8) and exchange < 100 * 0.006
    total, compute, comm, exposed = pm.epoch_seconds(p, link, "localsgd", 2, options, epochs=5)
    assert exposed == pytest.approx(exchange / 3)
    # 400 steps: syncs at 100, 200, 300 and 400 (the last one's whole exchange waited for at the end, then the
    # float32 average of the weights)
    end = exchange - exchange / 3 + cost_base.allreduce_seconds(5_120_000, 2, link)
    assert comm == pytest.approx((4 * exchange / 3 + end) / 5) and total == pytest.approx(compute + comm)


def test_a_timed_multiworker_step_adds_what_it_took_beyond_compute_and_exchange():
    # the pair's step 6 ms, the probe's float32 exchange on loopback 1 ms + 5.12 MB at 1e-10 s/B = 1.512 ms:
    # a real multiworker step of 9 ms leaves 1.488 ms to every step, on any link and wire
    p = probe(latency_seconds=0.001, per_byte_seconds=1e-10, multiworker_step_seconds=0.009)
    assert multiworker_cost.multiworker_extra_seconds(p) == pytest.approx(0.009 - 0.006 - 0.001512)
    link = cost_base.link_of(p, mbit=10)
    total, _, comm, g = pm.epoch_seconds(p, link, "multiworker", 2, {"allreduce_dtype": "float16"})
    untimed = pm.epoch_seconds(
        probe(latency_seconds=0.001, per_byte_seconds=1e-10), link, "multiworker", 2, {"allreduce_dtype": "float16"}
    )
    assert comm - untimed[2] == pytest.approx(100 * 0.001488) and total - untimed[0] == pytest.approx(100 * 0.001488)
    assert g == untimed[3]  # the exchange itself is the model's
    # on the probe's own link the prediction is the timed step (plus the agreements per call and per epoch)
    own = pm.epoch_seconds(p, cost_base.link_of(p), "multiworker", 2)[0]
    assert own == pytest.approx(100 * 0.009 + 4 * 0.001 + 0.001)
    # a timed step faster than the model's parts adds nothing (the model is not made faster by noise)
    assert multiworker_cost.multiworker_extra_seconds(probe(multiworker_step_seconds=0.006)) == 0.0
    assert multiworker_cost.multiworker_extra_seconds(probe()) == 0.0  # not timed


def test_a_sparse_gradient_is_gathered_every_step_and_the_workers_agree_once_per_train_call():
    p = probe(gradient_sparse=True, gradient_bytes=400_000, latency_seconds=0.001, per_byte_seconds=0.0)
    link = cost_base.link_of(p, mbit=100)
    _, _, comm, g = pm.epoch_seconds(p, link, "multiworker", 2)
    assert g == pytest.approx(2 * 0.001 + 400_000 * 8e-8)
    # the step function runs one step per call (step.py), but the trainer's calls are of k = 32 steps
    # (strategies/base.py train_epoch), each with one agreement whether to stop: 4 of them for 100 steps
    assert comm == pytest.approx(100 * g + 4 * 0.001 + 0.001)


def test_time_to_target_counts_start_up_evaluations_and_the_join():
    p = probe()
    link = cost_base.link_of(p)
    single = pm.predict(p, link, "single", 1, {}, epochs=5, epochs_to_target=3)
    assert single.time_to_target_seconds == pytest.approx(8.0 + 3 * (1.0 + 0.1))
    local = pm.predict(p, link, "localsgd", 2, {"sync_every": 32}, epochs=5, epochs_to_target=3)
    evaluation = 0.1 * 0.006 / 0.005  # the two workers evaluate at once, at the pair's pace
    # plain averaging of 2 workers: the steps of the one model count, so twice one worker's epochs
    assert local.epochs_to_target == 6
    assert local.time_to_target_seconds == pytest.approx(9.0 + 6 * (local.seconds_per_epoch + evaluation))
    # DiLoCo: one worker's epochs and one outer step (100 steps an epoch: H = 50 is half an epoch), up to the
    # evaluation that shows the target: 3.5 epochs, shown by the fourth
    diloco = pm.predict(
        p, link, "localsgd", 2, {"sync_every": 50, "outer_optimizer": "nesterov"}, epochs=5, epochs_to_target=3
    )
    assert diloco.epochs_to_target == 4 and not diloco.note
    assert diloco.time_to_target_seconds == pytest.approx(9.0 + 4 * (diloco.seconds_per_epoch + evaluation))
    # one worker crossing the target between two evaluations (2.4 epochs): DiLoCo's 2.9 shows at the third, as one
    # worker's own does
    early = pm.predict(
        p, link, "localsgd", 2, {"sync_every": 50, "outer_optimizer": "nesterov"}, epochs=5, epochs_to_target=2.4
    )
    assert (
        early.epochs_to_target == 3
        and pm.predict(p, link, "single", 1, {}, epochs=5, epochs_to_target=2.4).epochs_to_target == 3
    )
    assert [
        pm.predict(p, link, s, 2, {}, epochs=5, epochs_to_target=3).epochs_to_target
        for s in ("multiworker", "average", "parameterserver")
    ] == [6, 6, 3]


def test_diloco_needs_one_outer_step_more_than_one_worker_and_never_more_than_plain_averaging():
    # 12,800 examples, 2 workers, batch 64: 100 steps per worker per epoch; one worker's target at epoch 3
    p = probe()
    link = cost_base.link_of(p)
    steps = {
        h: pm.predict(
            p, link, "localsgd", 2, {"sync_every": h, "outer_optimizer": "nesterov"}, epochs=5, epochs_to_target=3
        )
        for h in (50, 100, 200, 300, 400)
    }
    assert {h: localsgd_cost.outer_steps(p, 2, {"sync_every": h}, 3) for h in steps} == {
        50: 6,
        100: 3,
        200: 1.5,
        300: 1,
        400: 0.75,
    }
    # 3 epochs and H / 100 more, up to plain averaging's 6 (2 workers: twice one worker's), with a note saying why;
    # rounded up to the evaluation that shows the target
    assert {
        h: pm.epochs_needed(p, "localsgd", 2, {"sync_every": h, "outer_optimizer": "nesterov"}, 3)[0] for h in steps
    } == {50: 3.5, 100: 4, 200: 5, 300: 6, 400: 6}
    assert {h: q.epochs_to_target for h, q in steps.items()} == {50: 4, 100: 4, 200: 5, 300: 6, 400: 6}
    assert steps[400].note.startswith("0.8 outer steps before the target: too few") and steps[300].note
    assert not any(steps[h].note for h in (50, 100, 200))
    # plain averaging at the same H: twice one worker's, whatever H
    assert pm.predict(p, link, "localsgd", 2, {"sync_every": 50}, epochs=5, epochs_to_target=3).epochs_to_target == 6
    # 4 workers: 50 steps an epoch each, so H = 100 is two epochs; plain averaging's bound is 4 times one worker's
    assert pm.epochs_needed(p, "localsgd", 4, {"sync_every": 100, "outer_optimizer": "nesterov"}, 3) == (5, False)
    assert pm.epochs_needed(p, "localsgd", 4, {"sync_every": 1000, "outer_optimizer": "nesterov"}, 3) == (12, True)
    assert pm.convergence_factor("multiworker", 4) == 4.0 and pm.convergence_factor("parameterserver", 4) == 1.0


@pytest.mark.parametrize(
    "strategy, workers, message",
    [
        ("multiworker", 1, "needs >= 2 workers"),
        ("single", 2, "single is one worker"),
        ("gossip", 2, "unknown strategy"),
    ],
)
def test_impossible_configurations_are_refused(strategy, workers, message):
    p = probe()
    with pytest.raises(cost_base.ModelError, match=message):
        pm.epoch_seconds(p, cost_base.link_of(p), strategy, workers)


def test_text_model_at_10_mbit_one_worker():
    """The text model (5.1 MB, ~5 ms steps): no sync during training pays at 10 Mbit/s, and one average at
    the end needs twice the epochs at half the time each, evaluated twice as often: one worker is faster."""
    p = probe()
    link = cost_base.link_of(p, mbit=10)
    predictions = pm.predict_all(p, link, [1, 2], epochs=5, epochs_to_target=5)
    choice = pm.recommend(predictions)
    assert (choice.strategy, choice.workers) == ("single", 1)
    sentence = pm.reason(choice, predictions, p, link)
    # (DiLoCo at H=500 would take one outer step in 500 steps: counted as plain averaging, it is not the best pair)
    assert sentence.startswith("the best option with more workers (average, 2 workers) is predicted"), sentence
    # with the epochs' time alone (no evaluations, no start-up) the average would tie: the model says why it loses
    average = next(q for q in predictions if q.strategy == "average")
    assert average.epochs_to_target == 10 and average.seconds_per_epoch == pytest.approx(
        choice.seconds_per_epoch / 2, rel=0.25
    )


def test_a_compute_bound_model_on_a_fast_link_syncs_often():
    p = probe(
        step_seconds_alone=0.165,
        step_seconds_pair=0.17,
        weight_bytes=9_100_000,
        gradient_bytes=8_900_000,
        one_host=False,
        link_measured="peers",
        per_byte_seconds=8e-9,
        train_examples=64_000,
    )
    predictions = pm.predict_all(p, cost_base.link_of(p), [1, 2, 4], epochs=10, epochs_to_target=10)
    choice = pm.recommend(predictions)
    # within 5 % of the fastest, the advice is the simplest: one average at the end, with the most workers
    # fast enough; nothing that syncs rarely without an outer optimizer
    assert choice.workers == 4
    assert not choice.note.startswith("plain averaging")
    assert pm.cost_of(choice) <= min(pm.cost_of(p_) for p_ in predictions) * 1.05


def test_a_slow_second_core_keeps_one_worker():
    p = probe(step_seconds_pair=0.0105)  # two at once barely faster than one (1.05x the work per second)
    predictions = pm.predict_all(p, cost_base.link_of(p), [1, 2], epochs=5, epochs_to_target=5)
    choice = pm.recommend(predictions)
    assert choice.strategy == "single"
    sentence = pm.reason(choice, predictions, p, cost_base.link_of(p))
    assert "(two workers on this host step at 10.5 ms against 5.0 ms alone)" in sentence and "slower" in sentence


def test_a_tie_with_one_worker_is_said_as_a_tie_not_as_0_percent():
    p = probe(step_seconds_pair=0.00624)  # the best pair takes within 0.5 % of one worker's time
    predictions = pm.predict_all(p, cost_base.link_of(p), [1, 2], epochs=5, epochs_to_target=5)
    choice = pm.recommend(predictions)
    best_pair = min((q for q in predictions if q.workers == 2), key=pm.cost_of)
    assert choice.strategy == "single" and abs(pm.cost_of(best_pair) / pm.cost_of(choice) - 1) < 0.005
    sentence = pm.reason(choice, predictions, p, cost_base.link_of(p))
    assert "is predicted to take the same time, to within 1 %" in sentence and "0 %" not in sentence, sentence


def test_plain_rare_averaging_is_not_recommended_but_the_outer_optimizer_is():
    p = probe(
        step_seconds_alone=0.1,
        step_seconds_pair=0.1,
        one_host=False,
        link_measured="peers",
        per_byte_seconds=8e-7,
        weight_bytes=9_100_000,
        gradient_bytes=9_100_000,
        train_examples=256_000,
    )
    # (as if one-shot averaging were known not to work; the overlapped syncs have a test of their own)
    predictions = [
        q
        for q in pm.predict_all(p, cost_base.link_of(p), [2], epochs=20, epochs_to_target=20)
        if q.strategy != "average" and not localsgd_cost.overlapped(q.options)
    ]
    choice = pm.recommend(predictions)
    assert choice.strategy == "localsgd" and choice.options["outer_optimizer"] == "nesterov"
    # int4 at H=500 is the fastest; within 5 % of it the advice syncs at each epoch's end, then more often (H=250),
    # and the wire is no tie-break for localsgd (error feedback: int8 or float16 at H=500, as close, are not
    # preferred for being wider)
    fastest = min(predictions, key=pm.cost_of)
    assert (
        fastest.label() == "localsgd H=500 int4 nesterov"
        and choice.label() == "localsgd H=250 +epoch ends int4 nesterov"
    )
    assert pm.cost_of(choice) <= pm.cost_of(fastest) * 1.05
    assert "localsgd H=250 +epoch ends int4 nesterov <-" in pm.table(predictions, choice)
    without = [q for q in predictions if not q.options.get("sync_at_epoch_end")]
    assert pm.recommend(without).label() == "localsgd H=250 int4 nesterov"
    assert not math.isclose(pm.cost_of(choice), pm.cost_of(fastest))


def test_within_the_tie_diloco_syncs_at_each_epochs_end_so_that_evaluations_read_the_groups_model():
    # MobileNetV2's shape: 125 steps a worker-epoch at 2 workers, 0.2 s steps, 9.1 MB of weights at 50 Mbit/s; one
    # worker crosses the target at 4.58 epochs
    p = probe(
        step_seconds_alone=0.2,
        step_seconds_pair=0.2,
        weight_bytes=9_100_000,
        weight_tensors=260,
        gradient_bytes=9_100_000,
        train_examples=16_000,
        batch=64,
    )
    link = cost_base.link_of(p, mbit=50)
    assert cost_base.steps_per_epoch(p.train_examples, 2, p.batch) == 125
    diloco = {"sync_every": 50, "allreduce_dtype": "int4", "outer_optimizer": "nesterov"}
    at_end = {**diloco, "sync_at_epoch_end": True}
    # an outer step: 50 of 125 steps, or with the epoch's end a third of an epoch (syncs at 50, 100 and 125)
    assert localsgd_cost.outer_step_epochs(p, 2, diloco) == pytest.approx(0.4)
    assert localsgd_cost.outer_step_epochs(p, 2, at_end) == pytest.approx(1 / 3)
    waiting = pm.predict(p, link, "localsgd", 2, diloco, epochs=16, epochs_to_target=4.58)
    ends = pm.predict(p, link, "localsgd", 2, at_end, epochs=16, epochs_to_target=4.58)
    # both show the target at the fifth evaluation (4.98 and 4.91 epochs); the extra sync an epoch costs a little
    assert waiting.epochs_to_target == ends.epochs_to_target == 5
    assert pm.cost_of(waiting) < pm.cost_of(ends) <= pm.cost_of(waiting) * (1 + pm.TIE)
    assert pm.recommend([waiting, ends]) is ends
    sentence = pm.reason(ends, [waiting, ends], p, link)
    assert "one at each epoch's end, so that every evaluation and checkpoint holds the group's model" in sentence
    # the sentence's cost of a sync is the exchange's: a batch-norm model's re-estimation follows one sync an epoch
    norm = pm.Probe(**{**p.to_dict(), "batch_norm": True, "batch_norm_bytes": 100_000})
    normed = pm.predict(norm, link, "localsgd", 2, at_end, epochs=16, epochs_to_target=4.58)
    exchange = cost_base.sync_seconds(norm, link, 2, "int4") + link.latency_seconds
    assert normed.sync_seconds > exchange + 0.5  # (8 forward passes of a 0.2 s step at a third of it)
    assert f"costs {exchange * 1000:.0f} ms at 50 Mbit/s" in pm.reason(normed, [normed], norm, link)
    # a candidate beside each waiting DiLoCo configuration, where H is shorter than an epoch (at 250 and 500 it would
    # sync once an epoch: another H)
    predicted = pm.predict_all(p, link, [2], epochs=16, epochs_to_target=4.58)
    assert sorted({q.options["sync_every"] for q in predicted if q.options.get("sync_at_epoch_end")}) == [50, 100]
    assert not any(
        q.options.get("sync_at_epoch_end")
        and (localsgd_cost.overlapped(q.options) or not pm.diloco(q.strategy, q.options))
        for q in predicted
    )


def test_multiworker_prefers_the_wider_wire_within_the_tie():
    # float16 gradients are rounded with nothing kept for later: among close multiworker rows, float32
    p = probe(
        step_seconds_alone=0.1, step_seconds_pair=0.1, one_host=False, link_measured="peers", per_byte_seconds=1e-10
    )
    rows = [
        q
        for q in pm.predict_all(p, cost_base.link_of(p), [2], epochs=5, epochs_to_target=5)
        if q.strategy == "multiworker"
    ]
    assert pm.cost_of(rows[1]) < pm.cost_of(rows[0]) <= pm.cost_of(rows[1]) * 1.05  # float16 a little faster
    assert pm.recommend(rows).options["allreduce_dtype"] == "float32"


def test_the_probe_round_trips_through_json():
    p = probe()
    assert pm.Probe.from_dict({**p.to_dict(), "unknown": 1}) == p


def test_a_row_without_its_sync_every_gets_the_trainers_default():
    p = probe()
    link = cost_base.link_of(p, mbit=10)
    assert pm.epoch_seconds(p, link, "localsgd", 2, {"sync_every": None}, epochs=2) == pm.epoch_seconds(
        p, link, "localsgd", 2, {"sync_every": 32}, epochs=2
    )
    with pytest.raises(cost_base.ModelError, match="sync_every must be an integer"):
        pm.epoch_seconds(p, link, "localsgd", 2, {"sync_every": 2.5})


def test_the_ceiling_is_each_of_two_whole_data_runs_at_the_pairs_step_time():
    # the time-to-accuracy benchmark's ceiling: two 1-worker runs on all the data, at once (not two half-data workers)
    p = probe(step_seconds_alone=0.005, step_seconds_pair=0.008)
    assert pm.ceiling_seconds_per_epoch(p) == pytest.approx(200 * 0.008)
    single = pm.predict(p, cost_base.link_of(p), "single", 1).seconds_per_epoch
    assert 2 * single / pm.ceiling_seconds_per_epoch(p) == pytest.approx(2 * 0.005 / 0.008)  # 1.25x at most
    average = pm.predict(p, cost_base.link_of(p), "average", 2).seconds_per_epoch
    assert average == pytest.approx(pm.ceiling_seconds_per_epoch(p) / 2)


def test_a_batch_norm_model_is_never_advised_to_average_rarely():
    # compute-bound, fast link: one average at the end is the fastest prediction; with batch norm it is a measured risk
    plain, bn = probe(step_seconds_pair=0.005), probe(step_seconds_pair=0.005, batch_norm=True)
    link = cost_base.link_of(plain)
    assert pm.recommend(pm.predict_all(plain, link, [1, 2], 5)).strategy == "average"
    advice = pm.recommend(pm.predict_all(bn, link, [1, 2], 5))
    assert advice.strategy == "localsgd" and advice.options["sync_every"] <= localsgd_cost.PLAIN_SYNC_RISK
    assert pm.predict(bn, link, "average", 2).accuracy_risk and "batch-norm" in pm.predict(bn, link, "average", 2).note
    outer = {"sync_every": 500, "allreduce_dtype": "int8", "outer_optimizer": "nesterov"}
    # the statistics re-estimated after each sync (the trainer's default): DiLoCo's long H is fine (MobileNetV2 at
    # H=250 ended at 0.976); without the re-estimation it is a risk
    assert not pm.predict(bn, link, "localsgd", 2, outer).accuracy_risk
    assert pm.predict(bn, link, "localsgd", 2, {**outer, "sync_batch_norm_batches": 0}).accuracy_risk
    assert not pm.predict(plain, link, "localsgd", 2, {**outer, "sync_batch_norm_batches": 0}).accuracy_risk


def test_a_batch_norm_sync_adds_the_statistics_refresh():
    plain = probe(step_seconds_pair=0.02)
    bn = probe(step_seconds_pair=0.02, batch_norm=True, batch_norm_bytes=136_000)
    link = cost_base.link_of(plain, 10)
    options = {"sync_every": 100, "allreduce_dtype": "int8", "outer_optimizer": "nesterov"}
    extra = (
        pm.predict(bn, link, "localsgd", 2, options).sync_seconds
        - pm.predict(plain, link, "localsgd", 2, options).sync_seconds
    )
    # 8 forward passes at a third of a 2-worker step, and the statistics all-reduced in float32 over 10 Mbit/s
    t = cost_base.step_seconds(bn, 2)
    assert extra == pytest.approx(8 * t / 3 + link.latency_seconds + 136_000 * link.per_byte_seconds)
    off = pm.predict(bn, link, "localsgd", 2, {**options, "sync_batch_norm_batches": 0})
    assert off.sync_seconds == pytest.approx(pm.predict(plain, link, "localsgd", 2, options).sync_seconds)


def test_the_parameter_server_row_says_it_is_a_lower_bound():
    p = probe()
    row = pm.predict(p, cost_base.link_of(p), "parameterserver", 2, {"ps": 1}, epochs=5)
    assert row.note.startswith("a lower bound: ") and not row.accuracy_risk


def test_a_timed_parameter_server_epoch_is_predicted_as_measured_and_carried_to_other_links_and_counts():
    # 200 group steps; without it, 100 * (0.006 + 2 * 0.001) = 0.8 s per epoch on the probe's link (loopback)
    untimed, timed = probe(), probe(parameterserver_epoch_seconds=2.0)
    assert pm.epoch_seconds(untimed, cost_base.link_of(untimed), "parameterserver", 2)[0] == pytest.approx(0.8)
    assert parameterserver_cost.parameterserver_extra_seconds(timed) == pytest.approx((2.0 - 0.8) / 200)
    row = pm.predict(timed, cost_base.link_of(timed), "parameterserver", 2, {"ps": 1}, epochs=5)
    assert row.seconds_per_epoch == pytest.approx(2.0) and not row.lower_bound and row.note == ""
    # 10 Mbit/s: the bytes of every step on top of the same runtime work per group step, or the server's link
    slow = cost_base.link_of(timed, mbit=10)
    workers_bound, server_bound, _ = parameterserver_cost.parameterserver_bounds(timed, slow, 2)
    assert pm.epoch_seconds(timed, slow, "parameterserver", 2)[0] == pytest.approx(
        max(workers_bound + 200 * (2.0 - 0.8) / 200, server_bound)
    )
    # four workers on the two cores: the same work per group step, the steps shared by more workers
    workers_bound, _, _ = parameterserver_cost.parameterserver_bounds(timed, cost_base.link_of(timed), 4)
    assert pm.epoch_seconds(timed, cost_base.link_of(timed), "parameterserver", 4)[0] == pytest.approx(
        workers_bound + 1.2
    )
    # measured faster than the bounds (noise): nothing is taken off them
    assert parameterserver_cost.parameterserver_extra_seconds(probe(parameterserver_epoch_seconds=0.5)) == 0.0


def test_on_the_probes_own_link_a_parameter_server_run_faster_than_the_bounds_corrects_them():
    # loopback's copying at 2.8 ns a byte prices the workers' exchanges at 100 * (0.006 + 0.002 + 10.24 MB * 2.8 ns)
    # = 3.67 s an epoch and the server's link at 200 * 5.12 MB * 2.8 ns = 2.87 s; the trainer's run on that link,
    # which carried those bytes, took 2.0 s: predicted as measured there
    timed = probe(per_byte_seconds=2.8e-9, parameterserver_epoch_seconds=2.0)
    own = cost_base.link_of(timed)
    workers_bound, server_bound, _ = parameterserver_cost.parameterserver_bounds(timed, own, 2)
    assert (workers_bound, server_bound) == (pytest.approx(3.667, abs=0.001), pytest.approx(2.867, abs=0.001))
    assert pm.epoch_seconds(timed, own, "parameterserver", 2)[0] == pytest.approx(2.0)
    # four workers there: their bound corrected by the same seconds per group step
    workers_bound_4, _, _ = parameterserver_cost.parameterserver_bounds(timed, own, 4)
    assert pm.epoch_seconds(timed, own, "parameterserver", 4)[0] == pytest.approx(
        max(workers_bound_4 + 2.0 - workers_bound, 2.0)
    )
    # on a given link the bytes are priced at its rate, and the bounds stand
    slow = cost_base.link_of(timed, mbit=100)
    workers_bound, server_bound, _ = parameterserver_cost.parameterserver_bounds(timed, slow, 2)
    assert parameterserver_cost.parameterserver_extra_seconds(timed) == 0.0
    predicted = pm.epoch_seconds(timed, slow, "parameterserver", 2)[0]
    assert predicted == pytest.approx(max(workers_bound, server_bound)) and predicted > 2.0


def test_an_untimed_multiworker_row_is_a_lower_bound_and_a_timed_one_is_not():
    untimed, timed = probe(), probe(multiworker_step_seconds=0.009)
    row = pm.predict(untimed, cost_base.link_of(untimed), "multiworker", 2, epochs=5)
    assert row.lower_bound and row.note.startswith("a lower bound: ") and "--budget-seconds" in row.note
    row = pm.predict(timed, cost_base.link_of(timed), "multiworker", 2, epochs=5)
    assert not row.lower_bound and row.note == ""
    assert pm.predict(timed, cost_base.link_of(timed), "parameterserver", 2, {"ps": 1}, epochs=5).lower_bound


def test_a_faster_lower_bound_is_passed_over_and_named():
    # the parameter server's lower bound is the fastest here (DiLoCo gets too few outer steps in 3 epochs);
    # the advice is what was predicted in full
    p = probe(step_seconds_alone=0.1, step_seconds_pair=0.1, multiworker_step_seconds=0.3)
    predictions = pm.predict_all(p, cost_base.link_of(p), [1, 2], epochs=3, epochs_to_target=3)
    fastest = min(predictions, key=pm.cost_of)
    assert fastest.strategy == "parameterserver" and fastest.lower_bound
    choice = pm.recommend(predictions)
    assert not choice.lower_bound and pm.cost_of(choice) > pm.cost_of(fastest)
    sentence = pm.reason(choice, predictions, p, cost_base.link_of(p))
    assert sentence.endswith(
        "; parameterserver (2 workers) is predicted faster, but only as a lower bound "
        "(its note says what was not probed)"
    )
    assert sentence.count("parameterserver") == 1  # (the best option with more workers is one predicted in full)
    # with only lower bounds left, the fastest of them is the advice, and the sentence adds nothing
    bounds = [q for q in predictions if q.lower_bound]
    assert pm.recommend(bounds).lower_bound and "predicted faster" not in pm.reason(
        pm.recommend(bounds), bounds, p, cost_base.link_of(p)
    )


def test_the_table_numbers_each_note_and_prints_it_once():
    p = probe(step_seconds_alone=0.1, step_seconds_pair=0.1)
    predictions = pm.predict_all(p, cost_base.link_of(p), [1, 2], epochs=3, epochs_to_target=3)
    text = pm.table(predictions, pm.recommend(predictions))
    rare = "plain averaging this rarely can lose accuracy (MobileNetV2 did): add --outer-optimizer nesterov"
    # plain localsgd at H = 250 and 500 on each of its 4 wires
    assert text.count(rare) == 1 and sum(1 for q in predictions if q.note == rare) == 8
    number = next(line.split()[0] for line in text.splitlines() if line.endswith(rare))
    rows = [
        line
        for line in text.splitlines()
        if line.startswith("localsgd H=500 int8 ") or line.startswith("localsgd H=250 float16 ")
    ]
    assert [row.split()[-1] for row in rows if "nesterov" not in row] == [number, number]
    assert all(line.startswith("[") for line in text.splitlines()[len(predictions) + 1 :])


def test_each_sync_costs_what_the_trainers_own_sync_took_beyond_its_modelled_exchange_on_any_link():
    # MobileNetV2's numbers: 2.3M weights, the probe's loopback (2 ms a collective, 2 Gbit/s), its int4 sync timed at
    # 91 ms, float32's at 56 ms
    loop = probe(
        weight_bytes=9_080_000,
        step_seconds_alone=0.2,
        step_seconds_pair=0.2,
        latency_seconds=0.002,
        per_byte_seconds=4e-9,
        train_examples=16_000,
        trainer_sync_seconds={"int4": 0.091, "float32": 0.056},
    )
    plain = pm.Probe(**{**loop.to_dict(), "trainer_sync_seconds": {}})
    here = cost_base.link_of(loop)
    own = 0.091 - localsgd_cost.sync_exchange_seconds(loop, here, 2, "int4")
    assert localsgd_cost.sync_own_seconds(loop, "int4") == pytest.approx(own)
    assert own == pytest.approx(
        0.091 - (3 * 0.002 + cost_base.sync_bytes(loop, "int4") * 4e-9)
    )  # the all-gather's 2 + alpha
    assert localsgd_cost.sync_own_seconds(loop, "int8") == 0.0  # not timed: the exchange alone, as before
    assert localsgd_cost.sync_own_seconds(plain, "int4") == 0.0
    # float32 timed faster than its modelled all-reduce: no negative work
    assert (
        localsgd_cost.sync_own_seconds(probe(per_byte_seconds=4e-9, trainer_sync_seconds={"float32": 0.001}), "float32")
        == 0.0
    )
    diloco = {"sync_every": 50, "allreduce_dtype": "int4", "outer_optimizer": "nesterov", "sync_at_epoch_end": True}
    for link in (
        here,
        cost_base.link_of(loop, mbit=50),
    ):  # the same own work on a slower link, beside its longer exchange
        with_own, _, comm, one = pm.epoch_seconds(loop, link, "localsgd", 2, diloco, epochs=16)
        without, _, comm_plain, one_plain = pm.epoch_seconds(plain, link, "localsgd", 2, diloco, epochs=16)
        # 125 steps an epoch at H = 50: syncs at 50, 100 and 125, three an epoch
        assert with_own - without == pytest.approx(3 * own)
        assert comm - comm_plain == pytest.approx(3 * own) and one - one_plain == pytest.approx(own)
    # an overlapped sync waits for its own work too, whatever the steps hide of its exchange
    eager = {"sync_every": 100, "allreduce_dtype": "int4", "outer_optimizer": "nesterov", "outer_overlap": "eager"}
    link = cost_base.link_of(loop, mbit=50)
    syncs = len(localsgd_cost.sync_steps(100, 125, 16))
    assert pm.epoch_seconds(loop, link, "localsgd", 2, eager, epochs=16)[0] - pm.epoch_seconds(
        plain, link, "localsgd", 2, eager, epochs=16
    )[0] == pytest.approx(syncs * own / 16)
    # the advice's sentence prices a sync with its own work
    choice = pm.predict(loop, here, "localsgd", 2, diloco, epochs=16)
    cost = localsgd_cost.sync_exchange_seconds(loop, here, 2, "int4") + own
    assert f"costs {cost * 1000:.0f} ms at loopback" in pm.reason(choice, [choice], loop, here)
