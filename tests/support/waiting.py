"""Waiting for something the code under test does in its own time (a background release, a file
written by another process): bounded, and failing with what was awaited."""

from __future__ import annotations

import time
from typing import Callable


def wait_for(predicate: Callable[[], object], what: str, timeout: float, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)
