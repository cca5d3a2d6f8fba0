"""The chart works with Helm 3 too (apiVersion v2): the pinned Helm 3.17 lints and renders what Helm 4 renders.

Helm 3.17 validates values with another JSON-schema library than Helm 4 (and
Helm 3.18+), so its refusals are checked here as well.
"""

import re

import pytest

from chartlib import CHART, CI_VALUES, NAMESPACE, RELEASE, VARIANTS, _render, helm, render_error


def test_it_is_helm_3():
    assert helm("version", "--short", major=3).stdout.startswith("v3.")


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_helm3_lints_and_renders_like_helm4(variant):
    values = str(CI_VALUES / VARIANTS[variant])
    assert "0 chart(s) failed" in helm("lint", "--strict", str(CHART), "-f", values, major=3).stdout
    for kube in ("1.28.0", "1.33.0"):
        out = helm(
            "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", kube, "-f", values, major=3
        )
        assert without_token(out.stdout) == without_token(_render(variant, (), kube, None, ()))


def without_token(manifests):
    """The generated API token is random in every rendering (no cluster for `lookup` to find the last one)."""
    return re.sub(r'(?m)^  token: "[A-Za-z0-9+/=]+"$', '  token: "<random>"', manifests)


@pytest.mark.parametrize(
    "sets, expected",
    [
        (["workers=0"], "workers: Must be greater than or equal to 1"),
        (["workers=2", "storage.accessMode=ReadWriteOnce"], "storage.accessMode ReadWriteOnce cannot be shared"),
        (["strategy=allreduce"], "strategy must be one of the following"),
        (["storage.storageClass="], "no storage configured"),
        (["bogus=1"], "Additional property bogus is not allowed"),
        (["learningRate=0"], "learningRate"),
    ],
)
def test_helm3_schema_refusals_are_clear(sets, expected):
    err = render_error(
        sets=tuple(sets),
        extra=("--set", "storage.storageClass=nfs-client") if "storage.storageClass=" not in sets else (),
        major=3,
    )
    assert expected in err, err


def test_helm3_accepts_decimal_strings_from_set():
    helm(
        "template",
        RELEASE,
        str(CHART),
        "--set",
        "storage.storageClass=x",
        "--set",
        "server.allowedHosts={demo.example.com}",
        "--set",
        "learningRate=0.0003",
        "--set",
        "data.testFraction=0.25",
        major=3,
    )
