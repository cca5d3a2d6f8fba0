"""The sweep's search-space flags, its validation split and the trainer's --params-from: fast, no training."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from disttrain_contract import ContractError
from disttrain_contract.manifest import Manifest, read_split
from disttrain_contract.params import read_params_file
from disttrain_sweep import split
from disttrain_sweep.space import build_space, parse_dimension, parse_start


def test_ranges_choices_and_fixed_values():
    lr = parse_dimension("learning_rate", "1e-4:1e-2")
    assert (lr.low, lr.high, lr.choices) == (1e-4, 1e-2, None)
    assert parse_dimension("batch", "32, 64,128").choices == (32, 64, 128)
    epochs = parse_dimension("epochs", "5")
    assert epochs.fixed and epochs.choices == (5,)
    assert parse_dimension("dropout", "0:0.5").high == 0.5


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("learning_rate", "0:1e-2", "learning_rate must be > 0"),
        ("learning_rate", "1e-2:1e-4", "LOW must be below HIGH"),
        ("learning_rate", "1:2:3", "a range is LOW:HIGH"),
        ("batch", "32,abc", "batch must be an integer"),
        ("batch", "0,64", "batch must be >= 1"),
        ("batch", "64,64", "listed twice"),
        ("dropout", "0:1", "dropout must be >= 0.0 and < 1.0"),
        ("epochs", "", "--epochs is empty"),
        ("learning_rate", "nan", "must be finite"),
    ],
)
def test_bad_space_flags_name_the_problem(name, text, message):
    with pytest.raises(ContractError, match=message):
        parse_dimension(name, text)


def test_defaults_per_task_and_overrides():
    text = build_space("text", {})
    assert text["learning_rate"].low == 3e-4 and text["batch"].choices == (32, 64, 128)
    image = build_space("image", {"epochs": "3"})
    assert image["epochs"].fixed and image["learning_rate"].describe() == "0.0001:0.01 (log)"
    table = build_space("table", {})
    assert table["epochs"].describe() == "10:40" and build_space("array", {})["batch"].choices == table["batch"].choices
    with pytest.raises(ContractError, match="text, image, table and array tasks; this dataset's task is faces"):
        build_space("faces", {})


def test_localsgd_sweeps_search_sync_every_on_a_log_scale():
    space = build_space("text", {}, "localsgd")
    assert space["sync_every"].choices == (8, 16, 32, 64, 128) and set(space) > set(build_space("text", {}))
    ranged = build_space("image", {"sync_every": "8:128"}, "localsgd")["sync_every"]
    assert (ranged.low, ranged.high, ranged.describe()) == (8, 128, "8:128 (log)")
    assert "sync_every" not in build_space("text", {})  # one worker has nothing to average
    with pytest.raises(ContractError, match="--sync-every is searched by localsgd trials only"):
        build_space("text", {"sync_every": "16,32"})
    with pytest.raises(ContractError, match="sync_every must be >= 1"):
        build_space("text", {"sync_every": "0,8"}, "localsgd")


def test_start_point_is_checked_against_the_space():
    space = build_space("text", {})
    assert parse_start("learning_rate=1e-5, batch=64", space) == {"learning_rate": 1e-5, "batch": 64}
    with pytest.raises(ContractError, match="not one of the searched values"):
        parse_start("batch=48", space)
    with pytest.raises(ContractError, match="unknown parameter 'momentum'"):
        parse_start("momentum=0.9", space)


def test_carve_is_disjoint_complete_and_deterministic_by_seed():
    train, validation = split.carve(1000, 0.2, seed=7)
    assert len(validation) == 200 and len(train) == 800
    assert not set(train) & set(validation) and set(train) | set(validation) == set(range(1000))
    again = split.carve(1000, 0.2, seed=7)
    assert all(np.array_equal(a, b) for a, b in zip((train, validation), again))
    assert not np.array_equal(validation, split.carve(1000, 0.2, seed=8)[1])
    with pytest.raises(ContractError, match="between 0 and 1"):
        split.carve(1000, 1.0, 1)


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep-split")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "disttrain_copier.main",
            "--source",
            "sample:digits",
            "--n-shards",
            "2",
            "--workdir",
            str(root),
        ],
        check=True,
        capture_output=True,
    )
    return root


def rows(data_dir, manifest, info):
    x, y = read_split(str(data_dir), manifest, info)
    return [(xi.tobytes(), int(yi)) for xi, yi in zip(x, y)]


def test_validation_split_comes_from_the_shards_only(digits, tmp_path):
    source = Manifest.read(str(digits / "data"))
    out = tmp_path / "sweep-data"
    carved = split.prepare(str(digits / "data"), str(out), 0.2, seed=3, log=lambda line: None)
    shard_rows = sorted(r for s in source.shards for r in rows(digits / "data", source, s))
    carved_rows = rows(out, carved, carved.shards[0]) + rows(out, carved, carved.test)
    # the shards' examples, every one once: the held-out test split contributes none
    assert sorted(carved_rows) == shard_rows
    assert carved.test.examples == round(source.train_examples * 0.2)
    test_rows = rows(digits / "data", source, source.test)
    held_out_only = set(test_rows) - set(shard_rows)  # (a few digits images occur in both of the copier's splits)
    assert held_out_only and not held_out_only & set(carved_rows)
    # the same seed again: the same bytes; another seed: another split
    again = split.prepare(str(digits / "data"), str(tmp_path / "again"), 0.2, seed=3, log=lambda line: None)
    assert again.test.sha256 == carved.test.sha256
    other = split.prepare(str(digits / "data"), str(tmp_path / "other"), 0.2, seed=4, log=lambda line: None)
    assert other.test.sha256 != carved.test.sha256
    with pytest.raises(ContractError, match="validation split of other shards, fraction, seed or trial workers"):
        split.prepare(str(digits / "data"), str(out), 0.3, seed=3, log=lambda line: None)


def test_localsgd_trials_get_one_training_shard_per_trial_worker(digits, tmp_path):
    source = Manifest.read(str(digits / "data"))
    one = split.prepare(str(digits / "data"), str(tmp_path / "one"), 0.2, seed=3, log=lambda line: None)
    three = split.prepare(str(digits / "data"), str(tmp_path / "three"), 0.2, seed=3, log=lambda line: None, n_shards=3)
    assert three.n_shards == 3 and three.test.sha256 == one.test.sha256  # the same validation split
    parts = [rows(tmp_path / "three", three, s) for s in three.shards]
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    # the one-shard split's training examples, in the same order, cut in three
    assert sum(parts, []) == rows(tmp_path / "one", one, one.shards[0])
    assert sum(map(len, parts)) + three.test.examples == source.train_examples
    with pytest.raises(ContractError, match="trial workers"):  # another shard count is another split
        split.prepare(str(digits / "data"), str(tmp_path / "one"), 0.2, seed=3, log=lambda line: None, n_shards=2)


def write(path, obj):
    path.write_text(json.dumps(obj))
    return str(path)


def test_params_file_is_checked(tmp_path):
    good = write(
        tmp_path / "best.json",
        {
            "params": {"learning_rate": 0.004, "batch": 32, "epochs": 3, "width": 96, "dropout": 0.25},
            "value": 0.97,
            "trial": 5,
        },
    )
    assert read_params_file(good) == {"learning_rate": 0.004, "batch": 32, "epochs": 3, "width": 96, "dropout": 0.25}
    cases = [
        ({"params": {"learning_rate": 0.01, "momentum": 0.9}}, "unknown parameter 'momentum'"),
        ({"params": {"batch": 32.5}}, "batch must be an integer"),
        ({"params": {"batch": True}}, "batch must be an integer"),
        ({"params": {"learning_rate": -1}}, "learning_rate must be > 0"),
        ({"params": {"dropout": 1.0}}, "dropout must be >= 0.0 and < 1.0"),
        ({"learning_rate": 0.01}, 'non-empty "params" object'),
        ([1, 2], 'non-empty "params" object'),
    ]
    for i, (obj, message) in enumerate(cases):
        with pytest.raises(ContractError, match=message):
            read_params_file(write(tmp_path / f"bad-{i}.json", obj))
    with pytest.raises(ContractError, match="no such file"):
        read_params_file(str(tmp_path / "missing.json"))


@pytest.mark.parametrize(
    "content, message",
    [
        ({"params": {"learning_rate": 0.01, "momentum": 0.9}}, "unknown parameter 'momentum'"),
        ({"params": {"epochs": 0}}, "epochs must be >= 1"),
        ({"params": {"sync_every": 0}}, "sync_every must be >= 1"),
        (
            {"params": {"sync_every": 16}},
            "sync_every was searched by localsgd trials, but this run's --strategy is average",
        ),
        (None, "is unreadable"),
    ],
)
def test_trainer_refuses_a_bad_params_file_with_exit_2(tmp_path, content, message):
    path = tmp_path / "best.json"
    path.write_text("{not json" if content is None else json.dumps(content))
    result = subprocess.run(
        [sys.executable, "-m", "disttrain_trainer.main", "--workdir", str(tmp_path), "--params-from", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert not os.path.exists(tmp_path / "train")
