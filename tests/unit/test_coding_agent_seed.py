"""What the coding agent accepts from a resources server's /seed_session: a sandbox_descriptor (the
owner's serialize(), with its grant); a bare sandbox_handle or nothing is refused naming why."""

from __future__ import annotations

import asyncio

import pytest

from gym_compose.server.agents.coding_agent import CodingAgent, NoSandbox


def agent() -> CodingAgent:
    return CodingAgent(config={"name": "coder", "resources_server": {"type": "resources_servers", "name": "swe_rs"},
                               "model_server": {"type": "responses_api_models", "name": "m"}})


@pytest.mark.parametrize("seed, why", [
    ({"sandbox_handle": "sbx-1"}, "only a sandbox_handle"),
    ({}, "handed over no sandbox"),
    ({"sandbox_descriptor": {"provider": "gym_compose"}}, "handed over no sandbox"),
    (None, "handed over no sandbox"),
])
def test_a_seed_without_a_descriptor_is_refused_naming_the_server_and_why(seed, why):
    with pytest.raises(NoSandbox) as refused:
        asyncio.run(agent()._connect(seed))
    assert "swe_rs" in str(refused.value) and why in str(refused.value)


def test_a_descriptor_is_connected_to(monkeypatch):
    connected = []

    async def connect(descriptor):
        connected.append(descriptor)
        return "sandbox"

    from gym_compose.sandbox import AsyncSandbox
    monkeypatch.setattr(AsyncSandbox, "connect", staticmethod(connect))
    descriptor = {"sandbox_id": "sbx-1", "provider": "gym_compose", "grant": "g"}
    assert asyncio.run(agent()._connect({"sandbox_descriptor": descriptor, "sandbox_handle": "sbx-1"})) == "sandbox"
    assert connected == [descriptor]
