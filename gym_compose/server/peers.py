"""Calls from one server to another by instance name, as NeMo Gym's server client does.

The address comes from the config; session cookies are passed explicitly per call (the agent
carries each resources session's cookie itself). Connection errors are retried with backoff for
`peer_connect_retry_seconds` (default 60), then raised: a dead peer fails the rollout, it does not
hang it forever.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Optional

from gym_compose.server.context import instance_address
from gym_compose.server.http_client import HttpClient, HttpResponse, PeerConnectError


class PeerError(RuntimeError):
    """A peer answered with an error status; `status` and `body` say what it was."""

    def __init__(self, server_name: str, path: str, status: int, body: bytes):
        self.server_name, self.path, self.status, self.body = server_name, path, status, body
        super().__init__(
            f"{server_name}{path} answered HTTP {status}: {body[:2000].decode('utf-8', 'replace')}"
        )


class PeerClient:
    def __init__(self, global_config: dict[str, Any], http: Optional[HttpClient] = None):
        self.global_config = global_config
        self.http = http or HttpClient(timeout=float(global_config.get("peer_request_timeout_seconds", 3600)))
        self.connect_retry_seconds = float(global_config.get("peer_connect_retry_seconds", 60))
        self._addresses: dict[str, tuple[str, int]] = {}

    def address(self, server_name: str) -> tuple[str, int]:
        address = self._addresses.get(server_name)
        if address is None:
            address = self._addresses[server_name] = instance_address(self.global_config, server_name)
        return address

    async def request(
        self,
        server_name: str,
        path: str,
        method: str = "POST",
        *,
        json: Any = None,
        content: Optional[bytes] = None,
        cookies: Optional[dict[str, str]] = None,
        headers: Optional[dict[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> HttpResponse:
        host, port = self.address(server_name)
        deadline = None
        delay = 0.05
        while True:
            try:
                return await self.http.request(
                    method, host, port, path, json=json, content=content,
                    cookies=cookies, headers=headers, timeout=timeout,
                )
            except PeerConnectError:
                now = time.monotonic()
                deadline = deadline or now + self.connect_retry_seconds
                if now + delay > deadline:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def post(self, server_name: str, path: str, **kwargs) -> HttpResponse:
        return await self.request(server_name, path, "POST", **kwargs)

    async def get(self, server_name: str, path: str, **kwargs) -> HttpResponse:
        return await self.request(server_name, path, "GET", **kwargs)

    async def post_json(self, server_name: str, path: str, **kwargs) -> tuple[Any, HttpResponse]:
        """POST and decode a JSON answer; an error status raises PeerError naming the peer."""
        response = await self.post(server_name, path, **kwargs)
        if not response.ok:
            raise PeerError(server_name, path, response.status, response.body)
        return response.json(), response

    async def aclose(self) -> None:
        await self.http.aclose()
