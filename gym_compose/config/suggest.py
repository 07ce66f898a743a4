""""Did you mean" hints for misspelt names."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def close_matches(word: str, candidates: Iterable[str], limit: int = 3) -> list[str]:
    return difflib.get_close_matches(word, sorted(set(candidates)), n=limit, cutoff=0.6)


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """' (did you mean 'x' or 'y'?)', or '' when nothing is close."""
    matches = close_matches(word, candidates)
    if not matches:
        return ""
    return " (did you mean " + " or ".join(repr(m) for m in matches) + "?)"
