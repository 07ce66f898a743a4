from tinystats import mean, spread, summarize


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5


def test_spread():
    assert spread([4, -1, 7]) == 8


def test_summarize():
    assert summarize(iter([2, 4])) == {"count": 2, "mean": 3.0, "spread": 2}
