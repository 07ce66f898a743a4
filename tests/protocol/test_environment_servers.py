"""Built-in environment servers against a stand-in peer client (no sockets)."""

from __future__ import annotations

import asyncio

import pytest

from gym_compose.net.http_client import HttpResponse, PeerConnectError
from gym_compose.server.environments.single_agent_turn import SingleAgentTurnConfig, SingleAgentTurnEnvironmentServer

ROW = {"responses_create_params": {"input": "hi"}, "expected_answer": "4"}


class FakePeers:
    """Answers seed/responses/verify; `/close_session` does what `close` says."""

    def __init__(self, close: str = "ok", verify_fails: bool = False):
        self.close, self.verify_fails, self.calls = close, verify_fails, []

    async def post_json(self, server, path, **kwargs):
        self.calls.append(path)
        if path == "/verify" and self.verify_fails:
            raise RuntimeError("verifier exploded")
        body = {"/seed_session": {}, "/v1/responses": {"output": []}, "/verify": {"reward": 1.0}}[path]
        return body, HttpResponse(200, [], b"")

    async def post(self, server, path, **kwargs):
        self.calls.append(path)
        if self.close == "unreachable":
            raise PeerConnectError("cannot connect to resources:8000")
        return HttpResponse(500 if self.close == "error" else 200, [], b"{}")


def server(peers: FakePeers) -> SingleAgentTurnEnvironmentServer:
    config = SingleAgentTurnConfig(name="env", agent_server={"name": "agent"}, resources_server={"name": "res"})
    return SingleAgentTurnEnvironmentServer(config=config, server_client=peers)


@pytest.mark.parametrize("close", ["ok", "error", "unreachable"])
def test_single_agent_turn_keeps_the_verdict_whatever_the_close_does(close):
    peers = FakePeers(close=close)
    result = asyncio.run(server(peers).run(dict(ROW)))
    assert result["reward"] == 1.0 and result["expected_answer"] == "4"
    assert peers.calls == ["/seed_session", "/v1/responses", "/verify", "/close_session"]


def test_single_agent_turn_reports_the_episode_error_not_the_close_error():
    peers = FakePeers(close="unreachable", verify_fails=True)
    with pytest.raises(RuntimeError, match="verifier exploded"):
        asyncio.run(server(peers).run(dict(ROW)))
    assert peers.calls[-1] == "/close_session"
