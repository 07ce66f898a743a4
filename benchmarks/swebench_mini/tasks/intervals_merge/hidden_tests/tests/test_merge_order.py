from spans import merge, total_length


def test_unsorted_input():
    assert merge([(5, 8), (1, 3), (2, 6)]) == [(1, 8)]


def test_touching_spans_join():
    assert merge([(1, 2), (2, 3)]) == [(1, 3)]


def test_total_length_unsorted():
    assert total_length([(10, 20), (0, 15)]) == 20
