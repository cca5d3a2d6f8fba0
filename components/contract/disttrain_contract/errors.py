"""Errors a user can act on, and the one place that turns them into an exit code."""

import gc
import os
import sys

# Where Kubernetes reads a container's termination message (terminationMessagePath): `kubectl get
# pods` / `describe` show it, so a failed stage says why without anyone reading its logs.
TERMINATION_LOG = "/dev/termination-log"
TERMINATION_LIMIT = 4096  # the kubelet keeps at most 4096 bytes

# A trainer stopped by SIGTERM (a node drain, a preemption, a deleted pod) after saving what it
# could exits with this code: "stopped on request, start me again", not a failure. The chart's
# trainer Job ignores it (podFailurePolicy action Ignore): the pod is replaced without using up a
# retry. 75 is EX_TEMPFAIL of sysexits.h ("temporary failure; the user is invited to retry").
PREEMPTED_EXIT_CODE = 75


class ContractError(Exception):
    """Bad input, a missing or corrupt artifact, a broken promise between stages.

    The message is shown to the user as is, so it must name the problem
    (which file, which flag, what was expected)."""

    exit_code = 2


class StageTimeout(ContractError):
    """A previous stage's marker did not appear in time."""

    exit_code = 3


class GroupLost(Exception):
    """A peer of a connected group went away mid-run (killed, evicted, its node lost): neither the user's
    input nor a bug, so one line and no traceback. Its exit code 1 is one the Job's retries count (2 would
    fail the Job at once, 75 is a saved preemption): the retried pods form the group again and resume from
    its checkpoints."""

    exit_code = 1


def write_termination_message(message, path=None):
    """Write the one-line reason a stage ends to the termination-message file, if there is one.

    The kubelet creates the file before the container starts; it is written only when it already
    exists and is writable, so a run outside Kubernetes never creates /dev/termination-log.
    DISTTRAIN_TERMINATION_LOG names another path (tests)."""
    path = path or os.environ.get("DISTTRAIN_TERMINATION_LOG", TERMINATION_LOG)
    line = " ".join(str(message).split())
    try:
        if os.path.isfile(path) and os.access(path, os.W_OK):
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(line.encode()[:TERMINATION_LIMIT].decode(errors="ignore"))
    except OSError:
        pass  # the message is a convenience: never let it hide the real error


def run_cli(main, argv=None):
    """Run a stage's main(argv) and exit with its status.

    A ContractError or GroupLost becomes one line on stderr (and in the termination-message file)
    and a non-zero exit instead of a traceback; Ctrl-C exits 130 quietly. Anything else is a bug and
    keeps its traceback; its exception's first line goes to the termination-message file."""
    try:
        status = main(argv)
    except (ContractError, GroupLost) as err:
        print(f"error: {err}", file=sys.stderr)
        write_termination_message(f"error: {err}")
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as err:
        first = next((line for line in str(err).splitlines() if line.strip()), "")
        write_termination_message(f"{type(err).__name__}: {first}" if first else type(err).__name__)
        raise
    # The stage is done and its outputs are written and closed. Python's last garbage collection
    # at exit would walk every object TensorFlow and Keras made (1-2 s of a stage's CPU, measured on
    # a 2-core host); frozen objects are skipped, and the operating system frees the memory anyway.
    gc.freeze()
    sys.exit(status or 0)
