#!/usr/bin/env python3
"""PNG plots from bench/results/*.json (matplotlib, Agg):
scaling.png        seconds per epoch and speedup, 1 vs 2 workers, both strategies, both tasks
latency.png        p50/p95/p99 latency and requests/s per concurrency, per server
training_curves.png held-out accuracy per epoch for each worker vs the final model (2 workers, average)
network.png        seconds per epoch and accuracy per link speed and strategy (movie reviews)
time_to_accuracy.png wall time until the held-out metric first reaches the target, per task and link
"""

import collections
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

from common import BENCH, command_line, load_result  # noqa: E402
from tta_store import LINK_ORDER, ceiling_time_to_target, row_order, sitting_references, strategy_options  # noqa: E402

PLOTS = os.path.join(BENCH, "plots")
COLORS = {
    "single": "#333333",
    "ceiling": "#AAAAAA",
    "diloco": "#C44E52",
    "average": "#4C72B0",
    "multiworker": "#DD8452",
    "localsgd": "#55A868",
    "parameterserver": "#937860",
    "disttrain": "#4C72B0",
    "disttrain-nobatch": "#8172B3",
    "flask-dev": "#C44E52",
    "in-process": "#55A868",
}


def subtitle(doc):
    tag = "PROVISIONAL: " if doc["provisional"] else ""
    other = doc["machine"].get("cpu_sec", {}).get("other_processes_cores")
    busy = (
        f"other processes {other:.2f} cores"
        if other is not None
        else f"load avg {doc['machine']['before']['loadavg_1_5_15'][0]}"
    )
    return f"{tag}{doc['machine']['nproc']} cores, {busy}, {doc['machine']['before']['time_utc'][:16]}Z"


def scaling(doc):
    rows = doc["results"]["summary"]
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4.8), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        labels, values, colors, notes, spread = [], [], [], [], [[], []]
        for r in (r for r in rows if r["task"] == task):
            spread[0].append(max(0.0, r["sec_per_epoch"] - min(r["sec_per_epoch_all"])))
            spread[1].append(max(0.0, max(r["sec_per_epoch_all"]) - r["sec_per_epoch"]))
            labels.append(
                f"{r['workers']} worker{'s' if r['workers'] > 1 else ''}"
                + ("\n+ ps + chief" if r["strategy"] == "parameterserver" else "")
                + f"\n{r['strategy']}"
            )
            values.append(r["sec_per_epoch"])
            colors.append(COLORS[r["strategy"]])
            notes.append(
                f"{r['sec_per_epoch']:.{2 if r['sec_per_epoch'] >= 1 else 3}f}s\nx{r['speedup_vs_1_worker']:.2f}\nacc {r['final_accuracy']:.3f}"
            )
        bars = ax.bar(labels, values, color=colors, yerr=spread, capsize=4, ecolor="#444444")
        for bar, note, up in zip(bars, notes, spread[1]):
            ax.annotate(
                note,
                (bar.get_x() + bar.get_width() / 2, bar.get_height() + up),
                ha="center",
                va="bottom",
                fontsize=9,
                xytext=(0, 2),
                textcoords="offset points",
            )
        ax.set_ylim(0, max(v + u for v, u in zip(values, spread[1])) * 1.45)
        ax.set_ylabel("seconds per epoch (steady state, lower is better)")
        r0 = next(r for r in rows if r["task"] == task)
        ax.set_title(f"{task}: {r0['epochs']} epochs, batch 64/worker, --threads 1")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(
        "Training: 1 vs 2 workers on the same data (bar: median s/epoch, whiskers: min-max over repetitions;\n"
        "label: s/epoch, speedup vs plain 1-worker training, final held-out accuracy)\n" + subtitle(doc),
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def latency(doc):
    rows = doc["results"]["summary"]
    targets = list(dict.fromkeys(r["target"] for r in rows))
    conc = sorted(set(r["concurrency"] for r in rows))
    cols = 2
    nrows = -(-(len(conc) + 1) // cols)
    fig, grid = plt.subplots(nrows, cols, figsize=(11, 4.2 * nrows))
    axes = list(grid.flat)
    pcts = ("p50_ms", "p95_ms", "p99_ms")
    width = 0.8 / len(targets)
    for ax, c in zip(axes, conc):
        for t_i, target in enumerate(targets):
            r = next(r for r in rows if r["target"] == target and r["concurrency"] == c)
            xs = [p + (t_i - (len(targets) - 1) / 2) * width for p in range(len(pcts))]
            bars = ax.bar(xs, [r[p] for p in pcts], width, label=target, color=COLORS.get(target))
            for bar, p in zip(bars, pcts):
                ax.annotate(
                    f"{r[p]:.0f}" if r[p] >= 10 else f"{r[p]:.1f}",
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center",
                    va="bottom",
                    fontsize=8,
                )
        ax.set_yscale("log")
        ax.set_xticks(range(len(pcts)), [p[:3] for p in pcts])
        ax.set_title(f"concurrency {c}")
        ax.set_ylabel("latency ms (log scale)")
        ax.grid(axis="y", alpha=0.3, which="both")
    for extra in axes[len(conc) + 1 :]:
        extra.axis("off")
    ax = axes[len(conc)]
    for target in targets:
        ys = [
            next(r for r in rows if r["target"] == target and r["concurrency"] == c)["requests_per_sec"] for c in conc
        ]
        ax.plot(conc, ys, marker="o", label=target, color=COLORS.get(target))
        for c, y in zip(conc, ys):
            ax.annotate(f"{y:.0f}", (c, y), xytext=(3, 3), textcoords="offset points", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(conc, [str(c) for c in conc])
    ax.set_yscale("log")
    ax.set_xlabel("concurrency")
    ax.set_ylabel("requests/s (log scale)")
    ax.set_title("throughput (colours as in every panel)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    for panel in axes[: len(conc) + 1]:  # plain numbers on the log axes, not 3x10^1
        panel.yaxis.set_major_formatter(plain)
        panel.yaxis.set_minor_formatter(
            plain if panel.get_ylim()[1] / panel.get_ylim()[0] < 20 else matplotlib.ticker.NullFormatter()
        )
    fig.suptitle("Single-instance :predict on loopback (movie-reviews model)\n" + subtitle(doc), fontsize=10)
    fig.tight_layout()
    return fig


def curves(doc):
    runs = [r for r in doc["results"]["runs"] if r["workers"] == 2 and r["strategy"] == "average" and r["rep"] == 0]
    fig, axes = plt.subplots(1, len(runs), figsize=(6 * len(runs), 4.4), squeeze=False)
    for ax, r in zip(axes[0], runs):
        epochs = range(1, r["epochs"] + 1)
        for i, curve in enumerate(r["curves"]):
            ax.plot(epochs, curve, marker=".", label=f"worker {i}, its half of the data (last epoch {curve[-1]:.3f})")
        ax.axhline(
            r["final_accuracy"], color="black", linestyle="--", label=f"final averaged model {r['final_accuracy']:.3f}"
        )
        one = next(
            (
                x
                for x in doc["results"]["runs"]
                if x["task"] == r["task"] and x["workers"] == 1 and x["strategy"] == "average" and x["rep"] == 0
            ),
            None,
        )
        if one:
            ax.plot(
                epochs,
                one["curves"][0],
                color="gray",
                alpha=0.6,
                label=f"1 worker, all data ({one['final_accuracy']:.3f})",
            )
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_xlabel("epoch")
        ax.set_ylabel("held-out accuracy")
        ax.set_title(f"{r['task']}: 2 workers, average strategy")
        lo = min(min(min(c) for c in r["curves"]), r["final_accuracy"])
        ax.set_ylim(
            max(0, lo - 0.02),
            1.0
            if r["task"] == "digits"
            else min(1.0, max(max(max(c) for c in r["curves"]), r["final_accuracy"]) + 0.05),
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(
        "Held-out accuracy per epoch for each worker vs the final (averaged) model\n" + subtitle(doc), fontsize=10
    )
    fig.tight_layout()
    return fig


def network(doc):
    rows = doc["results"]["summary"]
    base = next(r for r in rows if r["network"] == "none")
    nets = [n for n in dict.fromkeys(r["network"] for r in rows) if n != "none"]
    strategies = list(dict.fromkeys(r["strategy"] for r in rows if r["network"] != "none"))
    fig, (speed, acc) = plt.subplots(1, 2, figsize=(12, 4.6))
    width = 0.8 / len(strategies)
    for k, strategy in enumerate(strategies):
        rs = [next(r for r in rows if (r["network"], r["strategy"]) == (n, strategy)) for n in nets]
        xs = [i + (k - (len(strategies) - 1) / 2) * width for i in range(len(nets))]
        color = COLORS.get(strategy, "#8172B3")
        bars = speed.bar(xs, [r["sec_per_epoch"] for r in rs], width, color=color, label=f"2 workers, {strategy}")
        for bar, r in zip(bars, rs):
            speed.annotate(
                f"x{r['speedup_vs_1_worker']:.2f}",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=9,
            )
        acc.plot(range(len(nets)), [r["final_accuracy"] for r in rs], marker="o", color=color, label=strategy)
    speed.axhline(
        base["sec_per_epoch"],
        color="black",
        linestyle="--",
        label=f"1 worker, no network ({base['sec_per_epoch']:.2f} s)",
    )
    acc.axhline(base["final_accuracy"], color="black", linestyle="--", label=f"1 worker ({base['final_accuracy']:.3f})")
    for ax in (speed, acc):
        ax.set_xticks(range(len(nets)), [n.replace("gbit", " Gbit/s").replace("mbit", " Mbit/s") for n in nets])
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    speed.set_yscale("log")
    speed.set_ylabel("seconds per epoch (steady state, log scale; label: speedup)")
    acc.set_ylabel("final held-out accuracy")
    fig.suptitle(
        "Movie reviews, 2 workers in network namespaces joined by a tbf-shaped veth pair\n" + subtitle(doc), fontsize=10
    )
    fig.tight_layout()
    return fig


def row_label(row):
    """A time-to-accuracy row's configuration in a few words: strategy, H, outer optimizer, wire dtype."""
    o = strategy_options(row["options"])
    words = [row["strategy"] if row["workers"] == 1 or row["strategy"] == "ceiling" else f"2x {row['strategy']}"]
    if row["strategy"] == "localsgd":
        words.append(f"H={o.get('sync_every', 'default')}")
    words += [str(o[k]) for k in ("outer_optimizer", "allreduce_dtype") if k in o]
    words += [
        "+epoch-end syncs" if (k, v) == ("sync_at_epoch_end", True) else f"{k}={v}"
        for k, v in o.items()
        if k not in ("sync_every", "outer_optimizer", "allreduce_dtype")
    ]
    return " ".join(words)


SCALE_OF_SINGLE = 4  # the time-to-accuracy panels' axis: at most this many times one worker's time to the target


def minutes_shown(row):
    """A time-to-accuracy row's bar, in minutes: its time to the target, or where it stopped (0: it did not run)."""
    if row["status"] == "ok" and row["reached"]:
        return row["time_to_target_seconds"] / 60
    return (row.get("wall_seconds") or 0) / 60 if row["status"] in ("ok", "capped") else 0


def panel_sitting(measured, default=None):
    """The sitting whose references a time-to-accuracy panel draws: the one that measured most of the link's rows
    (the newest on a tie; None is the rows from before sittings), or `default` when the link has none of its own."""
    if not measured:
        return default
    counts = collections.Counter(r.get("sitting") for r in measured)
    return max(counts, key=lambda sitting: (counts[sitting], sitting or ""))


def time_to_accuracy(doc):
    """One panel per task and link: each configuration's time to the target (bar), the rows that never
    use the network (1 worker, the two-process ceiling, average) as references. Hosts differ 2-3x in speed
    from one sitting to the next, so a panel draws the references of the sitting that measured most of its
    rows, each row's speed-up is against its own sitting's 1 worker, and a row of another sitting is marked *.
    The panels of a task share their time axis, up to SCALE_OF_SINGLE times one worker's time to the target:
    a longer bar (a capped parameter server's 10 minutes beside one worker's 6 s) is cut at the axis's end and
    its note says its time. A task the benchmark retired (its rows kept) is not drawn."""
    from time_to_accuracy import RETIRED

    rows = [r for r in doc["rows"] if r["task"] not in RETIRED]
    earlier = [r for r in doc.get("earlier_rows") or [] if r["task"] not in RETIRED]
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    links = [link for link in LINK_ORDER if any(r["link"] == link for r in rows)]
    local = ("single", "ceiling", "average")
    panels = {}
    for task in tasks:
        current = [r for r in rows if r["task"] == task and r["strategy"] in local]
        for link in links:
            measured = [r for r in rows if r["task"] == task and r["link"] == link and r["strategy"] not in local]
            sitting = panel_sitting(
                measured, next((r.get("sitting") for r in current if r["strategy"] == "single"), None)
            )
            # the references the speed-ups below are read against (sitting_references: the sitting's own, or those of
            # the last sitting before it that ran them)
            found = sitting_references(task, sitting, rows, earlier)
            refs = (
                list(
                    {
                        r["strategy"]: r
                        for r in (*rows, *earlier)
                        if r["task"] == task and r["strategy"] in local and r.get("sitting") == found[0].get("sitting")
                    }.values()
                )
                if found
                else current
            )
            panels[task, link] = sorted(refs + measured, key=row_order), refs
    slots = max(len(panel) for panel, _ in panels.values())
    # (constrained layout: it makes room for the suptitle's lines, which tight_layout let the first row's titles cover)
    fig, axes = plt.subplots(
        len(tasks),
        len(links),
        figsize=(max(11.0, 4.6 * len(links)), (0.3 * slots + 1.4) * len(tasks) + 1.2),
        squeeze=False,
        sharex="row",
        layout="constrained",
    )
    marked = False
    for ax_row, task in zip(axes, tasks):
        single = next((r for r in rows if r["task"] == task and r["strategy"] == "single"), None)
        axis_end = 1.5 * max([1e-3, *(minutes_shown(r) for r in rows if r["task"] == task)])
        if single and single["reached"]:
            axis_end = min(axis_end, SCALE_OF_SINGLE * single["time_to_target_seconds"] / 60)
        for ax, link in zip(ax_row, links):
            panel, refs = panels[task, link]
            drawn = {r.get("sitting") for r in refs}
            labels, values, colors, notes = [], [], [], []
            for r in panel:
                other = r.get("sitting") not in drawn
                marked = marked or other
                labels.append(row_label(r) + (" *" if other else ""))
                reached = r["status"] == "ok" and r["reached"]
                values.append(minutes_shown(r))
                diloco = r["options"].get("outer_optimizer") not in (None, "none")
                colors.append(
                    (COLORS["diloco"] if diloco else COLORS.get(r["strategy"], "#8172B3")) if reached else "#DDDDDD"
                )
                if reached:
                    own = (sitting_references(task, r.get("sitting"), rows, earlier) or (single,))[0]
                    speed = (
                        f" x{own['time_to_target_seconds'] / r['time_to_target_seconds']:.2f}"
                        if own and own["reached"] and r is not own
                        else ""
                    )
                    seconds = r["time_to_target_seconds"]
                    notes.append((f"{seconds:.1f} s" if seconds < 60 else f"{seconds / 60:.1f} min") + speed)
                elif r["status"] in ("ok", "capped"):
                    final = f", final {r['final_metric']:.3f}" if r.get("final_metric") is not None else ""
                    notes.append(("capped" if r["status"] == "capped" else "not reached") + final)
                else:
                    notes.append(r["status"].split(":")[0])
            bars = ax.barh(range(len(panel)), values, height=0.7, color=colors)
            for bar, note, color in zip(bars, notes, colors):
                cut = bar.get_width() > axis_end  # the note inside the bar's end, in a colour that shows on it
                ax.annotate(
                    note,
                    (min(bar.get_width(), axis_end), bar.get_y() + bar.get_height() / 2),
                    xytext=(-3 if cut else 3, 0),
                    textcoords="offset points",
                    va="center",
                    fontsize=7,
                    ha="right" if cut else "left",
                    color="white" if cut and color != "#DDDDDD" else "black",
                )
            drawn_single = next((r for r in refs if r["strategy"] == "single"), None)
            ceiling = ceiling_time_to_target(refs, task)
            if drawn_single and drawn_single["reached"]:
                ax.axvline(drawn_single["time_to_target_seconds"] / 60, color="black", linestyle="--", linewidth=0.8)
            if ceiling:
                ax.axvline(ceiling[0] / 60, color=COLORS["ceiling"], linestyle=":", linewidth=1.2)
            ax.set_yticks(range(len(panel)), labels, fontsize=7)
            ax.set_ylim(slots - 0.5, -0.5)  # the same bar size in every panel, first row on top
            ax.set_xlabel("minutes from the processes' start to the target")
            name = link.replace("gbit", " Gbit/s").replace("mbit", " Mbit/s")
            ax.set_title(
                f"{task}\n{name}: {panel[0]['metric']} >= {panel[0]['target']}" if panel else f"{task}\n{name}",
                fontsize=9,
            )
            ax.grid(axis="x", alpha=0.3)
        ax_row[0].set_xlim(0, axis_end)
    provisional = sum(1 for r in rows if r.get("provisional"))
    when = sorted(r["machine_before"]["time_utc"][:10] for r in rows if r.get("machine_before"))
    fig.suptitle(
        "Time to accuracy: wall time from the trainers' start until the chief's held-out metric first reaches the target\n"
        "(dashed: 1 worker; dotted: the two-process ceiling's time, average's workers at 1 worker's epochs; grey: not reached, drawn to where the run stopped; red: DiLoCo)\n"
        + (
            "*: measured in another sitting than the panel's references (hosts differ in speed): read its speed-up, "
            "against its own sitting's 1 worker, not its bar beside them\n"
            if marked
            else ""
        )
        + (
            f"PROVISIONAL: {provisional} of {len(rows)} rows quick or measured while other processes were busy; "
            if provisional
            else ""
        )
        + f"{doc['machine'].get('nproc')} cores, {when[0] if when else '?'}..{when[-1] if when else '?'}",
        fontsize=10,
    )
    return fig


def main():
    os.makedirs(PLOTS, exist_ok=True)
    made = []
    for name, source, fn in (
        ("scaling", "train_scaling", scaling),
        ("latency", "server", latency),
        ("training_curves", "train_scaling", curves),
        ("network", "network_shaped", network),
        ("time_to_accuracy", "time_to_accuracy", time_to_accuracy),
    ):
        doc = load_result(source)
        if doc is None:
            continue
        fig = fn(doc)
        path = os.path.join(PLOTS, f"{name}.png")
        fig.savefig(path, dpi=100, bbox_inches="tight")  # (tight: a note past the last panel's axis stays in)
        plt.close(fig)
        made.append(os.path.relpath(path, BENCH))
    print("plots: " + ", ".join(made))


if __name__ == "__main__":
    command_line(__doc__)
    main()
