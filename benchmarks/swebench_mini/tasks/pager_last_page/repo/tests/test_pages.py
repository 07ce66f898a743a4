import pytest

from pager import page, page_count


def test_full_pages():
    assert page_count(20, 10) == 2


def test_first_page():
    assert page(list(range(25)), 1, 10) == list(range(10))


def test_bad_per_page():
    with pytest.raises(ValueError):
        page_count(5, 0)


def test_page_zero_is_refused():
    with pytest.raises(IndexError):
        page([1, 2, 3], 0, 2)
