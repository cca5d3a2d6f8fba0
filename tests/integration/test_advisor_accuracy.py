"""bench/advisor_accuracy.py on a small hand-made results file (the shape of the time-to-accuracy benchmark's
rows), from a real advisor probe of a user's table on this host (conftest.advisor_probe): the predictions against
the rows per (task, link)."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def row(link, strategy, workers, seconds_per_epoch, time_to_target, reached=True, **options):
    mbit = {"loopback": None, "10mbit": 10}[link]
    return {
        "task": "cancer",
        "link": link,
        "link_mbit": mbit,
        "strategy": strategy,
        "workers": workers,
        "options": {"batch": 64, "threads": 1, **options},
        "target": 0.95,
        "metric": "accuracy",
        "reached": reached,
        "time_to_target_seconds": time_to_target if reached else None,
        "cap_seconds": 120,
        "wall_seconds": 14.0,
        "seconds_per_epoch": seconds_per_epoch,
        "final_metric": 0.97,
        "epochs": 10,
        "status": "reached" if reached else "capped",
    }


@pytest.fixture
def results_file(tmp_path):
    rows = [
        # (the curve: [seconds, epoch, held-out value] per evaluation)
        {**row("loopback", "single", 1, 0.030, 9.0), "curve": [[3.0, 1, 0.90], [6.0, 2, 0.94], [9.0, 3, 0.951]]},
        row("loopback", "ceiling", 2, 0.017, 8.0),
        row("loopback", "average", 2, 0.017, 8.1),
        row("loopback", "localsgd", 2, 0.020, 8.3, sync_every=32, outer_optimizer="nesterov", allreduce_dtype="int8"),
        row("loopback", "multiworker", 2, 0.045, 10.5),
        row("10mbit", "single", 1, 0.030, 9.0),
        # (the seconds each worker's syncs took an epoch, as the trainer records them)
        {
            **row("10mbit", "localsgd", 2, 0.150, 12.0, sync_every=32, allreduce_dtype="float32"),
            "sync_seconds_per_epoch": [0.11, 0.12],
        },
        row("10mbit", "multiworker", 2, 1.500, 0, reached=False),
        # a configuration the trainer refused: stored, never trained, nothing to compare
        {
            **row("10mbit", "localsgd", 2, None, 0, reached=False, sync_every=32, allreduce_dtype="bfloat8"),
            "status": "not available",
            "wall_seconds": None,
            "final_metric": None,
        },
    ]
    path = tmp_path / "time_to_accuracy.json"
    path.write_text(json.dumps({"benchmark": "time_to_accuracy", "results": {"rows": rows}}))
    return path


def test_predicted_against_measured_per_row_and_the_advice_per_group(results_file, advisor_probe, tmp_path):
    assert advisor_probe[0].returncode == 0, advisor_probe[0].stderr
    out = tmp_path / "advisor_accuracy.json"
    result = subprocess.run(
        [
            sys.executable,
            "bench/advisor_accuracy.py",
            "--results",
            results_file,
            "--out",
            out,
            "--probe",
            f"cancer={advisor_probe[2]}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    text = result.stdout
    assert "-- cancer, 10mbit:" in text and "-- cancer, loopback:" in text
    assert text.count(" error ") == 8, text  # every trained row predicted, with its relative error
    assert "measured (none: not available)" in text
    assert text.count("the advice against the measurements: ") == 2
    document = json.loads(out.read_text())["results"]
    rows = {(r["link"], r["strategy"]): r for r in document["rows"] if r["measured_seconds_per_epoch"] is not None}
    for r in document["rows"]:
        if r["measured_seconds_per_epoch"] is None:
            assert r["relative_error"] is None
            continue
        assert r["relative_error"] == pytest.approx(
            (r["predicted_seconds_per_epoch"] - r["measured_seconds_per_epoch"]) / r["measured_seconds_per_epoch"]
        )
    # beside the row's measured syncs, the syncs' predicted share of its seconds per epoch
    synced = rows[("10mbit", "localsgd")]
    assert synced["measured_sync_seconds"] == [0.11, 0.12] and synced["predicted_communication_seconds"] > 0
    assert "its syncs " in text and "measured 0.11-0.12 (the two workers', each with its waits for the other)" in text
    assert "predicted_communication_seconds" not in rows[("loopback", "localsgd")]
    # the same configuration costs more on the slow link: a float32 sync of the weights every 32 steps
    assert (
        rows[("10mbit", "localsgd")]["predicted_seconds_per_epoch"]
        > rows[("loopback", "localsgd")]["predicted_seconds_per_epoch"]
    )
    groups = {g["link"]: g for g in document["groups"]}
    assert groups["10mbit"]["recommendation"]["strategy"] != "multiworker"
    # the 1-worker row's curve crossed the target between epochs 2 and 3 (0.94 to 0.951, 0.95 at 10/11 of the
    # way); without a curve: 9 s into its 14 s run of 10 epochs
    assert groups["loopback"]["epochs_to_target"] == pytest.approx(2 + 10 / 11)
    assert groups["10mbit"]["epochs_to_target"] == pytest.approx(9.0 / 14.0 * 10)
    assert document["summary"]["rows"] == 9 and document["summary"]["groups"] == 2


def test_a_results_file_without_rows_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"results": {}}))
    result = subprocess.run(
        [sys.executable, "bench/advisor_accuracy.py", "--results", bad, "--out", tmp_path / "o.json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and result.stderr.strip().startswith("error: ") and "has no rows" in result.stderr
    assert not (tmp_path / "o.json").exists()


def test_a_row_with_its_own_probe_is_predicted_from_it(results_file, advisor_probe, tmp_path):
    """A row the benchmark probed just before it (--probe-each-row) is predicted from that probe; its error against
    the probe given for the whole file stays beside it. Here the row's probe timed every step twice as slow."""
    assert advisor_probe[0].returncode == 0, advisor_probe[0].stderr
    probe = json.loads(advisor_probe[2].read_text())["probe"]
    slower = {**probe, **{k: 2 * probe[k] for k in ("step_seconds_alone", "step_seconds_pair") if probe.get(k)}}
    document = json.loads(results_file.read_text())
    for r in document["results"]["rows"]:
        if (r["link"], r["strategy"]) == ("loopback", "localsgd"):
            r["probe"] = slower
            # the same configuration measured before, since measured again: checked, but not the newest
            document["earlier_rows"] = [dict(r, seconds_per_epoch=2 * r["seconds_per_epoch"])]
    results_file.write_text(json.dumps(document))
    out = tmp_path / "advisor_accuracy.json"
    result = subprocess.run(
        [
            sys.executable,
            "bench/advisor_accuracy.py",
            "--results",
            results_file,
            "--out",
            out,
            "--probe",
            f"cancer={advisor_probe[2]}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # (the row, and its earlier measurement, which kept the probe taken before it)
    assert result.stdout.count("(the row's own probe; the sitting's: ") == 2, result.stdout
    checked = json.loads(out.read_text())["results"]
    rows = {(r["link"], r["strategy"]): r for r in checked["rows"] if not r["replaced"]}
    own = rows[("loopback", "localsgd")]
    assert own["probe"] == "row" and own["same_sitting"]
    from_given = own["relative_error_sitting_probe"]
    # twice the step time, the same syncs: the prediction from the row's own probe is slower, by at most twice
    assert 1.2 < (1 + own["relative_error"]) / (1 + from_given) <= 2.0 + 1e-9
    assert {r["probe"] for k, r in rows.items() if k != ("loopback", "localsgd")} == {"another"}
    replaced = [r for r in checked["rows"] if r["replaced"]]
    assert len(replaced) == 1 and replaced[0]["probe"] == "row"
    assert replaced[0]["measured_seconds_per_epoch"] == 2 * own["measured_seconds_per_epoch"]
    summary = checked["summary"]
    assert summary["own_probe_rows"] == 2 and summary["current_same_sitting_rows"] == 1
