from pager import page, page_count


def test_partial_last_page_counts():
    assert page_count(25, 10) == 3


def test_partial_last_page_items():
    assert page(list(range(25)), 3, 10) == [20, 21, 22, 23, 24]
