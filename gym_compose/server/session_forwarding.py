"""A session lives in the replica that made it: a request for another replica's session goes there.

With several replicas of one server (swarm, kubernetes), the service name balances connections
across them, and a client's pooled connections may reach any of them. Per-session state (what
`/seed_session` set up, a game in play) lives in one replica's memory, so each replica stamps
the sessions it creates with its own address (`GYM_COMPOSE_REPLICA_ADDRESS`, HOST:PORT as the
other replicas reach it) inside the signed cookie (signed with a key the replicas share), and a
replica that receives a request for a session stamped with another address passes the request
on, unchanged, to that replica and relays its answer. A forwarded request carries a header that
stops it from being forwarded again. A session whose replica is gone answers 502, naming it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Optional

import orjson

from gym_compose.contract import FORWARDED_HEADER

if TYPE_CHECKING:
    import httpx

LOG = logging.getLogger("gym_compose.server.session_forwarding")
HOP_BY_HOP = {b"host", b"content-length", b"connection", b"transfer-encoding", b"keep-alive"}
DROPPED_ANSWER_HEADERS = {"content-length", "transfer-encoding", "content-encoding", "connection", "keep-alive"}
FORWARDED_KEY = FORWARDED_HEADER.encode("latin-1")


def was_forwarded(scope: dict[str, Any]) -> bool:
    return any(name == FORWARDED_KEY for name, _ in scope.get("headers", ()))


class SessionForwarder:
    """Passes a whole request to the replica that owns its session (one client, pooled per replica)."""

    def __init__(self) -> None:
        self._client: Optional[httpx.AsyncClient] = None
        self.forwarded = 0

    async def forward(self, scope, receive, send, address: str) -> None:
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        headers = [(name, value) for name, value in scope.get("headers", ()) if name not in HOP_BY_HOP]
        headers.append((FORWARDED_KEY, b"1"))
        query = scope.get("query_string") or b""
        url = f"http://{address}{scope.get('root_path', '')}{scope['path']}" + (f"?{query.decode()}" if query else "")
        import httpx  # here, not at the top: every server imports this module, few forward (docs/performance.md)

        if self._client is None:
            self._client = httpx.AsyncClient(timeout=None)  # the caller's own deadline bounds the call
        try:
            answer = await self._client.request(scope["method"], url, headers=headers, content=bytes(body))
        except httpx.HTTPError as error:
            LOG.warning("session's replica %s did not answer: %s", address, error)
            payload = orjson.dumps({"detail": f"this session lives on replica {address}, which did not answer "
                                              f"({type(error).__name__}); start a new session"})
            await send({"type": "http.response.start", "status": 502,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(payload)).encode())]})
            await send({"type": "http.response.body", "body": payload})
            return
        self.forwarded += 1
        if self.forwarded == 1:
            LOG.info("passing requests of sessions held by another replica to it (first: %s)", address)
        content = answer.content
        out = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in answer.headers.multi_items()
               if name.lower() not in DROPPED_ANSWER_HEADERS]
        out.append((b"content-length", str(len(content)).encode()))
        await send({"type": "http.response.start", "status": answer.status_code, "headers": out})
        await send({"type": "http.response.body", "body": content})
