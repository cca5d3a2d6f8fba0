#!/usr/bin/env python3
"""Time to accuracy: the wall time from the training processes' start until the held-out metric
first reaches a target, for 1 worker and 2 workers of every strategy, on loopback and over tbf-shaped
links (1 Gbit/s, 100, 50 and 10 Mbit/s), beside the two-process ceiling measured in the same run.

What a row measures: the trainer processes of one configuration are started together (the clock starts
just before); the chief's held-out metric after each epoch is read from its progress.json as it is
written (the `time` of the write that first shows the epoch: the evaluation is done then); the time to
target is the first of these at or above the target. Start-up, cluster join, every evaluation and every
sync are inside it; the copier's data preparation is not (it is shared by every row). A run still going
at its task's cap is stopped (SIGTERM) and, if it had not reached the target, says "capped".

Configurations (ROWS: a list of data; a row whose flags the installed trainer refuses is recorded
"not available" without running):
  single           1 worker, all the data (`average` with one worker: no communication)
  ceiling          two independent 1-worker processes started together: what two processes get from
                   this host with no communication at all; the row is the slower one's
  average          2 workers that never talk, averaged once by the aggregator at the end: its time to
                   target is the aggregator's evaluation of the averaged model (there is no model before)
  multiworker      2 workers, gradients all-reduced every step
  localsgd         2 workers, weights averaged every --sync-every H steps (default H, and H in H_VALUES);
                   DiLoCo (--outer-optimizer nesterov) at the same H, float32, float16 and int8 on the wire;
                   DiLoCo with eager updates (--outer-overlap eager) at H = 100, float32 and int8;
                   DiLoCo int8 at H = 50 with half the batch-norm re-estimation (--sync-batch-norm-batches 4);
                   DiLoCo int4 at H = 50; DiLoCo int8, int4 and float16 at H = 50 with a sync at each
                   epoch's end too (--sync-at-epoch-end), and int4 with it at H = 100
  parameterserver  1 chief + 1 ps + 2 workers (4 processes)
single, ceiling and average never use the network, so they run on loopback only and are the reference
of every link. The ceiling of the time to target is measured by average's two workers (each evaluates
after every epoch): when the slower had evaluated the epoch at which 1 worker reached the target
(tta_store.ceiling_time_to_target says why that is the bound). Shaped links: one network namespace per process, each joined to a bridge (in a namespace
of its own) by a veth pair whose both ends are limited to the rate with `tc tbf` (bench/netns.py);
bandwidth only (no added delay). Shaped links need root.

Tasks: movie reviews (the text model, TEXT_EPOCHS epochs) and MobileNetV2 from scratch on digits
distorted to 32x32 (random rotation, scale, shift and noise of the 8x8 digits; the held-out examples
come only from originals no training example was made from) at half the default learning rate, so
that the held-out accuracy climbs through the run (TASKS says why; the milder task it replaced stays,
out of the plan). Both are sized for about 2,000 steps per worker with 2 workers (1 worker: twice as
many), batch 64 per worker, --threads 1 per process.

Sittings: each run of this command is a sitting (--continue-sitting [ID]: it adds to that one, or the
newest, instead, on the host that ran it, not restarted since). Its rows carry its id, and before a task's
first row it takes the strategy advisor's probe of that task (`disttrain-advise`, its default 60 s budget)
and keeps it with the sitting: hosts differ 2-3x in speed from one session to the next, so
bench/advisor_accuracy.py checks the advisor against the rows of its probe's own sitting, and ratios are
read within a sitting (--rerun runs a task's single, ceiling and average rows again beside a link's rows,
in one sitting).
With --probe-each-row it takes the probe again just before every row and keeps it in the row: the host's
speed can move within a sitting (stored sittings' references ran 10-15 % off the probe taken at their start),
and advisor_accuracy.py then predicts each such row from the probe taken just before it.

Resumable: each row is written to bench/results/time_to_accuracy.json (temporary file, then rename)
as soon as it finishes; a rerun skips the rows stored as "ok" or "capped" with the same key (task,
link, strategy, workers, options) and runs the others. --quick: tiny data and 2 epochs, into
time_to_accuracy-quick.json (checks the harness, measures nothing).

  python bench/time_to_accuracy.py --list                 the plan, with estimated times
  python bench/time_to_accuracy.py                        run (or resume) the whole plan
  python bench/time_to_accuracy.py --only link=loopback,strategy=localsgd
  python bench/time_to_accuracy.py --rerun --only 'task=movie-reviews,link=loopback,strategy=single|ceiling|average'
  python bench/time_to_accuracy.py --rerun --only 'task=movie-reviews,strategy=single|ceiling|average' --only 'task=movie-reviews,link=10mbit'
  python bench/time_to_accuracy.py --retarget --target movie-reviews=0.77   recompute from the stored curves
"""

import json
import math
import os
import signal
import sys
import time

from common import BIN, QUICK, RESULTS, command_line

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH, SEED, COPIER_SEED = 64, 42, 0
LINKS = {"loopback": None, "1gbit": 1000, "100mbit": 100, "50mbit": 50, "10mbit": 10}  # name -> Mbit/s
LOCAL_ONLY = ("single", "ceiling", "average")  # never use the network: loopback only, the reference of every link
H_VALUES = (50, 100, 250)
NAMESPACES = tuple(f"dttta-{i}" for i in range(4))
BRIDGE = "dttta-br"
TEXT_EPOCHS = 25  # 80 steps per worker-epoch with 2 workers: 2,000 steps


def rows_plan():
    """Every configuration of one task and link, in the order they run. Data: a configuration that a
    newer trainer takes (DiLoCo's flags) is one more entry here."""
    rows = [("single", 1, {}), ("ceiling", 2, {}), ("average", 2, {}), ("multiworker", 2, {}), ("localsgd", 2, {})]
    rows += [("localsgd", 2, {"sync_every": h}) for h in H_VALUES]
    rows += [
        ("localsgd", 2, {"sync_every": h, "outer_optimizer": "nesterov", **wire})
        for h in H_VALUES
        for wire in ({}, {"allreduce_dtype": "float16"}, {"allreduce_dtype": "int8"})
    ]
    # DiLoCo with eager updates (the exchange beside the next H steps) at H = 100, on the widest and the narrowest wire
    rows += [
        ("localsgd", 2, {"sync_every": 100, "outer_optimizer": "nesterov", **wire, "outer_overlap": "eager"})
        for wire in ({}, {"allreduce_dtype": "int8"})
    ]
    # DiLoCo at the shortest H with half the batch-norm re-estimation (--sync-batch-norm-batches 4 of 8): at H = 50
    # the re-estimation's forward passes were about half of each sync's cost on MobileNetV2 at 50 Mbit/s
    rows += [
        (
            "localsgd",
            2,
            {"sync_every": 50, "outer_optimizer": "nesterov", "allreduce_dtype": "int8", "sync_batch_norm_batches": 4},
        )
    ]
    # DiLoCo on the int4 wire (half int8's bytes) at the shortest H, where the syncs cost the most over a slow link
    rows += [("localsgd", 2, {"sync_every": 50, "outer_optimizer": "nesterov", "allreduce_dtype": "int4"})]
    # int8 and int4 at H = 50 with a sync at each epoch's end too (--sync-at-epoch-end): each epoch's evaluation
    # then reads the group's model, not the chief's own of up to H steps past the last sync; and float16 so, whose sync
    # needs no codec (the advisor's advice for MobileNetV2 at 1 Gbit/s once each wire's own work was timed)
    rows += [
        (
            "localsgd",
            2,
            {"sync_every": 50, "outer_optimizer": "nesterov", "allreduce_dtype": wire, "sync_at_epoch_end": True},
        )
        for wire in ("int8", "int4", "float16")
    ]
    # int4 with the switch at H = 100: half the syncs (the advisor's advice for MobileNetV2 at 10 Mbit/s on a host whose
    # steps are fast enough that H = 50's syncs weigh)
    rows += [
        (
            "localsgd",
            2,
            {"sync_every": 100, "outer_optimizer": "nesterov", "allreduce_dtype": "int4", "sync_at_epoch_end": True},
        )
    ]
    rows += [("parameterserver", 2, {})]
    return rows


# How far augmented digits are distorted: the random affine map's rotation (within +-degrees), scale
# (a range), shift (within +-pixels of the 8x8 original) and the pixel noise's standard deviation (of 255)
MILD = {"rotation": 12, "scale": (0.85, 1.15), "shift": 2, "noise": 8}
STRONG = {"rotation": 25, "scale": (0.7, 1.3), "shift": 3, "noise": 32}


# Per task: where the data comes from, its trainer flags (as options: {"image_size": 32} is --image-size 32), epochs, the target on the held-out metric, the
# cap, and the figures the --list estimates use (step seconds on one thread, model MB in float32, the
# slowdown of two processes at once against one alone (bench/contention.py), start-up seconds).
TASKS = {
    "movie-reviews": {
        "source": "sample:movie-reviews",
        "options": {},
        "epochs": TEXT_EPOCHS,
        "metric": "test_accuracy",
        "target": 0.76,
        "cap_seconds": 600,
        "step_sec": 0.004,
        "model_mb": 5.1,
        "gradient_mb": 0.5,
        "two_process_slowdown": 1.5,
        "startup_sec": 10,
        "eval_sec": 0.5,
        "examples": 10_200,
    },
    # MobileNetV2 from scratch on mildly augmented digits, the default learning rate. Retired from the plan
    # (its rows stay, and run again with --only task=digits-augmented-mobilenetv2): 1 worker reaches
    # 0.975 in epoch 5 of 16 and then wanders between 0.97 and 0.99, so start-up and the first epoch's
    # tracing were about a third of its time to target, and which epoch first crossed was chance.
    "digits-augmented-mobilenetv2": {
        "source": "augmented-digits",
        "distortion": MILD,
        "options": {"model": "mobilenetv2", "image_size": 32},
        "epochs": 16,
        "metric": "test_accuracy",
        "target": 0.975,
        "cap_seconds": 1800,
        "step_sec": 0.115,
        "model_mb": 9.1,
        "gradient_mb": 9.1,
        "two_process_slowdown": 1.1,
        "startup_sec": 15,
        "eval_sec": 1.5,
        # 16,000 training examples: 250 steps an epoch for 1 worker, 125 for each of 2 (2,000 in 16 epochs)
        "train_examples": 16_000,
        "test_examples": 840,
        "image_size": 32,
        "planned": False,
    },
    # The same model and sizes on strongly distorted digits at half the learning rate: the held-out accuracy
    # climbs through most of the run, so the time to target is mostly training, as in a long job.
    "digits-distorted-mobilenetv2": {
        "source": "augmented-digits",
        "distortion": STRONG,
        "options": {"model": "mobilenetv2", "image_size": 32, "learning_rate": 0.0005},
        "epochs": 16,
        "metric": "test_accuracy",
        "target": 0.90,
        "cap_seconds": 1800,
        "step_sec": 0.115,
        "model_mb": 9.1,
        "gradient_mb": 9.1,
        "two_process_slowdown": 1.1,
        "startup_sec": 15,
        "eval_sec": 1.5,
        "train_examples": 16_000,
        "test_examples": 840,
        "image_size": 32,
    },
}
# the tasks out of the plan (their rows kept): the plan, its plots and the advisor's check leave them out
RETIRED = {name for name, task in TASKS.items() if task.get("planned", True) is False}
QUICK_TASKS = {
    "movie-reviews": dict(TASKS["movie-reviews"], epochs=2, cap_seconds=120),
    **{
        name: dict(TASKS[name], epochs=2, cap_seconds=180, train_examples=512, test_examples=128)
        for name in ("digits-augmented-mobilenetv2", "digits-distorted-mobilenetv2")
    },
}


# every row's trainer flags beyond the defaults besides its task's and its strategy's: one thread per process
COMMON_OPTIONS = {"threads": 1}


def plan(tasks):
    """[{task, link, strategy, workers, options}] of the whole benchmark, in the order it runs. A row's options
    are all its trainer flags beyond the defaults (--epochs aside): one thread, the task's, the strategy's."""
    out = []
    for task in tasks:
        for link in LINKS:
            for strategy, workers, options in rows_plan():
                if strategy in LOCAL_ONLY and link != "loopback":
                    continue
                out.append(
                    {
                        "task": task,
                        "link": link,
                        "strategy": strategy,
                        "workers": workers,
                        "options": {**COMMON_OPTIONS, **tasks[task]["options"], **options},
                    }
                )
    return out


def planned_tasks(tasks, filter_sets):
    """The tasks whose rows the plan holds: all but a retired one ("planned": False), unless an --only names it."""
    named = {name for filters in filter_sets for name in filters.get("task", ())}
    return {name: t for name, t in tasks.items() if name not in RETIRED or name in named}


def bad_input(message):
    """A bad flag or a missing privilege: one line, exit 2, nothing run."""
    print(f"time_to_accuracy.py: {message}", file=sys.stderr)
    sys.exit(2)


def parse_only(text):
    """--only "key=value|value,key=value": {key: {values}}; keys task, link, strategy, workers or an option's name."""
    filters = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, values = part.partition("=")
        if not sep or not values:
            bad_input(f"--only: {part!r} is not KEY=VALUE[|VALUE...]")
        filters[key.strip()] = {v.strip() for v in values.split("|")}
    return filters


def selected(row, filters):
    """Whether a row matches every KEY=VALUE[|VALUE...] of one --only."""
    for key, values in filters.items():
        have = row[key] if key in ("task", "link", "strategy", "workers") else row["options"].get(key)
        if str(have) not in values:
            return False
    return True


def without_ceiling_time(rows):
    """The tasks whose 2-worker rows `rows` hold without the task's `average` row (tta_store.ceiling_time_to_target:
    its workers measure the ceiling of the time to target, within one sitting)."""
    two = {r["task"] for r in rows if r["workers"] == 2 and r["strategy"] not in ("ceiling", "average")}
    return sorted(t for t in two if not any(r["task"] == t and r["strategy"] == "average" for r in rows))


def processes(row):
    """How many processes a row starts (parameterserver: chief, ps and the workers)."""
    return row["workers"] + 2 if row["strategy"] == "parameterserver" else row["workers"]


# ------------------------------------------------------------------------------ estimates
def estimate_seconds(row, task):
    """A rough duration of a row for --list: start-up + epochs x (compute + syncs + evaluation), at
    most the cap. Not a prediction of the result: the figures in TASKS are from earlier runs."""
    t = task
    steps_one = -(
        -int(t["examples"] if "examples" in t else t["train_examples"]) // BATCH
    )  # 1 worker's steps per epoch
    mbit = LINKS[row["link"]] or 5000  # loopback: a few Gbit/s in practice
    strategy, options = row["strategy"], row["options"]
    # steps each training process takes per epoch (parameterserver: the group's steps are shared by its workers)
    per_worker = steps_one if row["workers"] == 1 or strategy == "ceiling" else -(-steps_one // row["workers"])
    compute = per_worker * t["step_sec"] * (t["two_process_slowdown"] if processes(row) > 1 else 1.0)
    from disttrain_trainer.strategies.cost_base import WIRE_BYTES  # (the advisor's bytes a weight on each wire)

    wire = WIRE_BYTES[options.get("allreduce_dtype", "float32")] / 4  # of the float32 size
    if strategy == "multiworker":
        comm = per_worker * (t["gradient_mb"] * wire * 8 / mbit + 0.002)
    elif strategy == "localsgd":
        comm = per_worker / options.get("sync_every", 32) * (t["model_mb"] * wire * 8 / mbit + 0.01)
    elif strategy == "parameterserver":
        # every step of either worker: read the weights, send the gradients, through the ps's one link
        comm = steps_one * (2 * t["model_mb"] * 8 / mbit + 0.004)
    else:
        comm = 0.0
    seconds = t["startup_sec"] * (1.5 if processes(row) > 2 else 1.0) + t["epochs"] * (compute + comm + t["eval_sec"])
    if strategy == "average":
        seconds += 15  # the aggregator
    return min(seconds, t["cap_seconds"] + 30)


def describe(row):
    from tta_store import strategy_options

    options = " ".join(f"{k}={v}" for k, v in strategy_options(row["options"]).items())
    return f"{row['task']} {row['link']} {row['workers']}x {row['strategy']}" + (f" {options}" if options else "")


# ------------------------------------------------------------------------------ data
def augmented_digits(path, train_examples, test_examples, size, distortion=MILD, seed=0):
    """digits' 8x8 images made into size x size ones by a random affine map (rotation, scale, shift: the
    `distortion`) plus pixel noise, written as npz (x uint8 [n, size, size, 1], y).

    The copier's split of the file is known beforehand (it depends only on its seed and the position:
    disttrain_copier.main.split_assignments), so every position the copier will hold out gets an image
    made from the held-out originals (a fifth of digits' 1,797, fixed by `seed`) and every training
    position one made from the others: no held-out example is a variant of a training example."""
    import numpy as np
    from scipy.ndimage import affine_transform
    from sklearn.datasets import load_digits

    from disttrain_copier.main import split_assignments

    digits = load_digits()
    images, labels = digits.images.astype(np.float32) * (255.0 / 16.0), digits.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(labels))
    held_out, kept = order[: len(labels) // 5], order[len(labels) // 5 :]
    test_fraction = test_examples / (train_examples + test_examples)
    destinations = split_assignments(COPIER_SEED, test_fraction, 1)
    n = train_examples + test_examples
    x, y = np.empty((n, size, size, 1), np.uint8), np.empty(n, np.int64)
    centre_in, centre_out = 3.5, (size - 1) / 2
    rotation, max_shift = distortion["rotation"], distortion["shift"]
    for i in range(n):
        source = rng.choice(held_out if next(destinations) < 0 else kept)
        angle, zoom = np.deg2rad(rng.uniform(-rotation, rotation)), rng.uniform(*distortion["scale"])
        matrix = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]]) * (8.0 / size / zoom)
        shift = rng.uniform(-max_shift, max_shift, size=2) * 8.0 / size
        offset = centre_in - matrix @ np.array([centre_out, centre_out]) + shift
        image = affine_transform(images[source], matrix, offset=offset, output_shape=(size, size), order=1, cval=0.0)
        x[i, ..., 0] = np.clip(image + rng.normal(0, distortion["noise"], image.shape), 0, 255).astype(np.uint8)
        y[i] = labels[source]
    tmp = path + ".tmp.npz"
    np.savez(tmp, x=x, y=y)
    os.replace(tmp, path)
    return test_fraction


def task_source(directory, task_name, task):
    """The copier flags of a task's data ([--source ..., --test-fraction ...]), its data file made in
    `directory` if the task has one (augmented digits: an npz, deterministic, made once)."""
    if task["source"] != "augmented-digits":
        return ["--source", task["source"]]
    npz = os.path.join(directory, f"{task_name}.npz")
    if not os.path.exists(npz + ".fraction"):
        print(
            f"  data: augmenting digits to {task['train_examples'] + task['test_examples']} images of "
            f"{task['image_size']}x{task['image_size']} ...",
            file=sys.stderr,
            flush=True,
        )
        fraction = augmented_digits(
            npz, task["train_examples"], task["test_examples"], task["image_size"], task["distortion"]
        )
        with open(npz + ".fraction", "w") as fh:
            fh.write(repr(fraction))
    with open(npz + ".fraction") as fh:
        return ["--source", f"npz:{npz}", "--test-fraction", fh.read()]


def workdirs(base, task_name, task):
    """{shards: workdir} of a task: the copier's output for 1 and for 2 shards (made once per session)."""
    from common import run_measured, tail

    source = task_source(base, task_name, task)
    out = {}
    for shards in (1, 2):
        workdir = os.path.join(base, f"{task_name}-{shards}")
        if not os.path.exists(os.path.join(workdir, "data", "_SUCCESS")):
            log = os.path.join(base, f"copier-{task_name}-{shards}.log")
            r = run_measured(
                [
                    os.path.join(BIN, "disttrain-copier"),
                    *source,
                    "--n-shards",
                    shards,
                    "--workdir",
                    workdir,
                    "--seed",
                    COPIER_SEED,
                ],
                log=log,
            )
            if r["rc"]:
                raise SystemExit(f"copier failed for {task_name}: {tail(log).strip().splitlines()[-1:]}")
        out[shards] = workdir
    return out


PROBE_BUDGET_SECONDS = 60  # the advisor's own default: the probe a user's run takes


def measure_link(store, sitting, link):
    """The payload rate a shaped link carries both ways (bench/goodput.py), before its first row of the
    sitting, kept with the sitting: the advisor's check gives the advisor this rate, as its probe on a real link
    would have measured it. A failed measurement is kept as its error (the check then uses the nominal rate)."""
    import subprocess

    import goodput

    print(f"  {link}: the link's payload rate ...", file=sys.stderr, flush=True)
    try:
        measured = goodput.measure(link)
    except (RuntimeError, ValueError, subprocess.SubprocessError, OSError) as err:
        measured = {"error": str(err)}
    store.put_link(sitting, link, measured)
    print(f"    {measured.get('goodput_mbit', measured.get('error'))} Mbit/s", file=sys.stderr, flush=True)


def probe_task(task_name, task, dirs, base):
    """The advisor's probe of a task on this host now: its document, or {"error": why} (the rows run all the same)."""
    from advisor_accuracy import take_probe

    options = {**COMMON_OPTIONS, **task["options"], "batch": BATCH}
    budget = 15 if QUICK else PROBE_BUDGET_SECONDS
    print(f"  {task_name}: the advisor's probe (at most {budget} s) ...", file=sys.stderr, flush=True)
    document, why = take_probe(dirs[2], os.path.join(base, f"probe-{task_name}.json"), task["epochs"], options, budget)
    if why:
        print(f"    the probe failed: {why}", file=sys.stderr, flush=True)
    return document if document is not None else {"error": why}


def write_data(directory, tasks):
    """--write-data: every task's data where another tool (bench/advisor_accuracy.py) can copy it the same way."""
    import shlex

    os.makedirs(directory, exist_ok=True)
    for name, task in tasks.items():
        source = task_source(os.path.abspath(directory), name, task)
        print(
            f"{name}: disttrain-copier {shlex.join(source)}; trainer flags: "
            f"{shlex.join(option_flags({**COMMON_OPTIONS, **task['options']}))} --batch {BATCH} --epochs {task['epochs']}"
        )


# ------------------------------------------------------------------------------ one row
def option_flags(options):
    """The trainer's flags of a row's options: a value after its flag; True: a switch by itself (--sync-at-epoch-end)."""
    flags = []
    for key, value in options.items():
        flags.append(f"--{key.replace('_', '-')}")
        if value is not True:
            flags.append(str(value))
    return flags


def trainer_argv(row, task, workdir, out, index, port, shaped):
    strategy = "average" if row["strategy"] in ("single", "ceiling") else row["strategy"]
    workers = 1 if row["strategy"] in ("single", "ceiling") else row["workers"]
    argv = [
        "--workdir",
        workdir,
        "--out",
        out,
        "--worker-index",
        index,
        "--workers",
        workers,
        "--epochs",
        task["epochs"],
        "--batch",
        BATCH,
        "--seed",
        SEED,
        "--strategy",
        strategy,
        *option_flags(row["options"]),
    ]
    if strategy in ("multiworker", "localsgd", "parameterserver"):
        argv += ["--port", port, "--peer-wait", 300]
        if shaped:
            import netns

            argv += ["--host-pattern", netns.HOST_PATTERN]
    if strategy == "parameterserver":
        argv += ["--ps", 1]
    return [str(a) for a in argv]


def row_workdir(row, dirs):
    """The copier's output a row trains on; dirs: {shards: workdir} (workdirs())."""
    return dirs[1 if row["strategy"] in ("single", "ceiling") else 2]


def row_commands(row, task, workdir, run_dir, port, shaped):
    """(each process's trainer argv, the --out directories) of a row run in run_dir. The ceiling is two
    independent runs, each into its own --out; every other row has one --out."""
    strategy = row["strategy"]
    outs = (
        [os.path.join(run_dir, f"train-{i}") for i in range(2)]
        if strategy == "ceiling"
        else [os.path.join(run_dir, "train")]
    )
    argvs = [
        trainer_argv(
            row,
            task,
            workdir,
            outs[i] if strategy == "ceiling" else outs[0],
            0 if strategy == "ceiling" else i,
            port,
            shaped,
        )
        for i in range(processes(row))
    ]
    return argvs, outs


PREFLIGHT = "import sys\nfrom disttrain_trainer import parse_config\nparse_config(sys.argv[1:])"


def refused(argv):
    """The trainer's one-line refusal of these flags (an older trainer without them), or None."""
    import subprocess

    # the interpreter of the trainer the rows run (BENCH_BIN may name another installation's)
    python = os.path.join(BIN, "python")
    r = subprocess.run(
        [python if os.path.exists(python) else sys.executable, "-c", PREFLIGHT, *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if r.returncode == 0:
        return None
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    return (lines[-1] if lines else f"exit {r.returncode}")[:300]


def last_line(path):
    from common import tail

    lines = [line.strip() for line in tail(path, 6000).splitlines() if line.strip()]
    return (lines[-1] if lines else "no output")[:300]


class Watch:
    """The held-out metric of one worker directory as its progress.json shows it: [(seconds, epoch, value)]."""

    def __init__(self, worker_dir, metric, started):
        from disttrain_contract.layout import PROGRESS_FILE

        self.path, self.metric, self.started, self.curve = os.path.join(worker_dir, PROGRESS_FILE), metric, started, []
        self.steps_per_epoch = None

    def poll(self):
        try:
            with open(self.path) as fh:
                progress = json.load(fh)
        except (OSError, ValueError):
            return  # not written yet (the file is replaced whole: never half read)
        self.steps_per_epoch = progress.get("steps_per_epoch")
        seen = {epoch for _, epoch, _ in self.curve}
        for entry in progress.get("history", []):
            if entry["epoch"] not in seen:
                # the write that first shows an epoch was made when its evaluation had finished
                self.curve.append((round(progress["time"] - self.started, 2), entry["epoch"], entry.get(self.metric)))


def stop(procs, grace=30):
    """SIGTERM to every process still running (a trainer saves a checkpoint and exits 75), SIGKILL after `grace` s."""
    import subprocess

    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_row(row, task, dirs, base):
    """Train one row; returns its stored form."""
    import shutil

    from common import (
        cpu_mark,
        machine_snapshot,
        other_processes_cores,
        run_measured,
        start,
        steady_epoch_sec,
        BUSY_CPU,
    )
    from stages import free_port_block
    from tta_store import outcome

    strategy, link = row["strategy"], row["link"]
    shaped = LINKS[link] is not None
    run_dir = os.path.join(base, "runs", "-".join([row["task"], link, strategy, *map(str, row["options"].values())]))
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    workdir = row_workdir(row, dirs)
    n = processes(row)
    port = free_port_block(n)
    argvs, outs = row_commands(row, task, workdir, run_dir, port, shaped)
    from disttrain_contract.manifest import Manifest

    record = {
        **row,
        "link_mbit": LINKS[link],
        "batch_per_worker": BATCH,
        "train_examples": Manifest.read(os.path.join(workdir, "data")).train_examples,
        "target": task["target"],
        "metric": task["metric"],
        "cap_seconds": task["cap_seconds"],
        "epochs_planned": task["epochs"],
        "processes": n,
        "quick": QUICK,
        "reached": False,
        "time_to_target_seconds": None,
        "wall_seconds": None,
        "seconds_per_epoch": None,
        "final_metric": None,
        "epochs": 0,
        "curve": [],
    }
    why = refused(argvs[0])
    if why:
        return dict(record, status="not available", reason=why)
    import netns

    if shaped:
        netns.bridged(NAMESPACES[:n], link, BRIDGE)
    before, mark = machine_snapshot(), cpu_mark()
    procs, capped, failure = [], False, None
    try:
        started = time.time()
        for i, argv in enumerate(argvs):
            cmd = [os.path.join(BIN, "disttrain-trainer"), *argv]
            procs.append(
                start(netns.exec_in(NAMESPACES[i], cmd) if shaped else cmd, os.path.join(run_dir, f"process-{i}.log"))
            )
        # the chief's worker directory (every strategy's worker 0 evaluates); ceiling: both runs'; average: both workers'
        watched = [os.path.join(out, "worker-00000") for out in outs] + (
            [os.path.join(outs[0], "worker-00001")] if strategy == "average" else []
        )
        watches = [Watch(d, task["metric"], started) for d in watched]
        while True:
            for w in watches:
                w.poll()
            codes = [p.poll() for p in procs]
            bad = next((i for i, c in enumerate(codes) if c not in (None, 0)), None)
            if bad is not None:
                failure = f"process {bad} exit {codes[bad]}: {last_line(os.path.join(run_dir, f'process-{bad}.log'))}"
                break
            if all(c == 0 for c in codes):
                break
            if time.time() - started > task["cap_seconds"]:
                capped = True
                break
            time.sleep(0.25)
        stop(procs)
        for w in watches:
            w.poll()
        curve = list(watches[0].curve)
        worker_curves = None
        if strategy == "average" and not (capped or failure):
            # the group's model exists only once the aggregator has averaged (and evaluated) it
            final = os.path.join(run_dir, "final")
            log = os.path.join(run_dir, "aggregator.log")
            agg = run_measured(
                [
                    os.path.join(BIN, "disttrain-aggregator"),
                    "--workdir",
                    workdir,
                    "--dir",
                    outs[0],
                    "--expect",
                    2,
                    "--timeout",
                    60,
                    "--savefile",
                    os.path.join(final, "model.keras"),
                    "--exports",
                    "none",
                    "--force",
                ],
                log=log,
            )
            if agg["rc"]:
                failure = f"aggregator exit {agg['rc']}: {last_line(log)}"
            else:
                from disttrain_contract.layout import REPORT_FILE
                from disttrain_contract.report import Report

                accuracy = Report.read(os.path.join(final, REPORT_FILE)).final.get(task["metric"])
                worker_curves = [[list(p) for p in w.curve] for w in watches]
                curve = [(round(time.time() - started, 2), task["epochs"], accuracy)]
        wall = time.time() - started
    finally:
        stop(procs, grace=5)
        if shaped:
            netns.teardown(NAMESPACES[:n], BRIDGE)
    others = other_processes_cores(mark)
    # steady seconds per epoch: the training workers' metrics.json (parameterserver: only the chief keeps one)
    trained = [
        os.path.join(out, f"worker-{i:05d}")
        for out in outs
        for i in range(1 if strategy in ("single", "ceiling", "parameterserver") else row["workers"])
    ]
    walls, syncs = [], []  # (syncs: localsgd's seconds an epoch stood still for its syncs, each worker's)
    for d in trained:
        try:
            with open(os.path.join(d, "metrics.json")) as fh:
                epoch_records = json.load(fh)
        except (OSError, ValueError):
            epoch_records = []
        walls.append([e["wall_time_sec"] for e in epoch_records])
        syncs.append([e["sync_sec"] for e in epoch_records if "sync_sec" in e])
    epochs = min((len(w) for w in walls), default=0)
    if epochs >= 2 and all(len(s) == len(w) for s, w in zip(syncs, walls)):
        # each worker's, over the same epochs as seconds_per_epoch: a worker that reaches a sync first also waits
        # there for the other, so the two differ by what each waited (the one that arrived last waited for no one)
        record["sync_seconds_per_epoch"] = [round(steady_epoch_sec([s]), 4) for s in syncs]
    record.update(
        wall_seconds=round(wall, 2),
        epochs=epochs,
        steps_per_epoch=watches[0].steps_per_epoch,
        machine_before=before,
        other_processes_cores=round(others, 3),
        provisional=QUICK or others > BUSY_CPU,
        seconds_per_epoch=round(steady_epoch_sec(walls), 4) if epochs >= 2 else None,
        first_epoch_seconds=round(max(w[0] for w in walls), 3) if epochs >= 1 else None,
        curve=[list(p) for p in curve],
    )
    if strategy == "ceiling":
        record["curves"] = [[list(p) for p in w.curve] for w in watches]
    if worker_curves:
        record["worker_curves"] = worker_curves
    if failure:
        return dict(record, status=f"failed: {failure}")
    if strategy == "ceiling":  # the slower of the two runs
        results = [outcome([(t, v) for t, _, v in w.curve], task["target"], capped) for w in watches]
        reached = all(r[0] for r in results)
        seconds = max(r[1] for r in results) if reached else None
        status = "ok" if reached or not capped else "capped"
        finals = [w.curve[-1][2] for w in watches if w.curve]
        final_metric = min(finals) if len(finals) == 2 and None not in finals else None
    else:
        reached, seconds, status = outcome([(t, v) for t, _, v in curve], task["target"], capped)
        final_metric = curve[-1][2] if curve else None
    return dict(
        record,
        reached=reached,
        time_to_target_seconds=seconds,
        status=status,
        final_metric=final_metric,
        stopped_at_cap=capped,
    )


# ------------------------------------------------------------------------------ the command
def options(parser):
    parser.add_argument(
        "--list",
        action="store_true",
        help="print the plan with estimated times (and which rows are stored); run nothing",
    )
    parser.add_argument(
        "--only",
        metavar="FILTERS",
        action="append",
        default=[],
        help="run only the rows matching every KEY=VALUE[|VALUE...] (comma-separated); keys: task, link, strategy, "
        "workers, or an option's name (sync_every, outer_optimizer, allreduce_dtype). Repeated: the rows "
        "matching any of them (e.g. a task's loopback references and its shaped links in one sitting)",
    )
    parser.add_argument(
        "--rerun",
        action="store_true",
        help="run the selected rows even where they are stored (each replaces its stored row): e.g. a "
        "task's single, ceiling and average rows again in this sitting, beside a link's rows",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny data and 2 epochs per row, into results/time_to_accuracy-quick.json: checks the harness",
    )
    parser.add_argument(
        "--cap-seconds",
        action="append",
        default=[],
        metavar="TASK=SECONDS",
        help="stop a run of TASK after SECONDS (default: "
        + ", ".join(f"{k} {v['cap_seconds']}" for k, v in TASKS.items())
        + ")",
    )
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="TASK=VALUE",
        help="the held-out metric's target of TASK (default: "
        + ", ".join(f"{k} {v['target']}" for k, v in TASKS.items())
        + ")",
    )
    parser.add_argument(
        "--retarget",
        action="store_true",
        help="recompute reached, time to target and status of the stored rows from their curves with the current "
        "targets (a capped run's curve ends at its cap); train nothing",
    )
    parser.add_argument(
        "--write-data",
        metavar="DIR",
        help="write each task's data into DIR and print the copier's and the trainer's flags for it (what a "
        "row copies and trains: e.g. for bench/advisor_accuracy.py --task); train nothing",
    )
    parser.add_argument(
        "--results", metavar="PATH", help="the result file (default bench/results/time_to_accuracy.json)"
    )
    parser.add_argument(
        "--continue-sitting",
        nargs="?",
        const="newest",
        metavar="SITTING",
        help="add the rows to a sitting of the results (its id; without one, the newest) instead of "
        "starting one (a row it left out, or one stopped), on the host that ran it, not restarted "
        "since (its boot id); its probes stay",
    )
    parser.add_argument(
        "--probe-each-row",
        action="store_true",
        help="take the advisor's probe again just before every row (its own budget, about a minute) and keep "
        "it in the row: bench/advisor_accuracy.py predicts such a row from the probe taken just before "
        "it, so the host's speed moving during a sitting is not counted against the advisor",
    )


def task_table(args):
    tasks = {name: dict(t) for name, t in (QUICK_TASKS if args.quick else TASKS).items()}
    for flag, key, kind in (("cap_seconds", "cap_seconds", float), ("target", "target", float)):
        for item in getattr(args, flag):
            name, sep, value = item.partition("=")
            if not sep or name not in tasks:
                bad_input(
                    f"--{flag.replace('_', '-')} {item!r}: expected TASK=VALUE with TASK one of {', '.join(tasks)}"
                )
            try:
                tasks[name][key] = kind(value)
            except ValueError:
                bad_input(f"--{flag.replace('_', '-')} {item!r}: {value!r} is not a number")
            if not math.isfinite(tasks[name][key]) or (key == "cap_seconds" and tasks[name][key] <= 0):
                bad_input(
                    f"--{flag.replace('_', '-')} {item!r}: must be a finite number"
                    + (" > 0" if key == "cap_seconds" else "")
                )
    return tasks


def print_plan(rows, tasks, store):
    from tta_store import row_key

    total = remaining = 0.0
    print(f"{'row':100} {'estimate':>9}  stored")
    for row in rows:
        seconds = estimate_seconds(row, tasks[row["task"]])
        stored = store.get(row_key(row)) if store else None
        done = stored is not None and store.done(row_key(row))
        total += seconds
        remaining += 0 if done else seconds
        print(f"{describe(row):100} {seconds / 60:8.1f}m  {stored['status'] if stored else '-'}")
    print(
        f"{len(rows)} rows: about {total / 3600:.1f} h in all, {remaining / 3600:.1f} h not yet stored "
        "(rough estimates from earlier step times; the caps bound the slow rows)"
    )


def retarget(store, tasks):
    from tta_store import outcome

    for row in store.rows:
        task = tasks.get(row["task"])
        if task is None or row.get("status") not in ("ok", "capped"):
            continue
        row["target"] = task["target"]
        capped = row.get("stopped_at_cap", row["status"] == "capped")
        if row["strategy"] == "ceiling":
            results = [outcome([(t, v) for t, _, v in c], task["target"], capped) for c in row["curves"]]
            row["reached"] = all(r[0] for r in results)
            row["time_to_target_seconds"] = max(r[1] for r in results) if row["reached"] else None
            row["status"] = "ok" if row["reached"] or not capped else "capped"
        else:
            row["reached"], row["time_to_target_seconds"], row["status"] = outcome(
                [(t, v) for t, _, v in row["curve"]], task["target"], capped
            )
    store.write()
    print(
        f"{len(store.rows)} rows recomputed for the targets "
        + ", ".join(f"{k} {v['target']}" for k, v in tasks.items()),
        file=sys.stderr,
    )


def interrupted(*_):
    raise KeyboardInterrupt


def boot_id():
    """This host's boot id (Linux), or None: what a continued sitting must share with the one that started it."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def main(args):
    global QUICK
    import common

    if args.quick:
        os.environ["BENCH_QUICK"] = "1"
        QUICK = common.QUICK = True
    tasks = task_table(args)
    filter_sets = [parse_only(text) for text in args.only]
    rows = [
        r
        for r in plan(planned_tasks(tasks, filter_sets))
        if not filter_sets or any(selected(r, f) for f in filter_sets)
    ]
    for text, filters in zip(args.only, filter_sets):
        if filters and not any(selected(r, filters) for r in rows):
            bad_input(f"--only {text!r} matches no row of the plan (--list shows it)")
    from tta_store import RowStore, row_key, sitting_link

    path = args.results or os.path.join(RESULTS, "time_to_accuracy-quick.json" if QUICK else "time_to_accuracy.json")
    if args.write_data:
        write_data(args.write_data, tasks)
        return
    if args.list:
        print_plan(rows, tasks, RowStore(path) if os.path.exists(path) else None)
        return
    config = {
        "batch_per_worker": BATCH,
        "threads_per_process": 1,
        "seed": SEED,
        "links": LINKS,
        "h_values": H_VALUES,
        "tasks": {
            k: {
                x: v[x]
                for x in ("source", "distortion", "options", "epochs", "metric", "target", "cap_seconds")
                if x in v
            }
            for k, v in tasks.items()
        },
        "shaping": "tc tbf on every interface a process sends through (a bridge between namespaces); no added delay",
    }
    store = RowStore(path, machine=common.machine_facts(), config=config)
    if args.retarget:
        retarget(store, tasks)
        return
    stale = sorted(
        {
            r["task"]
            for r in store.rows
            if r["task"] in tasks
            and r.get("target") != tasks[r["task"]]["target"]
            and r.get("status") in ("ok", "capped")
        }
    )
    if stale:
        print(
            f"note: stored rows of {', '.join(stale)} were measured against another target: --retarget recomputes them",
            file=sys.stderr,
        )
    todo = rows if args.rerun else [r for r in rows if not store.done(row_key(r))]
    print(
        f"{len(rows) - len(todo)} of {len(rows)} rows already stored; {len(todo)} to run", file=sys.stderr, flush=True
    )
    if any(LINKS[r["link"]] for r in todo) and os.geteuid() != 0:
        bad_input("the shaped links need root (ip netns, tc); run as root, or --only link=loopback")
    if not todo:
        return
    if not args.continue_sitting:
        for task in without_ceiling_time(todo):
            print(
                f"note: this sitting runs {task}'s 2-worker rows without its `average` row, whose workers measure the "
                "ceiling of the time to target: those rows will show no share of it (add strategy=average to --only, "
                "or add it later with --continue-sitting)",
                file=sys.stderr,
                flush=True,
            )
    # SIGTERM (as Ctrl-C): stop the running row's processes, remove its namespaces, keep the stored rows
    signal.signal(signal.SIGTERM, interrupted)
    base = common.tmpdir("tta")
    if args.continue_sitting:
        sitting, why = store.continue_sitting(
            boot_id(), None if args.continue_sitting == "newest" else args.continue_sitting
        )
        if why:
            bad_input(f"--continue-sitting: {why}")
        print(f"sitting {sitting}, continued", file=sys.stderr, flush=True)
    else:
        sitting = store.start_sitting(common.machine_facts(), boot=boot_id())
        print(f"sitting {sitting}", file=sys.stderr, flush=True)
    try:
        dirs = {}
        for row in todo:
            probe = None
            if row["task"] not in dirs:
                dirs[row["task"]] = workdirs(base, row["task"], tasks[row["task"]])
                # before a task's first row: kept with the sitting, bench/advisor_accuracy.py checks its rows against it
                if row["task"] not in store.doc["sittings"][sitting]["probes"]:  # (a continued sitting keeps its own)
                    probe = probe_task(row["task"], tasks[row["task"]], dirs[row["task"]], base)
                    store.put_probe(sitting, row["task"], probe)
            if LINKS[row["link"]] and not sitting_link(store.doc, sitting, row["link"]):
                measure_link(store, sitting, row["link"])
            if args.probe_each_row and probe is None:  # (a task's first row has the sitting's, just taken)
                probe = probe_task(row["task"], tasks[row["task"]], dirs[row["task"]], base)
            # --probe-each-row: the host as it is just before this row, kept in the row (the probe's timings only)
            row_probe = probe.get("probe") if args.probe_each_row else None
            print(f"  {describe(row)} ...", file=sys.stderr, flush=True)
            result = dict(run_row(row, tasks[row["task"]], dirs[row["task"]], base), sitting=sitting)
            if row_probe:
                result["probe"] = row_probe
            store.put(result)
            if result["status"] not in ("ok", "capped"):
                print(
                    f"    {result['status']}" + (f": {result['reason']}" if result.get("reason") else ""),
                    file=sys.stderr,
                    flush=True,
                )
                continue
            when = (
                f"{result['time_to_target_seconds']:.1f}s to {result['target']}"
                if result["reached"]
                else "target not reached"
            )
            spe = f", {result['seconds_per_epoch']:.2f} s/epoch" if result.get("seconds_per_epoch") else ""
            print(
                f"    {result['status']}: {when}{spe}, final {result['final_metric']}, wall {result['wall_seconds']}s",
                file=sys.stderr,
                flush=True,
            )
    except KeyboardInterrupt:
        print("interrupted: the rows finished so far are stored; run again to resume", file=sys.stderr)
        sys.exit(130)
    finally:
        if not os.environ.get("BENCH_KEEP"):
            import shutil

            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main(command_line(__doc__, options))
