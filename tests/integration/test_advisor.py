"""disttrain-advise on a real probe: two real TensorFlow processes on loopback, a user's table, a small budget."""

import json
import os
import subprocess
import sys

import pytest

from stages import ADVISOR_BUDGET_SECONDS as BUDGET
from stages import BIN

pytestmark = pytest.mark.slow


def advise(*args, timeout=BUDGET + 30):
    return subprocess.run(
        [os.path.join(BIN, "disttrain-advise"), *map(str, args)], capture_output=True, text=True, timeout=timeout
    )


def test_the_probe_finishes_within_its_budget_and_prints_a_table(advisor_probe):
    result, elapsed, out = advisor_probe  # (conftest.py: --budget-seconds BUDGET)
    assert result.returncode == 0, result.stdout + result.stderr
    assert elapsed < BUDGET + 3, f"the probe took {elapsed:.1f} s with a budget of {BUDGET} s"
    text = result.stdout
    assert "strategy" in text and "s/epoch" in text and "<-" in text, text
    for row in ("single", "average", "multiworker", "localsgd H=32 float32", "parameterserver"):
        assert f"\n{row} " in text, f"no {row} row:\n{text}"
    advice = [line for line in text.splitlines() if line.startswith("advice: ")]
    assert len(advice) == 1 and advice[0].endswith("."), text
    document = json.loads(out.read_text())
    probe = document["probe"]
    assert 0 < probe["step_seconds_alone"] < 1 and 0 < probe["step_seconds_pair"] < 1
    assert probe["weight_bytes"] > 0 and probe["latency_seconds"] > 0 and probe["link_measured"] == "loopback"
    assert document["recommendation"]["reason"] in advice[0]
    follow = text.splitlines()[text.splitlines().index(advice[0]) + 1]
    assert follow.startswith("to follow it: helm upgrade ") and follow.endswith(
        "--set " + document["recommendation"]["chart_values"]
    ), text
    assert {p["strategy"] for p in document["predictions"]} == {
        "single",
        "average",
        "multiworker",
        "localsgd",
        "parameterserver",
    }
    assert os.listdir(out.parent) == ["advice.json"], "a temporary file was left"

    # the same measurements, predicted for a slow link, with no probe: a sync now costs seconds
    slow = advise("--from-probe", out, "--link-mbit", 1, "--epochs", 5, timeout=30)
    assert slow.returncode == 0, slow.stderr
    assert "1 Mbit/s" in slow.stdout and "probing" not in slow.stdout


def test_the_text_models_multiworker_steps_syncs_and_parameter_server_epochs_are_timed(tmp_path):
    """The trainer's own localsgd sync in each wire. The text model's multiworker step (35 ms here) sizes the timed calls near a rounding edge (0.5 s / step):
    both workers must time calls of the same size, or their per-step collectives mismatch and TensorFlow aborts
    the phase; the advice then had only a lower bound for multiworker. Then the trainer's own parameter-server run
    (an epoch of about 3 s). A budget long enough for every phase: on a slow host beside CI's image builds the
    phases before the parameter server's took 65 s, and its run wanted 31 s of the 25 a 90 s budget left. The
    probe's phases each have a cap of their own, so a longer budget lengthens nothing on a fast host."""
    from stages import stage

    stage("copier", "--source", "sample:movie-reviews", "--n-shards", 2, "--workdir", tmp_path / "work")
    out, scratch = tmp_path / "advice.json", tmp_path / "tmp"
    scratch.mkdir()
    result = subprocess.run(
        [
            os.path.join(BIN, "disttrain-advise"),
            "--workdir",
            str(tmp_path / "work"),
            "--threads",
            "1",
            "--epochs",
            "5",
            "--budget-seconds",
            "130",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=200,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "not timed" not in result.stderr and "Collective" not in result.stderr, result.stderr
    document = json.loads(out.read_text())
    probe = document["probe"]
    assert probe["multiworker_step_seconds"] > probe["step_seconds_pair"], probe
    # the trainer's own localsgd sync in every wire, beyond which its exchange's model prices nothing
    assert sorted(probe["trainer_sync_seconds"]) == ["float16", "float32", "int4", "int8"], probe
    assert all(0 < seconds < 5 for seconds in probe["trainer_sync_seconds"].values()), probe
    assert "a localsgd sync (DiLoCo) " in result.stdout
    int8 = next(
        p
        for p in document["predictions"]
        if p["strategy"] == "localsgd"
        and p["workers"] == 2
        and p["options"] == {"sync_every": 50, "allreduce_dtype": "int8", "outer_optimizer": "nesterov"}
    )
    assert int8["sync_seconds"] >= probe["trainer_sync_seconds"]["int8"] - 1e-9, (
        int8
    )  # (the text model: no re-estimation)
    # the parameter server's epoch, measured: its row is predicted as measured, no longer a lower bound
    assert probe["parameterserver_epoch_seconds"] > 0, result.stderr
    row = next(p for p in document["predictions"] if p["strategy"] == "parameterserver" and p["workers"] == 2)
    assert not row["lower_bound"] and row["seconds_per_epoch"] == pytest.approx(probe["parameterserver_epoch_seconds"])
    assert "a parameter-server epoch" in result.stdout
    # (TensorFlow's autograph leaves files of its own there)
    assert not [n for n in os.listdir(scratch) if n.startswith("disttrain-advise-ps-")], (
        "the parameter-server run's files were left"
    )


def test_no_dataset_is_one_line_and_exit_2(tmp_path):
    result = advise("--workdir", tmp_path, "--budget-seconds", BUDGET, timeout=30)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "run the copier first" in result.stderr, result.stderr
    quiet = advise("--workdir", tmp_path, "--never-fail", timeout=30)  # the chart's step: the run goes on
    assert quiet.returncode == 0 and quiet.stdout.startswith("disttrain-advise: no advice: ")


def test_a_broken_model_file_is_one_line_and_exit_2(cancer_data, tmp_path):
    broken = tmp_path / "model.keras"
    broken.write_bytes(b"not a keras file")
    result = advise("--data", cancer_data, "--model-file", broken, "--budget-seconds", BUDGET)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if not line.startswith("  probe worker")]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "model.keras" in lines[0], result.stderr


def test_help_names_the_advisor_flags():
    result = subprocess.run([sys.executable, "-m", "disttrain_advisor.main", "--help"], capture_output=True, text=True)
    assert result.returncode == 0
    for flag in ("--budget-seconds", "--link-mbit", "--epochs-to-target", "--json", "--from-probe", "--model-file"):
        assert flag in result.stdout
    assert "--probe-worker" not in result.stdout


@pytest.mark.long
def test_two_workers_named_by_a_host_pattern_probe_the_link_between_them(cancer_data):
    """As on Kubernetes (--service names the pods): worker 0 and worker 1 each run one probe process, on the link
    their addresses name (here loopback ports); worker 0 prints the advice, worker 1 only takes part."""
    from stages import free_port_block

    port = free_port_block(2)
    common = [
        "--data",
        cancer_data,
        "--threads",
        "1",
        "--host-pattern",
        "127.0.0.1:{index_port}",
        "--port",
        port,
        "--budget-seconds",
        BUDGET,
    ]
    second = subprocess.Popen(
        [os.path.join(BIN, "disttrain-advise"), *map(str, common), "--worker-index", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = advise(*common, "--worker-index", 0)
    out, err = second.communicate(timeout=BUDGET + 30)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + err
    assert "two hosts" in first.stdout and "measured" in first.stdout and "\nadvice: " in first.stdout
    assert "this worker took part in the probe" in out and "advice:" not in out
    third = advise(*common, "--worker-index", 2, timeout=30)  # a third worker has nothing to probe
    assert third.returncode == 0 and "the advice is in worker 0's log" in third.stdout


@pytest.mark.long
def test_the_parameter_server_timed_on_part_of_the_data_is_scaled_to_the_whole(cancer_data):
    """The phase a model too slow for two whole epochs gets (parameterserver_phase.measure_on_part): the trainer's
    real parameter-server run on the first half of each shard, its steady epoch scaled by the whole data's steps
    over the part's, and the part's directory removed after."""
    import glob
    import re
    import tempfile
    import time

    from disttrain_contract.manifest import Manifest
    from disttrain_advisor import main as advise
    from disttrain_advisor import parameterserver_phase as advise_parameterserver

    args = advise.parse_args(["--data", str(cancer_data), "--threads", "1", "--batch", "8"])
    manifest = Manifest.read(str(cancer_data))
    lines = []
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "disttrain-advise-ps-data-*")))
    seconds = advise_parameterserver.measure_on_part(
        args, str(cancer_data), manifest, 0.5, 6, time.time() + 120, lines.append
    )
    assert seconds is not None, lines
    text = "\n".join(lines)
    whole, part = -(-manifest.train_examples // 8), sum(-(-s.examples // 2) for s in manifest.shards)
    part_steps = -(-part // 8)
    assert (
        f"timing it on {part:,} of the {manifest.train_examples:,} examples ({part_steps} steps of the group an "
        f"epoch, against {whole})" in text
    )
    steady = float(re.search(r"parameter server: ([0-9.]+) s per epoch \(2 workers", text).group(1))
    ratio = whole / part_steps
    assert seconds == pytest.approx(steady * ratio, abs=0.005 * ratio)  # (the printed figure is rounded to 0.01 s)
    assert 1.9 < ratio < 2.1
    assert f"{seconds:.2f} s per epoch of the whole data" in text
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "disttrain-advise-ps-data-*"))) == before
