"""gym_compose.server.mcp_exposure on an app in-process: which routes become tools, the start-up
refusals, and /verify seeing MCP-namespaced tool names as the bare ones."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from pydantic import BaseModel

from gym_compose.server.context import ServerConfigError
from gym_compose.server.mcp_exposure import harvest_tools, normalize_tool_name
from gym_compose.server.resources import (
    BaseResourcesServerConfig,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)
from tests.support.apps import client_for


class Lookup(BaseModel):
    key: str


class NamesServer(SimpleResourcesServer):
    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/lookup")(self.lookup)
        app.post("/items/{item}")(self.item)
        return app

    async def lookup(self, body: Lookup) -> dict:
        """Look a key up."""
        return {"key": body.key}

    async def item(self, item: str, body: dict) -> dict:
        return {"item": item}

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        names = [item.name for item in body.response.output if item.type == "function_call"]
        return BaseVerifyResponse(**body.model_dump(), reward=1.0 if names == ["lookup"] else 0.0)


def server(name: str = "names", cls: type = NamesServer) -> SimpleResourcesServer:
    return cls(config=BaseResourcesServerConfig(name=name, expose_tools_over_mcp=True))


def test_the_typed_post_routes_are_the_tools_and_the_catch_all_is_offered():
    tools, catchall = harvest_tools(server().setup_webserver())
    assert [(tool.name, tool.description) for tool in tools] == [("lookup", "Look a key up.")]
    assert tools[0].input_schema == Lookup.model_json_schema()
    assert catchall is not None and catchall.tool("x").path == "/x"


def test_verify_scores_mcp_namespaced_names_as_the_bare_ones_and_keeps_what_was_emitted():
    row = {"responses_create_params": {"input": "q"}, "response": {
        "id": "r", "created_at": 0, "model": "m", "object": "response", "parallel_tool_calls": True,
        "tool_choice": "auto", "tools": [], "output": [
            {"type": "function_call", "call_id": "c1", "name": "mcp__names__lookup", "arguments": "{}"}]}}
    with client_for(server(), "resources_servers", "names") as client:
        answer = client.post("/verify", json=row)
    assert answer.status_code == 200, answer.text
    assert answer.json()["reward"] == 1.0
    assert answer.json()["response"]["output"][0]["name"] == "mcp__names__lookup"
    assert normalize_tool_name("mcp__other__lookup", "names") == "mcp__other__lookup"


def test_a_tool_name_mcp_clients_reject_stops_the_server_naming_it():
    class BadName(NamesServer):
        def setup_webserver(self) -> FastAPI:
            app = super().setup_webserver()
            app.post("/look.up")(self.lookup)
            return app

    with pytest.raises(ServerConfigError, match=r"MCP tool name 'look.up' does not match"):
        client_for(server(cls=BadName), "resources_servers", "names")
