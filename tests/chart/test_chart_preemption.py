"""The trainer Job on preemption: a trainer that saved on SIGTERM exits 75, which the Job does not
count against its retries (podFailurePolicy Ignore on that exit code: a plain pod delete has no
DisruptionTarget condition), and its pods get trainer.terminationGracePeriodSeconds to save."""

import pytest

from chartlib import CHART, KUBE_VERSIONS, OLD_KUBE_VERSIONS, load_values, one, pod_spec, render, render_error
from disttrain_contract.errors import PREEMPTED_EXIT_CODE

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="pip install kubernetes-validate (see tests/chart)"
)

STORAGE = ("storage.storageClass=nfs-client",)
IGNORE_PREEMPTED = {
    "action": "Ignore",
    "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [PREEMPTED_EXIT_CODE]},
}


def rules_of(job):
    # (1.26-1.28: an empty onPodConditions beside onExitCodes, for their OpenAPI; it means unset)
    return [{k: v for k, v in rule.items() if v != []} for rule in job["spec"]["podFailurePolicy"]["rules"]]


@pytest.mark.parametrize("strategy", ["average", "multiworker", "localsgd", "parameterserver"])
@pytest.mark.parametrize("kube", ["1.26.0", "1.28.0", *KUBE_VERSIONS])
def test_the_trainer_job_ignores_the_preempted_exit_code_and_validates_strictly(kube, strategy):
    docs = render(sets=(f"strategy={strategy}",), kube_version=kube)
    job = one(docs, "Job", "trainer")
    rules = rules_of(job)
    assert rules[0] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert rules[1] == {
        "action": "FailJob",
        "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [2]},
    }
    assert rules[2] == IGNORE_PREEMPTED
    assert (
        pod_spec(job)["terminationGracePeriodSeconds"]
        == load_values("defaults")["trainer"]["terminationGracePeriodSeconds"]
    )
    kubernetes_validate.validate(job, kube, strict=True)


def test_only_the_trainer_ignores_it():
    """The other stages do not save on SIGTERM: an exit 75 of theirs is a failure like any other."""
    docs = render(sets=("sweep.enabled=true",))
    for stage in ("aggregator", "sweep"):
        rules = rules_of(one(docs, "Job", stage))
        assert [rule["action"] for rule in rules] == ["Ignore", "FailJob"] and "onPodConditions" in rules[0]


@pytest.mark.parametrize("kube", OLD_KUBE_VERSIONS[:1])
def test_without_pod_failure_policies_the_grace_period_still_applies(kube):
    job = one(render(kube_version=kube), "Job", "trainer")
    assert "podFailurePolicy" not in job["spec"]
    assert pod_spec(job)["terminationGracePeriodSeconds"] >= 1


def test_the_grace_period_comes_from_values_and_has_a_documented_default():
    job = one(render(sets=("trainer.terminationGracePeriodSeconds=300",)), "Job", "trainer")
    assert pod_spec(job)["terminationGracePeriodSeconds"] == 300
    values = (CHART / "values.yaml").read_text()
    assert "## @param trainer.terminationGracePeriodSeconds " in values
    assert load_values("defaults")["trainer"]["terminationGracePeriodSeconds"] > 30  # above Kubernetes' default


@pytest.mark.parametrize("value", ["0", "-5", "soon", "1.5"])
def test_the_schema_refuses_a_grace_period_that_is_no_whole_positive_number(value):
    err = render_error(sets=(*STORAGE, f"trainer.terminationGracePeriodSeconds={value}"))
    assert "/trainer/terminationGracePeriodSeconds" in err, err
