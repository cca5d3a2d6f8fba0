"""The aggregator's checks of a parameter-server group's markers (chief, ps, workers)."""

import dataclasses

import pytest

from disttrain_aggregator.checks import check_ps_roles, ps_tasks
from disttrain_aggregator.report_builder import ps_facts
from disttrain_contract import ContractError
from disttrain_contract.trainer_records import TrainerMarker

SHARED = {"workers": 2, "strategy": "parameterserver", "epochs": 3, "init_weights_sha256": "ab"}


def group(ps=1, shards=(717, 717)):
    chief = TrainerMarker(
        worker_index=0,
        role="chief",
        ps=ps,
        tasks=1 + ps + len(shards),
        examples=sum(shards),
        examples_by_worker=list(shards),
        steps_scheduled=69,
        steps_started_by_worker=[40, 29],
        steps_retried=0,
        **SHARED,
    )
    servers = [TrainerMarker(worker_index=1 + i, role="ps", examples=0, **SHARED) for i in range(ps)]
    workers = [
        TrainerMarker(worker_index=1 + ps + i, role="worker", examples=n, **SHARED) for i, n in enumerate(shards)
    ]
    return [chief, *servers, *workers]


def test_a_whole_group_passes_and_is_reported_per_role():
    markers = group(ps=2)
    assert ps_tasks(markers[0], expect=2) == 5
    check_ps_roles(markers)
    facts = ps_facts(markers)
    assert [(t["index"], t["role"], t["examples"]) for t in facts["tasks"]] == [
        (0, "chief", 1434),
        (1, "ps", 0),
        (2, "ps", 0),
        (3, "worker", 717),
        (4, "worker", 717),
    ]
    assert (facts["steps_scheduled"], facts["steps_retried"]) == (69, 0)


@pytest.mark.parametrize(
    "task, change, message",
    [
        (1, {"role": "worker"}, "task 1 of the parameter-server group should be the ps"),
        (3, {"examples": 5}, "worker task 3 reports 5 examples"),
        (0, {"role": "worker"}, "should be the chief"),
    ],
)
def test_roles_out_of_place_are_refused(task, change, message):
    markers = group()
    markers[task] = dataclasses.replace(markers[task], **change)
    with pytest.raises(ContractError, match=message):
        check_ps_roles(markers)


@pytest.mark.parametrize(
    "chief",
    [
        {"role": "worker", "ps": 1, "tasks": 4},
        {"role": "chief", "ps": 0, "tasks": 3},
        {"role": "chief", "ps": 1, "tasks": 5},
    ],
)
def test_a_chief_marker_that_does_not_describe_the_group_is_refused(chief):
    with pytest.raises(ContractError, match="not a parameter-server chief's for 2 workers"):
        ps_tasks(TrainerMarker(worker_index=0, examples=1434, **SHARED, **chief), expect=2)
