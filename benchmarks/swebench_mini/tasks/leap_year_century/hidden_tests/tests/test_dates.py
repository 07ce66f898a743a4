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


@pytest.mark.parametrize("year", [1700, 1800, 1900, 2100])
def test_centuries_are_not_leap_years(year):
    assert not is_leap_year(year)
    assert days_in_month(year, 2) == 28


def test_every_fourth_century_is():
    assert is_leap_year(2000) and days_in_year(2000) == 366
