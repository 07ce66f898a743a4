"""The agent's part of a rollout's cost block: model calls, the wall time waited on them, the phases."""

from __future__ import annotations

import asyncio

import pytest

from gym_compose.net.http_client import HttpResponse
from gym_compose.server.agents.agent_cost import AgentLedger, with_agent_cost
from gym_compose.server.agents.simple_agent import SimpleAgent, SimpleAgentConfig

ROW = {"responses_create_params": {"input": "count twice"}}
MODEL_DELAY_S = 0.05
CALL = {"type": "function_call", "name": "step", "call_id": "c1", "arguments": "{}"}
ANSWER = {"type": "message", "role": "assistant", "content": "done"}


class Peers:
    """A model that calls one tool and then answers, each after MODEL_DELAY_S; a verifier with or
    without a ledger of its own."""

    def __init__(self, verify_cost: dict | None):
        self.global_config: dict = {}
        self.verify_cost = verify_cost
        self.model_turns = 0

    async def post_json(self, server, path, **kwargs):
        if path == "/v1/responses":
            self.model_turns += 1
            await asyncio.sleep(MODEL_DELAY_S)
            return {"output": [CALL if self.model_turns == 1 else ANSWER]}, HttpResponse(200, [], b"")
        if path == "/verify":
            verified = {"reward": 1.0, **({"cost": self.verify_cost} if self.verify_cost is not None else {})}
            return verified, HttpResponse(200, [], b"")
        return {}, HttpResponse(200, [], b"{}")

    async def post(self, server, path, **kwargs):
        return HttpResponse(200, [], b'{"ok": true}')


def run(peers: Peers) -> dict:
    agent = SimpleAgent(config=SimpleAgentConfig(name="agent", resources_server={"name": "res"},
                                                 model_server={"name": "policy_model"}), server_client=peers)
    return asyncio.run(agent.run(dict(ROW), {}))


def test_a_ledger_keeping_server_gets_the_agents_model_calls_and_phases_added():
    row = run(Peers(verify_cost={"sandbox_leased_s": 1.5, "sandbox_commands": 1}))
    cost = row["cost"]
    assert cost["sandbox_leased_s"] == 1.5 and cost["sandbox_commands"] == 1  # the server's figures kept
    assert cost["model_calls"] == 2
    assert cost["model_wall_s"] >= 2 * MODEL_DELAY_S
    assert set(cost) >= {"seed_s", "episode_s", "verify_s", "wall_s"}
    assert cost["episode_s"] >= cost["model_wall_s"] - 0.001  # the model's waits are inside the episode
    assert cost["wall_s"] >= cost["seed_s"] + cost["episode_s"] + cost["verify_s"] - 0.001


def test_a_row_from_a_server_without_a_ledger_stays_as_nemo_gym_writes_it():
    row = run(Peers(verify_cost=None))
    assert "cost" not in row and row["reward"] == 1.0


def test_a_failed_model_call_is_counted_and_always_makes_a_block():
    ledger = AgentLedger()

    async def refused():
        raise ConnectionError("model gone")

    with pytest.raises(ConnectionError):
        asyncio.run(ledger.model_call(refused()))
    ledger.phase_done("episode")
    block = with_agent_cost({"reward": 0.0}, ledger, always=True)["cost"]
    assert block["model_calls"] == 1 and "episode_s" in block
    assert with_agent_cost({"reward": 0.0}, ledger) == {"reward": 0.0}
