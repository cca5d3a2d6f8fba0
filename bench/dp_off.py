#!/usr/bin/env python3
"""What the differential-privacy code costs when it is off: the trainer of this tree against the trainer before
DP-SGD existed, both without --dp-* flags.

The same measurement as task_interface.py (1 worker, --threads 1, the same seed and data, the two trainers in
turns, the earlier one checked out with `git worktree` and imported through PYTHONPATH), on the tasks DP-SGD
supports: movie reviews and digits. Per task: steady seconds per epoch before and after and their ratio (goal:
within noise, about 2 %), the held-out accuracy (goal: the same) and whether the final weights are bit-identical
(goal: yes).

    .venv/bin/python bench/dp_off.py [--before REVISION] [--tasks movie-reviews,digits]
Results: results/dp_off.json; the table in docs/benchmarks/results.md (bench/report.py).
"""

from task_interface import compare_from_command_line

# the last revision before DP-SGD (the merge that brought it has this as its first parent)
BEFORE = "9344190"
TASKS = ("movie-reviews", "digits")


def main():
    compare_from_command_line(__doc__, "dp_off", BEFORE, TASKS, "DP-SGD's code, off")


if __name__ == "__main__":
    main()
