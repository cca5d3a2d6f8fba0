"""The advisor's parameter-server phase: the trainer itself, run briefly as `parameterserver` on this host.

The probe's two processes form a MultiWorkerMirrored cluster, and a variable placed on the other process there
crashed TensorFlow, so they cannot time a parameter-server step. What such a step costs beyond the compute and
the bytes (each variable read from the server and each gradient sent to it as remote operations, the
optimizer's update on the server, the coordinator's scheduling) was the part the advisor could not predict:
measured on the text model, an epoch took 2x its prediction. So, after the probe's two processes have
finished and when what is left of the budget fits it, the advisor starts the real thing: the trainer's four
processes (chief, one parameter server, two workers) on loopback, with the run's own flags, on the probe's
data (two shards), and reads the chief's metrics.json as the epochs end. The steady seconds per epoch (the
mean of the epochs after the first, whose tracing it leaves out; the training part of each epoch, as the
benchmarks count it) is the measurement; then the four processes are stopped and their directory removed.

It needs whole epochs (the chief knows its steps only when an epoch's calls are done). When two epochs of the
whole data do not fit in what is left, it runs on the first part of each shard instead (`part_of_the_data`: at
least MIN_GROUP_STEPS steps of the group an epoch) and scales the steady epoch by the whole data's steps over
the part's: each step of the group pulls the whole model and pushes its gradients whatever the data, and the
runtime's own work per step is what the run is for. Measured on MobileNetV2 (262 variables), on the first 512
examples of each shard: 39.0 s an epoch scaled from 16 steps of the group, against 37.04 s measured on the whole
data. When not even that fits, the model keeps the lower bound, and the advice says what budget would time it.
"""

import dataclasses
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

from disttrain_contract import ContractError
from disttrain_contract.atomic import sha256_file
from disttrain_contract.manifest import MANIFEST, SplitInfo, split_files
from disttrain_contract.ports import free_port_block
from disttrain_contract.trainer_records import read_epoch_records
from disttrain_trainer import TrainConfig
from disttrain_trainer.strategies import cost_base
from disttrain_trainer.strategies.parameterserver.options import ParameterServerSettings

WORKERS, PARAMETER_SERVERS = 2, 1
# Timed until at least two epochs after the first (which traces the step) and STEADY_SECONDS of them (a
# small table's epochs last a tenth of a second), or until another epoch would not end before the deadline
# (one steady epoch is then enough)
STEADY_EPOCHS, STEADY_SECONDS = 2, 2.0
POLL_SECONDS = 0.2
# A part of the data: at least MIN_GROUP_STEPS steps of the group an epoch (fewer, and the per-epoch work the
# scaling multiplies weighs too much: 16 steps of MobileNetV2 scaled to +5.5 %, 63 to +2.9 %), at most
# MAX_GROUP_STEPS (its files go to a temporary directory: a few thousand examples, whatever the data's size), and a
# held-out split of at most PART_TEST_EXAMPLES (the run evaluates after each epoch, untimed but in the budget)
MIN_GROUP_STEPS, MAX_GROUP_STEPS, PART_TEST_EXAMPLES = 16, 64, 256
# The environment a trainer on Kubernetes reads its place from: none of it applies to processes on loopback.
PLACEMENT_ENVIRONMENT = ("TF_CONFIG", "JOB_COMPLETION_INDEX", "DISTTRAIN_SERVICE", "DISTTRAIN_JOB")


def phase_config(config, data_dir, out, base_port, epochs, peer_wait):
    """The run's TrainConfig as this phase's parameterserver run on loopback: the run's data, model and training
    flags, with this phase's own placement, strategy, epochs and output (`worker_index`: set per task)."""
    return dataclasses.replace(
        config,
        data=str(data_dir),
        out=out,
        strategy="parameterserver",
        strategy_settings=ParameterServerSettings(ps=PARAMETER_SERVERS),
        workers=WORKERS,
        port=base_port,
        host_pattern="127.0.0.1:{index_port}",
        service="",
        job="",
        epochs=epochs,
        progress_interval=0.0,
        peer_wait=peer_wait,
        params_from=None,
        wait_timeout=TrainConfig.wait_timeout,
    )


def seconds_needed(startup_seconds, bound_seconds):
    """What a run of the phase is taken to need: four start-ups on the host where two took `startup_seconds`, a
    first epoch (tracing) and a steady one, each taken as twice the lower bound (the text model's measured epoch)."""
    return 2 * startup_seconds + 2 * 2 * bound_seconds


def data_fraction(startup_seconds, bound_seconds, group_steps, left_seconds):
    """(the fraction of each shard to run on, the seconds left that the smallest part would need): 1.0 when the
    whole data fits in `left_seconds`; a smaller fraction when only part of it does (what fits, up to
    MAX_GROUP_STEPS steps of the group an epoch); None when not even MIN_GROUP_STEPS fit. `bound_seconds`: the
    lower bound of a whole epoch, whose `group_steps` steps each cost the same."""
    smallest = min(1.0, MIN_GROUP_STEPS / max(group_steps, 1))
    least = seconds_needed(startup_seconds, bound_seconds * smallest)
    if left_seconds >= seconds_needed(startup_seconds, bound_seconds):
        return 1.0, least
    if left_seconds < least:
        return None, least
    # seconds_needed is the start-ups plus a part of the epochs: the part whose epochs fill what is left
    fits = (left_seconds - seconds_needed(startup_seconds, 0)) / seconds_needed(0, bound_seconds)
    return min(fits, MAX_GROUP_STEPS / group_steps), least


def part_of_the_data(data_dir, manifest, fraction, out_dir):
    """Write the first `fraction` of each shard of the copier's output `data_dir` (and at most PART_TEST_EXAMPLES
    of its held-out split) to `out_dir`, as the copier would have: the same files beside them, a manifest with
    the part's counts and digests. Returns the part's Manifest."""
    splits = {s.name for s in (*manifest.shards, manifest.test)}
    own = {MANIFEST, *(f for name in splits for f in split_files(name, manifest.storage))}
    for name in os.listdir(data_dir):  # the vocabulary, the validation's statistics, the completion marker
        if name not in own and os.path.isfile(os.path.join(data_dir, name)):
            shutil.copy2(os.path.join(data_dir, name), os.path.join(out_dir, name))

    def part(split, examples):
        for fname in split_files(split.name, manifest.storage):
            source, target = os.path.join(data_dir, fname), os.path.join(out_dir, fname)
            if manifest.storage == "jsonl":  # one example a line
                with open(source, encoding="utf-8") as fh, open(target, "w", encoding="utf-8") as out:
                    for _, line in zip(range(examples), fh):
                        out.write(line)
            else:
                np.save(target, np.load(source, mmap_mode="r", allow_pickle=False)[:examples])
        return SplitInfo(
            split.name,
            examples,
            {f: sha256_file(os.path.join(out_dir, f)) for f in split_files(split.name, manifest.storage)},
        )

    shards = [part(s, max(1, math.ceil(s.examples * fraction))) for s in manifest.shards]
    the_part = dataclasses.replace(
        manifest, shards=shards, test=part(manifest.test, min(manifest.test.examples, PART_TEST_EXAMPLES))
    )
    the_part.write(out_dir)  # last: a complete part
    return the_part


def measure_on_part(args, data_dir, manifest, fraction, epochs, deadline, say):
    """measure() on the first `fraction` of each shard (part_of_the_data, in a temporary directory removed after),
    scaled to an epoch of the whole data by its steps of the group over the part's; None as measure()."""
    with tempfile.TemporaryDirectory(prefix="disttrain-advise-ps-data-") as part_dir:
        part = part_of_the_data(data_dir, manifest, fraction, part_dir)
        whole_steps, part_steps = (
            cost_base.steps_per_epoch(m.train_examples, 1, args.train.batch) for m in (manifest, part)
        )
        say(
            f"parameter server: two epochs of the whole data do not fit the budget; timing it on "
            f"{part.train_examples:,} of the {manifest.train_examples:,} examples ({part_steps} steps of the group an "
            f"epoch, against {whole_steps})"
        )
        seconds = measure(args, part_dir, epochs, deadline, say)
    if seconds is None:
        return None
    seconds *= whole_steps / part_steps
    say(f"parameter server: {seconds:.2f} s per epoch of the whole data (scaled by its steps)")
    return seconds


def measure(args, data_dir, epochs, deadline, say):
    """Steady seconds per epoch of `parameterserver` with 2 workers and 1 parameter server on this host, or None
    (with why, through `say`) when the run failed or the deadline came first. `epochs`: the run's --epochs, what
    the budget could use at most (its processes are stopped before; should the advisor itself be killed, they
    end by themselves soon after)."""
    out = tempfile.mkdtemp(prefix="disttrain-advise-ps-")
    env = {k: v for k, v in os.environ.items() if k not in PLACEMENT_ENVIRONMENT}
    procs = []
    try:
        try:
            base = free_port_block(1 + PARAMETER_SERVERS + WORKERS)
        except ContractError as err:
            say(f"parameter-server epochs not timed: {err}")
            return None
        run = phase_config(args.train, data_dir, out, base, epochs, peer_wait=max(1, int(deadline - time.time())))
        for index in range(1 + PARAMETER_SERVERS + WORKERS):
            argv = dataclasses.replace(run, worker_index=index).to_argv()
            with open(os.path.join(out, f"task-{index}.log"), "w") as log:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "disttrain_trainer.main", *argv],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=env,
                        start_new_session=True,
                    )
                )
        metrics = os.path.join(out, "worker-00000", "metrics.json")
        ended = []
        while time.time() < deadline:
            ended = read_epochs(metrics)
            if len(ended) > STEADY_EPOCHS and sum(ended[1:]) >= STEADY_SECONDS:
                break
            if len(ended) >= 2 and time.time() + steady(ended) * 1.2 > deadline:
                break  # another epoch would not end before the deadline
            if procs[0].poll() == 0:  # the chief trained all its epochs (a small table's are short)
                ended = read_epochs(metrics)
                break
            failed = [(i, p.returncode) for i, p in enumerate(procs) if p.poll() not in (None, 0)]
            if failed:
                index, code = failed[0]
                say(
                    f"parameter-server epochs not timed: its task {index} exited with {code} "
                    f"({last_line(os.path.join(out, f'task-{index}.log'))})"
                )
                return None
            time.sleep(POLL_SECONDS)
        if len(ended) < 2:
            say(
                f"parameter-server epochs not timed: {len(ended)} epoch(s) ended before the budget's end (the advisor "
                f"predicts it as a lower bound; a longer --budget-seconds times it)"
            )
            return None
        seconds = steady(ended)
        say(
            f"parameter server: {seconds:.2f} s per epoch (2 workers, 1 parameter server and the chief on this host; "
            f"{len(ended) - 1} steady epoch(s))"
        )
        return seconds
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: that trainer process and nothing else
            proc.wait()
        shutil.rmtree(out, ignore_errors=True)


def read_epochs(path):
    """The training seconds of each epoch the chief has ended so far (its metrics.json, written atomically)."""
    try:
        return [record.wall_time_sec for record in read_epoch_records(path)]
    except ContractError:  # (a record the chief has not finished writing is never seen: atomic; anything else: none)
        return []


def steady(epochs):
    """The mean of the epochs after the first (which traces the step), as the benchmarks' steady s/epoch."""
    rest = epochs[1:] or epochs
    return sum(rest) / len(rest)


def last_line(path):
    try:
        with open(path) as fh:
            lines = [line.strip() for line in fh if line.strip()]
        return lines[-1][:300] if lines else "no output"
    except OSError:
        return "no log"
