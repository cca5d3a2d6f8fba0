"""disttrain-advise: whether distributing this training pays, and with which strategy, from a short probe.

    disttrain-advise --workdir workdir                       # this host: 2 probe processes on loopback
    disttrain-advise --workdir workdir --link-mbit 10        # the same probe, predicted for a 10 Mbit/s link
    disttrain-advise --workdir workdir --epochs-to-target 8 --json advice.json
    disttrain-advise --from-probe advice.json --link-mbit 100   # predict again from an earlier probe

It takes the trainer's own flags (the same data, model, batch and threads mean the same things) and
probes for at most --budget-seconds: the step time of one worker alone and of two at once, one held-out
evaluation, the model's bytes, and collectives on the link (perfmodel.Probe; probe.py runs it); then,
on one host with enough of the budget left, the trainer's own parameter-server run for a few epochs
(parameterserver_phase.py).
From those it predicts the seconds per epoch and the time for the run (or to a target) of each strategy
and worker count (perfmodel.py says how), prints a table and recommends one, with the reason in one
sentence. It only advises: nothing it prints changes a run.

Where the probe runs: by default on this host, two processes on loopback. With the trainer's cluster
flags (--service on Kubernetes, or --host-pattern) it is one process per pod instead: the pods with
index 0 and 1 probe the real link between them (the others print where the advice is and exit).
"""

import argparse
import dataclasses
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from disttrain_contract import ContractError, StageTimeout, Workdir, atomic_write_json, read_json, run_cli
from disttrain_contract.manifest import Manifest
from disttrain_contract.strategies import strategy_of
from disttrain_trainer import TrainConfig, build_parser, cluster, from_flags, perfmodel
from disttrain_trainer.strategies import cost_base
from disttrain_trainer.strategies.localsgd import cost as localsgd_cost
from disttrain_trainer.strategies.parameterserver import cost as parameterserver_cost
from disttrain_trainer.strategies.options_base import AllReduceSettings

PROBE_WORKER_FLAG = "--probe-worker"
RELAY_LOCK = threading.Lock()  # one probe worker's line at a time on stderr
KILL_RESERVE_SECONDS = 1.0  # of the budget, kept for stopping the probe and printing the advice
MIN_BUDGET_SECONDS = 10.0


@dataclasses.dataclass(frozen=True)
class AdviseConfig:
    """What disttrain-advise was asked: the run to advise on (`train`, the trainer's flags as a TrainConfig),
    the wire settings its probe's collectives use (the trainer's --heartbeat-timeout and
    --allreduce-pack-bytes, whatever the run's strategy), and the advisor's own flags."""

    train: TrainConfig
    probe_wire: AllReduceSettings
    budget_seconds: float = 60.0
    link_mbit: float | None = None
    epochs_to_target: float | None = None
    worker_counts: tuple | None = None
    json_path: str | None = None
    from_probe: str | None = None
    local_probe: bool = False
    never_fail: bool = False
    probe_worker: tuple | None = None


def parse_args(argv=None):
    """The advisor's flags and the trainer's as an AdviseConfig; a bad flag or value: one line, exit 2."""
    p = build_parser(
        prog="disttrain-advise",
        description="Probe the training on this data and model for at most --budget-seconds, predict seconds per epoch "
        "and the time for the run of every strategy and worker count, and recommend one (advice only: it "
        "changes nothing). Takes the trainer's flags: the same data, model and batch are probed.",
    )
    p.epilog = (
        "The probe runs on this host (two processes on loopback) unless --service or --host-pattern names the "
        "workers' addresses (a Kubernetes Indexed Job): then the pods with index 0 and 1 each run one probe "
        "process and measure the real link between them. How the predictions are made: the docs' Strategies "
        "page, section 'Choosing a strategy: disttrain-advise'. Flags of the trainer that only concern a training run "
        "(--wait-timeout, --peer-wait, --progress-interval, --linger-for-peers, --out) are accepted and unused: "
        "the dataset must be there already. With --dp-l2-clip, --dp-noise-multiplier and --dp-delta the probe "
        "times the private step (per-example gradients, clipping, noise) and a dense gradient on the wire (the "
        "noise covers every embedding row)."
    )
    g = p.add_argument_group("the advisor")
    g.add_argument(
        "--budget-seconds",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help=f"the probe's whole time, start-up included; it is stopped at that (default 60, at least "
        f"{MIN_BUDGET_SECONDS:g})",
    )
    g.add_argument(
        "--link-mbit",
        type=float,
        metavar="MBIT",
        help="predict for a link that carries this many Mbit/s of payload between two workers, both ways at "
        "once (a link's line rate carries less: 8.3 of 10 Mbit/s in the benchmarks; measure it, e.g. "
        "iperf3 --bidir) (default: the link the probe measured: loopback, or the pods' network)",
    )
    g.add_argument(
        "--epochs-to-target",
        type=float,
        metavar="EPOCHS",
        help="epochs one worker needs to reach your target metric (from an earlier run; a fraction where "
        "its curve crossed the target between two evaluations, e.g. 4.6); the other strategies' epochs "
        "follow from it (the docs' convergence model), each up to the evaluation that shows the target "
        "(default: --epochs, i.e. the time for the whole run)",
    )
    g.add_argument("--worker-counts", metavar="N,N,...", help="worker counts to predict (default: 1, 2 and --workers)")
    g.add_argument(
        "--json",
        dest="json_path",
        metavar="PATH",
        help="also write the probe, every prediction and the recommendation to PATH (JSON)",
    )
    g.add_argument(
        "--from-probe",
        metavar="JSON",
        help="no probe: take the measurements from an earlier --json file (predict another link or target)",
    )
    g.add_argument(
        "--local-probe",
        action="store_true",
        help="probe with two processes on this host even when --service or --host-pattern names the "
        "workers (a run of one worker: there is no second pod to measure a link with)",
    )
    g.add_argument(
        "--never-fail",
        action="store_true",
        help="print a failed probe as 'no advice' and exit 0 (the chart's step before training: the run "
        "goes on whatever happens here)",
    )
    g.add_argument(
        PROBE_WORKER_FLAG, nargs=4, metavar=("INDEX", "ADDRESSES", "LAUNCHED", "DEADLINE"), help=argparse.SUPPRESS
    )  # (internal: one probe process)
    args = p.parse_args(argv)
    train = from_flags(p, args)
    if not MIN_BUDGET_SECONDS <= args.budget_seconds <= 3600:  # (also refuses nan)
        p.error(f"--budget-seconds must be between {MIN_BUDGET_SECONDS:g} and 3600")
    if args.link_mbit is not None and not (args.link_mbit > 0 and math.isfinite(args.link_mbit)):
        p.error("--link-mbit must be a number > 0")
    if args.epochs_to_target is not None and not (args.epochs_to_target > 0 and math.isfinite(args.epochs_to_target)):
        p.error("--epochs-to-target must be a number > 0")
    worker_counts = None
    if args.worker_counts is not None:
        try:
            worker_counts = tuple(sorted({int(n) for n in args.worker_counts.split(",")}))
        except ValueError:
            p.error(f"--worker-counts must be whole numbers separated by commas, got {args.worker_counts!r}")
        if worker_counts[0] < 1:
            p.error("--worker-counts must be >= 1")
    own = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(AdviseConfig)
        if f.name not in ("train", "probe_wire", "worker_counts")
    }
    wire = AllReduceSettings(heartbeat_timeout=args.heartbeat_timeout, allreduce_pack_bytes=args.allreduce_pack_bytes)
    return AdviseConfig(
        train=train,
        probe_wire=wire,
        worker_counts=worker_counts,
        **{**own, "probe_worker": tuple(args.probe_worker) if args.probe_worker else None},
    )


# --------------------------------------------------------------------------- the probe
def free_ports(count):
    """`count` TCP ports free on loopback now (the kernel's choice: no clash with another run's base port)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def peer_mode(args):
    return bool(args.train.service or args.train.host_pattern) and not args.local_probe


def run_probe(args, argv, launched, data_dir, manifest):
    """The probe's measurements (a dict from worker 0), or None on a worker that only took part.
    `launched`: when this process started its work (time.time()): the budget counts from there."""
    deadline = launched + args.budget_seconds - KILL_RESERVE_SECONDS
    if peer_mode(args):
        index = args.train.worker_index or 0
        if index >= 2:
            print(
                f"disttrain-advise: workers 0 and 1 probe the link; the advice is in worker 0's log (this is worker "
                f"{index})",
                flush=True,
            )
            return None
        pattern = args.train.host_pattern or cluster.default_host_pattern(args.train.service)
        try:
            addresses = cluster.worker_addresses(2, pattern, args.train.job, args.train.service, args.train.port)
        except ValueError as err:
            raise ContractError(str(err)) from None
        indexes = [index]
    else:
        addresses = [f"127.0.0.1:{port}" for port in free_ports(2)]
        indexes = [0, 1]
    where = "this host (loopback)" if not peer_mode(args) else f"{addresses[0]} and {addresses[1]}"
    print(f"disttrain-advise: probing on {where} for at most {args.budget_seconds:g} s ...", flush=True)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "disttrain_advisor.main",
                *argv,
                PROBE_WORKER_FLAG,
                str(i),
                ",".join(addresses),
                repr(launched),
                repr(deadline),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for i in indexes
    ]
    outputs, last_lines, error_lines = {}, {}, {}
    readers = [
        threading.Thread(target=relay, args=(proc, i, outputs, last_lines, error_lines), daemon=True)
        for proc, i in zip(procs, indexes)
    ]
    for reader in readers:
        reader.start()
    try:
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                break
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: the probe process and nothing else
                proc.wait()
        for reader in readers:
            reader.join(timeout=2)
    # a worker's own one-line refusal, whatever TensorFlow printed after it at exit
    errors = [error_lines[i] for i, proc in zip(indexes, procs) if proc.returncode == 2 and i in error_lines]
    if errors:
        raise ContractError(errors[0][len("error: ") :])
    if indexes[0] != 0:  # pod 1: it took part; pod 0 prints the advice
        # (its RESULT line comes before the best-effort multiworker phase: stopped at the deadline after it,
        # it took part)
        if procs[0].returncode != 0 and indexes[0] not in outputs:
            raise StageTimeout(
                f"the probe did not finish within {args.budget_seconds:g} s (last: "
                f"{last_lines.get(indexes[0], 'nothing')})"
            )
        print("disttrain-advise: this worker took part in the probe; the advice is in worker 0's log", flush=True)
        return None
    if 0 not in outputs:
        stuck = "; ".join(f"worker {i}: {last_lines.get(i, 'no output')}" for i in indexes)
        raise StageTimeout(f"the probe did not finish within --budget-seconds {args.budget_seconds:g} ({stuck})")
    if not peer_mode(args):
        parameter_server_phase(args, data_dir, manifest, outputs[0], deadline)
    return outputs[0]


def parameter_server_phase(args, data_dir, manifest, result, deadline):
    """The trainer's own parameter-server run, briefly, on this host (parameterserver_phase.py), when what is left
    of the budget looks enough for four start-ups and two epochs: its steady seconds per epoch go into `result`."""
    from disttrain_advisor import parameterserver_phase
    from disttrain_trainer import privacy

    def say(text):
        print(f"  probe: {text}", file=sys.stderr, flush=True)

    if privacy.enabled(args.train):
        return  # parameterserver cannot train a private run (privacy.py): it is not predicted
    if manifest.n_shards != parameterserver_phase.WORKERS:
        say(
            f"parameter-server epochs not timed: its run needs the data in {parameterserver_phase.WORKERS} shards "
            f"(it has {manifest.n_shards}; the advisor predicts it as a lower bound)"
        )
        return
    probe = probe_of(result, args, manifest, peers=False)
    bound = perfmodel.epoch_seconds(probe, cost_base.link_of(probe), "parameterserver", parameterserver_phase.WORKERS)[
        0
    ]
    group_steps = parameterserver_cost.parameterserver_group_steps(probe)
    left = deadline - time.time()
    fraction, least = parameterserver_phase.data_fraction(probe.startup_seconds, bound, group_steps, left)
    if fraction is None:
        # (a longer budget can also let the probe time multiworker steps first, which this one left out)
        more = (
            ""
            if result.get("multiworker_step_seconds") is not None
            else " (more if the probe then times multiworker steps too)"
        )
        say(
            f"parameter-server epochs not timed: about {least:.0f} s needed even on part of the data, {left:.0f} s "
            f"left of the budget (the advisor predicts it as a lower bound; a --budget-seconds of at least "
            f"{math.ceil(args.budget_seconds + least - left + 5)}{more} would time it)"
        )
        return
    # the run's epochs: what the time left could use at the bound's speed (it is stopped before)
    epochs = max(parameterserver_phase.STEADY_EPOCHS + 1, min(1000, math.ceil(left / max(bound * fraction, 1e-3))))
    if fraction == 1.0:
        seconds = parameterserver_phase.measure(args, data_dir, epochs, deadline, say)
    else:
        seconds = parameterserver_phase.measure_on_part(args, data_dir, manifest, fraction, epochs, deadline, say)
    if seconds is not None:
        result["parameterserver_epoch_seconds"] = seconds


def relay(proc, index, outputs, last_lines, error_lines):
    """Read a probe process: its progress lines go to stderr as they come, its RESULT lines into `outputs` (the last
    one counts), its last line into `last_lines` and its `error: ` line (probe.main's) into `error_lines`."""

    def err_lines():
        for line in proc.stderr:
            line = line.rstrip()
            if line:
                last_lines[index] = line
                if line.startswith("error: "):
                    error_lines[index] = line
                if line.startswith("probe worker"):
                    with RELAY_LOCK:  # (print writes the line and its newline apart: two relays interleaved them)
                        print(f"  {line}", file=sys.stderr, flush=True)

    errors = threading.Thread(target=err_lines, daemon=True)
    errors.start()
    for line in proc.stdout:
        if line.startswith("RESULT "):
            outputs[index] = json.loads(line[len("RESULT ") :])
    errors.join(timeout=2)


def probe_of(result, args, manifest, peers):
    return perfmodel.Probe(
        step_seconds_alone=result["step_seconds_alone"],
        step_seconds_pair=result["step_seconds_pair"],
        weight_bytes=result["weight_bytes"],
        weight_tensors=result["weight_tensors"],
        gradient_bytes=result["gradient_bytes"],
        gradient_sparse=result["gradient_sparse"],
        latency_seconds=result["latency_seconds"],
        per_byte_seconds=result["per_byte_seconds"],
        link_measured="peers" if peers else "loopback",
        batch=args.train.batch,
        # an epoch's examples (faces: each photo in several augmented views)
        train_examples=manifest.train_examples * result.get("views", 1),
        steps_per_call=args.train.steps_per_call,
        cores=len(os.sched_getaffinity(0)),
        one_host=not peers,
        startup_seconds=result["startup_seconds"],
        join_seconds=result["join_seconds"],
        eval_seconds=result["eval_seconds"],
        batch_norm=result.get("batch_norm", False),
        batch_norm_bytes=result.get("batch_norm_bytes", 0),
        multiworker_step_seconds=result.get("multiworker_step_seconds"),
        trainer_sync_seconds=result.get("trainer_sync_seconds", {}),
        parameterserver_epoch_seconds=result.get("parameterserver_epoch_seconds"),
    )


def read_probe(path):
    """(Probe, facts) from an earlier --json file."""
    data = read_json(path, None, what="the advisor's --json file")
    if data is None:
        raise ContractError(f"--from-probe {path}: no such file")
    try:
        return perfmodel.Probe.from_dict(data["probe"]), data.get("facts", {})
    except (KeyError, TypeError) as err:
        raise ContractError(f"--from-probe {path}: not an advisor --json file ({err})") from None


# --------------------------------------------------------------------------- advice
def run_options(config):
    """The options of the run a TrainConfig describes, in the predictions' terms."""
    return perfmodel.COST_MODELS[config.strategy].run_options(config.strategy_settings)


def chart_values(prediction):
    """The chart's values that run a prediction's configuration, as `helm --set` takes them (the trainer's flags
    have the same names in kebab case)."""
    model = prediction.model
    values = {
        "strategy": model.chart_strategy(),
        "workers": prediction.workers,
        **model.chart_values(prediction.options),
    }
    return ",".join(f"{key}={value}" for key, value in values.items())


def advise(args, probe, facts):
    """(text to print, the --json document)."""
    link = cost_base.link_of(probe, args.link_mbit)
    workers = args.train.workers or facts.get("workers") or 2
    counts = list(args.worker_counts or sorted({1, 2, workers}))
    epochs = args.train.epochs
    target = args.epochs_to_target or epochs
    predictions = perfmodel.predict_all(probe, link, counts, epochs, target)
    if args.train.dp_l2_clip is not None:  # a private run: parameterserver cannot train it (privacy.py)
        predictions = [p for p in predictions if not p.model.facts.asynchronous]
    choice = perfmodel.recommend(predictions)
    sentence = perfmodel.reason(choice, predictions, probe, link)
    this_run = None
    strategy = (
        perfmodel.SINGLE if workers == 1 and not strategy_of(args.train.strategy).connected else args.train.strategy
    )
    try:
        this_run = perfmodel.predict(probe, link, strategy, workers, run_options(args.train), epochs, target)
    except cost_base.ModelError:
        pass  # e.g. a connected strategy with no link to predict it on
    wire_bytes = {dtype: cost_base.sync_bytes(probe, dtype) for dtype in localsgd_cost.WIRE_DTYPES}
    basis = f"{args.epochs_to_target:g} epochs to the target" if args.epochs_to_target else f"the run's {epochs} epochs"
    pair = (
        (
            f", two at once {probe.step_seconds_pair * 1000:.2f} ms each ({'one host' if probe.one_host else 'two hosts'}, "
            f"{probe.cores} cores here: two processes that never talk get "
            f"{2 * probe.step_seconds_alone / probe.step_seconds_pair:.2f}x at most)"
        )
        if probe.step_seconds_pair
        else ""
    )
    if probe.multiworker_step_seconds is not None:
        pair += f"; a multiworker step {probe.multiworker_step_seconds * 1000:.2f} ms (float32 gradients)"
    if probe.trainer_sync_seconds:
        pair += "; a localsgd sync (DiLoCo) " + ", ".join(
            f"{seconds * 1000:.1f} ms in {dtype}" for dtype, seconds in probe.trainer_sync_seconds.items()
        )
    if probe.parameterserver_epoch_seconds is not None:
        pair += f"; a parameter-server epoch {probe.parameterserver_epoch_seconds:.2f} s (2 workers)"
    link_text = (
        "no link"
        if link is None
        else (
            f"{link.name}: {link.latency_seconds * 1000:.2f} ms per collective + {link.per_byte_seconds * 1e6:.3f} s per MB"
            + (f" (~{8 / (link.per_byte_seconds * 1e6):,.0f} Mbit/s)" if link.per_byte_seconds > 0 else "")
        )
    )
    lines = [
        f"probe: {facts.get('task', '?')} task, {probe.train_examples} training examples, batch {probe.batch}; "
        f"one worker {probe.step_seconds_alone * 1000:.2f} ms per step{pair}; weights on the wire "
        + ", ".join(f"{nbytes / 1e6:.2f} MB in {dtype}" for dtype, nbytes in wire_bytes.items())
        + f"; start-up {probe.startup_seconds:.1f} s, evaluation {probe.eval_seconds:.2f} s; {link_text}",
        f"predicted seconds per epoch and time for {basis} (fastest first; <- the advice):",
        perfmodel.table(predictions, choice),
    ]
    if this_run is not None:
        lines.append(
            f"this run's flags ({this_run.label()}, {workers} worker{'s' if workers > 1 else ''}): "
            f"{this_run.seconds_per_epoch:.3f} s per epoch, {this_run.time_to_target_seconds:.1f} s for {basis}"
        )
    lines.append(f"advice: {choice.label()}, {choice.workers} worker{'s' if choice.workers > 1 else ''}: {sentence}.")
    lines.append(f"to follow it: helm upgrade RELEASE CHART --reuse-values --set {chart_values(choice)}")
    document = {
        "probe": probe.to_dict(),
        "facts": {**facts, "workers": workers},
        "link": None if link is None else vars(link),
        "wire_bytes": wire_bytes,
        "epochs": epochs,
        "epochs_to_target": args.epochs_to_target,
        "worker_counts": counts,
        "predictions": [p.to_dict() for p in predictions],
        "recommendation": {
            **choice.to_dict(),
            "label": choice.label(),
            "reason": sentence,
            "chart_values": chart_values(choice),
        },
        "this_run": None if this_run is None else this_run.to_dict(),
    }
    return "\n".join(lines), document


def main(argv=None):
    launched = time.time()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    data_dir = args.train.data or Workdir(args.train.workdir).data
    if args.probe_worker:
        from disttrain_advisor import probe

        index, addresses, launched, deadline = args.probe_worker
        return probe.main(args, data_dir, int(index), addresses.split(","), float(launched), float(deadline))
    try:
        if args.from_probe:
            probe, facts = read_probe(args.from_probe)
        else:
            manifest = Manifest.read(data_dir)
            result = run_probe(args, argv, launched, data_dir, manifest)
            if result is None:
                return 0
            probe = probe_of(result, args, manifest, peer_mode(args))
            facts = {"task": manifest.task, "workers": args.train.workers or manifest.n_shards, "measured": result}
        text, document = advise(args, probe, facts)
    except (ContractError, cost_base.ModelError) as err:
        if not args.never_fail:
            if isinstance(err, cost_base.ModelError):
                raise ContractError(str(err)) from None
            raise
        print(f"disttrain-advise: no advice: {err}", flush=True)
        return 0
    except Exception as err:  # a bug: with --never-fail (the chart's step) it must not fail the run either
        if not args.never_fail:
            raise
        print(f"disttrain-advise: no advice: {type(err).__name__}: {err}", flush=True)
        return 0
    print(text, flush=True)
    if args.json_path:
        atomic_write_json(args.json_path, document)
    return 0


def cli():
    run_cli(main)


if __name__ == "__main__":
    cli()
