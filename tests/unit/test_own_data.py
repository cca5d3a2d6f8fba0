"""The copier's own-data sources (docs/formats.md): table:PATH (CSV and Parquet) for classification
and regression, npz:PATH with any numeric x, and the data checks for a regression target. Real files,
the real `disttrain-copier` program; results compared with numpy. Fast (no TensorFlow)."""

import collections
import csv
import hashlib
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes

from disttrain_contract import ContractError
from disttrain_contract.manifest import Manifest, read_split
from disttrain_copier.sources import open_source
from disttrain_copier.validation import TEST, Validator
from stages import stage

SHARDS = ["shard-00000", "shard-00001"]


def write_table(path, columns):
    """columns: {name: list of values}; .csv/.tsv with the csv module, .parquet with pyarrow."""
    path = str(path)
    if path.endswith(".parquet"):
        pq.write_table(pa.table(columns), path)
    else:
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh, delimiter="\t" if path.endswith(".tsv") else ",")
            writer.writerow(list(columns))
            writer.writerows(
                zip(*[[repr(v) if isinstance(v, float) else v for v in values] for values in columns.values()])
            )
    return path


@pytest.fixture(scope="module")
def sklearn_tables(tmp_path_factory):
    """breast_cancer (classification, label names as text) and diabetes (regression, column `target`),
    each as CSV and as Parquet."""
    root = tmp_path_factory.mktemp("tables")
    cancer, diabetes = load_breast_cancer(), load_diabetes(scaled=False)
    cancer_columns = {name: cancer.data[:, j].tolist() for j, name in enumerate(cancer.feature_names)}
    cancer_columns["label"] = [str(cancer.target_names[t]) for t in cancer.target]
    diabetes_columns = {name: diabetes.data[:, j].tolist() for j, name in enumerate(diabetes.feature_names)}
    diabetes_columns["target"] = diabetes.target.tolist()
    files = {}
    for fmt in ("csv", "parquet"):
        files["cancer", fmt] = write_table(root / f"breast_cancer.{fmt}", cancer_columns)
        files["diabetes", fmt] = write_table(root / f"diabetes.{fmt}", diabetes_columns)
    return files, cancer, diabetes


def copy(tmp_path, source, *args):
    out = tmp_path / "data"
    result = stage("copier", "--source", source, "--out", out, *args)
    return str(out), Manifest.read(str(out)), result


def splits(out, manifest):
    """{name: (x, y)} of every shard and the held-out split, checksums verified by read_split."""
    for split in [*manifest.shards, manifest.test]:
        for fname, digest in split.sha256.items():
            assert hashlib.sha256(open(os.path.join(out, fname), "rb").read()).hexdigest() == digest
    return {split.name: read_split(out, manifest, split) for split in [*manifest.shards, manifest.test]}


def rows(x, y):
    return collections.Counter((xs.tobytes(), ys.item()) for xs, ys in zip(x, y))


def assert_training_statistics(statistics, parts, manifest):
    """The manifest's per-feature statistics are numpy's over the training shards only (population variance)."""
    train = np.concatenate([parts[s.name][0] for s in manifest.shards]).astype(np.float64)
    train = train.reshape(-1, train.shape[-1])
    np.testing.assert_allclose(statistics["mean"], train.mean(axis=0), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(statistics["variance"], train.var(axis=0), rtol=1e-7, atol=1e-9)
    np.testing.assert_array_equal(statistics["min"], train.min(axis=0))
    np.testing.assert_array_equal(statistics["max"], train.max(axis=0))
    everything = np.concatenate([p[0] for p in parts.values()]).astype(np.float64).reshape(-1, train.shape[-1])
    assert not np.allclose(statistics["mean"], everything.mean(axis=0), rtol=1e-12, atol=0)  # not the held-out rows too


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_breast_cancer_table_classification(tmp_path, sklearn_tables, fmt):
    files, cancer, _ = sklearn_tables
    plot = () if fmt == "csv" else ("--no-stats-plot",)  # one plot of each kind is enough (~1-2 s each)
    out, manifest, result = copy(tmp_path, f"table:{files['cancer', fmt]}", "--n-shards", 3, *plot)
    assert manifest.task == "table" and manifest.problem == "classification" and manifest.target is None
    assert manifest.labels == ["benign", "malignant"]  # names sort alphabetically; y indexes them
    assert manifest.storage == "npy"
    spec = manifest.input
    assert {k: spec[k] for k in ("kind", "name", "shape", "dtype")} == {
        "kind": "table",
        "name": "features",
        "shape": [30],
        "dtype": "float32",
    }
    assert spec["features"] == list(cancer.feature_names)
    parts = splits(out, manifest)
    for x, y in parts.values():
        assert x.dtype == np.float32 and x.shape[1:] == (30,) and y.dtype == np.int64
    # disjoint shards whose union with the held-out split is the file, row for row, label for label
    expected = rows(
        cancer.data.astype(np.float32),
        np.asarray([manifest.labels.index(cancer.target_names[t]) for t in cancer.target]),
    )
    got = collections.Counter()
    for x, y in parts.values():
        got.update(rows(x, y))
    assert got == expected and sum(len(y) for _, y in parts.values()) == 569
    assert_training_statistics(spec["statistics"], parts, manifest)
    stats = json.load(open(os.path.join(out, "stats.json")))
    assert stats["train"]["feature_statistics"] == spec["statistics"] and stats["features"] == spec["features"]
    assert stats["splits"][TEST]["feature_statistics"]["max"] == parts[TEST][0].astype(np.float64).max(axis=0).tolist()
    assert manifest.validation["passed"]
    if not plot:  # 30 features: the summary panels
        assert open(os.path.join(out, "stats.png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert "task table, 30 features, 2 labels (benign, malignant)" in result.stdout


def test_csv_and_parquet_of_the_same_table_give_the_same_dataset(tmp_path, sklearn_tables):
    files, _, _ = sklearn_tables
    digests = []
    for fmt in ("csv", "parquet"):
        (tmp_path / fmt).mkdir()
        _, manifest, _ = copy(
            tmp_path / fmt,
            f"table:{files['diabetes', fmt]}",
            "--label-column",
            "target",
            "--problem",
            "regression",
            "--no-stats-plot",
        )
        digests.append([s.sha256 for s in [*manifest.shards, manifest.test]])
    assert digests[0] == digests[1]


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_diabetes_table_regression(tmp_path, sklearn_tables, fmt):
    files, _, diabetes = sklearn_tables
    plot = () if fmt == "parquet" else ("--no-stats-plot",)
    out, manifest, result = copy(
        tmp_path, f"table:{files['diabetes', fmt]}", "--label-column", "target", "--problem", "regression", *plot
    )
    assert manifest.task == "table" and manifest.problem == "regression" and manifest.target == "target"
    assert manifest.labels == [] and manifest.input["features"] == list(diabetes.feature_names)
    parts = splits(out, manifest)
    got = collections.Counter()
    for x, y in parts.values():
        assert x.dtype == np.float32 and y.dtype == np.float32
        got.update(rows(x, y))
    assert got == rows(diabetes.data.astype(np.float32), diabetes.target.astype(np.float32))
    assert_training_statistics(manifest.input["statistics"], parts, manifest)
    checks = manifest.validation["checks"]
    assert checks["missing_class"] == {"status": "skipped", "message": "regression target: no classes"}
    assert (
        checks["label_skew"]["status"] == "passed"
        and "quantile bins of the training targets" in checks["label_skew"]["message"]
    )
    assert checks["leakage"]["status"] == "passed"
    stats = json.load(open(os.path.join(out, "stats.json")))
    train_y = np.concatenate([parts[s.name][1] for s in manifest.shards]).astype(np.float64)
    assert stats["train"]["target"]["mean"] == pytest.approx(train_y.mean())
    assert stats["train"]["target"]["p50"] == pytest.approx(np.median(train_y))
    assert "label_counts" not in stats["splits"][TEST] and stats["target"]["name"] == "target"
    assert "task table, 10 features, regression of 'target'" in result.stdout
    if not plot:  # 10 features: one panel each, and the target's histogram
        assert open(os.path.join(out, "stats.png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_class_names_integer_valued_labels_sort_numerically(tmp_path):
    path = write_table(tmp_path / "t.tsv", {"a": [float(i) for i in range(12)], "label": ["10", "2", "1.0", " 2 "] * 3})
    dataset = open_source(f"table:{path}")
    assert dataset.labels == ["1", "2", "10"]
    assert [int(y) for _, y in dataset.stream()] == [2, 1, 0, 1] * 3
    mixed = write_table(tmp_path / "m.csv", {"a": [1.0, 2.0, 3.0, 4.0], "label": ["b", "3", "a", "-1"]})
    assert open_source(f"table:{mixed}").labels == ["-1", "3", "a", "b"]
    # a text CSV's labels sort the same way; "³" passes str.isdigit() but is a name, not a number
    text = tmp_path / "t.csv"
    text.write_text(
        "text,label\n" + "".join(f"row {i},{label}\n" for i, label in enumerate(["10", "b", "2", "³", "-1", "--3"]))
    )
    assert open_source(f"csv:{text}").labels == ["-1", "2", "10", "--3", "b", "³"]


def test_table_schema(tmp_path, sklearn_tables):
    files, cancer, _ = sklearn_tables
    schema = tmp_path / "schema.json"
    schema.write_text(
        json.dumps(
            {
                "labels": ["benign", "malignant"],
                "input": {"kind": "table", "shape": [30], "dtype": "float32"},
                "features": list(cancer.feature_names),
            }
        )
    )
    _, manifest, _ = copy(tmp_path, f"table:{files['cancer', 'parquet']}", "--schema", schema, "--no-stats-plot")
    assert manifest.validation["checks"]["schema"]["status"] == "passed"
    schema.write_text(json.dumps({"features": ["mean radius", "mean texture"]}))
    refused = stage(
        "copier",
        "--source",
        f"table:{files['cancer', 'parquet']}",
        "--schema",
        schema,
        "--out",
        tmp_path / "other",
        check=False,
    )
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert (
        "schema: the data violates --schema: the 30 feature columns ['mean radius', 'mean texture', 'mean perimeter', "
        "'mean area', 'mean smoothness', 'mean compactness', ... 24 more] are not the schema's 2 ['mean radius', "
        "'mean texture'] (not in the schema: ['mean perimeter', "
    ) in refused.stderr
    assert not os.path.exists(tmp_path / "other")


# ------------------------------------------------------------------------------------ npz


def test_npz_float_features_and_float_targets_are_an_array_regression(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(5.0, 3.0, size=(200, 10))  # float64: kept as float64
    y = x @ rng.normal(size=10) + rng.normal(size=200)
    np.savez(tmp_path / "r.npz", x=x, y=y)
    out, manifest, result = copy(tmp_path, f"npz:{tmp_path / 'r.npz'}", "--problem", "regression", "--no-stats-plot")
    assert (
        manifest.task == "array"
        and manifest.problem == "regression"
        and manifest.target == "y"
        and manifest.labels == []
    )
    assert {k: manifest.input[k] for k in ("kind", "name", "shape", "dtype")} == {
        "kind": "array",
        "name": "x",
        "shape": [10],
        "dtype": "float64",
    }
    parts = splits(out, manifest)
    got = collections.Counter()
    for xs, ys in parts.values():
        assert xs.dtype == np.float64 and ys.dtype == np.float32
        got.update(rows(xs, ys))
    assert got == rows(x, y.astype(np.float32))
    assert_training_statistics(manifest.input["statistics"], parts, manifest)
    assert "task array, x float64 [10] per example, regression of 'y'" in result.stdout


def test_npz_multi_axis_integer_array_classification(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.integers(-500, 500, size=(120, 5, 7, 2), dtype=np.int16)  # [n, h, w, 2]: 2 channels is not an image
    y = np.arange(120) % 2
    np.savez(tmp_path / "a.npz", x=x, y=y)
    out, manifest, _ = copy(tmp_path, f"npz:{tmp_path / 'a.npz'}", "--no-stats-plot")
    assert manifest.task == "array" and manifest.problem == "classification" and manifest.labels == ["0", "1"]
    assert manifest.input["shape"] == [5, 7, 2] and manifest.input["dtype"] == "int16"
    parts = splits(out, manifest)
    assert all(xs.dtype == np.int16 for xs, _ in parts.values())
    assert sum((rows(xs, ys) for xs, ys in parts.values()), collections.Counter()) == rows(x, y)
    # statistics per element of the last axis (2 values), over every position of the training shards
    assert_training_statistics(manifest.input["statistics"], parts, manifest)
    assert len(manifest.input["statistics"]["mean"]) == 2


def test_npz_images_stay_an_image_task_and_regression_makes_them_an_array(tmp_path):
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, size=(60, 6, 5), dtype=np.uint8)
    np.savez(tmp_path / "i.npz", x=x, y=np.arange(60) % 3)
    out, manifest, _ = copy(tmp_path, f"npz:{tmp_path / 'i.npz'}", "--no-stats-plot")
    assert manifest.task == "image" and manifest.input == {"kind": "image", "height": 6, "width": 5, "channels": 1}
    assert manifest.problem == "classification" and read_split(out, manifest, manifest.shards[0])[0].shape[1:] == (
        6,
        5,
        1,
    )
    np.savez(tmp_path / "ir.npz", x=x, y=rng.normal(size=60))
    (tmp_path / "r").mkdir()
    out, manifest, _ = copy(tmp_path / "r", f"npz:{tmp_path / 'ir.npz'}", "--problem", "regression", "--no-stats-plot")
    assert manifest.task == "array" and manifest.input["shape"] == [6, 5] and manifest.input["dtype"] == "uint8"
    assert read_split(out, manifest, manifest.test)[0].dtype == np.uint8


# ------------------------------------------------------------------------- regression checks


def test_regression_target_skew_between_shards(tmp_path):
    """Low targets in one shard, high in the other: far apart over the training targets' quantile bins."""
    spec = {"kind": "table", "name": "features", "shape": [1], "dtype": "float32", "features": ["a"]}

    def validator(**options):
        v = Validator("table", [], spec, SHARDS, problem="regression", target="price", **options)
        for i in range(100):
            v.add("shard-00000", np.float32([i]), float(i % 50))  # 0..49
            v.add("shard-00001", np.float32([i + 100]), float(i % 50 + 40))  # 40..89
            if i % 4 == 0:
                v.add(TEST, np.float32([i + 1000]), float(i))
        return v

    with pytest.raises(ContractError) as refused:
        validator().finish(str(tmp_path), "npy")
    message = str(refused.value)
    assert "label_skew: 2 shard(s) have a target distribution further than --max-label-skew 0.2" in message
    assert (
        "total-variation distance over 4 quantile bins of the training targets" in message
    )  # 100 examples a shard: 4 bins
    assert "missing_class" not in message
    stats = validator(allow_label_skew=True).finish(str(tmp_path), "npy")
    skew = stats["validation"]["checks"]["label_skew"]
    assert skew["status"] == "warning" and skew["bins"] == 4 and skew["max_distance"] == pytest.approx(0.4)
    assert stats["splits"]["shard-00000"]["target"]["max"] == 49 and stats["train"]["examples"] == 200


def test_regression_leakage_by_content(tmp_path):
    spec = {"kind": "table", "name": "features", "shape": [2], "dtype": "float32", "features": ["a", "b"]}
    v = Validator("table", [], spec, SHARDS, problem="regression", target="y")
    for i in range(40):
        v.add(SHARDS[i % 2], np.float32([i, 2 * i]), float(i))
    v.add(TEST, np.float32([7, 14]), 3.0)  # the same features as shard-00001's example 3, another target
    v.add(TEST, np.float32([0.5, 1]), 3.0)
    with pytest.raises(
        ContractError, match=r"leakage: 1 training example\(s\) .* shard-00001 example 3 = test example 0"
    ):
        v.finish(str(tmp_path), "npy")


# ------------------------------------------------------------------------------ bad inputs


def _cancer_like(d, name, **changes):
    columns = {
        "radius": [1.5, 2.5, 3.5, 4.5, 5.5, 6.5],
        "area": [10.0, 20.0, 30.0, 40.0, 50.0, 60.0],
        "label": ["a", "b"] * 3,
    }
    columns.update(changes)
    return "table:" + write_table(d / name, columns)


def _header_only_parquet(d):
    pq.write_table(pa.table({"a": pa.array([], pa.float64()), "label": pa.array([], pa.string())}), d / "h.parquet")
    return f"table:{d / 'h.parquet'}"


BAD = {
    # name: (make the source in dir d -> copier arguments, the one error line's expected text)
    "csv no label column": (
        lambda d: ["table:" + write_table(d / "l.csv", {"radius": [1.0, 2.0], "class": ["a", "b"]})],
        "no label column 'label'; the columns are ['radius', 'class']",
    ),
    "parquet no label column": (
        lambda d: [
            "table:" + write_table(d / "l.parquet", {"radius": [1.0, 2.0], "class": ["a", "b"]}),
            "--label-column",
            "kind",
        ],
        "no label column 'kind'; the columns are ['radius', 'class']",
    ),
    "csv header only": (
        lambda d: (d / "h.csv").write_text("a,b,label\n") and [f"table:{d / 'h.csv'}"],
        "the file has a header but no data rows",
    ),
    "parquet header only": (lambda d: [_header_only_parquet(d)], "the file has a header but no data rows"),
    "csv empty file": (lambda d: (d / "z.csv").write_text("") or [f"table:{d / 'z.csv'}"], "the file is empty"),
    "float label under classification": (
        lambda d: [_cancer_like(d, "f.csv", label=[1.0, 2.0, 3.7, 1.0, 2.0, 1.0])],
        "the label column 'label': data row 3 has '3.7', not a class",
    ),
    "non-numeric regression target": (
        lambda d: [_cancer_like(d, "r.csv", label=["1.5", "a", "2", "3", "4", "5"]), "--problem", "regression"],
        "the target column 'label': data row 2 has 'a', not a number",
    ),
    "one class only": (lambda d: [_cancer_like(d, "o.csv", label=["x"] * 6)], "classification needs at least 2"),
    "pandas index column": (
        lambda d: (d / "p.csv").write_text(",a,label\n0,1.5,x\n1,2.5,y\n") and [f"table:{d / 'p.csv'}"],
        "column 1 has no name in the header",
    ),
    "ragged csv row": (
        lambda d: (d / "g.csv").write_text("a,b,label\n1,2,x\n3,y\n") and [f"table:{d / 'g.csv'}"],
        "a row has 2 field(s), the header names 3 columns: '3,y'",
    ),
    "unknown extension": (
        lambda d: (d / "t.xlsx").write_text("x") and [f"table:{d / 't.xlsx'}"],
        "unknown table format '.xlsx'",
    ),
    "not parquet": (
        lambda d: (d / "t.parquet").write_text("a,label\n1,x\n") and [f"table:{d / 't.parquet'}"],
        "not a readable Parquet file",
    ),
    "npz float y under classification": (
        lambda d: np.savez(d / "f.npz", x=np.zeros((20, 10)), y=np.linspace(0, 1, 20)) or [f"npz:{d / 'f.npz'}"],
        "y must be [n] integers for classification, got float64 values such as 0.05263",
    ),
    "npz nan in x": (
        lambda d: (
            np.savez(
                d / "n.npz", x=np.where(np.arange(200)[:, None] == 150, np.nan, np.ones((200, 3))), y=np.arange(200) % 2
            )
            or [f"npz:{d / 'n.npz'}"]
        ),
        "x[150] has a value that is not a finite number (nan)",
    ),
    "npz nan target": (
        lambda d: (
            np.savez(d / "t.npz", x=np.zeros((20, 3)), y=np.where(np.arange(20) == 4, np.nan, 1.0))
            or [f"npz:{d / 't.npz'}", "--problem", "regression"]
        ),
        "y[4] is nan: a regression target must be a finite number",
    ),
    "regression of images:DIR": (
        lambda d: ["sample:digits", "--problem", "regression"],
        "--problem regression needs a numeric target: --source table:PATH or npz:PATH",
    ),
    "label column with npz": (
        lambda d: ["npz:x.npz", "--label-column", "y"],
        "--label-column applies to --source table:PATH only",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_own_data_one_line_exit_2_nothing_published(tmp_path, case):
    make, message = BAD[case]
    source, *args = make(tmp_path)
    result = stage("copier", "--source", source, *args, "--out", tmp_path / "data", check=False)
    lines = result.stderr.splitlines()
    if "--label-column" in args:  # argparse: its usage lines, then the one error line
        lines = [line for line in lines if "error:" in line]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith(("error: ", "disttrain-copier: error: ")) and message in lines[0], result.stderr
    assert not os.path.exists(tmp_path / "data") and not [f for f in os.listdir(tmp_path) if f.startswith(".")]
