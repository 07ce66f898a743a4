"""Summaries of numbers."""


def mean(values):
    if not values:
        return None
    return sum(values) / len(values)


def spread(values):
    if not values:
        return None
    return max(values) - min(values)


def summarize(values) -> dict:
    """count, mean and spread of `values` (mean and spread are None when there are none)."""
    values = list(values)
    return {"count": len(values), "mean": mean(values), "spread": spread(values)}
