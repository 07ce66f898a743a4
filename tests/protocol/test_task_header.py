"""The row (with its expected answers) goes to a model in `x-gym-task` only when that model is a mock."""

from __future__ import annotations

import asyncio

import pytest

from gym_compose.net.http_client import HttpResponse
from gym_compose.server.agents.common import TASK_HEADER, agent_model_reads_task_header, model_reads_task_header
from gym_compose.server.agents.gymnasium_agent import GymnasiumAgent, GymnasiumAgentConfig
from gym_compose.server.agents.simple_agent import SimpleAgent, SimpleAgentConfig
from gym_compose.server.environments.single_agent_turn import SingleAgentTurnConfig, SingleAgentTurnEnvironmentServer

ROW = {"responses_create_params": {"input": "2+2?"}, "expected_answer": "4"}

MODELS = {
    "mock": {"mock_model": {"host": "mock", "port": 8000}},
    "real": {"openai_model": {"host": "real", "port": 8000, "openai_base_url": "https://api.example.com/v1"}},
    "proxy": {"openai_model": {"host": "proxy", "port": 8000, "openai_base_url": "http://mock:8000/v1",
                               "forward_task_header": True}},
    "proxy_off": {"openai_model": {"host": "proxy", "port": 8000, "openai_base_url": "http://mock:8000/v1",
                                   "forward_task_header": False}},
    "custom": {"my_vllm_model": {"host": "custom", "port": 8000}},
}
SENDS = {"mock": True, "real": False, "proxy": True, "proxy_off": False, "custom": False, "missing": False}


def global_config(model: str) -> dict:
    config = {name: {"responses_api_models": block} for name, block in MODELS.items()}
    config["agent"] = {"responses_api_agents": {"simple_agent": {
        "host": "agent", "port": 8000, "resources_server": {"type": "resources_servers", "name": "res"},
        "model_server": {"type": "responses_api_models", "name": model}}}}
    return config


class RecordingPeers:
    """Answers every call; records the headers each model call carried."""

    def __init__(self, config: dict):
        self.global_config = config
        self.model_headers: list[dict] = []

    async def post_json(self, server, path, **kwargs):
        if path == "/v1/responses":
            self.model_headers.append(dict(kwargs.get("headers") or {}))
            return {"output": [{"type": "message", "role": "assistant", "content": "4"}]}, HttpResponse(200, [], b"")
        if path == "/step":
            return {"reward": 1.0, "terminated": True}, HttpResponse(200, [], b"")
        return {"reward": 1.0}, HttpResponse(200, [], b"")

    async def post(self, server, path, **kwargs):
        return HttpResponse(200, [], b"{}")


@pytest.mark.parametrize("model", sorted(SENDS))
def test_which_models_read_the_task_header(model):
    assert model_reads_task_header(global_config(model), model) is SENDS[model]
    assert agent_model_reads_task_header(global_config(model), "agent") is SENDS[model]


@pytest.mark.parametrize("model", sorted(SENDS))
def test_agents_send_the_row_only_to_a_mock_model(model):
    refs = {"resources_server": {"name": "res"}, "model_server": {"name": model}}
    agents = [
        SimpleAgent(config=SimpleAgentConfig(name="agent", **refs), server_client=RecordingPeers(global_config(model))),
        GymnasiumAgent(config=GymnasiumAgentConfig(name="agent", **refs),
                       server_client=RecordingPeers(global_config(model))),
    ]
    for agent in agents:
        result = asyncio.run(agent.run(dict(ROW), {}))
        assert result["reward"] == 1.0
        (headers,) = agent.server_client.model_headers
        assert (TASK_HEADER in headers) is SENDS[model], type(agent).__name__

    environment = SingleAgentTurnEnvironmentServer(
        config=SingleAgentTurnConfig(name="env", agent_server={"name": "agent"}, resources_server={"name": "res"}),
        server_client=RecordingPeers(global_config(model)),
    )
    asyncio.run(environment.run(dict(ROW)))
    (headers,) = environment.server_client.model_headers
    assert (TASK_HEADER in headers) is SENDS[model]


def test_a_peer_client_without_a_config_sends_nothing():
    class Bare(RecordingPeers):
        global_config = None

    peers = Bare({})
    peers.global_config = None
    agent = SimpleAgent(config=SimpleAgentConfig(name="agent", resources_server={"name": "res"},
                                                 model_server={"name": "mock"}), server_client=peers)
    asyncio.run(agent.run(dict(ROW), {}))
    assert peers.model_headers == [{}]
