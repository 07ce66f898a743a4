"""How long a request may still take, handed down every hop so the innermost wait gives up first.

The collector sends `x-gym-time-left: SECONDS` with each /run. A server that gets it gives each
call to a peer at most that long, less a margin, and sends the smaller figure on. So when the
model hangs, the agent's call to the model times out first and the failure names the model; the
environment server and the collector, which wait longer, get that error instead of timing out
themselves and blaming the server in front of them.
"""

from __future__ import annotations

import contextvars
import time
from typing import Optional

from gym_compose.contract import TIME_LEFT_HEADER
from gym_compose.net.web import scope_header

_RAW_HEADER = TIME_LEFT_HEADER.encode()
MIN_MARGIN_SECONDS = 2.0
MARGIN_FRACTION = 0.02

_deadline: contextvars.ContextVar[Optional[float]] = contextvars.ContextVar("gym_time_deadline", default=None)


def adopt_from_scope(scope) -> None:
    """Start this request's budget from its header (ASGI scope); no header, no budget."""
    value = scope_header(scope, _RAW_HEADER)
    if value is None:
        return
    try:
        seconds = float(value)
    except ValueError:
        return
    if seconds > 0:
        _deadline.set(time.monotonic() + seconds)


def margin(seconds: float) -> float:
    return max(MIN_MARGIN_SECONDS, MARGIN_FRACTION * seconds)


def call_timeout(configured: float) -> float:
    """The timeout of one call to a peer: the configured one, cut to what this request has left
    less a margin (so our caller, who waits a little longer, hears our error first)."""
    deadline = _deadline.get()
    if deadline is None:
        return configured
    left = deadline - time.monotonic()
    inner = left - margin(left)
    if inner < MIN_MARGIN_SECONDS:
        inner = max(left / 2, 0.05)
    return min(configured, inner)
