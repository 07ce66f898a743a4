"""Which of the collector's rollouts a request serves, handed down every hop like the time budget.

The collector sends `x-gym-rollout: RUN/TASK/ROLLOUT` with each /run (contract.ROLLOUT_HEADER;
RUN is the run folder's id, kept across `--resume`). A server that gets it sends it on with its
own calls to peers, so the agent that works the rollout knows it: its checkpoints are filed under
it (server/agents/checkpoints.py). Requests without it (NeMo Gym's own servers, a trainer's client,
`gym-compose eval` of one row) serve no named rollout.
"""

from __future__ import annotations

import contextvars
from typing import Optional

from gym_compose.contract import ROLLOUT_HEADER
from gym_compose.net.web import scope_header

_RAW_HEADER = ROLLOUT_HEADER.encode()
MAX_LENGTH = 200

_rollout: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar("gym_rollout", default=None)


def adopt_from_scope(scope) -> None:
    """This request's rollout from its header (ASGI scope); no header (or a malformed one), none."""
    value = scope_header(scope, _RAW_HEADER)
    text = value.decode("ascii", "replace") if value is not None else ""
    if 0 < len(text) <= MAX_LENGTH and text.isprintable():
        _rollout.set(text)


def current_rollout() -> Optional[str]:
    return _rollout.get()


def rollout_headers() -> dict[str, str]:
    rollout = _rollout.get()
    return {ROLLOUT_HEADER: rollout} if rollout else {}
