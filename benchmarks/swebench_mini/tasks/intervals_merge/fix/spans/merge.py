"""Spans are (start, end) pairs with start <= end."""


def merge(spans):
    """The union of `spans` as sorted, non-overlapping spans (touching spans join)."""
    merged = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def total_length(spans):
    return sum(end - start for start, end in merge(spans))
