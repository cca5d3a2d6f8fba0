"""Errors a user can act on, and the one place that turns them into an exit code."""

import sys


class ContractError(Exception):
    """Bad input, a missing or corrupt artifact, a broken promise between stages.

    The message is shown to the user as is, so it must name the problem
    (which file, which flag, what was expected)."""

    exit_code = 2


class StageTimeout(ContractError):
    """A previous stage's marker did not appear in time."""

    exit_code = 3


def run_cli(main, argv=None):
    """Run a stage's main(argv) and exit with its status.

    A ContractError becomes one line on stderr and a non-zero exit instead of a
    traceback; Ctrl-C exits 130 quietly. Anything else is a bug and keeps its
    traceback."""
    try:
        status = main(argv)
    except ContractError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(status or 0)
