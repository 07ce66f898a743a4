"""Signed session cookies and per-session state with an idle reaper.

The cookie holds only `{"session_id": ...}`; the state lives in the server, keyed by that id
(NeMo Gym's contract). The cookie name is per server instance (`<Class>___<instance>`, as NeMo
Gym names it) so one client can hold sessions of several servers at once.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import logging
import os
import time
import uuid
from typing import Any, Awaitable, Callable, Iterator, MutableMapping, Optional

import orjson
from itsdangerous import BadSignature, Signer

from gym_compose.contract import REPLICA_ADDRESS_ENV
from gym_compose.net.incarnation import CALLER_HEADER
from gym_compose.server.session_forwarding import SessionForwarder, was_forwarded

SESSION_ID_KEY = "session_id"
REPLICA_KEY = "replica"  # with several replicas: the HOST:PORT of the one holding the session's state
LOG = logging.getLogger("gym_compose.server.sessions")
# The caller of the request being served (gym_compose/net/incarnation.py): a session set now is held for it.
CURRENT_CALLER: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar("gym_compose_caller", default=None)
_CALLER_KEY = CALLER_HEADER.encode("latin-1")


class SessionCookieCodec:
    """A session dict <-> the signed value of its cookie (the middleware's, and what the MCP
    endpoint presents when it calls a tool route for a session: gym_compose.server.mcp_exposure)."""

    def __init__(self, secret_key: str):
        self.signer = Signer(secret_key, salt="gym-compose-session")

    def encode(self, session: dict) -> bytes:
        return self.signer.sign(base64.urlsafe_b64encode(orjson.dumps(session)))

    def decode(self, token: bytes) -> Optional[dict]:
        try:
            data = orjson.loads(base64.urlsafe_b64decode(self.signer.unsign(token.strip(b'"'))))
        except (BadSignature, ValueError, orjson.JSONDecodeError):
            return None
        return data if isinstance(data, dict) else None


class SessionCookieMiddleware:
    """Pure-ASGI session middleware: `request.session` is a dict that always holds a session_id.

    A request without a valid cookie gets a fresh id and a Set-Cookie on its response.
    """

    def __init__(self, app, cookie_name: str, secret_key: str,
                 on_session: Optional[Callable[[str, Optional[str]], None]] = None, replica: Optional[str] = None):
        self.app = app
        self.cookie_name = cookie_name
        self.cookie_key = cookie_name.encode("latin-1")
        self.codec = SessionCookieCodec(secret_key)
        self.on_session = on_session
        # One of several replicas (docs/deploy.md): sessions are stamped with it and kept there.
        self.replica = replica or os.environ.get(REPLICA_ADDRESS_ENV) or None
        self.forwarder = SessionForwarder() if self.replica else None

    def _read_headers(self, scope) -> tuple[Optional[dict], Optional[str]]:
        """The session in the request's cookie, and the caller it names (x-gym-compose-caller)."""
        session, caller = None, None
        for name, value in scope.get("headers", ()):
            if name == _CALLER_KEY:
                caller = value.decode("latin-1")
            elif name == b"cookie" and session is None:
                for part in value.split(b";"):
                    key, _, token = part.strip().partition(b"=")
                    if key == self.cookie_key and token:
                        session = self.codec.decode(token)
                        break
        return session, caller

    def _cookie_value(self, session: dict) -> bytes:
        return self.codec.encode(session)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        session, caller = self._read_headers(scope)
        is_new = session is None or not session.get(SESSION_ID_KEY)
        owner = None if is_new or session is None else session.get(REPLICA_KEY)
        if self.forwarder is not None and owner and owner != self.replica and not was_forwarded(scope):
            return await self.forwarder.forward(scope, receive, send, str(owner))
        if is_new:
            session = {SESSION_ID_KEY: str(uuid.uuid4())}
            if self.replica:
                session[REPLICA_KEY] = self.replica
        original = dict(session)
        scope["session"] = session
        CURRENT_CALLER.set(caller)
        if self.on_session is not None:
            self.on_session(session[SESSION_ID_KEY], caller)

        async def send_with_cookie(message):
            if message["type"] == "http.response.start" and (is_new or session != original):
                cookie = b"%s=%s; Path=/; HttpOnly; SameSite=Lax" % (self.cookie_key, self._cookie_value(session))
                message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie)]}
            await send(message)

        await self.app(scope, receive, send_with_cookie)


class SessionState(MutableMapping[str, Any]):
    """A dict of per-session state that forgets sessions idle longer than `idle_timeout` seconds.

    Every read or write of a session refreshes it. `on_reap(session_id, value)` (sync or async)
    releases what a reaped session held. Reaping runs from `start_reaper()` (once the loop runs).
    A session set while serving a caller that names itself is held for that caller:
    `reap_caller(caller)` gives back all of one caller's sessions at once, and a session set for a
    caller that `replaced` says has restarted since is given back at once.
    """

    def __init__(self, idle_timeout: float = 3600.0,
                 on_reap: Optional[Callable[[str, Any], Optional[Awaitable[None]]]] = None,
                 replaced: Optional[Callable[[str], bool]] = None):
        self.idle_timeout = idle_timeout
        self.on_reap = on_reap
        self.replaced = replaced  # a caller whose container has restarted since (net/incarnation.py)
        self._late_reaps: set[asyncio.Task] = set()
        self._values: dict[str, Any] = {}
        self._touched: dict[str, float] = {}
        self._callers: dict[str, str] = {}
        self._reaper: Optional[asyncio.Task] = None

    def touch(self, session_id: str) -> None:
        if session_id in self._values:
            self._touched[session_id] = time.monotonic()

    def __getitem__(self, session_id: str) -> Any:
        value = self._values[session_id]
        self._touched[session_id] = time.monotonic()
        return value

    def __setitem__(self, session_id: str, value: Any) -> None:
        self._values[session_id] = value
        self._touched[session_id] = time.monotonic()
        caller = CURRENT_CALLER.get()
        if caller:
            self._callers[session_id] = caller
            if self.replaced is not None and self.replaced(caller):  # opened for a caller that is gone
                task = asyncio.get_running_loop().create_task(self._reap([session_id]))
                self._late_reaps.add(task)
                task.add_done_callback(self._late_reaps.discard)

    def __delitem__(self, session_id: str) -> None:
        del self._values[session_id]
        self._touched.pop(session_id, None)
        self._callers.pop(session_id, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._values

    def __repr__(self) -> str:
        return f"SessionState({len(self)} sessions, idle_timeout={self.idle_timeout})"

    async def reap_idle(self) -> list[str]:
        cutoff = time.monotonic() - self.idle_timeout
        expired = await self._reap([session_id for session_id, touched in self._touched.items() if touched < cutoff])
        if expired:
            LOG.info("reaped %d idle sessions", len(expired))
        return expired

    async def reap_caller(self, caller: str) -> list[str]:
        """Give back every session held for `caller` (a start of a container that has restarted since)."""
        return await self._reap([session_id for session_id, held in self._callers.items() if held == caller])

    async def _reap(self, session_ids: list[str]) -> list[str]:
        for session_id in session_ids:
            value = self._values.pop(session_id, None)
            self._touched.pop(session_id, None)
            self._callers.pop(session_id, None)
            if self.on_reap is not None:
                try:
                    result = self.on_reap(session_id, value)
                    if asyncio.iscoroutine(result):
                        await result
                except Exception:  # noqa: BLE001 - a failed release must not stop the reaper
                    LOG.exception("releasing session %s failed", session_id)
        return session_ids

    def start_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap_forever())

    async def _reap_forever(self) -> None:
        interval = max(0.05, min(self.idle_timeout / 4, 60.0))
        while True:
            await asyncio.sleep(interval)
            await self.reap_idle()
