"""Turn a server class into a running process: config -> instance -> ASGI app -> uvicorn."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Optional

from starlette.requests import Request
from starlette.routing import Route

from gym_compose.contract import ROOT_READY_ENV
from gym_compose.net.web import (
    READY_PATH,
    BadRequestBody,
    ErrorBoundary,
    bad_request_body,
    dumps,
    json_response,
    serve,
    server_error_body,
)
from gym_compose.server.context import ServerConfigError, ServerContext, load_context
from gym_compose.server.readiness import PeersReadiness, Readiness
from gym_compose.server.rollout_identity import adopt_from_scope as adopt_rollout
from gym_compose.server.time_budget import adopt_from_scope

if TYPE_CHECKING:  # imported where used: the head serves no server class (pydantic's import: docs/performance.md)
    from gym_compose.server.base import BaseServer

LOG = logging.getLogger("gym_compose.server")

_current: Optional[ServerContext] = None


def set_current_context(context: ServerContext) -> None:
    global _current
    _current = context


def current_context() -> ServerContext:
    """The context the entry loaded; a NeMo Gym app.py run directly loads it from the environment."""
    global _current
    if _current is None:
        _current = load_context()
    return _current


def build_server(cls: type[BaseServer], context: ServerContext) -> BaseServer:
    from pydantic import ValidationError

    from gym_compose.server.peers import PeerClient

    config_cls: Any = cls.model_fields["config"].annotation  # a pydantic model class (BaseServer's contract)
    config_data = {**context.spec, "name": context.name}
    config_data.setdefault("host", context.bind_host)
    config_data.setdefault("port", context.port)
    try:
        config = config_cls.model_validate(config_data)
    except ValidationError as error:
        # pydantic's own message quotes the input: the whole block, resolved secrets included
        problems = "; ".join(
            f"{'.'.join(str(part) for part in entry['loc']) or '(block)'}: {entry['msg']}"
            for entry in error.errors(include_url=False, include_context=False, include_input=False)
        )
        raise ServerConfigError(f"config of {context.name!r} ({cls.__name__}) is invalid: {problems}") from None
    return cls(config=config, server_client=PeerClient(context.global_config))


def _add_error_handlers(app, server_name: str) -> None:
    """A FastAPI app answers errors itself (Starlette's ServerErrorMiddleware would send plain text
    before the ErrorBoundary sees them): give it the ErrorBoundary's bodies, so every server has
    one 500 shape and one 422 shape."""

    async def bad_body(request: Request, error: BadRequestBody):
        return json_response(bad_request_body(error), 422)

    async def server_error(request: Request, error: Exception):
        return json_response(server_error_body(error, server_name, request.url.path), 500)

    app.add_exception_handler(BadRequestBody, bad_body)
    app.add_exception_handler(Exception, server_error)


async def _root(request: Request):
    return json_response({"status": "ok"})


class ServerApp:
    """The outer ASGI app of every server: readiness route, error boundary, start-up hooks."""

    def __init__(self, inner, context: ServerContext, server: Optional[BaseServer] = None):
        self.context = context
        self.server = server
        self.readiness: Readiness | PeersReadiness
        if context.is_head:
            root_ready = frozenset(filter(None, os.environ.get(ROOT_READY_ENV, "").split(",")))
            self.readiness = PeersReadiness(context.global_config, root_ready)
        else:
            self.readiness = Readiness(context.spec, context.global_config)
        self.inner = ErrorBoundary(inner, context.name)

    async def _startup(self) -> None:
        self.readiness.start()
        if self.server is not None:
            await self.server.on_startup()

    async def _shutdown(self) -> None:
        if self.server is not None:
            await self.server.on_shutdown()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            async def hooked_receive():
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await self._startup()
                elif message["type"] == "lifespan.shutdown":
                    await self._shutdown()
                return message
            return await self.inner(scope, hooked_receive, send)
        if scope["type"] == "http" and scope["path"] == READY_PATH:
            own_reason = self.server.not_ready_reason() if self.server is not None else None
            ready = self.readiness.ready and own_reason is None
            reason = self.readiness.reason if not self.readiness.ready else own_reason
            body = dumps({"ready": True} if ready else {"ready": False, "reason": reason})
            await send({"type": "http.response.start", "status": 200 if ready else 503,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        if scope["type"] == "http":
            adopt_from_scope(scope)
            adopt_rollout(scope)
        await self.inner(scope, receive, send)


def finish_app(app, context: ServerContext, server: Optional[BaseServer] = None) -> ServerApp:
    """Add what every server has (GET /, JSON 500 bodies) to an app a server class built."""
    router = getattr(app, "router", None)
    if router is not None:
        has_root = any(
            isinstance(route, Route) and route.path == "/" and "GET" in (route.methods or ())
            for route in router.routes
        )
        if not has_root:
            router.add_route("/", _root, methods=["GET"], include_in_schema=False)
        _add_error_handlers(app, context.name)
    if server is not None and getattr(server.config, "expose_tools_over_mcp", False):
        from gym_compose.server.mcp_exposure import McpExposureError, expose_tools_over_mcp

        try:
            app = expose_tools_over_mcp(server, app)  # /mcp (docs/servers.md#mcp)
        except McpExposureError as error:
            raise ServerConfigError(str(error)) from None
    return ServerApp(app, context, server)


def run_server_class(cls: type[BaseServer]) -> None:
    context = current_context()
    server = build_server(cls, context)
    app = server.setup_webserver()
    if app is None:
        raise RuntimeError(f"{cls.__name__}.setup_webserver() returned no app")
    serve(finish_app(app, context, server), context.bind_host, context.port)


def run_app(app, context: ServerContext) -> None:
    serve(finish_app(app, context), context.bind_host, context.port)
