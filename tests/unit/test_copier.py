"""copier: shards are disjoint and complete, the manifest's checksums hold, bad input is refused cleanly."""

import collections
import csv
import hashlib
import json
import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from disttrain_contract import ContractError
from disttrain_contract.manifest import Manifest, read_split
from disttrain_copier.main import copy, parse_args, split_assignments
from stages import stage


def write_csv(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["text", "label"])
        writer.writerows(rows)


def copy_csv(tmp, rows, n_shards, test_fraction=0.25, seed=0, extra=()):
    src = os.path.join(tmp, "in.csv")
    write_csv(src, rows)
    out = os.path.join(tmp, "data")
    copy(
        parse_args(
            [
                "--source",
                f"csv:{src}",
                "--n-shards",
                str(n_shards),
                "--out",
                out,
                "--test-fraction",
                str(test_fraction),
                "--seed",
                str(seed),
                *extra,
            ]
        )
    )
    return out, Manifest.read(out)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n_examples=st.integers(min_value=12, max_value=300),
    n_shards=st.integers(min_value=1, max_value=5),
    test_fraction=st.floats(min_value=0.1, max_value=0.5),
    seed=st.integers(min_value=0, max_value=2**31),
)
def test_shards_are_disjoint_and_complete(n_examples, n_shards, test_fraction, seed):
    rows = [(f"review number {i} {'good' if i % 3 else 'bad'}", "pos" if i % 3 else "neg") for i in range(n_examples)]
    with tempfile.TemporaryDirectory() as tmp:
        try:
            # a dozen examples in 5 shards legitimately leave a class out of a shard, or skew one:
            # this test is about the split, test_validation.py about the checks
            out, manifest = copy_csv(
                tmp,
                rows,
                n_shards,
                test_fraction,
                seed,
                extra=("--allow-missing-classes", "--allow-label-skew", "--no-stats-plot"),
            )
        except ContractError as err:  # tiny inputs may leave a split empty: refused, and nothing written
            assert "empty" in str(err)
            assert not os.path.exists(os.path.join(tmp, "data"))
            return
        seen = collections.Counter()
        for split in [*manifest.shards, manifest.test]:
            texts, labels = read_split(out, manifest, split)
            seen.update(texts)
            # labels survive the round trip
            assert all(manifest.labels[y] == ("pos" if "good" in t else "neg") for t, y in zip(texts, labels))
        assert seen == collections.Counter(r[0] for r in rows)  # every example exactly once
        sizes = [s.examples for s in manifest.shards]
        assert max(sizes) - min(sizes) <= 1  # round-robin keeps shards balanced
        assert manifest.train_examples + manifest.test.examples == n_examples


def test_same_seed_same_split_and_other_seed_differs(tmp_path):
    rows = [(f"text {i}", i % 2) for i in range(200)]
    shard0 = {}
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        os.makedirs(tmp_path / name)
        out, _ = copy_csv(str(tmp_path / name), rows, 3, seed=seed)
        shard0[name] = open(os.path.join(out, "shard-00000.jsonl")).read()
    assert shard0["a"] == shard0["b"]
    assert shard0["a"] != shard0["c"]


def test_assignment_fraction_is_close_to_requested():
    stream = split_assignments(seed=1, test_fraction=0.2, n_shards=4)
    picks = [next(stream) for _ in range(20000)]
    assert abs(picks.count(-1) / len(picks) - 0.2) < 0.01
    counts = collections.Counter(p for p in picks if p >= 0)
    assert max(counts.values()) - min(counts.values()) <= 1


def test_manifest_checksums_match_files_and_detect_corruption(tmp_path):
    rows = [(f"review {i}", i % 2) for i in range(100)]
    out, manifest = copy_csv(str(tmp_path), rows, 2)
    for split in [*manifest.shards, manifest.test]:
        for fname, digest in split.sha256.items():
            assert hashlib.sha256(open(os.path.join(out, fname), "rb").read()).hexdigest() == digest
    raw = json.load(open(os.path.join(out, "manifest.json")))
    assert raw["n_shards"] == 2 and raw["seed"] == 0 and raw["labels"] == ["0", "1"]
    assert [s["examples"] for s in raw["shards"]] == [s.examples for s in manifest.shards]
    assert raw["test"]["examples"] == manifest.test.examples
    with open(os.path.join(out, "shard-00001.jsonl"), "a") as fh:
        fh.write('{"text": "tampered", "label": 0}\n')
    with pytest.raises(ContractError, match="shard-00001.jsonl is corrupt"):
        read_split(out, manifest, manifest.shards[1])


def test_digits_are_image_shards(tmp_path):
    out = str(tmp_path / "data")
    copy(parse_args(["--source", "sample:digits", "--n-shards", "3", "--out", out]))
    manifest = Manifest.read(out)
    assert manifest.task == "image" and manifest.input == {"kind": "image", "height": 8, "width": 8, "channels": 1}
    x, y = read_split(out, manifest, manifest.shards[0])
    assert x.dtype == np.uint8 and x.shape[1:] == (8, 8, 1) and x.max() == 255
    assert manifest.train_examples + manifest.test.examples == 1797


def test_npz_source_streams_arrays(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(50, 6, 5, 3), dtype=np.uint8)
    y = np.arange(50) % 3
    np.savez(tmp_path / "d.npz", x=x, y=y, label_names=np.array(["cat", "dog", "owl"]))
    out = str(tmp_path / "data")
    copy(parse_args(["--source", f"npz:{tmp_path / 'd.npz'}", "--n-shards", "2", "--out", out]))
    manifest = Manifest.read(out)
    assert manifest.labels == ["cat", "dog", "owl"]
    rows = [read_split(out, manifest, s) for s in [*manifest.shards, manifest.test]]
    got = {xs.tobytes(): int(ys) for xx, yy in rows for xs, ys in zip(xx, yy)}
    assert got == {xs.tobytes(): int(ys) for xs, ys in zip(x, y)}


def test_images_folder_source(tmp_path):
    cv2 = pytest.importorskip("cv2")
    for label, value in (("dark", 30), ("light", 220)):
        os.makedirs(tmp_path / "imgs" / label)
        for i in range(6):
            cv2.imwrite(str(tmp_path / "imgs" / label / f"{i}.png"), np.full((20, 30, 3), value + i, np.uint8))
    (tmp_path / "imgs" / "light" / "notes.txt").write_text("not an image, ignored")
    out = str(tmp_path / "data")
    copy(
        parse_args(
            [
                "--source",
                f"images:{tmp_path / 'imgs'}",
                "--n-shards",
                "2",
                "--out",
                out,
                "--image-size",
                "16",
                "--test-fraction",
                "0.3",
            ]
        )
    )
    manifest = Manifest.read(out)
    assert manifest.labels == ["dark", "light"]
    x, y = read_split(out, manifest, manifest.shards[0])
    assert x.shape[1:] == (16, 16, 3)
    assert all((img.mean() > 128) == bool(label) for img, label in zip(x, y))


def write_imdb(directory, reviews, labels, word_index):
    """A small file in the exact format of keras' imdb.npz: object arrays of word-rank lists."""
    ranks = {w: i for w, i in word_index.items()}
    seqs = np.empty(len(reviews), dtype=object)
    for i, text in enumerate(reviews):
        seqs[i] = [ranks[w] for w in text.split()]
    half = len(reviews) // 2
    np.savez(
        os.path.join(directory, "imdb.npz"),
        x_train=seqs[:half],
        y_train=np.array(labels[:half]),
        x_test=seqs[half:],
        y_test=np.array(labels[half:]),
    )
    with open(os.path.join(directory, "imdb_word_index.json"), "w") as fh:
        json.dump(word_index, fh)


def test_keras_imdb_local_copy(tmp_path):
    word_index = {"great": 1, "film": 2, "awful": 3, "plot": 4}
    reviews = ["great film", "awful plot", "great plot", "awful film"] * 10
    labels = [1, 0, 1, 0] * 10
    write_imdb(tmp_path, reviews, labels, word_index)
    out = str(tmp_path / "data")
    # four reviews ten times over: the same texts in training and held out, accepted on purpose
    copy(parse_args(["--source", f"keras:imdb={tmp_path}", "--n-shards", "2", "--out", out, "--allow-duplicates"]))
    manifest = Manifest.read(out)
    assert manifest.labels == ["negative", "positive"]
    decoded = {}
    for split in [*manifest.shards, manifest.test]:
        texts, ys = read_split(out, manifest, split)
        decoded.update(zip(texts, ys))
    assert decoded == {"great film": 1, "awful plot": 0, "great plot": 1, "awful film": 0}


class Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/disttrain-pwned",))


def test_imdb_npz_with_a_pickle_gadget_is_refused(tmp_path):
    bad = np.empty(2, dtype=object)
    bad[0], bad[1] = Evil(), [1, 2]
    np.savez(tmp_path / "imdb.npz", x_train=bad, y_train=np.array([0, 1]), x_test=bad, y_test=np.array([0, 1]))
    (tmp_path / "imdb_word_index.json").write_text("{}")
    result = stage("copier", "--source", f"keras:imdb={tmp_path}", "--out", tmp_path / "data", check=False)
    assert result.returncode != 0
    assert "refusing to unpickle posix.system" in result.stderr or "refusing to unpickle os.system" in result.stderr
    assert "Traceback" not in result.stderr
    assert not os.path.exists("/tmp/disttrain-pwned") and not os.path.exists(tmp_path / "data")


@pytest.mark.parametrize(
    "make_source, message",
    [
        (lambda d: "csv:" + str(d / "missing.csv"), "does not exist"),
        (
            lambda d: (d / "h.csv").write_text("review,stars\nx,1\n") and "csv:" + str(d / "h.csv"),
            "must name 'text' and 'label'",
        ),
        (
            lambda d: (d / "one.csv").write_text("text,label\na,1\nb,1\n") and "csv:" + str(d / "one.csv"),
            "at least 2 distinct labels",
        ),
        (lambda d: (d / "bad.npz").write_bytes(b"not a zip") and "npz:" + str(d / "bad.npz"), "not a readable .npz"),
        (lambda d: np.savez(d / "noy.npz", x=np.zeros((4, 2, 2))) or "npz:" + str(d / "noy.npz"), "no 'y' array"),
        (
            lambda d: (
                np.savez(d / "obj.npz", x=np.array([[1], "a"], dtype=object), y=np.zeros(2, int))
                or "npz:" + str(d / "obj.npz")
            ),
            "object array",
        ),
        # x [n, 5] is an array task now (test_own_data.py); complex numbers are not numeric data
        (
            lambda d: (
                np.savez(d / "cplx.npz", x=np.zeros((4, 5), complex), y=np.zeros(4, int))
                or "npz:" + str(d / "cplx.npz")
            ),
            "x must be numeric",
        ),
        (lambda d: "nonsense", "not of the form KIND:ARG"),
        (lambda d: "sample:cats", "unknown --source"),
    ],
)
def test_bad_sources_fail_cleanly_and_leave_nothing(tmp_path, make_source, message):
    source = make_source(tmp_path)
    result = stage("copier", "--source", source, "--out", tmp_path / "data", check=False)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not os.path.exists(tmp_path / "data")


def test_too_many_shards_is_refused(tmp_path):
    write_csv(tmp_path / "small.csv", [("a", 0), ("b", 1), ("c", 0), ("d", 1)])
    result = stage(
        "copier",
        "--source",
        f"csv:{tmp_path / 'small.csv'}",
        "--n-shards",
        "10",
        "--out",
        tmp_path / "data",
        check=False,
    )
    assert result.returncode != 0 and "empty" in result.stderr and "Traceback" not in result.stderr
    assert not os.path.exists(tmp_path / "data")


def test_flag_aliases_and_bad_flags(tmp_path):
    args = parse_args(["--source", "sample:digits", "--n_container", "4", "--savedir", "x"])
    assert args.n_shards == 4 and args.out == "x"
    for bad in (["--n-shards", "0"], ["--test-fraction", "1.5"]):
        result = stage("copier", "--source", "sample:digits", *bad, check=False)
        assert result.returncode == 2 and "Traceback" not in result.stderr


def test_rerun_replaces_the_dataset_atomically(tmp_path):
    out = str(tmp_path / "data")
    stage("copier", "--source", "sample:digits", "--n-shards", "2", "--out", out)
    first = open(os.path.join(out, "manifest.json")).read()
    stage("copier", "--source", "sample:digits", "--n-shards", "3", "--out", out)
    assert Manifest.read(out).n_shards == 3 and open(os.path.join(out, "manifest.json")).read() != first
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".")]  # no temporary leftovers
