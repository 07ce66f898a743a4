from spans import merge, total_length


def test_overlapping():
    assert merge([(1, 4), (3, 6)]) == [(1, 6)]


def test_apart():
    assert merge([(1, 2), (5, 6)]) == [(1, 2), (5, 6)]


def test_total_length():
    assert total_length([(0, 10), (5, 15)]) == 15


def test_empty():
    assert merge([]) == []
