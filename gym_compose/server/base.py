"""Server classes: a server is a pydantic model holding its config and a peer client, and builds an ASGI app.

This mirrors NeMo Gym's BaseServer/SimpleServer so that a NeMo Gym-style `app.py` subclass
(`config: MyConfig`, `PrivateAttr`s, `setup_webserver()` returning FastAPI, `run_webserver()`)
works unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
from typing import Any, ClassVar, Optional

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from gym_compose.contract import SESSION_KEY_FILE_ENV
from gym_compose.net.incarnation import Incarnations
from gym_compose.server.sessions import SessionCookieMiddleware, SessionState

LOG = logging.getLogger("gym_compose.server")


class ServerRef(BaseModel):
    """A reference to another instance: `{type: resources_servers, name: my_instance}`."""

    model_config = ConfigDict(extra="allow")
    type: str = ""
    name: str


class BaseServerConfig(BaseModel):
    """An instance's own config block; keys a server does not declare stay available as extras."""

    model_config = ConfigDict(extra="allow")
    name: str = ""
    host: str = "127.0.0.1"
    port: int = 0
    entrypoint: Optional[str] = None
    num_workers: Optional[int] = None  # NeMo Gym's worker processes; accepted, one process serves here


class BaseServer(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    config: BaseServerConfig
    server_client: Any = None  # gym_compose.server.peers.PeerClient

    ray_enabled: ClassVar[Optional[bool]] = None
    session_idle_timeout_seconds: ClassVar[float] = 3600.0

    _session_secret: str = PrivateAttr(default_factory=lambda: _session_key())
    _callers: Incarnations = PrivateAttr(default_factory=Incarnations)
    _caller_reaps: set = PrivateAttr(default_factory=set)

    @model_validator(mode="after")
    def _make_session_state_reapable(self):
        """Give any plain-dict `session_state` an idle reaper, so a client that dies cannot leak it."""
        state = self.__dict__.get("session_state")
        if isinstance(state, dict):
            timeout = float(getattr(self.config, "session_idle_timeout_seconds", None)
                            or self.session_idle_timeout_seconds)
            reapable = SessionState(idle_timeout=timeout, on_reap=self._release_reaped_session,
                                    replaced=self._callers.replaced)
            reapable.update(state)
            self.__dict__["session_state"] = reapable
        return self

    async def _release_reaped_session(self, session_id: str, value: Any) -> None:
        """Called for each session reaped for idleness; override to release external resources."""

    def session_states(self) -> list[SessionState]:
        return [value for value in self.__dict__.values() if isinstance(value, SessionState)]

    def not_ready_reason(self) -> Optional[str]:
        """Why the server cannot serve requests yet (a model still loading); None once it can.
        The readiness route answers 503 with this reason until then."""
        return None

    def setup_webserver(self):
        raise NotImplementedError(f"{type(self).__name__} must implement setup_webserver()")

    def session_cookie_secret(self) -> str:
        """The key that signs this server's session cookies (and its MCP session tokens)."""
        return self._session_secret

    def get_session_middleware_key(self) -> str:
        return f"{type(self).__name__}___{self.config.name}"

    def setup_session_middleware(self, app) -> None:
        if getattr(app.state, "gym_compose_sessions", False):
            return
        app.state.gym_compose_sessions = True
        app.add_middleware(
            SessionCookieMiddleware,
            cookie_name=self.get_session_middleware_key(),
            secret_key=self._session_secret,
            on_session=self._touch_session,
        )

    def _touch_session(self, session_id: str, caller: Optional[str] = None) -> None:
        for state in self.session_states():
            state.touch(session_id)
        restarted = self._callers.observe(caller)
        if restarted is not None and self.session_states():
            task = asyncio.get_running_loop().create_task(self._release_sessions_of(restarted))
            self._caller_reaps.add(task)
            task.add_done_callback(self._caller_reaps.discard)

    async def _release_sessions_of(self, caller: str) -> None:
        """A caller's container restarted: nobody will close the sessions its earlier start opened."""
        released = [session for state in self.session_states() for session in await state.reap_caller(caller)]
        if released:
            LOG.warning("gave back %d sessions opened by %s, which has restarted since (its rollouts are lost)",
                        len(released), caller)

    async def on_startup(self) -> None:
        for state in self.session_states():
            state.start_reaper()

    async def on_shutdown(self) -> None:
        if self.server_client is not None:
            await self.server_client.aclose()

    @classmethod
    def run_webserver(cls) -> None:
        """Serve this class as the instance the environment names (NeMo Gym's entry point)."""
        from gym_compose.server.runtime import run_server_class

        run_server_class(cls)


def _session_key() -> str:
    """The cookie signing key: shared by a server's replicas (a secret file), else this process's own."""
    path = os.environ.get(SESSION_KEY_FILE_ENV)
    if path:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    return secrets.token_hex(32)


# NeMo Gym names
SimpleServer = BaseServer
BaseRunServerInstanceConfig = BaseServerConfig
ResourcesServerRef = ServerRef
ModelServerRef = ServerRef
AgentServerRef = ServerRef

__all__ = ["BaseServer", "BaseServerConfig", "ServerRef", "Field", "SimpleServer"]
