"""Calls from one server to another by instance name, as NeMo Gym's server client does.

The address comes from the config; session cookies are passed explicitly per call (the agent
carries each resources session's cookie itself). A refused connection is retried with backoff for
`peer_connect_retry_seconds` (default 5: a dead peer fails the rollout fast, a peer restarting in
that time is waited for), then raised naming the peer. Each call's timeout is
`peer_request_timeout_seconds`, cut to what the request being served has left (time_budget).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Optional

from gym_compose.contract import TIME_LEFT_HEADER
from gym_compose.net.http_client import (
    HttpClient,
    HttpResponse,
    PeerConnectError,
    PeerError,
    PeerStatusError,
    PeerTimeout,
    error_cause,
)
from gym_compose.net.incarnation import caller_headers
from gym_compose.server.context import instance_address
from gym_compose.server.rollout_identity import rollout_headers
from gym_compose.server.time_budget import call_timeout

__all__ = ["PeerError", "PeerStatusError", "error_cause"]  # the peer family (net/http_client.py), and below

DEFAULT_CONNECT_RETRY_SECONDS = 5.0


class PeerClient:
    def __init__(self, global_config: dict[str, Any], http: Optional[HttpClient] = None):
        self.global_config = global_config
        self.http = http or HttpClient(timeout=float(global_config.get("peer_request_timeout_seconds", 3600)))
        self.connect_retry_seconds = float(
            global_config.get("peer_connect_retry_seconds", DEFAULT_CONNECT_RETRY_SECONDS))
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
        timeout = call_timeout(timeout or self.http.timeout)
        headers = {**caller_headers(), **rollout_headers(), **(headers or {}), TIME_LEFT_HEADER: f"{timeout:.3f}"}
        deadline = None
        delay = 0.05
        while True:
            try:
                return await self.http.request(
                    method, host, port, path, json=json, content=content,
                    cookies=cookies, headers=headers, timeout=timeout,
                )
            except PeerTimeout:
                raise PeerTimeout(f"{server_name} did not answer {method} {path} within {timeout:.3g} s") from None
            except PeerConnectError as error:
                now = time.monotonic()
                deadline = deadline or now + self.connect_retry_seconds
                if now + delay > deadline:
                    raise PeerConnectError(f"cannot reach {server_name} ({error}; retried for "
                                           f"{self.connect_retry_seconds:g} s)") from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
            except ConnectionError as error:  # the peer went away mid-call (killed, restarted)
                raise type(error)(f"{server_name} dropped the connection during {method} {path} ({error})") from None

    async def post(self, server_name: str, path: str, **kwargs) -> HttpResponse:
        return await self.request(server_name, path, "POST", **kwargs)

    async def get(self, server_name: str, path: str, **kwargs) -> HttpResponse:
        return await self.request(server_name, path, "GET", **kwargs)

    async def post_json(self, server_name: str, path: str, **kwargs) -> tuple[Any, HttpResponse]:
        """POST and decode a JSON answer; an error status raises PeerStatusError naming the peer."""
        response = await self.post(server_name, path, **kwargs)
        if not response.ok:
            raise PeerStatusError(server_name, path, response.status, response.body)
        return response.json(), response

    async def aclose(self) -> None:
        await self.http.aclose()
