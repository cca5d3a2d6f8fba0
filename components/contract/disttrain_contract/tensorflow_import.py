"""Import TensorFlow without its C++ start-up lines on the user's terminal.

TF_CPP_MIN_LOG_LEVEL does not silence what TensorFlow 2.19+ logs while it is being
imported: the oneDNN notice and absl's "All log messages before absl::InitializeLog() is
called are written to STDERR" are written to file descriptor 2 by C++ code before the
level applies (tensorflow/tensorflow#100442, open). Redirecting Python's sys.stderr does
not help either, since C++ writes to the descriptor. So the first import runs with
descriptor 2 pointing at an in-memory file; afterwards TensorFlow's own info and warning
lines are dropped and everything else (an error line, a Python warning, another thread's
log line) is written to the real stderr, in order: nothing of ours is lost, only delayed
by the import. If the import fails, every captured line is written back.

It also hides, during the import only, the optional packages Keras imports at its own import for
features no stage uses (see KERAS_OPTIONAL_PACKAGES): a third of the import's CPU, paid by every
trainer, aggregator and server worker.

DISTTRAIN_LOG_LEVEL=debug keeps TensorFlow's lines (and lowers TF_CPP_MIN_LOG_LEVEL to 0
unless it is set): the switch for debugging a stage, inherited by every process it starts.
"""

import os
import re
import sys
import tempfile
import threading
from contextlib import contextmanager

LOG_LEVEL_ENV = "DISTTRAIN_LOG_LEVEL"

# absl's prefix ("I0000 00:00:1795423790.932690   25356 port.cc:153] ": before absl is
# initialised, the seconds field is the Unix time), TensorFlow's older
# one ("2025-09-17 14:44:05.157831: I tensorflow/core/util/port.cc:153] "), at info or warning
TENSORFLOW_NOTICE = re.compile(
    r"^(?:[IW]\d{4} [\d:.]+\s+\d+ [\w./-]+:\d+\] "
    r"|\d{4}-\d\d-\d\d [\d:.]+: [IW] [\w./-]+:\d+\] "
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$)"
)
# the one notice known to continue on a second line (cpu_feature_guard.cc)
NOTICE_CONTINUATION = re.compile(
    r"^To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler flags\.$"
)

# Installed packages Keras 3 and TensorFlow import while TensorFlow is imported, each behind
# `try: import X / except ImportError: X = None`, only for features no stage calls:
# keras.visualization (matplotlib, cv2), keras.wrappers' scikit-learn estimators (sklearn, which
# brings scipy) and TensorFlow's legacy tf.keras engine (scipy.sparse). Hidden for the import
# (sys.modules[name] = None makes `import name` raise ImportError), they are never loaded:
# about 2.4 of 5.7 CPU seconds of the import on a 2-core host. Afterwards they import as usual (the
# aggregator draws its plots with matplotlib, the server decodes images with cv2); only those
# Keras features stay off in a stage's process.
KERAS_OPTIONAL_PACKAGES = ("matplotlib", "cv2", "sklearn", "scipy")

# Held during the first import: one import at a time (a server loads its model in a request
# thread; two threads must not swap the descriptor over each other), and no thread is handed
# a module that another thread is still importing (sys.modules holds it from the start).
_lock = threading.Lock()
_tensorflow = None  # set once the import has finished


def verbose():
    return os.environ.get(LOG_LEVEL_ENV, "").lower() == "debug"


def import_tensorflow():
    """The tensorflow module, imported quietly the first time (see the module docstring)."""
    global _tensorflow
    if _tensorflow is None:
        with _lock:
            if _tensorflow is None:
                _tensorflow = _import()
    return _tensorflow


def _import():
    debug = verbose()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if debug else "2")  # what is logged after the import
    if debug or "tensorflow" in sys.modules:  # (debug: its lines are wanted; imported before us: none will come)
        with _optional_packages_hidden():
            import tensorflow

        return tensorflow
    with _in_memory_file() as capture, _optional_packages_hidden():
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(capture.fileno(), 2)
        failed = True
        try:
            import tensorflow

            failed = False
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)  # (only descriptor 2 wrote to it: the file object's buffer is empty)
            captured = capture.read().decode("utf-8", "replace")
            sys.stderr.write(captured if failed else without_tensorflow_notices(captured))
            sys.stderr.flush()
    return tensorflow


@contextmanager
def _optional_packages_hidden():
    """KERAS_OPTIONAL_PACKAGES not yet imported raise ImportError inside the block, and import as usual after it.
    Only while this is the process's one Python thread: sys.modules is shared, and a server's request
    thread importing cv2 meanwhile must not be refused."""
    hidden = (
        [name for name in KERAS_OPTIONAL_PACKAGES if name not in sys.modules] if threading.active_count() == 1 else []
    )
    for name in hidden:
        sys.modules[name] = None
    try:
        yield
    finally:
        for name in hidden:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


def without_tensorflow_notices(text):
    """`text` without TensorFlow's info and warning log lines."""
    kept, dropped_previous = [], False
    for line in text.splitlines(keepends=True):
        bare = line.rstrip("\r\n")
        dropped = bool(TENSORFLOW_NOTICE.match(bare)) or (dropped_previous and bool(NOTICE_CONTINUATION.match(bare)))
        if not dropped:
            kept.append(line)
        dropped_previous = dropped
    return "".join(kept)


def _in_memory_file():
    """A file with a descriptor and no path: memfd on Linux (containers run with a read-only
    root filesystem), a temporary file elsewhere."""
    if hasattr(os, "memfd_create"):
        return os.fdopen(os.memfd_create("disttrain-tensorflow-import"), "w+b")
    return tempfile.TemporaryFile()
