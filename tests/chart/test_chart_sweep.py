"""The sweep stage of the chart (sweep.enabled): its Indexed Job, the trainer's wait for it and --params-from."""

import pytest

from chartlib import arg, containers, one, pod_spec, render, render_error, stage_of

ON = (
    "sweep.enabled=true",
    "sweep.trials=9",
    "sweep.parallelism=3",
    "sweep.space.learningRate=1e-4:1e-2",
    "sweep.space.batch=32\\,64",
)


def job(docs, stage):
    return one([d for d in docs if stage_of(d) == stage], "Job")


def test_off_by_default():
    docs = render()
    assert not [d for d in docs if stage_of(d) == "sweep"]
    trainer = pod_spec(job(docs, "trainer"))
    assert "--params-from" not in containers(trainer, init=False)[0]["args"]
    assert [c["name"] for c in trainer["initContainers"]] == ["wait-for-copier"]


def test_enabled_sweep_job_and_trainer_chain():
    docs = render(sets=ON)
    sweep = job(docs, "sweep")
    assert sweep["spec"]["completionMode"] == "Indexed"
    assert sweep["spec"]["completions"] == sweep["spec"]["parallelism"] == 3
    spec = pod_spec(sweep)
    (main,) = spec["containers"]
    assert main["image"].split("/")[-1].startswith("disttrain-sweep:")
    assert (
        arg(main, "--trials") == "9" and arg(main, "--learning-rate") == "1e-4:1e-2" and arg(main, "--batch") == "32,64"
    )
    assert "--epochs" not in main["args"]  # empty space value: the task's default
    copier = pod_spec(job(docs, "copier"))
    assert spec["securityContext"] == copier["securityContext"]
    assert main["securityContext"] == copier["containers"][0]["securityContext"]
    assert main["securityContext"]["readOnlyRootFilesystem"] is True and main["resources"]["limits"]
    (wait,) = spec["initContainers"]
    assert wait["name"] == "wait-for-copier" and wait["command"][-1].endswith("/data/_SUCCESS")
    trainer = pod_spec(job(docs, "trainer"))
    waits = {c["name"]: c for c in trainer["initContainers"]}
    assert waits["wait-for-sweep"]["command"][-1].endswith("/sweep/_SUCCESS")
    trainer_main = trainer["containers"][0]
    assert arg(trainer_main, "--params-from").endswith("/sweep/best.json")
    assert arg(trainer_main, "--workdir") == arg(main, "--workdir")


def test_sweep_args_are_accepted_by_the_real_parser():
    from disttrain_sweep.main import parse_args

    main = pod_spec(job(render(sets=ON), "sweep"))["containers"][0]
    args = parse_args(main["args"])
    assert (args.trials, args.learning_rate, args.pruner) == (9, "1e-4:1e-2", "median")
    assert (args.strategy, args.trial_workers, args.sync_every) == ("average", 1, None)  # trials of one worker


def test_localsgd_sweep_searches_sync_every_with_groups_of_trainers():
    from disttrain_sweep.main import parse_args

    docs = render(sets=ON + ("strategy=localsgd", "sweep.trialWorkers=3", "sweep.space.syncEvery=16\\,64"))
    args = parse_args(pod_spec(job(docs, "sweep"))["containers"][0]["args"])
    assert (args.strategy, args.trial_workers, args.sync_every) == ("localsgd", 3, "16,64")
    trainer_main = pod_spec(job(docs, "trainer"))["containers"][0]
    assert arg(trainer_main, "--strategy") == "localsgd" and arg(trainer_main, "--params-from").endswith(
        "/sweep/best.json"
    )


def test_sync_every_search_needs_localsgd():
    err = render_error("defaults", sets=("sweep.enabled=true", "sweep.space.syncEvery=16\\,64"))
    assert "sweep.space.syncEvery is searched by localsgd trials only, and strategy is average" in err


@pytest.mark.parametrize(
    "bad",
    [
        "sweep.pruner=random",
        "sweep.space.batch=abc",
        "sweep.parallelism=0",
        "sweep.validationFraction=1",
        "sweep.bogus=1",
        "sweep.trialWorkers=1",
    ],
)
def test_schema_refuses_bad_sweep_values(bad):
    assert "sweep" in render_error("defaults", sets=("sweep.enabled=true", bad))
