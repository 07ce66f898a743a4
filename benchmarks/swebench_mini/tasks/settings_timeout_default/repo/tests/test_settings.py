import pytest

from netconf import parse_settings


def test_values_are_typed():
    assert parse_settings("retries = 5\nverbose = yes")["retries"] == 5


def test_booleans():
    assert parse_settings("verbose = on")["verbose"] is True


def test_comments_are_ignored():
    assert parse_settings("# nothing\nretries = 1  # one")["retries"] == 1


def test_bad_line():
    with pytest.raises(ValueError, match="line 2"):
        parse_settings("retries = 1\noops")
