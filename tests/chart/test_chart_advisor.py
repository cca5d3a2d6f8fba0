"""The advisor's step before training (advisor.enabled): an init container of the trainer pods that runs
disttrain-advise with the trainer's own flags, never fails the run, and is named in NOTES.txt."""

from chartlib import CHART, NAMESPACE, RELEASE, arg, helm, one, pod_spec, render, render_error, stage_of, values_args


def trainer_spec(docs):
    return pod_spec(one([d for d in docs if stage_of(d) == "trainer"], "Job"))


def test_off_by_default():
    names = [c["name"] for c in trainer_spec(render())["initContainers"]]
    assert "advisor" not in names


def test_enabled_runs_the_advisor_with_the_trainer_flags_after_the_waits():
    spec = trainer_spec(
        render(
            sets=(
                "advisor.enabled=true",
                "advisor.linkMbit=50",
                "advisor.epochsToTarget=3",
                "strategy=localsgd",
                "syncEvery=64",
                "workers=3",
            )
        )
    )
    inits = {c["name"]: c for c in spec["initContainers"]}
    assert list(inits)[-1] == "advisor" and list(inits)[0] == "wait-for-copier"
    advisor, trainer = inits["advisor"], spec["containers"][0]
    assert advisor["args"] == trainer["args"]  # the same run: data, model, batch, threads, cluster names
    assert advisor["image"] == trainer["image"] and advisor["resources"] == trainer["resources"]
    assert advisor["securityContext"] == trainer["securityContext"]
    assert advisor["volumeMounts"] == trainer["volumeMounts"] and advisor["env"] == trainer["env"]
    command = advisor["command"]
    assert command[0] == "disttrain-advise" and "--never-fail" in command and "--local-probe" not in command
    assert arg(advisor | {"args": command}, "--budget-seconds") == "60"
    assert arg(advisor | {"args": command}, "--link-mbit") == "50"
    assert arg(advisor | {"args": command}, "--epochs-to-target") == "3"


def test_the_rendered_command_is_accepted_by_the_real_parser():
    from disttrain_advisor.main import parse_args

    spec = trainer_spec(render(sets=("advisor.enabled=true", "strategy=multiworker", "advisor.budgetSeconds=30")))
    advisor = next(c for c in spec["initContainers"] if c["name"] == "advisor")
    args = parse_args(advisor["command"][1:] + advisor["args"])
    assert (args.never_fail, args.budget_seconds, args.train.strategy, args.local_probe) == (
        True,
        30,
        "multiworker",
        False,
    )
    assert args.train.service  # pods 0 and 1 probe the link between them


def test_one_worker_probes_inside_its_own_pod():
    spec = trainer_spec(render(sets=("advisor.enabled=true", "workers=1")))
    advisor = next(c for c in spec["initContainers"] if c["name"] == "advisor")
    assert "--local-probe" in advisor["command"]


def test_notes_say_how_to_read_the_advice():
    def notes(*sets):
        return helm(
            "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run", *values_args("defaults", sets=sets)
        ).stdout

    on = notes("advisor.enabled=true")
    assert f"kubectl logs -n {NAMESPACE} -c advisor -l batch.kubernetes.io/job-name=" in on
    assert "batch.kubernetes.io/job-completion-index=0" in on and '"advice: ..."' in on
    assert "-c advisor" not in notes()


def test_every_configuration_the_advisor_can_advise_renders_with_the_values_it_prints():
    """The advice's "to follow it: ... --set V" line: for each kind of candidate the chart accepts V (schema and
    refusals) and gives the trainer the flags of that configuration, read back by the trainer's own parser."""
    from disttrain_trainer import perfmodel as pm
    from disttrain_trainer.strategies import cost_base
    from disttrain_trainer.strategies.localsgd import cost as localsgd_cost
    from disttrain_advisor.main import chart_values, run_options
    from disttrain_trainer import parse_config

    probe = pm.Probe(
        step_seconds_alone=0.2,
        step_seconds_pair=0.2,
        weight_bytes=9_100_000,
        weight_tensors=260,
        gradient_bytes=9_100_000,
        gradient_sparse=False,
        latency_seconds=0.001,
        per_byte_seconds=0.0,
        link_measured="loopback",
        train_examples=16_000,
        batch=64,
        steps_per_call=32,
        cores=2,
        one_host=True,
    )
    predictions = pm.predict_all(probe, cost_base.link_of(probe, mbit=50), [1, 3], epochs=16, epochs_to_target=4.58)
    kinds = {}  # one of each kind: the labels without H and the wire
    for p in predictions:
        kinds.setdefault(
            (
                p.strategy,
                pm.diloco(p.strategy, p.options),
                localsgd_cost.overlapped(p.options),
                bool(p.options.get("sync_at_epoch_end")),
                p.options.get("allreduce_dtype"),
            ),
            p,
        )
    # single, average, multiworker in 2 wires, and in 4 wires each: plain localsgd, DiLoCo, DiLoCo with syncs at each
    # epoch's end, DiLoCo with eager updates; the parameter server
    assert len(kinds) == 1 + 1 + 2 + 4 * 4 + 1
    for p in kinds.values():
        sets = chart_values(p)
        job = one([d for d in render(sets=(sets,)) if stage_of(d) == "trainer"], "Job")
        args = parse_config(pod_spec(job)["containers"][0]["args"])
        # (a parameter-server run's Job also holds its chief and parameter servers)
        tasks = p.workers + (1 + p.options["ps"] if p.strategy == "parameterserver" else 0)
        assert job["spec"]["completions"] == tasks, sets
        assert ("single" if p.workers == 1 else args.strategy) == p.strategy, sets
        if p.strategy in ("localsgd", "multiworker"):
            assert run_options(args) == {k: v for k, v in p.options.items() if k != "outer_overlap"} | (
                {} if p.strategy != "localsgd" else {"outer_optimizer": p.options.get("outer_optimizer", "none")}
            ), sets
        if localsgd_cost.overlapped(p.options):
            assert args.strategy_settings.outer_overlap == p.options["outer_overlap"], sets


def test_bad_values_are_refused_by_the_schema():
    assert "budgetSeconds" in render_error(sets=("advisor.enabled=true", "advisor.budgetSeconds=5"))
    assert "linkMbit" in render_error(sets=("advisor.linkMbit=0",))
