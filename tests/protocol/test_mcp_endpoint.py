"""`/mcp` on a lean resources server (`expose_tools_over_mcp: true`), driven by the official `mcp`
client over real HTTP on loopback: the tools are the server's tool routes, a call answers what
`POST /<tool>` answers for the same session, and a call without the rollout's token is refused."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from conftest import SERVER_IMAGES

from tests.support.mcp_client import (
    call_tool,
    list_tools,
    seed_with_token,
    stateful_counter_config,
    tool_schemas,
)
from tests.support.stacks import seed_verify_stack

pytestmark = pytest.mark.protocol

COUNTER = "stateful_counter"


@pytest.fixture
def counter(start_stack) -> str:
    stack = start_stack(stateful_counter_config(), {COUNTER: SERVER_IMAGES / COUNTER})
    return stack.url(COUNTER)


def test_initialize_and_tools_list_equal_the_servers_tool_routes(counter):
    tools = asyncio.run(list_tools(f"{counter}/mcp"))  # initialize, then tools/list
    assert tools["server_name"] == COUNTER
    assert {tool.name for tool in tools["tools"]} == {"increment", "read_counter"}
    assert tool_schemas(tools["tools"]) == tool_schemas_of_routes()


def tool_schemas_of_routes() -> dict[str, Any]:
    """What the server's own routes take, from its body models (read from its app.py, not ours)."""
    import importlib.util

    from gym_compose.server import compat

    compat.install()
    spec = importlib.util.spec_from_file_location("counter_app", SERVER_IMAGES / COUNTER / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {"increment": module.IncrementRequest.model_json_schema(),
            "read_counter": module.ReadCounterRequest.model_json_schema()}


def test_tools_call_answers_what_the_route_answers_for_the_same_session(counter):
    with httpx.Client(base_url=counter, timeout=10) as client:
        token = seed_with_token(client, {"initial_value": 5})
        other = httpx.Client(base_url=counter, timeout=10)
        other_token = seed_with_token(other, {"initial_value": 100})

        called = asyncio.run(call_tool(f"{counter}/mcp", token, "increment", {"amount": 2}))
        assert not called.isError, called.content
        assert called.structuredContent == {"value": 7}
        assert json.loads(called.content[0].text) == {"value": 7}
        # the same session over plain HTTP sees what the MCP call did, and answers the same
        posted = client.post("/read_counter", json={})
        assert posted.status_code == 200
        over_mcp = asyncio.run(call_tool(f"{counter}/mcp", token, "read_counter", {}))
        assert over_mcp.structuredContent == posted.json() == {"value": 7}
        assert over_mcp.content[0].text == posted.text
        # the other session's state is its own
        assert other.post("/read_counter", json={}).json() == {"value": 100}
        assert asyncio.run(call_tool(f"{counter}/mcp", other_token, "read_counter", {})).structuredContent == {
            "value": 100}
        # a bad body is refused as POST /increment refuses it (422, naming the field)
        bad = asyncio.run(call_tool(f"{counter}/mcp", token, "increment", {"amount": "many"}))
        assert bad.isError
        assert "HTTP 422 from POST /increment" in bad.content[0].text and "amount" in bad.content[0].text
        other.close()


def test_calls_without_a_valid_token_are_refused(counter, start_stack):
    with httpx.Client(base_url=counter, timeout=10) as client, \
            httpx.Client(base_url=counter, timeout=10) as other:
        token = seed_with_token(client, {"initial_value": 1})
        other_token = seed_with_token(other, {"initial_value": 50})
        mcp = f"{counter}/mcp"

        no_token = asyncio.run(call_tool(mcp, None, "increment", {"amount": 1}))
        assert no_token.isError and "Missing X-NeMo-Gym-Session-Token" in no_token.content[0].text
        forged = asyncio.run(call_tool(mcp, token[:-4] + "abcd", "increment", {"amount": 1}))
        assert forged.isError and "Invalid Gym MCP session token" in forged.content[0].text
        # another session's token beside this session's cookie: refused, neither session changes
        cookies = {name: value for name, value in client.cookies.items()}
        crossed = asyncio.run(call_tool(mcp, other_token, "increment", {"amount": 1}, cookies=cookies))
        assert crossed.isError and "another session" in crossed.content[0].text
        # a token of another server (another instance of the same code, its own secret)
        second = start_stack(stateful_counter_config(), {COUNTER: SERVER_IMAGES / COUNTER})
        with httpx.Client(base_url=second.url(COUNTER), timeout=10) as elsewhere:
            foreign = seed_with_token(elsewhere, {"initial_value": 0})
        assert asyncio.run(call_tool(mcp, foreign, "increment", {"amount": 1})).isError

        assert client.post("/read_counter", json={}).json() == {"value": 1}
        assert other.post("/read_counter", json={}).json() == {"value": 50}


def test_a_session_allow_list_narrows_list_and_call(start_stack, tmp_path):
    """`mcp_allowed_tools_for_session(seed_body)`: the token lists and calls only those tools."""
    folder = tmp_path / "narrowed_counter"
    folder.mkdir()
    source = (SERVER_IMAGES / COUNTER / "app.py").read_text()
    (folder / "app.py").write_text(source.replace("class CounterServer(SimpleResourcesServer):", (
        "class CounterServer(SimpleResourcesServer):\n"
        "    def mcp_allowed_tools_for_session(self, seed_body):\n"
        "        return seed_body.get('allowed_tools')\n")))
    stack = start_stack(stateful_counter_config(), {COUNTER: folder})
    url = stack.url(COUNTER)
    with httpx.Client(base_url=url, timeout=10) as client:
        token = seed_with_token(client, {"initial_value": 3, "allowed_tools": ["read_counter"]})
        listed = asyncio.run(list_tools(f"{url}/mcp", token))
        assert [tool.name for tool in listed["tools"]] == ["read_counter"]
        assert asyncio.run(call_tool(f"{url}/mcp", token, "read_counter", {})).structuredContent == {"value": 3}
        refused = asyncio.run(call_tool(f"{url}/mcp", token, "increment", {"amount": 1}))
        assert refused.isError and "not allowed for this session" in refused.content[0].text
        assert client.post("/read_counter", json={}).json() == {"value": 3}


def test_rollouts_still_reward_one_with_mcp_on(start_stack):
    """The HTTP agent path is unchanged: the seed answer's `mcp` block is extra."""
    config = seed_verify_stack(COUNTER)
    config[COUNTER]["resources_servers"][COUNTER]["expose_tools_over_mcp"] = True
    stack = start_stack(config, {COUNTER: SERVER_IMAGES / COUNTER})
    rows = [json.loads(line) for line in (SERVER_IMAGES / COUNTER / "data" / "example.jsonl").read_text().splitlines()]
    with httpx.Client(timeout=20) as client:
        for row in rows:
            answer = client.post(f"{stack.url('environment')}/run", json=row)
            assert answer.status_code == 200, answer.text
            assert answer.json()["reward"] == 1.0
