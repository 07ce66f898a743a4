"""The agent's part of a rollout's `cost` block (docs/sandboxes.md#what-a-rollout-cost): the model
calls it made, the wall time it waited on them, and the wall time of each phase of the rollout
(the resources server's set-up, the episode, the verification)."""

from __future__ import annotations

import time
from typing import Any, Awaitable, TypeVar

from gym_compose.metrics.agent_metrics import COST_KEY

T = TypeVar("T")


class AgentLedger:
    def __init__(self) -> None:
        self.began = self._mark = time.monotonic()
        self.model_calls = 0
        self.model_wall_s = 0.0
        self.phases: dict[str, float] = {}

    async def model_call(self, call: Awaitable[T]) -> T:
        """Await one model call, counting it and its wall time (a failed call counts too)."""
        began = time.monotonic()
        try:
            return await call
        finally:
            self.model_calls += 1
            self.model_wall_s += time.monotonic() - began

    def phase_done(self, name: str) -> None:
        """The phase `name` ended now; it began where the previous one ended."""
        now = time.monotonic()
        self.phases[f"{name}_s"] = round(now - self._mark, 4)
        self._mark = now

    def block(self) -> dict[str, Any]:
        return {"model_calls": self.model_calls, "model_wall_s": round(self.model_wall_s, 4), **self.phases,
                "wall_s": round(time.monotonic() - self.began, 4)}


def with_agent_cost(verified: dict[str, Any], ledger: AgentLedger, always: bool = False) -> dict[str, Any]:
    """The verify response with the agent's figures added to its `cost` block. Without `always`, only
    where the resources server keeps a ledger (its response has a `cost` block): a NeMo Gym row
    from a server that keeps none stays as NeMo Gym writes it."""
    cost = verified.get(COST_KEY)
    if not isinstance(cost, dict):
        if not always:
            return verified
        cost = {}
    return {**verified, COST_KEY: {**cost, **ledger.block()}}
