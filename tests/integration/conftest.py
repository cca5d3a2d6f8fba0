"""Fixtures of the integration tests: a user's tables, copied once per session."""

import pytest

from own_models import breast_cancer_csv, copied_table, diabetes_csv, wine_csv


def copied(tmp_path_factory, name, write_csv, *copier_args):
    """A table copied once per session into 2 shards; each test copies the data directory into its own workdir."""
    return copied_table(tmp_path_factory.mktemp(name), name, write_csv, *copier_args)


@pytest.fixture(scope="session")
def cancer_data(tmp_path_factory):
    return copied(tmp_path_factory, "cancer", breast_cancer_csv)


@pytest.fixture(scope="session")
def diabetes_data(tmp_path_factory):
    return copied(
        tmp_path_factory, "diabetes", diabetes_csv, "--label-column", "progression", "--problem", "regression"
    )


@pytest.fixture(scope="session")
def wine_data(tmp_path_factory):
    return copied(tmp_path_factory, "wine", wine_csv)


@pytest.fixture(scope="session")
def advisor_probe(cancer_data, tmp_path_factory):
    """One real `disttrain-advise` probe of the cancer table (two TensorFlow processes on loopback, a 40 s budget:
    stages.ADVISOR_BUDGET_SECONDS),
    shared by the advisor's tests: (the finished process, its wall seconds, the path of its --json file)."""
    import os
    import subprocess
    import time

    from stages import ADVISOR_BUDGET_SECONDS, BIN

    out = tmp_path_factory.mktemp("advisor") / "advice.json"
    started = time.monotonic()
    result = subprocess.run(
        [
            os.path.join(BIN, "disttrain-advise"),
            "--data",
            str(cancer_data),
            "--threads",
            "1",
            "--epochs",
            "5",
            "--budget-seconds",
            str(ADVISOR_BUDGET_SECONDS),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=ADVISOR_BUDGET_SECONDS + 50,
    )
    return result, time.monotonic() - started, out
