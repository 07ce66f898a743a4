"""A resources server gives back the sessions of a caller whose container restarted, including one
that a request of the dead start opens after the restart was seen (its seed was still running)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from fastapi import Request
from pydantic import Field

from gym_compose.net.incarnation import CALLER_HEADER
from gym_compose.server.resources import BaseResourcesServerConfig, BaseSeedSessionRequest, SimpleResourcesServer


class GatedSeeds(SimpleResourcesServer):
    """Each seed holds a "lease" until the test opens its gate; released leases are recorded."""

    session_state: dict[str, Any] = Field(default_factory=dict)
    gate: Any = None
    app: Any = None
    released: list = Field(default_factory=list)

    async def seed_session(self, request: Request, body: BaseSeedSessionRequest):
        if request.headers.get("x-wait") and self.gate is not None:
            await self.gate.wait()
        self.session_state[request.session["session_id"]] = f"lease of {request.headers[CALLER_HEADER]}"
        return {}

    async def release_session_value(self, value: Any) -> None:
        self.released.append(value)


async def seed(server: GatedSeeds, caller: str, wait: bool = False) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=server.app), base_url="http://res") as client:
        return await client.post("/seed_session", json={},
                                 headers={CALLER_HEADER: caller, **({"x-wait": "1"} if wait else {})})


async def until(condition) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


def test_a_session_opened_for_a_start_that_was_replaced_meanwhile_is_given_back_at_once():
    async def scenario():
        server = GatedSeeds(config=BaseResourcesServerConfig(name="res"), gate=asyncio.Event())
        server.app = server.setup_webserver()
        await seed(server, "agent@1")
        late = asyncio.ensure_future(seed(server, "agent@1", wait=True))  # the dead start's seed, still running
        await asyncio.sleep(0.05)
        await seed(server, "agent@2")  # the restarted agent's first call: agent@1's sessions go
        await until(lambda: server.released == ["lease of agent@1"])
        server.gate.set()
        assert (await late).status_code == 200
        await until(lambda: server.released == ["lease of agent@1"] * 2)
        assert sorted(server.session_state.values()) == ["lease of agent@2"]

    asyncio.run(scenario())
