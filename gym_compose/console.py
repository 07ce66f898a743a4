"""What the host-side commands tell the user on stderr (stdout carries results only)."""

from __future__ import annotations

import sys


def say(message: str) -> None:
    """A line on stderr; a terminal that went away (SIGHUP) must not stop a clean-up half-way."""
    try:
        print(message, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
