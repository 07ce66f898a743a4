"""Summaries of numbers."""


def mean(values):
    return sum(values) / len(values)


def spread(values):
    return max(values) - min(values)


def summarize(values) -> dict:
    """count, mean and spread of `values`."""
    values = list(values)
    return {"count": len(values), "mean": mean(values), "spread": spread(values)}
