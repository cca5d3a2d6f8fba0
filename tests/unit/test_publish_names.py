"""disttrain_aggregator.publish's pure parts: the --publish-to URL, and the order a SavedModel's files
are written in (saved_model.pb last: a directory is a SavedModel to TensorFlow only once it has one)."""

import argparse

import pytest

from disttrain_aggregator.publish import parse_url, saved_model_order


@pytest.mark.parametrize(
    "text, url",
    [
        ("s3://models/digits/", "s3://models/digits"),
        ("s3://models", "s3://models"),
        ("s3://models/", "s3://models"),
        ("s3://b/a/b/c", "s3://b/a/b/c"),
    ],
)
def test_a_url_is_kept_without_its_trailing_slash(text, url):
    assert parse_url(text) == url


@pytest.mark.parametrize(
    "text, why",
    [
        ("/local/dir", "is not an s3:// URL"),
        ("gs://b/k", "is not an s3:// URL"),
        ("s3:///key", "names no bucket"),
        ("s3://b/a//c", "an empty, '.' or '..' part"),
        ("s3://b/a/../c", "an empty, '.' or '..' part"),
    ],
)
def test_a_bad_url_is_refused(text, why):
    with pytest.raises(argparse.ArgumentTypeError, match=why.replace(".", r"\.").replace("(", r"\(")):
        parse_url(text)


def test_saved_model_pb_is_written_last_and_the_rest_in_key_order():
    files = [
        "variables/variables.index",
        "saved_model.pb",
        "assets/vocab.txt",
        "fingerprint.pb",
        "variables/variables.data-00000-of-00001",
    ]
    assert saved_model_order(files) == [
        "assets/vocab.txt",
        "fingerprint.pb",
        "variables/variables.data-00000-of-00001",
        "variables/variables.index",
        "saved_model.pb",
    ]
    assert saved_model_order(["a"]) == ["a"]
