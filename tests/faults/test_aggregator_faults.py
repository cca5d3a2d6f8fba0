"""aggregator fed broken worker outputs, a broken dataset, an unwritable or full final
directory: an `error:` line naming the problem, a non-zero exit, no traceback, nothing
published under a final name (and a previous publication left exactly as it was), no
temporary left behind.

Every case runs on a copy of one real 2-worker run (the `trained` fixture). The
environment cases (full disk, read-only directory) and one corrupt model run the real
`disttrain-aggregator` process; the others call the same entry point in-process
(`run_cli(main, argv)`, what the console script runs), to spare a TensorFlow start
(~5-10 s on a busy 2-core machine) per case."""

import contextlib
import gc
import hashlib
import io
import json
import os
import shutil
import subprocess

import pytest

from faults.faultlib import assert_failed_cleanly, read_only_dir, temp_leftovers, tmpfs
from stages import stage

pytestmark = pytest.mark.faults

FINAL_FILES = ("model.keras", "report.json", "report.png", "analysis.png", "_SUCCESS", "model.tflite", "saved_model")


@pytest.fixture
def work(trained, tmp_path):
    dst = tmp_path / "work"
    shutil.copytree(trained / "work", dst, ignore=shutil.ignore_patterns("checkpoints", "tensorboard"))
    return dst


def worker(work, index):
    return work / "train" / f"worker-{index:05d}"


def aggregate(work, *extra, process=False):
    """Run the aggregator; a CompletedProcess either way. In-process, an exception other than
    the ContractError that run_cli turns into `error: ...` propagates and fails the test, just
    as a traceback would fail `assert_failed_cleanly`."""
    args = ["--workdir", str(work), "--timeout", "0", *map(str, extra)]
    if process:
        return stage("aggregator", *args, check=False)
    from disttrain_aggregator.main import main
    from disttrain_contract import run_cli

    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            run_cli(main, args)
        except SystemExit as exit:
            code = exit.code
        finally:
            gc.unfreeze()  # a successful run freezes every object before its exit: not this process's
    return subprocess.CompletedProcess(["disttrain-aggregator", *args], code, stdout.getvalue(), stderr.getvalue())


def assert_nothing_published(result, message, work, exit_code=2):
    final = work / "final"
    return assert_failed_cleanly(result, message, work, absent=[final / f for f in FINAL_FILES], exit_code=exit_code)


def flip_bytes(path, at=0.5, length=4096):
    data = bytearray(path.read_bytes())
    start = int(len(data) * at)
    data[start : start + length] = bytes(b ^ 0xFF for b in data[start : start + length])
    path.write_bytes(bytes(data))


def test_worker_model_truncated(work):
    model = worker(work, 1) / "model.keras"
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    assert_nothing_published(
        aggregate(work, process=True), r"worker-00001/model\.keras is not a readable model file", work
    )


def test_worker_model_corrupt(work):
    flip_bytes(worker(work, 1) / "model.keras")
    assert_nothing_published(
        aggregate(work), r"cannot load model .*worker-00001/model\.keras: BadZipFile: Bad CRC-32", work
    )


def test_worker_marker_names_a_missing_model(work):
    (worker(work, 1) / "model.keras").unlink()
    assert_nothing_published(aggregate(work), r"no model at .*worker-00001/model\.keras", work)


def test_worker_marker_truncated(work):
    marker = worker(work, 0) / "_SUCCESS"
    marker.write_bytes(marker.read_bytes()[:40])
    assert_nothing_published(aggregate(work), r"marker .*worker-00000/_SUCCESS is unreadable", work)


def test_worker_marker_missing_fields(work):
    """A marker that parses but is not a trainer's (another version, a hand-made file)."""
    marker = json.loads((worker(work, 1) / "_SUCCESS").read_text())
    del marker["workers"], marker["init_weights_sha256"]
    (worker(work, 1) / "_SUCCESS").write_text(json.dumps(marker))
    assert_nothing_published(
        aggregate(work),
        r"worker-00001/_SUCCESS is not a trainer's marker \(missing workers, init_weights_sha256\)",
        work,
    )


def test_workers_with_different_seeds_are_refused(work, trained):
    shutil.rmtree(worker(work, 1))
    shutil.copytree(
        trained / "train-seed7" / "worker-00001",
        worker(work, 1),
        ignore=shutil.ignore_patterns("checkpoints", "tensorboard"),
    )
    assert_nothing_published(aggregate(work), r"did not start from the same initial weights .* same --seed", work)


def test_workers_of_different_shard_counts_are_refused(work, trained):
    shutil.rmtree(worker(work, 1))
    shutil.copytree(
        trained / "train-3shards" / "worker-00001",
        worker(work, 1),
        ignore=shutil.ignore_patterns("checkpoints", "tensorboard"),
    )
    assert_nothing_published(aggregate(work), r"workers were started for \[2, 3\] workers, expected 2", work)


def test_expecting_another_worker_count_is_refused(work):
    assert_nothing_published(
        aggregate(work, "--expect", 1), r"workers were started for \[2\] workers, expected 1", work
    )


def test_missing_worker_times_out_naming_it(work):
    shutil.rmtree(worker(work, 1))
    assert_nothing_published(
        aggregate(work), r"1 of 2 workers did not finish \(missing .*worker-00001/_SUCCESS\)", work, exit_code=3
    )


def test_missing_data_dir(work):
    shutil.rmtree(work / "data")
    assert_nothing_published(
        aggregate(work), r"waiting for the copier's dataset \(no marker at .*data/_SUCCESS\)", work, exit_code=3
    )


def test_corrupt_manifest(work):
    manifest = work / "data" / "manifest.json"
    manifest.write_bytes(manifest.read_bytes()[:100])
    assert_nothing_published(aggregate(work), r"dataset manifest .*manifest\.json is unreadable", work)


def test_corrupt_test_split(work):
    with open(work / "data" / "test.jsonl", "a") as fh:
        fh.write('{"text": "tampered", "label": 1}\n')
    assert_nothing_published(
        aggregate(work), r"data/test\.jsonl is corrupt: sha256 .* does not match the manifest", work
    )


def test_truncated_test_split(work):
    split = work / "data" / "test.jsonl"
    split.write_bytes(split.read_bytes()[:1000])
    assert_nothing_published(aggregate(work), r"data/test\.jsonl is corrupt", work)


def test_unwritable_final_dir(work):
    with read_only_dir(work / "final"):
        result = aggregate(work, process=True)
        # the exports are staged first (final/.exports.tmp-*), so they meet the read-only directory first
        assert_nothing_published(
            result,
            r"cannot write (in )?.*final(/(model\.keras|report\.json|report\.png|analysis\.png))?: (\[Errno \d+\] )?(Read-only file system|Permission denied)",
            work,
        )


def test_full_disk_while_writing_the_final_model(work):
    # report.json and report.png would fit, the ~5 MB model does not; the exports, staged first
    # (a SavedModel written by TensorFlow's own SaveV2), meet the full disk first
    with tmpfs(work / "final", size="2m"):
        result = aggregate(work, process=True)
        assert_nothing_published(
            result, r"no space left on device while writing (the exports in )?.*final(/model\.keras)?", work
        )
        assert os.listdir(work / "final") == []


def test_full_disk_while_writing_the_final_model_without_exports(work):
    with tmpfs(work / "final", size="2m"):
        result = aggregate(work, "--exports", "none", process=True)
        assert_nothing_published(result, r"no space left on device while writing .*final/model\.keras", work)
        assert os.listdir(work / "final") == []


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def digests(final):
    """Every file under final/ (the SavedModel's directory too), relative name -> sha256."""
    return {str(p.relative_to(final)): digest(p) for p in sorted(final.rglob("*")) if p.is_file()}


def test_full_disk_on_a_rerun_keeps_the_previous_publication(work):
    """The previous model, report and marker stay byte for byte; the server keeps serving the old model."""
    final = work / "final"
    with tmpfs(final, size="24m"):  # one publication (model, SavedModel, TFLite: ~16 MB) fits, not two
        stage("aggregator", "--workdir", work, "--timeout", 0)  # a real process, like the failing re-run
        before = digests(final)
        assert {"model.keras", "model.tflite"} <= set(before) and any(f.startswith("saved_model/") for f in before)
        # leave about 1 MB free: the report fits, a second ~5 MB model does not
        st = os.statvfs(final)
        (final / "filler").write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - (1 << 20)))
        result = aggregate(work, process=True)
        assert_failed_cleanly(
            result,
            r"no space left on device while writing (the exports in )?.*final(/model\.keras)?",
            work,
            exit_code=2,
        )
        (final / "filler").unlink()
        assert digests(final) == before
        assert sorted(os.listdir(final)) == sorted(FINAL_FILES)
        assert temp_leftovers(work) == []


def test_worker_model_with_a_lambda_layer_is_refused_and_not_run(work, tmp_path, monkeypatch):
    """A worker model carrying Python code (a Keras Lambda layer) with a valid disttrain.json."""
    from disttrain_contract.artifact import read_meta
    from faults.faultlib import SENTINEL_ENV, lambda_model

    model = worker(work, 1) / "model.keras"
    meta = read_meta(str(model))
    model.unlink()
    lambda_model(str(model), meta)
    sentinel = tmp_path / "code-ran"
    monkeypatch.setenv(SENTINEL_ENV, str(sentinel))
    result = aggregate(work)
    assert_nothing_published(
        result,
        r"the model .*worker-00001/model\.keras has a Lambda layer .*: Python code inside a model file is refused \(safe mode\)",
        work,
    )
    assert not sentinel.exists()


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", r"--baseline .*baseline\.json is unreadable"),
        (
            json.dumps(
                {
                    "workers": [{"name": "worker 0"}, {"name": "worker 1"}],
                    "strategy": "average",
                    "task": "image",
                    "final": {"test_accuracy": 0.9},
                }
            ),
            r"--baseline .*baseline\.json is a 2-worker average run, not a 1-worker one",
        ),
        (
            json.dumps(
                {
                    "workers": [{"name": "worker 0"}],
                    "strategy": "average",
                    "final": {"test_accuracy": 0.9},
                    "task": "image",
                    "source": "sample:other",
                    "split_seed": 0,
                    "test_examples": 1,
                    "labels": ["a"],
                }
            ),
            r"--baseline .*baseline\.json is of other data: its (task|source|split_seed|test_examples|labels) is",
        ),
        (
            json.dumps(
                {
                    "workers": [{"name": "worker 0"}],
                    "strategy": "average",
                    "task": "image",
                    "final": {"examples": "all"},
                }
            ),
            r"--baseline .*baseline\.json: final\.examples must be a number, got \"all\"",
        ),
    ],
)
def test_a_baseline_report_that_cannot_be_compared_is_refused(work, tmp_path, content, message):
    baseline = tmp_path / "baseline.json"
    baseline.write_text(content)
    assert_nothing_published(aggregate(work, "--baseline", baseline), message, work)


def test_a_missing_baseline_report_is_refused(work, tmp_path):
    assert_nothing_published(
        aggregate(work, "--baseline", tmp_path / "nothing.json"), r"--baseline .*nothing\.json: no such file", work
    )
