"""The advisor's parameter-server phase on part of the data (disttrain_advisor.parameterserver_phase): how much of the data fits
what is left of the budget, and the part itself, written as the copier writes data, for the trainer to read."""

import math
import os

import pytest

from disttrain_contract.manifest import Manifest, read_split, read_vocab
from disttrain_advisor.parameterserver_phase import (
    MAX_GROUP_STEPS,
    MIN_GROUP_STEPS,
    PART_TEST_EXAMPLES,
    data_fraction,
    part_of_the_data,
    seconds_needed,
)
from stages import stage


def test_the_whole_data_when_two_epochs_fit_and_a_part_when_only_less_does():
    # start-up 10 s (four start-ups: 20 s), an epoch's lower bound 5 s (two epochs taken as 2 x 2 x 5 = 20 s)
    assert seconds_needed(10, 5) == 40
    assert data_fraction(10, 5, 250, left_seconds=45) == (1.0, 20 + 20 * MIN_GROUP_STEPS / 250)
    fraction, _ = data_fraction(10, 5, 100, left_seconds=30)
    assert fraction == pytest.approx(0.5)  # (30 - 20) / 20: the part's two epochs fill what is left
    fraction, _ = data_fraction(10, 5, 250, left_seconds=30)
    assert fraction == pytest.approx(MAX_GROUP_STEPS / 250)  # at most 64 steps of the group, whatever fits
    # not even MIN_GROUP_STEPS steps of the group: no run, and the seconds the smallest part would need
    fraction, least = data_fraction(10, 5, 250, left_seconds=21)
    assert fraction is None and least == pytest.approx(20 + 20 * 16 / 250)
    # a small table: its whole data is the smallest part there is
    assert data_fraction(10, 5, 8, left_seconds=39) == (None, 40)


@pytest.mark.parametrize("source", ["sample:digits", "sample:movie-reviews"])  # npy, and jsonl with a vocabulary
def test_the_part_is_data_the_trainer_reads(tmp_path, source):
    stage("copier", "--source", source, "--n-shards", 2, "--workdir", tmp_path)
    data = tmp_path / "data"
    whole = Manifest.read(data)
    out = tmp_path / "part"
    out.mkdir()
    part = part_of_the_data(str(data), whole, 0.25, str(out))
    read_back = Manifest.read(out)
    assert read_back.to_json() == part.to_json()
    assert [s.examples for s in part.shards] == [math.ceil(s.examples * 0.25) for s in whole.shards]
    assert part.test.examples == min(whole.test.examples, PART_TEST_EXAMPLES)
    for whole_split, split in zip((*whole.shards, whole.test), (*part.shards, part.test)):
        x, y = read_split(str(out), read_back, split)  # (checks every file against the part's sha256)
        x_whole, y_whole = read_split(str(data), whole, whole_split)
        assert list(y) == list(y_whole[: split.examples])  # the first examples of each split, in order
        assert len(x) == split.examples and str(x[0]) == str(x_whole[0])
    if whole.vocab:
        assert read_vocab(str(out), read_back) == read_vocab(str(data), whole)
    assert os.path.exists(out / "_SUCCESS") == os.path.exists(data / "_SUCCESS")
