"""Data validation in the copier (issue 18 point 1): statistics, and each check on small data;
through the real CLI: leakage refused (exit 2, the previous dataset untouched) or accepted with a warning."""

import csv
import itertools
import json
import os

import numpy as np
import pytest

from disttrain_contract import ContractError
from disttrain_contract.manifest import Manifest, iter_split_text, tokenize
from disttrain_copier.main import split_assignments
from disttrain_copier.validation import TEST, Validator, read_schema, tv_distance
from stages import stage

TEXT = {"kind": "text"}
IMAGE = {"kind": "image", "height": 2, "width": 2, "channels": 1}
SHARDS = ["shard-00000", "shard-00001"]


def text_validator(rows, labels=("neg", "pos"), **options):
    """A Validator fed (split, text, label) rows, as the copier feeds it."""
    validator = Validator("text", list(labels), TEXT, SHARDS, **options)
    for name, text, label in rows:
        validator.add(name, text, label, tokenize(text))
    return validator


def balanced(n=8):
    """n distinct texts per split, both labels in each."""
    return [(name, f"{name} text number {i}", i % 2) for name in SHARDS + [TEST] for i in range(n)]


# --------------------------------------------------------------------------- statistics


def test_text_statistics_count_labels_lengths_and_empty_inputs(tmp_path):
    rows = [
        ("shard-00000", "one two three", 0),
        ("shard-00000", "one", 1),
        ("shard-00000", "!!!", 1),
        ("shard-00000", "one", 1),
        ("shard-00001", "a b", 0),
        ("shard-00001", "c d e f", 1),
        (TEST, "x y", 0),
        (TEST, "z", 1),
    ]
    stats = text_validator(rows).finish(str(tmp_path), "jsonl")
    shard = stats["splits"]["shard-00000"]
    assert shard["examples"] == 4 and shard["label_counts"] == {"neg": 1, "pos": 3}
    assert shard["empty_inputs"] == 1  # "!!!" has no token once punctuation is stripped
    assert shard["repeated_inputs"] == 1  # "one" twice
    lengths = shard["text_length_tokens"]  # [3, 1, 0, 1]
    assert (lengths["min"], lengths["p50"], lengths["max"], lengths["mean"]) == (0, 1, 3, 1.25)
    assert stats["train"] == {"examples": 6, "label_counts": {"neg": 2, "pos": 4}}
    assert stats["label_skew"]["distance"]["shard-00001"] == pytest.approx(
        abs(0.5 - 2 / 6), abs=1e-6
    )  # rounded to 6 places
    assert stats["validation"]["passed"] and stats["validation"]["warnings"] == []


def test_image_statistics_pixel_mean_std_and_constant_inputs(tmp_path):
    validator = Validator("image", ["a", "b"], IMAGE, SHARDS)
    images = {
        "shard-00000": [np.full((2, 2, 1), 10, np.uint8), np.array([0, 0, 200, 200], np.uint8).reshape(2, 2, 1)],
        "shard-00001": [np.array([0, 50, 100, 150], np.uint8).reshape(2, 2, 1), np.full((2, 2, 1), 7, np.uint8)],
        TEST: [np.array([1, 2, 3, 4], np.uint8).reshape(2, 2, 1), np.array([5, 6, 7, 8], np.uint8).reshape(2, 2, 1)],
    }
    for name, xs in images.items():
        for label, x in enumerate(xs):
            validator.add(name, x, label)
    stats = validator.finish(str(tmp_path), "npy")
    first = stats["splits"]["shard-00000"]
    pixels = np.array([10, 10, 10, 10, 0, 0, 200, 200], np.float64)
    assert first["pixel_mean"] == pytest.approx(pixels.mean()) and first["pixel_std"] == pytest.approx(pixels.std())
    assert first["constant_inputs"] == 1 and stats["splits"][TEST]["constant_inputs"] == 0
    assert list(validator.values()["shard-00000"]) == [10.0, 100.0]  # per-image means, for the plot


def test_tv_distance():
    assert tv_distance([5, 5], [50, 50]) == 0
    assert tv_distance([10, 0], [5, 5]) == pytest.approx(0.5)
    assert tv_distance([1, 0, 0], [0, 0, 1]) == 1
    assert tv_distance([7, 3], [5, 5]) == pytest.approx(0.2)


# ------------------------------------------------------------------------------- checks


def test_leakage_is_refused_with_count_and_example_or_accepted_as_a_warning(tmp_path):
    rows = balanced() + [("shard-00001", f"{TEST} text number 3", 1), ("shard-00000", f"{TEST} text number 5", 1)]
    with open(tmp_path / "shard-00000.jsonl", "w") as fh:  # the example is quoted from the split as written
        fh.writelines(
            json.dumps({"text": text, "label": label}) + "\n" for name, text, label in rows if name == "shard-00000"
        )
    with pytest.raises(ContractError) as refused:
        text_validator(rows).finish(str(tmp_path), "jsonl")
    message = str(refused.value)
    assert "leakage: 2 training example(s)" in message and "--allow-duplicates" in message
    assert 'shard-00000 example 8 = test example 5: "test text number 5"' in message
    stats = text_validator(rows, allow_duplicates=True).finish(str(tmp_path), "jsonl")
    leakage = stats["validation"]["checks"]["leakage"]
    assert leakage["status"] == "warning" and leakage["duplicates"] == 2
    assert leakage["per_shard"] == {"shard-00000": 1, "shard-00001": 1}
    assert stats["validation"]["passed"] and len(stats["validation"]["warnings"]) == 1


def test_duplicates_within_one_split_are_not_leakage(tmp_path):
    rows = balanced() + [("shard-00000", "shard-00001 text number 2", 0), (TEST, "test text number 1", 1)]
    stats = text_validator(rows).finish(str(tmp_path), "jsonl")
    assert stats["validation"]["checks"]["leakage"]["status"] == "passed"
    assert stats["splits"][TEST]["repeated_inputs"] == 1


def test_label_skew_beyond_the_limit(tmp_path):
    # shard 0: 8 neg 2 pos; shard 1: 2 neg 8 pos; training 50/50: each shard 0.3 away
    rows = [("shard-00000", f"a{i}", int(i >= 8)) for i in range(10)] + [
        ("shard-00001", f"b{i}", int(i >= 2)) for i in range(10)
    ]
    rows += [(TEST, "t0", 0), (TEST, "t1", 1)]
    with pytest.raises(
        ContractError, match=r"label_skew: 2 shard\(s\) .* --max-label-skew 0.2 .* worst shard-00000: 0.300"
    ):
        text_validator(rows).finish(str(tmp_path), "jsonl")
    assert text_validator(rows, max_label_skew=0.3).finish(str(tmp_path), "jsonl")["validation"]["warnings"] == []
    stats = text_validator(rows, allow_label_skew=True).finish(str(tmp_path), "jsonl")
    skew = stats["validation"]["checks"]["label_skew"]
    assert skew["status"] == "warning" and skew["max_distance"] == pytest.approx(0.3)


def test_a_class_missing_from_a_shard_or_the_held_out_split(tmp_path):
    rows = [(name, f"{name} {i}", i % 3) for name in SHARDS for i in range(9)] + [(TEST, "t0", 0), (TEST, "t1", 1)]
    labels = ("a", "b", "c")
    with pytest.raises(
        ContractError, match=r"missing_class: 1 split\(s\) lack a class: test has no example of class 'c'"
    ):
        text_validator(rows, labels, allow_label_skew=True).finish(str(tmp_path), "jsonl")
    rows = [r for r in rows if not (r[0] == "shard-00001" and r[2] == 1)] + [(TEST, "t2", 2)]
    with pytest.raises(ContractError, match="shard-00001 has no example of class 'b'"):
        text_validator(rows, labels, allow_label_skew=True).finish(str(tmp_path), "jsonl")
    stats = text_validator(rows, labels, allow_label_skew=True, allow_missing_classes=True).finish(
        str(tmp_path), "jsonl"
    )
    assert stats["validation"]["checks"]["missing_class"] == {
        "status": "warning",
        "missing": {"shard-00001": ["b"]},
        "message": "1 split(s) lack a class: shard-00001 has no example of class 'b' (accepted by --allow-missing-classes)",
    }


def test_faces_skip_the_label_checks(tmp_path):
    validator = Validator("faces", ["p0", "p1", "p2"], IMAGE, SHARDS)
    for name, label in (("shard-00000", 0), ("shard-00001", 1), (TEST, 2)):  # every person in one split only
        validator.add(name, np.full((2, 2, 1), label * 40 + 1, np.uint8) + np.eye(2, dtype=np.uint8)[..., None], label)
    checks = validator.finish(str(tmp_path), "npy")["validation"]["checks"]
    assert {k: v["status"] for k, v in checks.items()} == {
        "leakage": "passed",
        "label_skew": "skipped",
        "missing_class": "skipped",
        "schema": "skipped",
    }


def test_schema_violations(tmp_path):
    def check(schema, rows=None, kind="text"):
        path = tmp_path / "schema.json"
        path.write_text(json.dumps(schema))
        validator = text_validator(rows or balanced(), schema=read_schema(str(path)))
        return validator.finish(str(tmp_path), "jsonl")

    ok = check(
        {"labels": ["neg", "pos"], "input": {"kind": "text", "dtype": "str"}, "text_length": {"min": 1, "max": 4}}
    )
    assert ok["validation"]["checks"]["schema"]["status"] == "passed"
    with pytest.raises(
        ContractError,
        match=r"labels \['neg', 'pos'\] are not the schema's \['neg', 'pos', 'mixed'\] \(not in the data: \['mixed'\]\)",
    ):
        check({"labels": ["neg", "pos", "mixed"]})
    with pytest.raises(ContractError, match="the inputs are text, the schema expects image"):
        check({"input": {"kind": "image", "shape": [2, 2, 1]}})
    with open(tmp_path / "shard-00000.jsonl", "w") as fh:
        fh.write(json.dumps({"text": "shard-00000 text number 0", "label": 0}) + "\n")
    with pytest.raises(
        ContractError,
        match=r"24 input\(s\) outside the schema's text length 0..3 tokens, e.g. shard-00000 example 0 has 4 tokens",
    ):
        check({"text_length": {"max": 3}})


def test_schema_for_images_shape_and_dtype(tmp_path):
    path = tmp_path / "schema.json"
    path.write_text(json.dumps({"input": {"kind": "image", "shape": [8, 8, 1], "dtype": "uint8"}}))
    validator = Validator("image", ["a", "b"], IMAGE, SHARDS, source_dtype="float32", schema=read_schema(str(path)))
    for i, (name, label) in enumerate(itertools.product(SHARDS + [TEST], (0, 1))):
        validator.add(name, np.arange(4, dtype=np.uint8).reshape(2, 2, 1) + 10 * i, label)
    with pytest.raises(ContractError) as refused:
        validator.finish(str(tmp_path), "npy")
    assert "input shape [2, 2, 1] is not the schema's [8, 8, 1]" in str(refused.value)
    assert "input dtype float32 is not the schema's uint8" in str(refused.value)


@pytest.mark.parametrize(
    "content, message",
    [
        ("[1, 2]", "must be a JSON object"),
        ('{"label": ["a"]}', "unknown key(s) ['label']"),
        ('{"labels": "a,b"}', '"labels" must be a list of strings'),
        ('{"input": {"kind": "audio"}}', '"input" must be'),
        ('{"input": {"kind": "image", "shape": [8, 8]}}', '"shape" must be [H, W, C]'),
        ('{"text_length": {"min": 5, "max": 2}}', "min 5 is above max 2"),
        ("{not json", "is unreadable"),
    ],
)
def test_a_malformed_schema_is_refused(tmp_path, content, message):
    (tmp_path / "s.json").write_text(content)
    with pytest.raises(ContractError) as refused:
        read_schema(str(tmp_path / "s.json"))
    assert message in str(refused.value)


def test_the_cli_refuses_a_bad_schema_before_reading_data(tmp_path):
    (tmp_path / "s.json").write_text('{"labels": ["0", "1"], "colour": true}')
    result = stage(
        "copier", "--source", "sample:digits", "--schema", tmp_path / "s.json", "--out", tmp_path / "data", check=False
    )
    assert result.returncode == 2 and "unknown key(s) ['colour']" in result.stderr and "Traceback" not in result.stderr
    assert '"text_length": {"min": 1, "max": 400}' in result.stderr  # the format is shown
    assert not os.path.exists(tmp_path / "data")
    # a schema the digits violate: refused after reading, nothing published
    (tmp_path / "s.json").write_text('{"labels": ["0", "1"], "input": {"kind": "image", "shape": [8, 8, 3]}}')
    result = stage(
        "copier", "--source", "sample:digits", "--schema", tmp_path / "s.json", "--out", tmp_path / "data", check=False
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (
        "schema: the data violates --schema: labels ['0', '1', '2', '3', '4', '5', '6', '7', '8', '9'] are not the schema's ['0', '1']"
        in result.stderr
    )
    assert "input shape [8, 8, 1] is not the schema's [8, 8, 3]" in result.stderr
    assert not os.path.exists(tmp_path / "data")


# ------------------------------------------------------------------- the real CLI, end to end


def leaky_csv(path, n=2000, seed=0, test_fraction=0.2, share=0.01):
    """n distinct reviews, then 1% of the held-out ones copied again at positions the copier deals to
    a shard (the split depends only on seed and position, as split_assignments documents).
    Returns (rows of the clean prefix, the duplicated texts)."""
    rows = [
        (f"review {i}: {'a fine' if i % 2 else 'a dull'} film, scene {i * 7 % 13}", "pos" if i % 2 else "neg")
        for i in range(n)
    ]
    where = split_assignments(seed, test_fraction, 2)
    held_out = [row for row, dest in zip(rows, where) if dest < 0]
    copies = held_out[:: int(1 / share)][: round(len(held_out) * share)]
    extra, pending, i = [], list(copies), n
    while pending:  # `where` continues at position n
        extra.append(pending.pop(0) if next(where) >= 0 else (f"filler {i}", "pos" if i % 2 else "neg"))
        i += 1
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["text", "label"])
        writer.writerows(rows + extra)
    return held_out, [text for text, _ in copies]


def test_one_percent_of_held_out_duplicated_into_training_is_refused_then_accepted(tmp_path):
    """The issue's goal, through the real CLI: refused with the count and an example (exit 2; the
    dataset published before is left byte for byte); with --allow-duplicates published with a warning."""
    clean = tmp_path / "clean.csv"
    with open(clean, "w", newline="") as fh:
        csv.writer(fh).writerows([("text", "label")] + [(f"clean {i}", i % 2) for i in range(300)])
    work = tmp_path / "work"
    stage("copier", "--source", f"csv:{clean}", "--workdir", work)
    before = {f: open(work / "data" / f, "rb").read() for f in sorted(os.listdir(work / "data"))}

    held_out, copies = leaky_csv(tmp_path / "leaky.csv")
    assert len(copies) == round(len(held_out) / 100) > 0
    refused = stage("copier", "--source", f"csv:{tmp_path / 'leaky.csv'}", "--workdir", work, check=False)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert (
        f"error: data validation failed, nothing published:\n  leakage: {len(copies)} training example(s)"
        in refused.stderr
    )
    quoted = refused.stderr.split("test example ", 1)[1].split(": ", 1)[1].split(";", 1)[0]
    assert json.loads(quoted) in copies
    after = {f: open(work / "data" / f, "rb").read() for f in sorted(os.listdir(work / "data"))}
    assert after == before and not [f for f in os.listdir(work) if f.startswith(".")]

    accepted = stage("copier", "--source", f"csv:{tmp_path / 'leaky.csv'}", "--workdir", work, "--allow-duplicates")
    assert f"copier: warning: leakage: {len(copies)} training example(s)" in accepted.stderr
    assert "(accepted by --allow-duplicates)" in accepted.stderr
    data = work / "data"
    manifest = Manifest.read(str(data))
    validation = manifest.validation
    assert validation["passed"] and validation["checks"]["leakage"]["duplicates"] == len(copies)
    assert (
        validation["warnings"] == [w for w in validation["warnings"] if w.startswith("leakage:")]
        and validation["warnings"]
    )
    stats = json.load(open(data / "stats.json"))
    assert stats["validation"] == {k: v for k, v in validation.items() if k not in ("stats", "plot", "stats_sha256")}
    assert sum(s["examples"] for s in stats["splits"].values()) == sum(1 for _ in open(tmp_path / "leaky.csv")) - 1
    assert open(data / "stats.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    training = {text for s in manifest.shards for text, _ in iter_split_text(str(data / f"{s.name}.jsonl"))}
    assert set(copies) <= training  # the copies did land in training, as built


def test_label_skew_and_missing_class_through_the_cli(tmp_path):
    """A CSV sorted by label with 3 shards: round-robin dealing keeps shards balanced, so skew needs a
    shard-sized block of one class; here the third class is too rare to reach every split."""
    rows = [(f"t{i}", "a" if i % 2 else "b") for i in range(400)] + [("rare one", "c")]
    path = tmp_path / "rare.csv"
    with open(path, "w", newline="") as fh:
        csv.writer(fh).writerows([("text", "label")] + rows)
    refused = stage("copier", "--source", f"csv:{path}", "--n-shards", 3, "--out", tmp_path / "data", check=False)
    assert refused.returncode == 2 and "missing_class: 3 split(s) lack a class" in refused.stderr
    assert not os.path.exists(tmp_path / "data")
    accepted = stage(
        "copier", "--source", f"csv:{path}", "--n-shards", 3, "--out", tmp_path / "data", "--allow-missing-classes"
    )
    assert "copier: warning: missing_class: 3 split(s) lack a class" in accepted.stderr
    assert Manifest.read(str(tmp_path / "data")).validation["checks"]["missing_class"]["status"] == "warning"


def test_the_aggregator_summarises_the_copiers_statistics(tmp_path):
    """report.json's "data": the validation result and each split's figures, from the real copier's
    stats.json (checked against the manifest's sha256)."""
    from disttrain_aggregator.data_summary import data_summary
    from disttrain_copier.main import copy, parse_args

    out = str(tmp_path / "data")
    copy(parse_args(["--source", "sample:digits", "--n-shards", "2", "--out", out, "--no-stats-plot"]))
    manifest = Manifest.read(out)
    summary = data_summary(out, manifest)
    stats = json.load(open(os.path.join(out, "stats.json")))
    assert summary["passed"] and summary["warnings"] == [] and summary["plot"] is None
    assert summary["checks"] == {
        "leakage": "passed",
        "label_skew": "passed",
        "missing_class": "passed",
        "schema": "skipped",
    }
    assert summary["splits"]["test"]["examples"] == manifest.test.examples
    assert summary["splits"]["shard-00001"]["pixel_mean"] == stats["splits"]["shard-00001"]["pixel_mean"]
    assert summary["label_skew"] == stats["label_skew"]["distance"] and summary["leaked_duplicates"] == 0
    manifest.validation = None  # a dataset copied before issue 18
    assert data_summary(out, manifest) is None
    with open(os.path.join(out, "stats.json"), "a") as fh:
        fh.write(" ")
    with pytest.raises(ContractError, match="stats.json does not match the dataset manifest's sha256"):
        data_summary(out, Manifest.read(out))
