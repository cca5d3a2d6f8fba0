#!/usr/bin/env python3
"""How right the strategy advisor is: its predictions against the time-to-accuracy benchmark's measured rows.

For each task of bench/results/time_to_accuracy.json it copies the task's data (the copier, into a
temporary directory) and runs one advisor probe on this host (`disttrain-advise --json`, the task's model
and batch); then for each (task, link) group of rows it runs the advisor again from that probe with the
group's link (`--from-probe ... --link-mbit L`; loopback: the link the probe measured) and prints, per
measured row, the predicted against the measured seconds per epoch and the relative error
((predicted - measured) / measured), and whether the advisor's recommendation is the fastest measured
strategy to the target, or within 5 % of it. Writes bench/results/advisor_accuracy.json.

Which configuration a row is: its strategy, workers and options (sync_every, allreduce_dtype,
outer_optimizer, outer_overlap), predicted with disttrain_trainer.perfmodel; "ceiling" (two 1-worker runs on the whole data
at once, that never talk) by perfmodel.ceiling_seconds_per_epoch, and never recommended. The epochs to the target given to the advisor are those of
the group's 1-worker row: the first epoch at which its held-out curve reached the target.

Sittings: hosts differ 2-3x in speed from one session to the next, so a probe predicts only the rows of
the sitting it was taken in. The benchmark takes a probe of each task at the start of each sitting and
keeps it beside that sitting's rows (tta_store); the rows of a sitting are checked against its own probe,
and the epochs to the target come from the same sitting's 1-worker row where it has one. Rows without a
sitting (measured before sittings were recorded) or whose sitting has no probe are checked against a probe
taken now (or --probe): their errors are printed and stored but marked "same_sitting": false, and the
summary counts the rows checked within their own sitting apart. A row that carries a probe of its own
(time_to_accuracy --probe-each-row: taken just before it, as a user probes before a run) is predicted
from that probe, its error against the sitting's first probe printed and stored beside it: the host's
speed can move within a sitting, and a probe taken an hour before a row timed another speed, which is no
error of the advisor's model. A row a later sitting measured again is read from the file's
"earlier_rows", so every sitting is checked whole; the summary also counts the newest measurement of
each configuration (the rows the results' tables show) apart. The rows that never use the
network (1 worker, the ceiling, `average`: loopback only) join each link's comparison: on a slow link,
training alone or averaging once at the end can be the fastest, and the advice is checked against them.
The rows of a task the benchmark retired (time_to_accuracy.TASKS, "planned": False) are left out.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

from common import BIN, RESULTS, machine_facts

from disttrain_contract import atomic_write_json
from disttrain_trainer import perfmodel
from disttrain_trainer.strategies import cost_base
from disttrain_trainer.strategies.localsgd import cost as localsgd_cost

# task name in the results -> (copier source, trainer flags). --task adds or replaces one; the time-to-accuracy
# benchmark's own tasks (time_to_accuracy.TASKS) need neither: their data is made as the benchmark makes it.
TASKS = {
    "movie-reviews": ("sample:movie-reviews", []),
    "text": ("sample:movie-reviews", []),
    "digits": ("sample:digits", []),
    "mobilenetv2": ("sample:digits", ["--model", "mobilenetv2", "--image-size", "32"]),
    "resnet50": ("sample:digits", ["--model", "resnet50", "--image-size", "32"]),
}
# options of a row that shape the probe (the same flags as the trainer's)
PROBE_OPTIONS = ("batch", "threads", "model", "image_size", "optimizer", "steps_per_call", "width")
WITHIN = 0.05  # the recommendation counts as right within 5 % of the fastest measured time to the target


def read_rows(path):
    """(the rows, the whole document) of a results file. The rows a later sitting measured again
    ("earlier_rows", tta_store) come after the current ones: their sittings are checked whole."""
    try:
        with open(path) as fh:
            data = json.load(fh)
    except FileNotFoundError:
        sys.exit(f"error: no benchmark results at {path}: run the time-to-accuracy benchmark first")
    except ValueError as err:
        sys.exit(f"error: {path} is not JSON: {err}")
    rows = data if isinstance(data, list) else data.get("rows") or (data.get("results") or {}).get("rows")
    if not isinstance(rows, list) or not rows:
        sys.exit(f"error: {path} has no rows (a list, or an object with rows or results.rows)")
    # (marked: the summary counts the newest measurement of each configuration apart)
    earlier = [dict(r, replaced=True) for r in (data.get("earlier_rows") or [] if isinstance(data, dict) else [])]
    for i, row in enumerate(rows + earlier):
        missing = [k for k in ("task", "link", "strategy", "workers", "seconds_per_epoch") if k not in row]
        if missing:
            sys.exit(f"error: {path}: row {i} has no {', '.join(missing)}")
    return rows + earlier, (data if isinstance(data, dict) else {})


def flag_args(options):
    """The probe-shaping options of a row as trainer flags."""
    out = []
    for key in PROBE_OPTIONS:
        if options.get(key) is not None:
            out += [f"--{key.replace('_', '-')}", str(options[key])]
    return out


def epochs_to_target(rows):
    """The group's 1-worker epochs to the target, or None when it did not reach it: where its held-out curve
    ([seconds, epoch, value] per evaluation) crossed the target, interpolated between the evaluation before
    and the first that showed it (the advisor rounds every configuration's epochs up to the evaluation that
    shows the target: perfmodel's docstring); the first evaluation's own epoch when that one shows it. A row
    without a curve: the fraction of its run at which it reached it (time to target / wall time) times its
    epochs (that counts the start-up as training: a run that reaches the target at its first evaluation
    would seem to need several epochs)."""
    single = next((r for r in rows if r["strategy"] == "single" and r.get("reached")), None)
    if single is None:
        return None
    from tta_store import first_reach

    target = single.get("target")
    # (epoch, value) of each evaluation that gave a value; the benchmark's own test of "reached" (first_reach)
    curve = [(float(epoch), value) for _, epoch, value in single.get("curve") or [] if value is not None]
    epoch = first_reach(curve, target) if target is not None else None
    if epoch is not None:
        earlier = [point for point in curve if point[0] < epoch]
        if not earlier:
            return epoch
        (before, value_before), value = earlier[-1], dict(curve)[epoch]
        return before + (epoch - before) * (target - value_before) / (value - value_before)
    if not single.get("wall_seconds") or not single.get("epochs"):
        return None
    return max(single["time_to_target_seconds"] / single["wall_seconds"] * single["epochs"], 0.1)


def take_probe(workdir, json_path, epochs, options, budget_seconds, flags=()):
    """One advisor probe of a task's data (`disttrain-advise --json`): (its document, None), or (None, why not)."""
    _, why = run_advise(
        [
            "--workdir",
            str(workdir),
            "--json",
            str(json_path),
            "--budget-seconds",
            f"{budget_seconds:g}",
            "--epochs",
            str(epochs),
            *flags,
            *flag_args(options),
        ],
        timeout=budget_seconds + 60,
    )
    if why:
        return None, why
    with open(json_path) as fh:
        return json.load(fh), None


def sitting_groups(rows, doc):
    """[(sitting or None, that sitting's probe document of the task or None, its rows)] of one task's rows, in
    the order the sittings first appear."""
    from tta_store import sitting_probe

    order = list(dict.fromkeys(r.get("sitting") for r in rows))
    return [
        (s, sitting_probe(doc, s, rows[0]["task"]) if s else None, [r for r in rows if r.get("sitting") == s])
        for s in order
    ]


def with_reference(group, task_rows):
    """A link group's rows with a 1-worker row to take the epochs to the target from: its own sitting's if the
    group has one, else the task's first (the current one before a replaced one). (rows, whether the
    reference is of the group's sitting: true also where the task has no 1-worker row at all)."""
    if any(r["strategy"] == "single" for r in group):
        return group, True
    other = [r for r in task_rows if r["strategy"] == "single"][:1]
    return group + other, not other or other[0].get("sitting") in {r.get("sitting") for r in group if r.get("sitting")}


def link_groups(rows):
    """[(link, the rows it is compared with)] of one sitting's rows of a task. The rows that
    never use the network (time_to_accuracy.LOCAL_ONLY: 1 worker, the ceiling, `average`) run on loopback
    only and are the reference of every link: they join each shaped link's comparison, so the advice to
    train alone or to average once at the end is checked on every link; they are predicted once, on loopback."""
    from time_to_accuracy import LOCAL_ONLY

    links = sorted({r["link"] for r in rows if r["strategy"] != "single"} or {"loopback"})
    return [
        (
            link,
            [r for r in rows if r["link"] == link]
            + [r for r in rows if r["link"] != link and r["strategy"] in LOCAL_ONLY],
        )
        for link in links
    ]


def run_advise(args, timeout):
    """`disttrain-advise args`: (its output, None), or (None, why it failed)."""
    try:
        result = subprocess.run(
            [os.path.join(BIN, "disttrain-advise"), *args], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return None, f"disttrain-advise {' '.join(args)} ran over {timeout:g} s"
    if result.returncode != 0:
        return None, f"disttrain-advise {' '.join(args)} exited {result.returncode}: {result.stderr.strip()[-500:]}"
    return result.stdout, None


def advise(args, timeout):
    output, why = run_advise(args, timeout)
    if why:
        sys.exit(f"error: {why}")
    return output


def predicted_row(probe, link, row, epochs, target):
    """(the Prediction of a measured row, None) or (None, why it cannot be predicted)."""
    try:
        if row["strategy"] == "ceiling":  # independent 1-worker runs on the whole data, at once: never recommended
            seconds = perfmodel.ceiling_seconds_per_epoch(probe, int(row["workers"]))
            return perfmodel.Prediction("ceiling", int(row["workers"]), {}, seconds, seconds, 0.0, 0.0, None), None
        return perfmodel.predict(
            probe, link, row["strategy"], int(row["workers"]), row.get("options") or {}, epochs, target
        ), None
    except cost_base.ModelError as err:
        return None, str(err)


def relative_error(predicted, measured):
    """(predicted - measured) / measured of a row's seconds per epoch, or None (not predicted, or not trained)."""
    return None if predicted is None or not measured else (predicted.seconds_per_epoch - measured) / measured


def row_probe(row):
    """The probe the benchmark took just before the row (time_to_accuracy --probe-each-row), or None."""
    probe = row.get("probe")
    return perfmodel.Probe.from_dict(probe) if isinstance(probe, dict) and probe else None


def configuration(strategy, options):
    """What makes two runs of a strategy the same configuration: localsgd's H, wire, outer optimizer, overlap,
    batch-norm re-estimation and syncs at the epochs' ends (the trainer's defaults filled in), multiworker's wire."""
    if strategy == "localsgd":
        return (
            strategy,
            options.get("sync_every") or localsgd_cost.DEFAULT_SYNC_EVERY,
            options.get("allreduce_dtype") or "float32",
            options.get("outer_optimizer") or "none",
            options.get("outer_overlap") or "none",
            options.get("sync_batch_norm_batches", localsgd_cost.REFRESH_BATCHES),
            bool(options.get("sync_at_epoch_end")),
        )
    if strategy == "multiworker":
        return (strategy, options.get("allreduce_dtype") or "float32")
    return (strategy,)


def check_group(rows, recommendation):
    """(the fastest measured strategy row, the best measured row of the recommended strategy, verdict)."""
    reached = [r for r in rows if r.get("reached") and r["strategy"] != "ceiling" and r.get("time_to_target_seconds")]
    if not reached:
        return None, None, "no row reached the target"
    fastest = min(reached, key=lambda r: r["time_to_target_seconds"])
    wanted = configuration(recommendation["strategy"], recommendation.get("options") or {})
    same = [
        r
        for r in reached
        if configuration(r["strategy"], r.get("options") or {}) == wanted
        and int(r["workers"]) == recommendation["workers"]
    ]
    if not same:
        return (
            fastest,
            None,
            (
                f"{recommendation.get('label') or recommendation['strategy']} with "
                f"{recommendation['workers']} worker(s) was not measured (or did not reach the target)"
            ),
        )
    best = min(same, key=lambda r: r["time_to_target_seconds"])
    ratio = best["time_to_target_seconds"] / fastest["time_to_target_seconds"]
    verdict = (
        "fastest"
        if best is fastest
        else (
            f"within {100 * (ratio - 1):.1f} % of the fastest"
            if ratio <= 1 + WITHIN
            else f"{100 * (ratio - 1):.0f} % slower than the fastest"
        )
    )
    return fastest, best, verdict


def probe_now(task, tasks, probes, single, epochs, scratch, budget_seconds):
    """The path of a probe of the task for rows that have none of their own sitting: --probe's, or one taken now."""
    if task in probes:
        print(f"== {task}: the probe of {probes[task]}", flush=True)
        return probes[task]
    import time_to_accuracy

    if task in tasks:
        source, flags = tasks[task]
        copier_args = ["--source", source]
    else:  # the benchmark's own task: its data made as the benchmark makes it (augmented digits' npz)
        copier_args = [
            *time_to_accuracy.task_source(scratch, task, time_to_accuracy.TASKS[task]),
            "--seed",
            str(time_to_accuracy.COPIER_SEED),
        ]
        flags = []  # (the model's flags come from the rows' options)
    workdir = os.path.join(scratch, task)
    copier = subprocess.run(
        [os.path.join(BIN, "disttrain-copier"), *copier_args, "--n-shards", "2", "--workdir", workdir],
        capture_output=True,
        text=True,
    )
    if copier.returncode != 0:
        sys.exit(f"error: the copier failed on {' '.join(copier_args)}: {copier.stderr.strip()[-500:]}")
    print(f"== {task}: probing now ({' '.join(copier_args)} {' '.join(flags)}) ...", flush=True)
    probe_path = os.path.join(scratch, f"{task}.probe.json")
    _, why = take_probe(workdir, probe_path, epochs, single.get("options") or {}, budget_seconds, flags)
    if why:
        sys.exit(f"error: {why}")
    return probe_path


def check_sitting(
    task, sitting, own_probe, rows, task_rows, probe, probe_path, epochs, scratch, out_rows, groups, doc=None
):
    """Predict every row of one sitting of a task from `probe`, per link; append to out_rows and groups. A shaped
    link's rate is the payload rate the sitting measured on it where it did (bench/goodput.py: what the probe
    would have measured on a real link of that speed), else its nominal rate."""
    from time_to_accuracy import LOCAL_ONLY
    from tta_store import sitting_link

    groups_of_links = link_groups(rows)
    links = {link for link, _ in groups_of_links}
    for link_name, compared in groups_of_links:
        # one worker sends nothing: any link's 1-worker row is the group's reference
        group, reference_same = with_reference(compared, task_rows)
        same_sitting = own_probe and reference_same
        nominal = next((r.get("link_mbit") for r in group if r.get("link_mbit")), None)
        measured_link = sitting_link(doc, sitting, link_name) or {}
        mbit = measured_link.get("goodput_mbit") or nominal
        target = epochs_to_target(group)
        advice_path = os.path.join(scratch, f"{task}.{sitting}.{link_name}.json")
        text = advise(
            [
                "--from-probe",
                probe_path,
                "--json",
                advice_path,
                "--epochs",
                str(epochs),
                "--worker-counts",
                ",".join(str(n) for n in sorted({int(r["workers"]) for r in group} | {1})),
                *(["--link-mbit", f"{mbit:g}"] if mbit else []),
                *(["--epochs-to-target", f"{target:g}"] if target else []),
            ],
            timeout=120,
        )
        with open(advice_path) as fh:
            recommendation = json.load(fh)["recommendation"]
        link = cost_base.link_of(probe, mbit)
        where = (
            f" (sitting {sitting}{'' if same_sitting else ': a probe or 1-worker row of another sitting'})"
            if sitting
            else ""
        )
        rate = f", its measured payload rate {mbit:g} of {nominal:g} Mbit/s" if nominal and mbit != nominal else ""
        print(f"-- {task}, {link_name}{where}{rate}:", flush=True)
        for row in group:
            if row["link"] != link_name and row["link"] in links:
                continue  # another link's row (one that never uses the network, on loopback): predicted in its own group
            measured = row["seconds_per_epoch"]  # None where the row did not train ("not available", "failed: ...")
            predicted, why = predicted_row(probe, link, row, epochs, target)
            error = relative_error(predicted, measured)
            own = row_probe(row)
            if own is not None:  # taken just before the row (--probe-each-row): the row is predicted from it
                own_predicted, own_why = predicted_row(own, cost_base.link_of(own, mbit), row, epochs, target)
                sitting_error, predicted, why, error = (
                    error,
                    own_predicted,
                    own_why,
                    relative_error(own_predicted, measured),
                )
            label = f"{row['strategy']} x{row['workers']} {json.dumps(row.get('options') or {}, sort_keys=True)}"
            shown = f"{predicted.seconds_per_epoch:8.3f}" if predicted else f"  ({why})"
            measured_shown = f"{measured:8.3f}" if measured is not None else f"(none: {row.get('status', 'no row')})"
            measured_syncs = row.get("sync_seconds_per_epoch")  # (localsgd rows since the trainer records them)
            syncs_shown = (
                f"; its syncs {predicted.communication_seconds:.2f} s an epoch, measured "
                f"{min(measured_syncs):.2f}-{max(measured_syncs):.2f} (the two workers', each with its waits for the other)"
                if measured_syncs and predicted
                else ""
            )
            print(
                f"   {label:70} predicted {shown} s/epoch, measured {measured_shown}"
                + (f", error {100 * error:+6.1f} %" if error is not None else "")
                + syncs_shown
                + (
                    ""
                    if own is None
                    else " (the row's own probe"
                    + (f"; the sitting's: {100 * sitting_error:+.1f} %)" if sitting_error is not None else ")")
                ),
                flush=True,
            )
            out_rows.append(
                {
                    "task": task,
                    "link": link_name,
                    "strategy": row["strategy"],
                    "workers": row["workers"],
                    "options": row.get("options") or {},
                    "measured_seconds_per_epoch": measured,
                    "predicted_seconds_per_epoch": predicted.seconds_per_epoch if predicted else None,
                    "relative_error": error,
                    "not_predicted": why,
                    "sitting": sitting,
                    **(
                        {
                            "predicted_communication_seconds": predicted.communication_seconds,
                            "measured_sync_seconds": measured_syncs,
                        }
                        if measured_syncs and predicted
                        else {}
                    ),
                    "same_sitting": same_sitting or own is not None and reference_same,
                    "replaced": bool(row.get("replaced")),
                    "probe": "row" if own is not None else "sitting" if own_probe else "another",
                    **({"relative_error_sitting_probe": sitting_error} if own is not None else {}),
                }
            )
        if len(links) > 1 and all(r["strategy"] in LOCAL_ONLY for r in group if r["link"] == link_name):
            # only the references, which every other link's group of the sitting already compares: predicted, not a group
            print(
                "   (the references of the sitting's links: their advice is checked in each link's group)", flush=True
            )
            continue
        fastest, best, verdict = check_group(group, recommendation)
        print("   " + next(line for line in text.splitlines() if line.startswith("advice: ")), flush=True)
        print(
            f"   the advice against the measurements: {verdict}"
            + (
                f" (fastest measured: {fastest['strategy']} x{fastest['workers']}, "
                f"{fastest['time_to_target_seconds']:.1f} s)"
                if fastest
                else ""
            ),
            flush=True,
        )
        groups.append(
            {
                "task": task,
                "link": link_name,
                "sitting": sitting,
                "same_sitting": same_sitting,
                "link_mbit_nominal": nominal,
                "link_mbit_given": mbit,
                "link_measured": measured_link or None,
                "epochs_to_target": target,
                "recommendation": recommendation,
                "verdict": verdict,
                "fastest_measured": fastest,
                "recommended_measured": best,
            }
        )


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", default=os.path.join(RESULTS, "time_to_accuracy.json"), help="the benchmark's rows")
    p.add_argument("--out", default=os.path.join(RESULTS, "advisor_accuracy.json"), help="where this writes")
    p.add_argument("--budget-seconds", type=float, default=60, help="each probe's budget (default 60)")
    p.add_argument(
        "--probe",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="use this earlier `disttrain-advise --json` file as task NAME's probe (no copier, no new probe; "
        "repeatable)",
    )
    p.add_argument(
        "--task",
        action="append",
        default=[],
        metavar="NAME=SOURCE [FLAGS]",
        help="the copier source and trainer flags of a task name of the results, e.g. "
        "'mobilenetv2=sample:digits --model mobilenetv2 --image-size 64' (repeatable)",
    )
    args = p.parse_args()
    tasks = dict(TASKS)
    for spec in args.task:
        name, _, rest = spec.partition("=")
        words = shlex.split(rest)
        if not name or not words:
            sys.exit(f"error: --task {spec!r}: expected NAME=SOURCE [FLAGS]")
        tasks[name] = (words[0], words[1:])
    probes = {}
    for spec in args.probe:
        name, _, path = spec.partition("=")
        if not name or not os.path.isfile(path):
            sys.exit(f"error: --probe {spec!r}: expected NAME=PATH of an existing file")
        probes[name] = os.path.abspath(path)
    rows, doc = read_rows(args.results)
    import time_to_accuracy

    # a task the benchmark retired (its rows kept for the record) is not the advisor's to answer for
    retired = sorted({r["task"] for r in rows} & time_to_accuracy.RETIRED)
    if retired:
        print(f"(rows of the retired task(s) {', '.join(retired)} left out)", flush=True)
        rows = [r for r in rows if r["task"] not in retired]

    unknown = sorted({r["task"] for r in rows} - set(tasks) - set(probes) - set(time_to_accuracy.TASKS))
    if unknown:
        sys.exit(f"error: no copier source for task(s) {', '.join(unknown)}: give --task NAME=SOURCE [FLAGS]")

    out_rows, groups = [], []
    with tempfile.TemporaryDirectory(prefix="advisor-accuracy-") as scratch:
        for task in sorted({r["task"] for r in rows}):
            task_rows = [r for r in rows if r["task"] == task]
            single = next((r for r in task_rows if r["strategy"] == "single"), task_rows[0])
            epochs = int(single.get("epochs") or 1)
            fresh_probe = None  # a probe given (--probe) or taken now: for rows without their own sitting's
            for sitting, stored_probe, sitting_rows in sitting_groups(task_rows, doc):
                if stored_probe is not None:
                    probe_path = os.path.join(scratch, f"{task}.{sitting}.probe.json")
                    with open(probe_path, "w") as fh:
                        json.dump(stored_probe, fh)
                    print(f"== {task}, sitting {sitting}: the probe taken in that sitting", flush=True)
                else:
                    fresh_probe = fresh_probe or probe_now(
                        task, tasks, probes, single, epochs, scratch, args.budget_seconds
                    )
                    probe_path = fresh_probe
                    if sitting:
                        print(
                            f"   (sitting {sitting} kept no probe of {task}: its rows are checked against {probe_path})",
                            flush=True,
                        )
                with open(probe_path) as fh:
                    probe = perfmodel.Probe.from_dict(json.load(fh)["probe"])
                check_sitting(
                    task,
                    sitting,
                    stored_probe is not None,
                    sitting_rows,
                    task_rows,
                    probe,
                    probe_path,
                    epochs,
                    scratch,
                    out_rows,
                    groups,
                    doc,
                )
    errors = [abs(r["relative_error"]) for r in out_rows if r["relative_error"] is not None]
    same_rows = [r for r in out_rows if r["relative_error"] is not None and r["same_sitting"]]
    same = [abs(r["relative_error"]) for r in same_rows]
    right = [g for g in groups if g["verdict"].startswith(("fastest", "within"))]
    own = [r for r in out_rows if r["probe"] == "row" and r["relative_error"] is not None]
    current = [abs(r["relative_error"]) for r in same_rows if not r["replaced"]]
    summary = {
        "rows": len(out_rows),
        "max_abs_relative_error": max(errors) if errors else None,
        "rows_within_15_percent": sum(e <= 0.15 for e in errors),
        "groups_recommendation_right": len(right),
        "groups": len(groups),
        # the check that counts: predictions against rows of the probe's own sitting
        "same_sitting_rows": len(same),
        "same_sitting_rows_within_15_percent": sum(e <= 0.15 for e in same),
        "same_sitting_max_abs_relative_error": max(same) if same else None,
        "same_sitting_groups": sum(g["same_sitting"] for g in groups),
        # of them the newest measurement of each configuration (the results' tables), not those measured again since
        "current_same_sitting_rows": len(current),
        "current_same_sitting_rows_within_15_percent": sum(e <= 0.15 for e in current),
        # rows with a probe taken just before them: from that probe, and from their sitting's first one
        "own_probe_rows": len(own),
        "own_probe_rows_within_15_percent": sum(abs(r["relative_error"]) <= 0.15 for r in own),
        "own_probe_rows_within_15_percent_of_the_sitting_probe": sum(
            r.get("relative_error_sitting_probe") is not None and abs(r["relative_error_sitting_probe"]) <= 0.15
            for r in own
        ),
        "same_sitting_groups_recommendation_right": sum(g["same_sitting"] for g in right),
    }
    print(
        f"== {summary['rows_within_15_percent']} of {len(errors)} predicted rows within 15 %; the advice right in "
        f"{summary['groups_recommendation_right']} of {len(groups)} (task, link) groups",
        flush=True,
    )
    print(
        f"== within their probe's own sitting: {summary['same_sitting_rows_within_15_percent']} of {len(same)} rows "
        f"within 15 %; the advice right in {summary['same_sitting_groups_recommendation_right']} of "
        f"{summary['same_sitting_groups']} groups",
        flush=True,
    )
    print(
        f"== of them, the newest measurement of each configuration: {summary['current_same_sitting_rows_within_15_percent']} "
        f"of {len(current)} rows within 15 %",
        flush=True,
    )
    if own:
        print(
            f"== of them, {len(own)} rows with a probe taken just before them: {summary['own_probe_rows_within_15_percent']} "
            f"within 15 % of it ({summary['own_probe_rows_within_15_percent_of_the_sitting_probe']} of the sitting's first "
            f"probe)",
            flush=True,
        )
    atomic_write_json(
        args.out,
        {
            "benchmark": "advisor_accuracy",
            "results_file": os.path.abspath(args.results),
            "machine": machine_facts(),
            "config": {"budget_seconds": args.budget_seconds},
            "results": {"rows": out_rows, "groups": groups, "summary": summary},
        },
    )
    print(f"-> {args.out}", flush=True)


if __name__ == "__main__":
    main()
