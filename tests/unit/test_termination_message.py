"""run_cli writes the stage's one-line error to the termination-message file Kubernetes shows."""

import gc

import pytest

from disttrain_contract import ContractError, GroupLost, StageTimeout, run_cli
from disttrain_contract.errors import write_termination_message


@pytest.fixture
def log(tmp_path, monkeypatch):
    path = tmp_path / "termination-log"
    path.write_text("")  # the kubelet creates the file before the container starts
    monkeypatch.setenv("DISTTRAIN_TERMINATION_LOG", str(path))
    return path


def fail_with(err):
    def main(argv):
        raise err

    return main


@pytest.mark.parametrize(
    "err, code",
    [
        (ContractError("no such file: /workdir/x.csv"), 2),
        (StageTimeout("timed out\nafter 3s"), 3),
        # a peer gone: a retry the Job counts (not 2, which fails the Job at once)
        (GroupLost("worker 0/2: the group lost a peer mid-run"), 1),
    ],
)
def test_a_contract_error_is_the_termination_message(log, capsys, err, code):
    with pytest.raises(SystemExit) as exit:
        run_cli(fail_with(err))
    assert exit.value.code == code
    expected = "error: " + " ".join(str(err).split())
    assert log.read_text() == expected
    assert capsys.readouterr().err.strip() == f"error: {err}"


def test_a_bug_keeps_its_traceback_and_leaves_its_first_line(log):
    with pytest.raises(RuntimeError):
        run_cli(fail_with(RuntimeError("Collective ops failed\n  details on the next line")))
    assert log.read_text() == "RuntimeError: Collective ops failed"


def test_success_writes_nothing(log):
    with pytest.raises(SystemExit) as exit:
        run_cli(lambda argv: 0)
    gc.unfreeze()  # (what a finished stage does before its exit: not for this process)
    assert exit.value.code == 0 and log.read_text() == ""


def test_no_file_is_created_outside_kubernetes(tmp_path, monkeypatch):
    path = tmp_path / "termination-log"
    monkeypatch.setenv("DISTTRAIN_TERMINATION_LOG", str(path))
    with pytest.raises(SystemExit):
        run_cli(fail_with(ContractError("bad input")))
    assert not path.exists()


def test_a_long_message_is_cut_at_the_kubelets_limit(log):
    write_termination_message("x" * 10000)
    assert len(log.read_bytes()) == 4096


def test_a_finished_stage_freezes_its_objects_so_the_exit_skips_the_last_collection():
    """In a fresh process (freezing is process-wide): after main returns, every object is frozen
    before the exit, and atexit handlers still run."""
    import subprocess
    import sys

    code = (
        "import atexit, gc, sys\n"
        "from disttrain_contract import run_cli\n"
        "atexit.register(lambda: print('frozen objects:', gc.get_freeze_count() > 1000))\n"
        "run_cli(lambda argv: 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout) == (0, "frozen objects: True\n"), result.stderr
