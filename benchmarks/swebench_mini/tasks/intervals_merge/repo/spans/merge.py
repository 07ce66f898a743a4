"""Spans are (start, end) pairs with start <= end."""


def merge(spans):
    """The union of `spans` as sorted, non-overlapping spans."""
    merged = []
    for start, end in spans:
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def total_length(spans):
    return sum(end - start for start, end in merge(spans))
