from tinystats import mean, spread, summarize


def test_summarize_nothing():
    assert summarize([]) == {"count": 0, "mean": None, "spread": None}


def test_mean_of_nothing():
    assert mean([]) is None


def test_spread_of_nothing():
    assert spread([]) is None
