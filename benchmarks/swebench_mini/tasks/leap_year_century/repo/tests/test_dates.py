import pytest

from almanac import days_in_month, days_in_year, is_leap_year


def test_ordinary_years():
    assert not is_leap_year(2023)
    assert is_leap_year(2024)


def test_february():
    assert days_in_month(2024, 2) == 29
    assert days_in_month(2023, 2) == 28


def test_bad_month():
    with pytest.raises(ValueError):
        days_in_month(2024, 13)


def test_days_in_year():
    assert days_in_year(2024) == 366
