"""A rollout that fails before /verify gives its resources session back at once (its sandbox with it)."""

from __future__ import annotations

import asyncio

import pytest

from gym_compose.net.http_client import HttpResponse, PeerConnectError
from gym_compose.server.agents.simple_agent import SimpleAgent, SimpleAgentConfig

ROW = {"responses_create_params": {"input": "2+2?"}, "expected_answer": "4"}
COOKIE = (b"set-cookie", b"Res___res=signed-session; Path=/")


class Peers:
    """A resources server that seeds with a cookie, and a model that answers or is gone."""

    def __init__(self, model_up: bool):
        self.global_config: dict = {}
        self.model_up = model_up
        self.posts: list[tuple[str, dict]] = []

    async def post_json(self, server, path, **kwargs):
        if path == "/seed_session":
            return {}, HttpResponse(200, [COOKIE], b"{}")
        if path == "/v1/responses":
            if not self.model_up:
                raise PeerConnectError("cannot reach policy_model (connection refused; retried for 5 s)")
            return {"output": [{"type": "message", "role": "assistant", "content": "4"}]}, HttpResponse(200, [], b"")
        return {"reward": 1.0}, HttpResponse(200, [], b"{}")

    async def post(self, server, path, **kwargs):
        self.posts.append((path, dict(kwargs.get("cookies") or {})))
        return HttpResponse(200, [], b"{}")


def agent(peers: Peers) -> SimpleAgent:
    return SimpleAgent(config=SimpleAgentConfig(name="agent", resources_server={"name": "res"},
                                                 model_server={"name": "policy_model"}), server_client=peers)


def test_a_failed_episode_closes_its_resources_session_with_its_cookie():
    peers = Peers(model_up=False)
    with pytest.raises(PeerConnectError, match="policy_model"):
        asyncio.run(agent(peers).run(dict(ROW), {}))
    assert peers.posts == [("/close_session", {"Res___res": "signed-session"})]


def test_a_scored_rollout_leaves_the_release_to_verify():
    peers = Peers(model_up=True)
    assert asyncio.run(agent(peers).run(dict(ROW), {}))["reward"] == 1.0
    assert peers.posts == []
