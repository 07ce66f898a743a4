"""The mock model's call gate: generation calls held once a budget is spent, until the caller says.

For tests that must land a fault in the middle of a run whatever the machine's speed: with
`hold_after_calls: N` the mock answers N generation calls, then holds every further one. A
run of more than N / (calls per rollout) rollouts therefore cannot finish until the test opens
the gate (`POST /mock/gate`), so a server killed or a CLI stopped while calls are held is killed
mid-run by construction, not because the machine happened to be slow enough.

`POST /mock/gate {"passes": M}` releases every call held now and lets M more through before
holding again; `{"passes": null}` opens the gate for good. Both, and `GET /mock/gate`, answer
`{"held": calls waiting now, "passes_left": M or null}`.
"""

from __future__ import annotations

import asyncio
from typing import Optional

from starlette.requests import Request

from gym_compose.net.web import json_response, read_json_object

GATE_PATH = "/mock/gate"


class CallGate:
    def __init__(self, passes: Optional[int]):
        self.passes = passes  # None: open
        self.held = 0
        self._released: Optional[asyncio.Event] = None  # set when the calls held now may go

    async def through(self) -> None:
        """Return at once while passes are left (spending one), else when the gate next opens."""
        if self.passes is None:
            return
        if self.passes > 0:
            self.passes -= 1
            return
        if self._released is None:
            self._released = asyncio.Event()
        released = self._released
        self.held += 1
        try:
            await released.wait()
        finally:
            if not released.is_set():  # given up (its caller went away), not released
                self.held -= 1

    def reset(self, passes: Optional[int]) -> None:
        """Release the calls held now; then `passes` more go through (None: all of them)."""
        if self._released is not None:
            self._released.set()
            self._released = None
        self.held = 0
        self.passes = passes

    def state(self) -> dict[str, Optional[int]]:
        return {"held": self.held, "passes_left": self.passes}

    async def route(self, request: Request):
        if request.method == "POST":
            body = await read_json_object(request)
            passes = body.get("passes")
            if passes is not None and (isinstance(passes, bool) or not isinstance(passes, int) or passes < 0):
                return json_response({"detail": "passes must be a whole number (0 or more) or null"}, 422)
            self.reset(passes)
        return json_response(self.state())
