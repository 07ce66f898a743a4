"""The official `mcp` client against a resources server's `/mcp` (protocol and e2e tests)."""

from __future__ import annotations

from typing import Any, Optional

import httpx

TOKEN_HEADER = "X-NeMo-Gym-Session-Token"


def stateful_counter_config(name: str = "stateful_counter") -> dict[str, Any]:
    return {name: {"resources_servers": {"stateful_counter": {
        "entrypoint": "app.py", "domain": "agent", "expose_tools_over_mcp": True}}}}


def seed_with_token(client: httpx.Client, row: dict[str, Any]) -> str:
    """POST /seed_session (the client keeps the session cookie); the MCP token it answered."""
    seeded = client.post("/seed_session", json=row)
    assert seeded.status_code == 200, seeded.text
    metadata = seeded.json()["mcp"]
    assert metadata["url_path"] == "/mcp" and metadata["transport"] == "http"
    return metadata["headers"][TOKEN_HEADER]


def _headers(token: Optional[str], cookies: Optional[dict[str, str]] = None) -> dict[str, str]:
    headers = {TOKEN_HEADER: token} if token else {}
    if cookies:
        headers["Cookie"] = "; ".join(f"{key}={value}" for key, value in cookies.items())
    return headers


async def list_tools(url: str, token: Optional[str] = None) -> dict[str, Any]:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with httpx.AsyncClient(headers=_headers(token), timeout=30) as http, \
            streamable_http_client(url, http_client=http) as (read, write, _), ClientSession(read, write) as session:
        initialized = await session.initialize()
        listed = await session.list_tools()
    return {"server_name": initialized.serverInfo.name, "tools": listed.tools}


async def call_tool(url: str, token: Optional[str], name: str, arguments: dict[str, Any],
                    cookies: Optional[dict[str, str]] = None) -> Any:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with httpx.AsyncClient(headers=_headers(token, cookies), timeout=30) as http, \
            streamable_http_client(url, http_client=http) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        return await session.call_tool(name, arguments)


def tool_schemas(tools: list[Any]) -> dict[str, Any]:
    return {tool.name: tool.inputSchema for tool in tools}
