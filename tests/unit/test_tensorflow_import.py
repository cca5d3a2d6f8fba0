"""disttrain_contract.tensorflow_import: TensorFlow's start-up lines are dropped, nothing else is.

The real TensorFlow is imported in a fresh process (an import happens once per process);
the failure and concurrency cases use a stand-in `tensorflow` module on PYTHONPATH that
writes to file descriptor 2 the way TensorFlow's C++ code does, because the real one
cannot be made to fail on import."""

import os
import subprocess
import sys
import textwrap

from disttrain_contract.tensorflow_import import TENSORFLOW_NOTICE, without_tensorflow_notices

ONEDNN = (
    "I0000 00:00:1795423790.932690   25356 port.cc:153] oneDNN custom operations are on. You may see "
    "slightly different numerical results due to floating-point round-off errors.\n"
)
ABSL = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
CPU_GUARD = (
    "I0000 00:00:1795424259.072059   29916 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to "
    "use available CPU instructions in performance-critical operations.\n"
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with the "
    "appropriate compiler flags.\n"
)
OLD_STYLE = (
    "2025-09-17 14:44:05.157831: W external/local_xla/xla/tsl/cuda/cudart_stub.cc:32] Could not find cuda drivers.\n"
)
ERROR = "E0000 00:00:1758131045.203198 3722035 cuda_dnn.cc:8579] Unable to register cuDNN factory\n"
OURS = "worker 0/2 epoch 1/5: loss=0.6 accuracy=0.7\n"
PY_WARNING = "/x/y.py:3: DeprecationWarning: something\n"


def test_drops_tensorflow_info_and_warning_lines_and_keeps_the_rest_in_order():
    text = (
        ABSL + ONEDNN + OURS + CPU_GUARD + PY_WARNING + OLD_STYLE + ERROR + "To enable the following instructions: x\n"
    )
    assert without_tensorflow_notices(text) == OURS + PY_WARNING + ERROR + "To enable the following instructions: x\n"


def test_a_continuation_line_is_dropped_only_after_a_dropped_notice():
    second_line = CPU_GUARD.splitlines(keepends=True)[1]
    assert without_tensorflow_notices(OURS + second_line) == OURS + second_line
    assert without_tensorflow_notices(CPU_GUARD) == ""


def test_error_and_fatal_lines_are_never_notices():
    assert not TENSORFLOW_NOTICE.match(ERROR)
    assert not TENSORFLOW_NOTICE.match("F0000 00:00:1.0 1 x.cc:1] fatal")
    assert not TENSORFLOW_NOTICE.match("2025-09-17 14:44:05.157831: E x.cc:1] error")


def run_python(code, env_extra=None, pythonpath=None, timeout=120):
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "DISTTRAIN_LOG_LEVEL")}
    env.update(env_extra or {})
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=timeout
    )


def test_the_real_tensorflow_import_prints_nothing_and_debug_brings_its_lines_back():
    code = """
        import sys
        from disttrain_contract.tensorflow_import import KERAS_OPTIONAL_PACKAGES, import_tensorflow
        tf = import_tensorflow()
        assert tf.constant(2).numpy() == 2
        # Keras' optional packages were hidden from the import, and import as usual afterwards
        assert [name for name in KERAS_OPTIONAL_PACKAGES if name in sys.modules] == []
        import cv2, matplotlib, scipy.sparse, sklearn.metrics
        assert sklearn.metrics.accuracy_score([1, 0], [1, 1]) == 0.5 and scipy.sparse.issparse(scipy.sparse.eye(2))
        print("ok")
    """
    quiet = run_python(code)
    assert quiet.returncode == 0, quiet.stderr
    assert (quiet.stdout, quiet.stderr) == ("ok\n", "")
    # the same import with the switch on shows TensorFlow's lines: the quiet run's empty
    # stderr is the filter's doing, not a TensorFlow build that prints nothing
    loud = run_python(code, {"DISTTRAIN_LOG_LEVEL": "debug"})
    assert loud.returncode == 0, loud.stderr
    assert any(TENSORFLOW_NOTICE.match(line) for line in loud.stderr.splitlines()), loud.stderr


FAKE_TENSORFLOW = """
import os, time
os.write(2, {notice!r}.encode())
os.write(2, b"a line that is not TensorFlow's\\n")
time.sleep(0.2)  # long enough for the other threads to queue behind the import
with open(os.environ["IMPORT_COUNT_FILE"], "a") as fh:
    fh.write("imported\\n")
{ending}
READY = True  # a thread handed the module before this line got a half-imported one
"""


def fake_tensorflow(tmp_path, ending=""):
    package = tmp_path / "fake"
    package.mkdir()
    (package / "tensorflow.py").write_text(FAKE_TENSORFLOW.format(notice=ONEDNN + ABSL, ending=ending))
    return str(package)


def test_a_failed_import_writes_back_everything_it_captured(tmp_path):
    path = fake_tensorflow(tmp_path, ending='raise ImportError("the fake TensorFlow failed")')
    result = run_python(
        """
        from disttrain_contract.tensorflow_import import import_tensorflow
        import_tensorflow()
    """,
        {"IMPORT_COUNT_FILE": str(tmp_path / "count")},
        pythonpath=path,
    )
    assert result.returncode == 1
    assert ONEDNN + ABSL + "a line that is not TensorFlow's\n" in result.stderr
    assert "ImportError: the fake TensorFlow failed" in result.stderr


def test_threads_importing_at_once_import_once_and_lose_no_line(tmp_path):
    path = fake_tensorflow(tmp_path)
    for _ in range(5):
        count = tmp_path / "count"
        count.unlink(missing_ok=True)
        result = run_python(
            """
            import sys, threading, time
            from disttrain_contract.tensorflow_import import import_tensorflow
            barrier = threading.Barrier(8)
            modules = []
            def load(i):
                barrier.wait()
                time.sleep(0.03 * i)  # some arrive before the import starts, some during it
                module = import_tensorflow()
                modules.append((module, getattr(module, "READY", False)))  # complete when handed over?
            threads = [threading.Thread(target=load, args=(i,)) for i in range(8)]
            for t in threads: t.start()
            for t in threads: t.join()
            assert len(modules) == 8 and len({id(m) for m, _ in modules}) == 1
            assert all(ready for _, ready in modules), "a thread got a half-imported module"
            print("ok")
        """,
            {"IMPORT_COUNT_FILE": str(count)},
            pythonpath=path,
        )
        assert result.returncode == 0, result.stderr
        assert count.read_text() == "imported\n"
        assert result.stderr == "a line that is not TensorFlow's\n"


def test_optional_packages_are_hidden_only_from_the_import_and_only_with_one_thread(tmp_path):
    """The fake TensorFlow imports scipy as Keras does (`except ImportError: None`): hidden when the
    importing thread is the only one, importable again afterwards; another live thread (a server's
    request thread that may import cv2 meanwhile) turns the hiding off."""
    path = fake_tensorflow(tmp_path, ending="try:\n    import scipy\nexcept ImportError:\n    scipy = None")
    for other_thread in (False, True):
        result = run_python(
            f"""
            import threading
            from disttrain_contract.tensorflow_import import import_tensorflow
            stop = threading.Event()
            if {other_thread}:
                threading.Thread(target=stop.wait).start()
            tf = import_tensorflow()
            stop.set()
            import scipy.sparse
            print(tf.scipy is None, scipy.sparse.issparse(scipy.sparse.eye(2)))
        """,
            {"IMPORT_COUNT_FILE": str(tmp_path / f"count-{other_thread}")},
            pythonpath=path,
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout == ("False True\n" if other_thread else "True True\n")
