"""The time-to-accuracy benchmark's bookkeeping (bench/tta_store.py, bench/time_to_accuracy.py): when a
run first reached its target, the resumable row file, and the evaluation times read from a real
progress.json as the trainer's writer writes it. No training here: the benchmark itself runs by hand."""

import json
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")
sys.path.insert(0, BENCH)

import time_to_accuracy  # noqa: E402
from tta_store import RowStore, ceiling_time_to_target, first_reach, outcome, row_key  # noqa: E402


def row(status="ok", **kwargs):
    base = {
        "task": "movie-reviews",
        "link": "10mbit",
        "strategy": "localsgd",
        "workers": 2,
        "options": {"sync_every": 100, "outer_optimizer": "nesterov"},
        "status": status,
    }
    return {**base, **kwargs}


# ------------------------------------------------------------------ the first time the target is reached
def test_first_reach_is_the_first_evaluation_at_or_above_the_target():
    curve = [(10.0, 0.50), (20.0, 0.74), (30.0, 0.76), (40.0, 0.80)]
    assert first_reach(curve, 0.76) == 30.0  # equal counts
    assert first_reach(curve, 0.75) == 30.0
    assert first_reach(curve, 0.50) == 10.0
    assert first_reach(curve, 0.81) is None


def test_a_run_that_touches_the_target_and_falls_back_counts_from_its_first_touch():
    curve = [(10.0, 0.70), (20.0, 0.77), (30.0, 0.74), (40.0, 0.78)]
    assert first_reach(curve, 0.76) == 20.0


def test_missing_values_never_count_and_lower_is_better_when_asked():
    assert first_reach([(5.0, None), (6.0, 0.9)], 0.8) == 6.0
    assert first_reach([], 0.8) is None
    rmse = [(10.0, 3.0), (20.0, 1.2), (30.0, 0.9)]
    assert first_reach(rmse, 1.0, higher_is_better=False) == 30.0
    assert first_reach(rmse, 0.5, higher_is_better=False) is None


def test_outcome_says_capped_only_for_a_run_stopped_before_the_target():
    curve = [(10.0, 0.5), (20.0, 0.9)]
    assert outcome(curve, 0.8, capped=False) == (True, 20.0, "ok")
    assert outcome(curve, 0.8, capped=True) == (True, 20.0, "ok")  # reached, then stopped at the cap
    assert outcome(curve, 0.95, capped=True) == (False, None, "capped")
    assert outcome(curve, 0.95, capped=False) == (False, None, "ok")  # finished its epochs below the target


# ------------------------------------------------------------------ the resumable store
def test_a_stored_row_survives_a_restart_and_is_skipped_while_failed_ones_run_again(tmp_path):
    path = str(tmp_path / "results" / "tta.json")
    store = RowStore(path, machine={"nproc": 2, "cpu": "x"})
    store.put(row("ok", time_to_target_seconds=12.5))
    store.put(row("capped", link="50mbit"))
    store.put(row("failed: process 1 exit 1: boom", link="1gbit"))
    store.put(row("not available", link="100mbit"))
    assert sorted(os.listdir(tmp_path / "results")) == ["tta.json"]  # written through a temporary name, renamed

    again = RowStore(path, machine={"nproc": 2, "cpu": "x"})  # a new session
    assert len(again.rows) == 4 and again.doc["machine"] == {"nproc": 2, "cpu": "x"}
    assert again.done(row_key(row()))
    assert again.done(row_key(row(link="50mbit")))
    assert not again.done(row_key(row(link="1gbit")))  # failed: run again
    assert not again.done(row_key(row(link="100mbit")))  # not available: run again (a newer trainer may take it)
    assert not again.done(row_key(row(link="loopback")))  # never run
    assert again.get(row_key(row()))["time_to_target_seconds"] == 12.5


def test_the_key_is_task_link_strategy_workers_and_options_in_any_order(tmp_path):
    store = RowStore(str(tmp_path / "tta.json"))
    store.put(row("failed: x"))
    store.put(row("ok", options={"outer_optimizer": "nesterov", "sync_every": 100}))  # same options, other order
    assert len(store.rows) == 1 and store.rows[0]["status"] == "ok"  # replaced, not added
    assert row_key(row()) != row_key(row(options={"sync_every": 100}))
    assert row_key(row()) != row_key(row(workers=1))
    assert row_key(row()) != row_key(row(strategy="multiworker"))
    with open(tmp_path / "tta.json") as fh:
        assert len(json.load(fh)["rows"]) == 1


def test_a_runs_configuration_joins_the_stored_one(tmp_path):
    path = str(tmp_path / "tta.json")
    first = RowStore(path, config={"seed": 1, "tasks": {"old": {"target": 0.9}}})
    first.put({"task": "old", "link": "loopback", "strategy": "single", "workers": 1, "options": {}, "status": "ok"})
    later = RowStore(path, config={"seed": 2, "tasks": {"new": {"target": 0.8}}})
    # the run's settings win, and a task the run does not name keeps the stored configuration
    assert later.doc["config"] == {"seed": 2, "tasks": {"old": {"target": 0.9}, "new": {"target": 0.8}}}
    assert RowStore(path).doc["config"] == {"seed": 1, "tasks": {"old": {"target": 0.9}}}  # (as written)


def test_the_ceilings_time_is_the_slower_average_worker_at_the_epoch_one_worker_reached_the_target():
    single = {
        "task": "t",
        "strategy": "single",
        "target": 0.9,
        "reached": True,
        "curve": [[30.0, 1, 0.5], [50.0, 2, 0.91], [70.0, 3, 0.95]],
    }
    average = {
        "task": "t",
        "strategy": "average",
        "worker_curves": [
            [[20.0, 1, 0.4], [31.0, 2, 0.8], [40.0, 3, 0.9]],
            [[21.0, 1, 0.4], [32.5, 2, 0.7], [41.0, 3, 0.9]],
        ],
    }
    # 1 worker reached 0.90 at epoch 2; the slower worker of average evaluated its epoch 2 at 32.5 s
    # (its own metric does not matter: the examples taken do)
    assert ceiling_time_to_target([single, average], "t") == (32.5, 2)
    assert ceiling_time_to_target([single], "t") is None  # no average row
    assert ceiling_time_to_target([dict(single, reached=False), average], "t") is None
    short = dict(average, worker_curves=[c[:1] for c in average["worker_curves"]])  # stopped before epoch 2
    assert ceiling_time_to_target([single, short], "t") is None


def test_a_file_that_is_not_a_result_file_is_refused(tmp_path):
    bad = tmp_path / "tta.json"
    bad.write_text('{"results": {}}')
    with pytest.raises(ValueError, match="no \"rows\" list"):
        RowStore(str(bad))


def test_the_plan_skips_what_is_stored(tmp_path):
    store = RowStore(str(tmp_path / "tta.json"))
    plan = time_to_accuracy.plan(time_to_accuracy.TASKS)
    keys = {row_key(r) for r in plan}
    assert len(keys) == len(plan)  # every row of the plan has its own key
    for r in plan[:3]:
        store.put({**r, "status": "ok"})
    assert [r for r in plan if not store.done(row_key(r))] == plan[3:]
    # the rows that never use the network run on loopback only
    assert {r["link"] for r in plan if r["strategy"] in ("single", "ceiling", "average")} == {"loopback"}


def test_a_retired_task_is_planned_only_when_named():
    tasks = time_to_accuracy.TASKS
    retired = [name for name, t in tasks.items() if t.get("planned", True) is False]
    assert retired == ["digits-augmented-mobilenetv2"] == sorted(time_to_accuracy.RETIRED)
    assert set(time_to_accuracy.planned_tasks(tasks, [])) == set(tasks) - set(retired)
    only = [
        time_to_accuracy.parse_only("link=loopback"),
        time_to_accuracy.parse_only("task=digits-augmented-mobilenetv2"),
    ]
    assert set(time_to_accuracy.planned_tasks(tasks, only)) == set(tasks)


def test_only_filters_by_row_fields_and_options(capsys):
    plan = time_to_accuracy.plan(time_to_accuracy.TASKS)
    only = time_to_accuracy.parse_only("link=10mbit|50mbit,outer_optimizer=nesterov,allreduce_dtype=int8")
    picked = [r for r in plan if time_to_accuracy.selected(r, only)]
    assert picked and all(
        r["link"] in ("10mbit", "50mbit") and r["options"].get("allreduce_dtype") == "int8" for r in picked
    )
    with pytest.raises(SystemExit) as stopped:
        time_to_accuracy.parse_only("link")
    assert stopped.value.code == 2
    assert capsys.readouterr().err.strip() == "time_to_accuracy.py: --only: 'link' is not KEY=VALUE[|VALUE...]"


def test_repeated_only_lists_the_rows_matching_any_of_them(tmp_path):
    """One sitting can hold a task's loopback references and one shaped link's rows: --only twice."""
    import subprocess

    command = [
        sys.executable,
        os.path.join(BENCH, "time_to_accuracy.py"),
        "--list",
        "--results",
        str(tmp_path / "none.json"),
        "--only",
        "task=movie-reviews,strategy=single|ceiling|average",
        "--only",
        "task=movie-reviews,link=10mbit",
    ]
    listed = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    rows = [line.split()[:4] for line in listed.stdout.splitlines() if line.startswith("movie-reviews ")]
    plan = time_to_accuracy.plan(time_to_accuracy.TASKS)
    expected = [
        r
        for r in plan
        if r["task"] == "movie-reviews" and (r["strategy"] in ("single", "ceiling", "average") or r["link"] == "10mbit")
    ]
    assert len(rows) == len(expected) and {r[2] for r in rows[:3]} == {"1x", "2x"}
    assert [r[1] for r in rows] == [r["link"] for r in expected]
    # an --only that matches nothing is named, and nothing runs
    unmatched = subprocess.run(command[:-2] + ["--only", "link=2mbit"], capture_output=True, text=True, timeout=120)
    assert unmatched.returncode == 2
    assert (
        unmatched.stderr.strip()
        == "time_to_accuracy.py: --only 'link=2mbit' matches no row of the plan (--list shows it)"
    )


# ------------------------------------------------------------------ evaluation times from progress.json
def test_each_epoch_is_timed_by_the_write_that_first_shows_it(tmp_path):
    from disttrain_trainer.progress import ProgressFile

    now = [1000.0]
    writer = ProgressFile(
        str(tmp_path / "progress.json"),
        1.0,
        worker=0,
        tag="worker 0/1",
        strategy="average",
        epochs=3,
        steps_per_epoch=10,
        clock=lambda: now[0],
        wall_clock=lambda: now[0],
    )
    watch = time_to_accuracy.Watch(str(tmp_path), "test_accuracy", started=990.0)
    watch.poll()  # nothing written yet
    assert watch.curve == []
    for epoch, accuracy in ((1, 0.6), (2, 0.8)):
        writer.start_epoch(epoch)
        now[0] += 5
        writer.end_epoch(
            {
                "epoch": epoch,
                "loss": 1.0,
                "accuracy": 0.5,
                "examples": 640,
                "examples_per_sec": 100.0,
                "test_accuracy": accuracy,
            }
        )
        watch.poll()
        now[0] += 3
        writer.update(5, None)  # a later write of the next epoch's steps: the epoch keeps its first time
        writer.flush()
        watch.poll()
    assert watch.curve == [(15.0, 1, 0.6), (23.0, 2, 0.8)]


# ------------------------------------------------------------------ sittings: rows checked against their own probe


def test_each_sitting_keeps_its_machine_and_its_probes(tmp_path):
    from tta_store import sitting_probe

    path = str(tmp_path / "tta.json")
    store = RowStore(path, machine={"nproc": 2})
    first = store.start_sitting({"nproc": 2, "cpu": "slow"}, now=1_800_000_000)
    second = store.start_sitting({"nproc": 2, "cpu": "fast"}, now=1_800_000_000)  # the same second: its own id
    assert first == "2027-01-15T08:00:00Z" and second != first
    store.put_probe(first, "movie-reviews", {"probe": {"step_seconds": 0.004}})
    store.put_probe(second, "movie-reviews", {"error": "disttrain-advise exited 2: ..."})
    store.put(row(sitting=first))
    doc = json.load(open(path))  # on disk at once
    assert doc["sittings"][first]["machine"]["cpu"] == "slow" and doc["rows"][0]["sitting"] == first
    assert sitting_probe(doc, first, "movie-reviews") == {"probe": {"step_seconds": 0.004}}
    assert sitting_probe(doc, second, "movie-reviews") is None  # a failed probe predicts nothing
    assert sitting_probe(doc, first, "digits-distorted-mobilenetv2") is None and sitting_probe(doc, None, "x") is None
    assert set(RowStore(path).doc["sittings"]) == {first, second}  # a rerun keeps them


def test_only_the_newest_sitting_continues_and_only_on_the_host_boot_that_ran_it(tmp_path):
    store = RowStore(str(tmp_path / "tta.json"), machine={"nproc": 2})
    assert store.continue_sitting("boot-a") == (None, "the results hold no sitting to continue")
    old = store.start_sitting({"nproc": 2}, now=1_800_000_000)  # kept no boot id (as sittings before it)
    assert (
        store.continue_sitting("boot-a")[1]
        == f"the newest sitting, {old}, cannot be continued here: it kept no boot id"
    )
    newest = store.start_sitting({"nproc": 2}, now=1_800_000_100, boot="boot-a")
    assert RowStore(str(tmp_path / "tta.json")).continue_sitting("boot-a") == (newest, None)  # (kept on disk)
    why = store.continue_sitting("boot-b")[1]
    assert why.endswith("it ran on another host, or before this one restarted") and newest in why
    assert store.continue_sitting(None)[0] is None  # no boot id here (not Linux): never
    # an older sitting by its id, on its own boot only
    later = store.start_sitting({"nproc": 2}, now=1_800_000_200, boot="boot-b")
    assert store.continue_sitting("boot-a", newest) == (newest, None) and store.continue_sitting("boot-b")[0] == later
    assert store.continue_sitting("boot-b", newest)[1] == (
        f"sitting {newest} cannot be continued here: it ran on another host, or before this one restarted"
    )
    assert store.continue_sitting("boot-a", "2020-01-01T00:00:00Z")[1].startswith("the results hold no sitting 2020")


def test_the_advisor_is_checked_per_sitting_with_that_sittings_one_worker_row():
    import advisor_accuracy

    probe = {"probe": {"step_seconds": 0.004}}
    doc = {"sittings": {"s1": {"probes": {"movie-reviews": probe}}, "s2": {"probes": {}}}}
    rows = [
        row(strategy="single", workers=1, link="loopback", sitting="s1"),
        row(sitting="s1"),
        row(link="50mbit", sitting="s2"),
        row(link="1gbit"),
    ]  # measured before sittings were recorded
    groups = advisor_accuracy.sitting_groups(rows, doc)
    assert [(s, p, [r["link"] for r in rs]) for s, p, rs in groups] == [
        ("s1", probe, ["loopback", "10mbit"]),
        ("s2", None, ["50mbit"]),
        (None, None, ["1gbit"]),
    ]
    # a link group with its sitting's 1-worker row keeps it; one without borrows the task's first, and says so
    assert advisor_accuracy.with_reference(rows[:2], rows) == (rows[:2], True)
    assert advisor_accuracy.with_reference(rows[2:3], rows) == ([rows[2], rows[0]], False)


def test_a_row_measured_again_in_a_later_sitting_keeps_the_earlier_one_apart(tmp_path):
    """The rows hold each key's newest measurement; the replaced one of another sitting stays in
    earlier_rows, so that sitting can still be checked whole against its own probe, and one its own sitting
    measured again stays in remeasured_rows, so that no measurement is lost."""
    path = str(tmp_path / "tta.json")
    store = RowStore(path)
    store.put(row(strategy="single", workers=1, link="loopback", sitting="s1", seconds_per_epoch=0.8))
    store.put(row(strategy="single", workers=1, link="loopback", sitting="s2", seconds_per_epoch=0.7))
    store.put(
        row(strategy="single", workers=1, link="loopback", sitting="s2", seconds_per_epoch=0.6)
    )  # same sitting: replaced
    store.put(row(sitting=None, seconds_per_epoch=1.0))
    store.put(row(sitting="s2", seconds_per_epoch=0.9))  # (one from before sittings is kept too: its rows' references)
    doc = json.load(open(path))
    assert [(r["sitting"], r["seconds_per_epoch"]) for r in doc["rows"]] == [("s2", 0.6), ("s2", 0.9)]
    assert [(r["sitting"], r["seconds_per_epoch"]) for r in doc["earlier_rows"]] == [("s1", 0.8), (None, 1.0)]
    assert RowStore(path).earlier_rows == doc["earlier_rows"]
    assert [(r["sitting"], r["seconds_per_epoch"]) for r in doc["remeasured_rows"]] == [("s2", 0.7)]  # kept, unread


def test_each_link_is_compared_with_the_rows_that_never_use_the_network():
    """single, ceiling and average run on loopback only: they join every shaped link's comparison (the advice
    to train alone or to average once at the end is checked on each link), and the sitting's 1-worker row is
    the shaped links' reference."""
    import advisor_accuracy

    rows = [
        row(strategy="single", workers=1, link="loopback", sitting="s2"),
        row(strategy="ceiling", link="loopback", sitting="s2"),
        row(strategy="average", link="loopback", sitting="s2"),
        row(strategy="multiworker", link="10mbit", sitting="s2"),
        row(link="10mbit", sitting="s2"),
        row(link="1gbit", sitting="s2"),
    ]
    groups = dict(advisor_accuracy.link_groups(rows))
    assert list(groups) == ["10mbit", "1gbit", "loopback"]
    assert [r["strategy"] for r in groups["10mbit"]] == ["multiworker", "localsgd", "single", "ceiling", "average"]
    assert [r["strategy"] for r in groups["loopback"]] == ["single", "ceiling", "average"]
    assert advisor_accuracy.with_reference(groups["10mbit"], rows)[1] is True
    # a group without one borrows the task's first 1-worker row, and says whether it is of the group's sitting
    earlier_single = row(strategy="single", workers=1, link="loopback", sitting="s1")
    assert advisor_accuracy.with_reference(rows[4:6], [rows[0], earlier_single]) == (rows[4:6] + [rows[0]], True)
    assert advisor_accuracy.with_reference(rows[4:6], [earlier_single, rows[0]]) == (
        rows[4:6] + [earlier_single],
        False,
    )


def test_the_advisor_check_reads_the_rows_a_later_sitting_replaced(tmp_path):
    import advisor_accuracy

    path = tmp_path / "tta.json"
    current = row(strategy="single", workers=1, link="loopback", sitting="s2", seconds_per_epoch=0.7)
    earlier = row(strategy="single", workers=1, link="loopback", sitting="s1", seconds_per_epoch=0.8)
    path.write_text(json.dumps({"rows": [current], "earlier_rows": [earlier]}))
    rows, _ = advisor_accuracy.read_rows(str(path))
    assert rows == [current, dict(earlier, replaced=True)]  # (marked: the summary counts the newest apart)


def test_the_results_table_reads_a_rows_speedup_within_its_own_sitting():
    """A shaped link's row is compared with the 1-worker row of its own sitting, even after a later sitting
    measured the 1-worker row again (kept in earlier_rows); a row of a sitting without one, with the current."""
    import report

    def timed(strategy, workers, link, sitting, seconds, **kwargs):
        return row(
            strategy=strategy,
            workers=workers,
            link=link,
            sitting=sitting,
            reached=True,
            time_to_target_seconds=seconds,
            seconds_per_epoch=1.0,
            target=0.76,
            final_metric=0.76,
            epochs=5,
            options={"threads": 1},
            **kwargs,
        )

    earlier_single = timed("single", 1, "loopback", "s1", 6.0)
    current_single = timed("single", 1, "loopback", "s2", 4.0)
    shaped = timed("localsgd", 2, "10mbit", "s1", 12.0)
    unsat = timed("localsgd", 2, "1gbit", None, 8.0)
    table = report.time_to_accuracy_rows([current_single, shaped, unsat], [earlier_single])
    by_link = {line.split(" | ")[1]: line.split(" | ") for line in table if line.startswith("| movie-reviews")}
    assert by_link["10mbit"][7] == "0.50x"  # 6.0 / 12.0: its own sitting's 1-worker row
    assert by_link["1gbit"][7] == "0.50x"  # 4.0 / 8.0: no sitting of its own, the current one
    assert by_link["loopback"][7] == "1.00x"


def test_a_sitting_without_references_takes_those_of_the_last_sitting_before_it():
    """A row run again in a sitting of its own, beside an earlier sitting's references, keeps being read against
    them when a later sitting measures the references again (ISO times: the ids sort as the sittings ran)."""
    from tta_store import sitting_references

    def single(sitting):
        return row(strategy="single", workers=1, link="loopback", sitting=sitting, options={"threads": 1})

    first, second = single("2026-11-29T11:38:23Z"), single("2026-11-29T15:28:07Z")
    later_row = "2026-11-29T13:08:16Z"
    assert sitting_references("movie-reviews", later_row, [second], [first])[0] is first
    assert sitting_references("movie-reviews", "2026-11-29T16:00:00Z", [second], [first])[0] is second
    assert sitting_references("movie-reviews", "2026-11-29T10:00:00Z", [second], [first]) is None
    assert sitting_references("movie-reviews", None, [second], [first]) is None


def test_a_row_from_before_sittings_is_read_against_the_references_of_its_time():
    """Rows without a sitting were measured on an earlier host: their speed-up is against the 1-worker row without a
    sitting (kept in earlier_rows when a sitting measured it again), not against today's; the plot's panel draws
    the references of the sitting that measured most of its rows."""
    import plots
    import report
    from tta_store import sitting_references

    def timed(strategy, workers, link, sitting, seconds):
        return row(
            strategy=strategy,
            workers=workers,
            link=link,
            sitting=sitting,
            reached=True,
            time_to_target_seconds=seconds,
            seconds_per_epoch=1.0,
            target=0.76,
            final_metric=0.76,
            epochs=5,
            options={"threads": 1},
        )

    old_single, new_single = timed("single", 1, "loopback", None, 2.0), timed("single", 1, "loopback", "s2", 8.0)
    old_row, new_row = timed("localsgd", 2, "1gbit", None, 1.0), timed("localsgd", 2, "10mbit", "s2", 4.0)
    assert sitting_references("movie-reviews", None, [new_single, old_row], [old_single])[0] is old_single
    assert sitting_references("movie-reviews", "s1", [new_single], [old_single]) is None  # no sitting before it ran one
    table = report.time_to_accuracy_rows([new_single, old_row, new_row], [old_single])
    by_link = {line.split(" | ")[1]: line.split(" | ") for line in table if line.startswith("| movie-reviews")}
    assert by_link["1gbit"][7] == "2.00x" and by_link["10mbit"][7] == "2.00x"
    assert plots.panel_sitting([old_row, new_row, dict(new_row)]) == "s2"
    assert plots.panel_sitting([old_row, new_row]) == "s2"  # a tie: the newest
    assert plots.panel_sitting([old_row, old_row, new_row]) is None
    assert plots.panel_sitting([], default="s2") == "s2"


def test_a_sitting_without_average_is_told_its_rows_get_no_ceiling_time():
    plan = time_to_accuracy.plan(
        {
            "movie-reviews": time_to_accuracy.TASKS["movie-reviews"],
            "digits-distorted-mobilenetv2": time_to_accuracy.TASKS["digits-distorted-mobilenetv2"],
        }
    )
    diloco = [r for r in plan if r["strategy"] == "localsgd" and r["link"] == "50mbit"]
    assert time_to_accuracy.without_ceiling_time(diloco) == ["digits-distorted-mobilenetv2", "movie-reviews"]
    text_average = [r for r in plan if r["task"] == "movie-reviews" and r["strategy"] == "average"]
    assert time_to_accuracy.without_ceiling_time(diloco + text_average) == ["digits-distorted-mobilenetv2"]
    # the references alone, or 1 worker alone: nothing to warn of
    assert time_to_accuracy.without_ceiling_time([r for r in plan if r["strategy"] in ("single", "ceiling")]) == []


def test_a_rows_options_become_the_trainers_flags_and_a_true_one_a_switch():
    flags = time_to_accuracy.option_flags({"sync_every": 50, "outer_optimizer": "nesterov", "sync_at_epoch_end": True})
    assert flags == ["--sync-every", "50", "--outer-optimizer", "nesterov", "--sync-at-epoch-end"]
    # and the trainer takes them (the benchmark's own preflight does the same before a row runs)
    from disttrain_trainer import parse_config

    assert parse_config(["--strategy", "localsgd", *flags]).strategy_settings.sync_at_epoch_end is True
