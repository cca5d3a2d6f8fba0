"""whole_number: the one reading of a version directory, a URL's version, a form field or a label as an integer."""

import pytest

from disttrain_contract.layout import job_completion_index, whole_number


@pytest.mark.parametrize("text, expected", [("0", 0), ("7", 7), ("0123", 123), ("1764000000", 1764000000)])
def test_ascii_digits_are_a_number(text, expected):
    assert whole_number(text) == expected


@pytest.mark.parametrize("text", ["", "-1", "+1", " 1", "1 ", "1\n", "1.0", "1e3", "³", "٣", "１", "x", None, 3])
def test_anything_else_is_not(text):
    """ "³" passes str.isdigit() and int() refuses it; "٣" and "１" int() reads as 3 and 1: none is a version."""
    assert whole_number(text) is None


@pytest.mark.parametrize("text, expected", [("-3", -3), ("12", 12), ("--3", None), ("-", None), ("-³", None)])
def test_a_signed_number_takes_one_minus(text, expected):
    assert whole_number(text, signed=True) == expected


@pytest.mark.parametrize("value, expected", [("2", 2), ("", 9), ("²", 9), ("-1", 9)])
def test_the_job_completion_index_falls_back_on_anything_but_digits(monkeypatch, value, expected):
    monkeypatch.setenv("JOB_COMPLETION_INDEX", value)
    assert job_completion_index(9) == expected
