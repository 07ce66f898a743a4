"""The `view` server answers only requests addressed to it, and says its content types are meant.

DNS rebinding: a page on `evil.example` that re-points its name at 127.0.0.1 can make the browser
send requests to the local server, with `Host: evil.example`; checking the Host header against
the names the server is served under refuses them (a page addressed by IP literal is the server's
own origin, not another site's). `X-Content-Type-Options: nosniff` keeps a browser from reading a
JSON answer (or a run's text inside it) as a script or page.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARDS = ("", "0.0.0.0", "::")


def host_name(header: str) -> str:
    """`127.0.0.1:8000` -> `127.0.0.1`, `[::1]:8000` -> `::1`, `Example.com.` -> `example.com`."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    name = header.rsplit(":", 1)[0] if header.count(":") == 1 else header
    return name.rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _is_loopback(name: str) -> bool:
    return name == "localhost" or (_is_ip(name) and ipaddress.ip_address(name).is_loopback)


class AllowedHosts:
    """The names a server bound to `bind_host` is reached by: that address (and `localhost` and
    the loopback addresses for a loopback one); on every interface, any IP literal and this
    machine's own names."""

    def __init__(self, bind_host: str):
        bound = host_name(bind_host) if bind_host not in WILDCARDS else bind_host
        self.any_ip = bound in WILDCARDS
        self.names = {bound}
        if self.any_ip or _is_loopback(bound):
            self.names.update(LOOPBACK_NAMES)
        if self.any_ip:
            self.names.update(name.lower() for name in (socket.gethostname(), socket.getfqdn()) if name)

    def allows(self, header: str | None) -> bool:
        if not header:
            return False
        name = host_name(header)
        return name in self.names or (self.any_ip and _is_ip(name))


class HostCheck:
    """ASGI middleware: a request whose Host is not one of `allowed` gets 421 and nothing else;
    every answer carries `X-Content-Type-Options: nosniff`."""

    def __init__(self, app: App, allowed: AllowedHosts):
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        host = headers.get(b"host", b"").decode("latin-1")
        if not self.allowed.allows(host):
            body = (f"this server answers only requests addressed to it, not to Host {host!r} "
                    "(gym-compose view refuses other names: DNS rebinding)\n").encode()
            await send({"type": "http.response.start", "status": 421, "headers": [
                (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
                (b"x-content-type-options", b"nosniff")]})
            await send({"type": "http.response.body", "body": body})
            return

        async def send_nosniff(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"x-content-type-options", b"nosniff")]
            await send(message)

        await self.app(scope, receive, send_nosniff)
