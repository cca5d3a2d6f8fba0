"""The copier's typed tables (docs/own-model.md, "The data"): a table with text columns or missing values
becomes the task typed_table, its shards keep the raw typed values with nulls (NAME.parquet), and the
manifest's input is the columns' TableSpec with statistics from the training shards only. Type inference
and overrides, every missing-value spelling in CSV and Parquet, the bad-cell report, the ID-column rule,
the typed checks, and the real Palmer penguins table. Real files through the real `disttrain-copier`;
statistics compared with numpy over the shards read back. Fast (no TensorFlow)."""

import collections
import json
import math
import os
import subprocess

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from disttrain_contract.manifest import Manifest, read_split
from disttrain_contract.typed_table import TableSpec
from disttrain_copier.main import SplitCodes, split_assignments
from stages import BIN, stage


def write_csv(path, header, rows):
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(",".join(header) + "\n")
        fh.writelines(",".join(str(v) for v in row) + "\n" for row in rows)
    return str(path)


def copy(tmp_path, source, *args, check=True, plot=False):
    out = tmp_path / "data"
    result = stage(
        "copier", "--source", source, "--out", out, *(() if plot else ("--no-stats-plot",)), *args, check=check
    )
    return str(out), (Manifest.read(str(out)) if result.returncode == 0 else None), result


def shard_tables(out, manifest):
    """{split name: pyarrow Table of its NAME.parquet} (checksums verified through read_split first)."""
    for split in [*manifest.shards, manifest.test]:
        read_split(out, manifest, split)
    return {s.name: pq.read_table(os.path.join(out, f"{s.name}.parquet")) for s in [*manifest.shards, manifest.test]}


def test_split_codes_are_split_assignments_in_blocks():
    for seed, fraction, shards in ((0, 0.2, 2), (3, 0.5, 5), (7, 0.05, 1)):
        stream = split_assignments(seed, fraction, shards, block=1000)
        expected = [next(stream) for _ in range(3500)]
        codes = SplitCodes(seed, fraction, shards, block=1000)
        got = np.concatenate([codes.take(n) for n in (1, 999, 1, 1700, 799)])
        assert got.tolist() == expected


# ------------------------------------------------------------------------------ penguins


PENGUINS = os.path.join(os.path.dirname(__import__("palmerpenguins").__file__), "data", "penguins.csv")


def _penguin_rows():
    with open(PENGUINS, encoding="utf-8") as fh:
        header = fh.readline().strip().split(",")
        return header, [line.rstrip("\n").split(",") for line in fh]


def test_penguins_is_a_typed_table_with_training_statistics(tmp_path):
    header, rows = _penguin_rows()
    assert len(rows) == 344 and sum("NA" in r for r in rows) == 11
    out, manifest, result = copy(tmp_path, f"table:{PENGUINS}", "--label-column", "species", "--n-shards", 2, plot=True)
    assert manifest.task == "typed_table" and manifest.storage == "parquet"
    assert manifest.labels == ["Adelie", "Chinstrap", "Gentoo"]
    spec = TableSpec.from_json(manifest.input)
    types = {c.name: (c.type, c.dtype) for c in spec.columns}
    assert types == {
        "island": ("string", "string"),
        "bill_length_mm": ("float", "float32"),
        "bill_depth_mm": ("float", "float32"),
        "flipper_length_mm": ("integer", "float32"),  # integers with NA: float32 with NaN for the model
        "body_mass_g": ("integer", "float32"),
        "sex": ("string", "string"),
        "year": ("integer", "int64"),
    }
    tables = shard_tables(out, manifest)
    assert sum(t.num_rows for t in tables.values()) == 344
    # raw values kept: text as text, NA as null, integers as int64
    every = pa.concat_tables(tables.values())
    assert (
        every.schema.field("flipper_length_mm").type == pa.int64() and every.schema.field("island").type == pa.string()
    )
    assert every.column("sex").null_count == 11 and every.column("bill_length_mm").null_count == 2
    expected = collections.Counter(tuple(_value(v) for v in r[1:]) for r in rows)
    assert collections.Counter(tuple(_value(v) for v in row.values()) for row in every.to_pylist()) == expected
    # the statistics are the training shards', not the held-out split's
    train = pa.concat_tables([tables[s.name] for s in manifest.shards])
    for name in ("bill_length_mm", "body_mass_g", "year"):
        values = train.column(name).drop_null().to_numpy().astype(np.float64)
        column = spec.column(name)
        assert column.mean == pytest.approx(values.mean(), rel=1e-12)
        assert column.variance == pytest.approx(values.var(), rel=1e-9)
        assert (column.min, column.max) == (values.min(), values.max())
        assert column.missing == train.column(name).null_count
    everything = every.column("bill_length_mm").drop_null().to_numpy()
    assert spec.column("bill_length_mm").mean != pytest.approx(everything.mean(), rel=1e-9)
    sex = collections.Counter(train.column("sex").drop_null().to_pylist())
    assert dict(zip(spec.column("sex").vocabulary, spec.column("sex").counts)) == dict(sex)
    assert spec.column("sex").vocabulary == tuple(sorted(sex, key=lambda v: (-sex[v], v)))
    assert set(spec.column("island").vocabulary) == {"Biscoe", "Dream", "Torgersen"}
    stats = json.load(open(os.path.join(out, "stats.json")))
    assert stats["train"]["columns"] == manifest.input["columns"]
    assert stats["splits"]["test"]["columns"]["sex"]["missing"] == tables["test"].column("sex").null_count
    assert manifest.validation["passed"] and "missing_skew" in manifest.validation["checks"]
    assert "task typed_table, 7 features, 3 labels (Adelie, Chinstrap, Gentoo)" in result.stdout
    assert open(os.path.join(out, "stats.png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    # the trainer reads the shards through the contract: one [n, 1] input per column of its dtype
    x, y = read_split(out, manifest, manifest.shards[0])
    assert x["island"].dtype == object and x["flipper_length_mm"].dtype == np.float32 and x["year"].dtype == np.int64
    assert (
        np.isnan(x["flipper_length_mm"]).sum() == tables[manifest.shards[0].name].column("flipper_length_mm").null_count
    )
    assert len(y) == manifest.shards[0].examples and y.dtype == np.int64


def _value(v):
    """A cell as a comparable value: missing (NA, null) as None, numbers as floats, text as it is."""
    if v is None or v == "NA":
        return None
    try:
        return float(v)
    except ValueError:
        return v


def test_penguins_under_a_private_vocabulary_is_refused(tmp_path):
    _, _, result = copy(
        tmp_path,
        f"table:{PENGUINS}",
        "--label-column",
        "species",
        "--dp-vocab-epsilon",
        "1",
        "--dp-vocab-delta",
        "1e-5",
        check=False,
    )
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert "not for the text columns ['island', 'sex']" in result.stderr
    assert not os.path.exists(tmp_path / "data")


# ------------------------------------------------------------------------ types and overrides


def _mixed(tmp_path, rows=40):
    header = ["count", "price", "member", "city", "zip", "label"]
    data = [
        [
            i,
            f"{i * 1.5:.2f}" if i % 3 else str(i),
            "true" if i % 2 else "False",
            ["Oslo", "Lima"][i % 2],
            f"0{1000 + i}",
            i % 2,
        ]
        for i in range(rows)
    ]
    return write_csv(tmp_path / "mixed.csv", header, data)


def test_type_inference_and_overrides(tmp_path):
    path = _mixed(tmp_path)
    (tmp_path / "a").mkdir()
    out, manifest, _ = copy(tmp_path / "a", f"table:{path}")
    spec = TableSpec.from_json(manifest.input)
    assert [(c.name, c.type, c.dtype) for c in spec.columns] == [
        ("count", "integer", "int64"),
        ("price", "float", "float32"),  # "3" and "4.50" in one column: float
        ("member", "boolean", "int64"),
        ("city", "string", "string"),
        ("zip", "integer", "int64"),  # "01000" reads as the number 1000 ...
    ]
    every = pa.concat_tables(shard_tables(out, manifest).values())
    assert sorted(every.column("zip").to_pylist())[:2] == [1000, 1001]
    assert every.schema.field("member").type == pa.bool_() and sum(every.column("member").to_pylist()) == 20
    # ... unless it is a string: by --column-types, or by the --schema file
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"column_types": {"zip": "string"}}))
    for name, args in (("b", ("--column-types", "zip=string,count=float")), ("c", ("--schema", schema))):
        (tmp_path / name).mkdir()
        out, manifest, _ = copy(tmp_path / name, f"table:{path}", *args)
        spec = TableSpec.from_json(manifest.input)
        assert spec.column("zip").type == "string" and "01000" in spec.column("zip").vocabulary
        assert spec.column("count").type == ("float" if name == "b" else "integer")
    (tmp_path / "d").mkdir()
    _, _, refused = copy(
        tmp_path / "d", f"table:{path}", "--schema", schema, "--column-types", "zip=integer", check=False
    )
    assert (
        refused.returncode == 2
        and "column 'zip' is string in the --schema file but integer in --column-types" in refused.stderr
    )
    (tmp_path / "e").mkdir()
    _, _, refused = copy(tmp_path / "e", f"table:{path}", "--column-types", "weight=float", check=False)
    assert (
        refused.returncode == 2 and "--column-types names ['weight'], not among the feature columns" in refused.stderr
    )


def test_a_numeric_table_stays_the_table_task(tmp_path):
    rows = [[i, i * 0.5, "true" if i % 3 else "false", i % 2] for i in range(30)]
    path = write_csv(tmp_path / "n.csv", ["a", "b", "flag", "label"], rows)
    out, manifest, _ = copy(tmp_path, f"table:{path}")
    assert manifest.task == "table" and manifest.storage == "npy" and manifest.input["dtype"] == "float32"
    x = np.concatenate([read_split(out, manifest, s)[0] for s in [*manifest.shards, manifest.test]])
    assert x.shape == (30, 3) and sorted(x[:, 2].tolist()).count(1.0) == 20  # a boolean without holes: 0/1


def test_every_missing_spelling_in_csv(tmp_path):
    cells = ["", "NA", "NaN", "nan", "?", "1.5", "2.5", "3.5"] * 5
    rows = [[i, v, ["a", "NA", "b", ""][i % 4], i % 2] for i, v in enumerate(cells)]  # (i: no two rows alike)
    path = write_csv(tmp_path / "m.csv", ["i", "x", "s", "label"], rows)
    out, manifest, _ = copy(tmp_path, f"table:{path}", "--na-values", "NA,?")
    every = pa.concat_tables(shard_tables(out, manifest).values())
    assert every.column("x").null_count == 25 and every.column("s").null_count == 20
    assert sorted(every.column("x").drop_null().to_pylist()) == [1.5] * 5 + [2.5] * 5 + [3.5] * 5
    spec = TableSpec.from_json(manifest.input)
    assert spec.column("x").dtype == "float32" and set(spec.column("s").vocabulary) <= {"a", "b"}
    # a real category spelled NA: --na-values without it
    (tmp_path / "na").mkdir()
    out, manifest, _ = copy(tmp_path / "na", f"table:{path}", "--na-values", "?")
    every = pa.concat_tables(shard_tables(out, manifest).values())
    assert every.column("s").null_count == 10 and "NA" in TableSpec.from_json(manifest.input).column("s").vocabulary
    assert every.column("x").null_count == 20  # "NA" is a value now: x holds text
    assert TableSpec.from_json(manifest.input).column("x").type == "string"


def test_every_missing_spelling_in_parquet(tmp_path):
    n = 40
    table = pa.table(
        {
            "f": pa.array(
                [None if i % 8 == 0 else (math.nan if i % 8 == 1 else i / 4) for i in range(n)], pa.float64()
            ),
            "i": pa.array([None if i % 10 == 0 else i for i in range(n)], pa.int32()),
            "b": pa.array([None if i % 5 == 0 else bool(i % 2) for i in range(n)], pa.bool_()),
            "s": pa.array([[None, "", "NA", "x", "y"][i % 5] for i in range(n)], pa.string()),
            "d": pa.array(["u", "v"] * (n // 2)).dictionary_encode(),
            "label": [i % 2 for i in range(n)],
        }
    )
    pq.write_table(table, tmp_path / "m.parquet")
    out, manifest, _ = copy(tmp_path, f"table:{tmp_path / 'm.parquet'}")
    assert manifest.task == "typed_table"
    every = pa.concat_tables(shard_tables(out, manifest).values())
    assert [every.column(c).null_count for c in ("f", "i", "b", "s", "d")] == [10, 4, 8, 24, 0]
    assert every.schema.field("i").type == pa.int64() and every.schema.field("d").type == pa.string()
    spec = TableSpec.from_json(manifest.input)
    assert [(c.type, c.dtype) for c in spec.columns] == [
        ("float", "float32"),
        ("integer", "float32"),
        ("boolean", "float32"),
        ("string", "string"),
        ("string", "string"),
    ]
    assert set(spec.column("s").vocabulary) == {"x", "y"}


# ------------------------------------------------------------------------------ refusals


def test_every_bad_cell_is_reported_one_line_each(tmp_path):
    rows = [[str(i), "true", f"{i}.5", i % 2] for i in range(20)]
    for i, v in ((3, "abc"), (7, "4.5"), (9, "x"), (15, "y")):
        rows[i][0] = v
    rows[5][1] = "maybe"
    rows[11][2] = "inf"
    path = write_csv(tmp_path / "b.csv", ["age", "member", "size", "label"], rows)
    _, _, result = copy(tmp_path, f"table:{path}", "--column-types", "age=integer,member=boolean", check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith("error: ") and "6 cell(s) cannot be read" in lines[0]
    assert [line.strip() for line in lines[1:]] == [
        "column 'age' (integer, by --column-types): data row 4 has 'abc', not a whole number",
        "column 'age' (integer, by --column-types): data row 8 has '4.5', not a whole number",
        "column 'age' (integer, by --column-types): data row 10 has 'x', not a whole number",
        "column 'age' (integer, by --column-types): 1 more such cell(s)",
        "column 'member' (boolean, by --column-types): data row 6 has 'maybe', not a boolean "
        "(true/True/TRUE/false/False/FALSE/1/0)",
        "column 'size': data row 12 has 'inf', not a finite number (a missing value? name it in --na-values)",
    ]
    assert not os.path.exists(tmp_path / "data") and not [f for f in os.listdir(tmp_path) if f.startswith(".")]


def test_an_id_column_is_refused_naming_the_flag_that_fixes_it(tmp_path):
    rows = [[f"user-{i}", i % 7, i / 8, ["a", "b"][i % 2]] for i in range(60)]
    path = write_csv(tmp_path / "ids.csv", ["user", "visits", "spent", "label"], rows)
    _, _, result = copy(tmp_path, f"table:{path}", "--max-categories", "20", check=False)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert "column 'user' has more than 20 distinct values in the training rows" in result.stderr
    assert "--drop-columns user" in result.stderr and not os.path.exists(tmp_path / "data")
    out, manifest, _ = copy(tmp_path, f"table:{path}", "--max-categories", "20", "--drop-columns", "user")
    assert manifest.task == "table" and manifest.input["features"] == ["visits", "spent"]


def test_categories_below_the_minimum_count_are_out_of_vocabulary(tmp_path):
    rows = [[i, ["a", "a", "a", "b", "b", f"rare{i}"][i % 6], i % 2] for i in range(120)]
    path = write_csv(tmp_path / "c.csv", ["i", "kind", "label"], rows)
    out, manifest, _ = copy(tmp_path, f"table:{path}", "--min-category-count", "2")
    column = TableSpec.from_json(manifest.input).column("kind")
    assert column.vocabulary == ("a", "b")
    train = pa.concat_tables([shard_tables(out, manifest)[s.name] for s in manifest.shards]).column("kind").to_pylist()
    assert column.counts == (train.count("a"), train.count("b"))


# ------------------------------------------------------------------------------ typed checks


def _test_positions(rows, seed=0, fraction=0.2, shards=2):
    return set(np.flatnonzero(SplitCodes(seed, fraction, shards).take(rows) == -1).tolist())


def test_typed_checks_unseen_category_missing_skew_and_type_change(tmp_path):
    n = 400
    held_out = _test_positions(n)
    rows = []
    for i in range(n):
        city = "Atlantis" if i in held_out and i % 3 == 0 else ["Oslo", "Lima"][i % 2]
        weight = "NA" if i in held_out and i % 2 == 0 else f"{50 + i % 40}"
        size = str(i) if i < 300 else f"big{i}"
        rows.append([city, weight, size, i % 2])
    path = write_csv(tmp_path / "t.csv", ["city", "weight", "size", "label"], rows)
    _, _, refused = copy(tmp_path, f"table:{path}", check=False)
    assert refused.returncode == 2 and "missing_skew: 1 column split(s)" in refused.stderr
    assert "'weight' in test:" in refused.stderr and "--allow-missing-skew accepts it" in refused.stderr
    out, manifest, _ = copy(tmp_path, f"table:{path}", "--allow-missing-skew")
    checks = manifest.validation["checks"]
    atlantis = sum(1 for i in held_out if i % 3 == 0)
    assert checks["unseen_category"]["status"] == "warning"
    assert f"'city': 1 value(s), 'Atlantis' ({atlantis} rows)" in checks["unseen_category"]["message"]
    assert checks["unseen_category"]["columns"]["city"] == {"values": 1, "rows": atlantis}
    # size is text now, a distinct value a row: every held-out one is new
    assert checks["unseen_category"]["columns"]["size"] == {"values": len(held_out), "rows": len(held_out)}
    assert checks["missing_skew"]["status"] == "warning"
    assert checks["type_change"]["status"] == "warning" and checks["type_change"]["changes"] == [
        {"column": "size", "from": "number", "row": 301, "value": "big300"}
    ]
    assert TableSpec.from_json(manifest.input).column("size").type == "string"
    stats = json.load(open(os.path.join(out, "stats.json")))
    assert stats["splits"]["test"]["columns"]["city"]["unseen"] == 1


def test_typed_leakage_is_found_by_row_content(tmp_path):
    n = 200
    held_out = sorted(_test_positions(n))
    rows = [[f"{i * 0.25}", ["x", "y", "NA"][i % 3], i % 2] for i in range(n)]
    first_training = min(set(range(n)) - set(held_out))  # shard-00000's example 0
    rows[held_out[0]][:2] = rows[first_training][:2]  # the first held-out row: the same features
    path = write_csv(tmp_path / "l.csv", ["a", "s", "label"], rows)
    _, _, refused = copy(tmp_path, f"table:{path}", check=False)
    assert refused.returncode == 2 and "leakage: 1 training example(s)" in refused.stderr
    assert "shard-00000 example 0 = test example 0: row 0 of shard-00000.parquet" in refused.stderr


# ------------------------------------------------------------------------------ memory


def _write_big_csv(path, megabytes, seed=0):
    """A generated mixed table: a unique integer id (no two rows alike), a float column with 2 % missing,
    an integer, a float, a text column of 300 categories and one of 2, the label."""
    rng = np.random.default_rng(seed)
    pool = [
        f"{'' if rng.random() < 0.02 else f'{rng.normal():.6f}'},{rng.integers(0, 1000)},{rng.random():.3f},"
        f"city{rng.integers(0, 300):03d},{'xy'[rng.integers(0, 2)]},{rng.integers(0, 2)}"
        for _ in range(4999)
    ]
    with open(path, "w") as fh:
        fh.write("id,a,b,c,city,kind,label\n")
        start = 0
        while fh.tell() < megabytes << 20:
            fh.write("".join(f"{i},{pool[i % len(pool)]}\n" for i in range(start, start + 100_000)))
            start += 100_000
    return os.path.getsize(path), start


# docs/tables.md's bound: the interpreter and its libraries (~170 MB) with pyarrow's CSV blocks in flight
# (~12 of 2 MB, as text and as typed columns), and 16 bytes a row: the data validation's 8-byte row hash, and
# the copies the leakage check makes while it compares them (measured: 374 MB on 300 MB, 8.1 million rows)
BASE_MB, PER_ROW_BYTES = 350, 16


@pytest.mark.long
def test_copier_memory_is_a_batch_plus_bytes_per_row(tmp_path):
    size, rows = _write_big_csv(tmp_path / "big.csv", 300)
    cmd = [
        "/usr/bin/time",
        "-f",
        "%M",
        "-o",
        str(tmp_path / "rss"),
        os.path.join(BIN, "disttrain-copier"),
        "--source",
        f"table:{tmp_path / 'big.csv'}",
        "--out",
        str(tmp_path / "data"),
        "--no-stats-plot",
    ]
    subprocess.run(cmd, check=True, capture_output=True)
    peak_mb = int(open(tmp_path / "rss").read().split()[-1]) / 1024
    bound = BASE_MB + rows * PER_ROW_BYTES / 2**20
    assert peak_mb < bound, f"peak RSS {peak_mb:.0f} MB on {size / 2**20:.0f} MB ({rows} rows), bound {bound:.0f} MB"
    manifest = Manifest.read(str(tmp_path / "data"))
    assert manifest.task == "typed_table" and manifest.train_examples + manifest.test.examples == rows


def _timestamps(d):
    pq.write_table(
        pa.table({"when": pa.array(range(10), pa.timestamp("s")), "label": [i % 2 for i in range(10)]}), d / "t.parquet"
    )
    return [f"table:{d / 't.parquet'}"]


REFUSED = {
    # name: (make the source in dir d -> copier arguments, the one error line's expected text)
    "parquet timestamp column": (
        _timestamps,
        "column 'when' has Parquet type timestamp[ms], which a table column cannot",
    ),
    "column of missing values only": (
        lambda d: [f"table:{write_csv(d / 'e.csv', ['a', 'b', 'label'], [[i, 'NA', i % 2] for i in range(9)])}"],
        "column 'b' has no value in any row (every cell is missing): drop it with --drop-columns b",
    ),
    "unknown dropped column": (
        lambda d: [
            f"table:{write_csv(d / 'u.csv', ['a', 'label'], [[i, i % 2] for i in range(9)])}",
            "--drop-columns",
            "nope",
        ],
        "--drop-columns names ['nope'], not in the table; its columns are ['a', 'label']",
    ),
    "missing label": (
        lambda d: [f"table:{write_csv(d / 'l.csv', ['a', 'label'], [[1, 'x'], [2, 'NA'], [3, 'y'], [4, 'x']])}"],
        "the label column 'label': data row 2 has 'NA', a missing value: a row needs its label",
    ),
    "a number column with one word": (
        lambda d: [
            "table:" + write_csv(d / "w.csv", ["a", "label"], [["oops" if i == 49 else i, i % 2] for i in range(60)]),
            "--max-categories",
            "20",
        ],
        "(it holds numbers before data row 50, which has 'oops': --column-types a=float reports such cells instead)",
    ),
    "column types syntax": (
        lambda d: ["table:x.csv", "--column-types", "age"],
        "--column-types: 'age' is not NAME=TYPE",
    ),
    "column type unknown": (
        lambda d: ["table:x.csv", "--column-types", "age=text"],
        "--column-types: 'age=text': unknown type 'text'; one of float, integer, boolean, string",
    ),
    "na values of an npz": (
        lambda d: ["npz:x.npz", "--na-values", "?"],
        "--na-values applies to --source table:PATH only",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_tables_one_line_exit_2_nothing_published(tmp_path, case):
    make, message = REFUSED[case]
    source, *args = make(tmp_path)
    result = stage("copier", "--source", source, *args, "--out", tmp_path / "data", check=False)
    lines = [line for line in result.stderr.splitlines() if not line.startswith(("usage:", " "))]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert message in lines[0], result.stderr
    assert not os.path.exists(tmp_path / "data")


def test_penguins_as_parquet_is_the_same_typed_dataset(tmp_path):
    import pyarrow.csv as pacsv

    table = pacsv.read_csv(PENGUINS, convert_options=pacsv.ConvertOptions(null_values=["NA"], strings_can_be_null=True))
    pq.write_table(table, tmp_path / "penguins.parquet")
    results = []
    for fmt, path in (("csv", PENGUINS), ("parquet", tmp_path / "penguins.parquet")):
        (tmp_path / fmt).mkdir()
        out, manifest, _ = copy(tmp_path / fmt, f"table:{path}", "--label-column", "species")
        results.append((manifest.input, {n: t for n, t in shard_tables(out, manifest).items()}, manifest.labels))
    (csv_input, csv_tables, csv_labels), (pq_input, pq_tables, pq_labels) = results
    assert csv_input == pq_input and csv_labels == pq_labels
    assert all(csv_tables[n].equals(pq_tables[n]) for n in csv_tables)


def test_penguins_regression_target_and_a_missing_target(tmp_path):
    (tmp_path / "year").mkdir()
    out, manifest, _ = copy(tmp_path / "year", f"table:{PENGUINS}", "--label-column", "year", "--problem", "regression")
    assert manifest.task == "typed_table" and manifest.problem == "regression" and manifest.target == "year"
    assert TableSpec.from_json(manifest.input).column("species").vocabulary == ("Adelie", "Gentoo", "Chinstrap")
    train_y = np.concatenate([read_split(out, manifest, s)[1] for s in manifest.shards])
    assert train_y.dtype == np.float32 and manifest.target_statistics["mean"] == pytest.approx(train_y.mean())
    (tmp_path / "mass").mkdir()
    _, _, refused = copy(
        tmp_path / "mass", f"table:{PENGUINS}", "--label-column", "body_mass_g", "--problem", "regression", check=False
    )
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert [line.strip() for line in refused.stderr.splitlines()[1:]] == [
        "the target column 'body_mass_g': data row 4 has 'NA', a missing value: a row needs its label",
        "the target column 'body_mass_g': data row 272 has 'NA', a missing value: a row needs its label",
    ]
