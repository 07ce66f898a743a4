"""`/mcp` of a resources server in a running stack, reached from the host through its published
port (the host view the head serves), with the official `mcp` client: a lean server
(gym_compose.server.mcp_exposure) and a NeMo Gym-runtime server (NeMo Gym 0.7's own
mcp_auto_exposure). docs/writing-a-server.md#tools-over-mcp."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from tests.support.e2e import BUILDS_NEMO_GYM_RUNTIME, free_port, gym_compose, labelled
from tests.support.mcp_client import call_tool, list_tools, seed_with_token

pytestmark = [pytest.mark.docker, BUILDS_NEMO_GYM_RUNTIME]


def resources_url(head_port: int, instance: str) -> str:
    instances = httpx.get(f"http://127.0.0.1:{head_port}/server_instances", timeout=10).json()
    found = next(i for i in instances if i["name"] == instance)
    assert found["host"] == "127.0.0.1"  # published: the host view, reachable from outside the network
    return str(found["url"]).rstrip("/")


def test_a_lean_servers_mcp_through_the_published_port(project, tmp_path):
    head_port = free_port()
    up = gym_compose("up", "-d", "-p", project, "--head-port", str(head_port), "--resources-server",
                     "stateful_counter", "++stateful_counter.resources_servers.stateful_counter.expose_tools_over_mcp=true",
                     cwd=tmp_path, timeout=900)
    assert up.returncode == 0, (up.stdout + up.stderr)[-4000:]
    try:
        url = resources_url(head_port, "stateful_counter")
        tools = asyncio.run(list_tools(f"{url}/mcp"))
        assert {tool.name for tool in tools["tools"]} == {"increment", "read_counter"}
        with httpx.Client(base_url=url, timeout=20) as client, httpx.Client(base_url=url, timeout=20) as other:
            token = seed_with_token(client, {"initial_value": 40})
            other_token = seed_with_token(other, {"initial_value": 0})
            called = asyncio.run(call_tool(f"{url}/mcp", token, "increment", {"amount": 2}))
            assert not called.isError and called.structuredContent == {"value": 42}
            posted = client.post("/read_counter", json={})
            read = asyncio.run(call_tool(f"{url}/mcp", token, "read_counter", {}))
            assert read.content[0].text == posted.text and posted.json() == {"value": 42}

            assert asyncio.run(call_tool(f"{url}/mcp", None, "increment", {"amount": 1})).isError
            cookies = dict(client.cookies.items())
            crossed = asyncio.run(call_tool(f"{url}/mcp", other_token, "increment", {"amount": 1}, cookies=cookies))
            assert crossed.isError and "another session" in crossed.content[0].text
            assert other.post("/read_counter", json={}).json() == {"value": 0}
    finally:
        down = gym_compose("down", "-p", project, cwd=tmp_path)
        assert down.returncode == 0, down.stderr
    assert labelled("container", project) == []


def test_a_nemo_gym_runtime_servers_own_mcp_through_the_published_port(nemo_gym_checkout, project, tmp_path):
    head_port = free_port()
    server = "example_tool_call_multireward"
    up = gym_compose("up", "-d", "-p", project, "--head-port", str(head_port), "--search-dir", str(nemo_gym_checkout),
                     "--resources-server", server, f"++{server}.resources_servers.{server}.expose_tools_over_mcp=true",
                     cwd=tmp_path, timeout=1800)
    assert up.returncode == 0, (up.stdout + up.stderr)[-4000:]
    assert "(NeMo Gym runtime)" in up.stdout + up.stderr or "nemo_gym" in up.stdout + up.stderr
    try:
        url = resources_url(head_port, server)
        tools = asyncio.run(list_tools(f"{url}/mcp"))
        assert [tool.name for tool in tools["tools"]] == ["get_weather"]
        assert tools["tools"][0].inputSchema["required"] == ["city"]
        with httpx.Client(base_url=url, timeout=20) as client:
            token = seed_with_token(client, {})
            called = asyncio.run(call_tool(f"{url}/mcp", token, "get_weather", {"city": "Oslo"}))
            posted = client.post("/get_weather", json={"city": "Oslo"})
            assert not called.isError
            assert called.structuredContent == posted.json() == json.loads(called.content[0].text)
            assert posted.json()["weather_description"] == "The weather in Oslo is sunny."
        refused = asyncio.run(call_tool(f"{url}/mcp", None, "get_weather", {"city": "Oslo"}))
        assert refused.isError and "Missing X-NeMo-Gym-Session-Token" in refused.content[0].text
        forged = asyncio.run(call_tool(f"{url}/mcp", token[:-4] + "abcd", "get_weather", {"city": "Oslo"}))
        assert forged.isError and "Invalid Gym MCP session token" in forged.content[0].text
    finally:
        down = gym_compose("down", "-p", project, cwd=tmp_path)
        assert down.returncode == 0, down.stderr
    assert labelled("container", project) == []
