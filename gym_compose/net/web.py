"""HTTP plumbing every server shares: orjson responses, error bodies, base routes, serving."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import socket
import sys
from typing import TYPE_CHECKING, Any, Optional

import orjson
from starlette.requests import Request
from starlette.responses import Response

if TYPE_CHECKING:
    from pydantic import ValidationError

from gym_compose.contract import LISTEN_FD_ENV, READY_PATH

__all__ = ["READY_PATH"]  # and the helpers below

LOG = logging.getLogger("gym_compose.server")


def scope_header(scope: dict[str, Any], raw_name: bytes) -> Optional[bytes]:
    """The value of header `raw_name` (lower-case bytes) of an ASGI request scope; None if absent."""
    for name, value in scope.get("headers") or ():
        if name.lower() == raw_name:
            return value
    return None


def dumps(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS, default=_fallback)


def _fallback(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return dumps(content)


def json_response(content: Any, status_code: int = 200) -> Response:
    return Response(dumps(content), status_code=status_code, media_type="application/json")


def validation_error_body(error: ValidationError, location: tuple = ("body",)) -> dict[str, Any]:
    """FastAPI's 422 shape: one entry per failing field with its location."""
    return {
        "detail": [
            {"loc": [*location, *entry["loc"]], "msg": entry["msg"], "type": entry["type"]}
            for entry in error.errors(include_url=False, include_context=False, include_input=False)
        ]
    }


def is_validation_error(error: BaseException) -> bool:
    """A pydantic ValidationError, without importing pydantic: the head has no pydantic model, and
    pydantic's import is a cost (docs/performance.md). An error of that type exists only once pydantic is loaded."""
    core = sys.modules.get("pydantic_core")
    return core is not None and isinstance(error, core.ValidationError)


def validation_error_response(error: ValidationError, location: tuple = ("body",)) -> Response:
    return json_response(validation_error_body(error, location), 422)


class BadRequestBody(Exception):
    """A request body that is not JSON or not an object; becomes a 422."""


def bad_request_body(error: Exception) -> dict[str, Any]:
    """The 422 body of a BadRequestBody, in FastAPI's shape."""
    return {"detail": [{"loc": ["body"], "msg": str(error), "type": "json_invalid"}]}


def server_error_body(error: Exception, server_name: str, path: Optional[str]) -> dict[str, Any]:
    """The one 500 body every server answers for an uncaught error. An error that came from a
    peer's error answer (PeerStatusError) carries the peer's `cause` on, so the caller at the end of
    the chain reads where it started: `{type, error, server, path}` of the first server that failed."""
    from gym_compose.net.http_client import PeerStatusError  # here: the head serves without the client

    body: dict[str, Any] = {"error": str(error) or type(error).__name__, "type": type(error).__name__,
                            "server": server_name, "path": path}
    if isinstance(error, PeerStatusError) and error.cause is not None:
        body["cause"] = error.cause
    return body


async def read_json_object(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise BadRequestBody(f"request body is not valid JSON: {error}") from error
    if not isinstance(body, dict):
        raise BadRequestBody("request body must be a JSON object")
    return body


class ErrorBoundary:
    """Outermost ASGI middleware: an uncaught error becomes a JSON 500 and is logged with its session.

    The server keeps serving; the caller gets `{"error": ..., "type": ..., "server": ...}`.
    """

    def __init__(self, app, server_name: str = ""):
        self.app = app
        self.server_name = server_name

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def tracking_send(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except BadRequestBody as error:
            if not started:
                await _send_json(send, 422, bad_request_body(error))
        except Exception as error:  # noqa: BLE001 - this is the last line of defence
            if is_validation_error(error):
                if not started:
                    await _send_json(send, 422, validation_error_body(error))
                return
            session = (scope.get("session") or {}).get("session_id") if isinstance(scope.get("session"), dict) else None
            LOG.exception(
                "uncaught error in %s %s %s (session %s)",
                self.server_name, scope.get("method"), scope.get("path"), session,
            )
            if not started:
                await _send_json(send, 500, server_error_body(error, self.server_name, scope.get("path")))


async def _send_json(send, status: int, body: dict[str, Any]) -> None:
    payload = dumps(body)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})


def serve(app, host: str, port: int, log_level: str = "warning") -> None:
    """Run an ASGI app with uvicorn on uvloop + httptools (each response written in one syscall),
    no access log, no proxy-header layer (peers call each other directly), and a main loop that
    sleeps while idle."""
    import uvicorn

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="uvloop",
        http=_coalescing_protocol_class(),
        ws="auto" if _may_serve_websockets(app) else "none",
        lifespan="on",
        access_log=False,
        proxy_headers=False,
        log_level=log_level,
        timeout_keep_alive=75,
        backlog=4096,
        timeout_graceful_shutdown=2,
    )
    server = _quiet_server_class(uvicorn.Server)(config)
    listener = inherited_listener(port)
    resume_gc()
    server.run(sockets=[listener] if listener is not None else None)


def inherited_listener(port: int) -> Optional[socket.socket]:
    """The listening socket the local-process target handed this process (LISTEN_FD_ENV) when it is
    bound to `port`. The target held the port from the moment it chose it, so no other process could
    take it in between. Read once: a process this server starts does not inherit the claim."""
    raw = os.environ.pop(LISTEN_FD_ENV, None)
    if raw is None:
        return None
    try:
        listener = socket.socket(fileno=int(raw))
    except (ValueError, OSError):
        return None
    if listener.getsockname()[1] != port:
        listener.detach()  # not this server's socket: leave the descriptor as it is
        return None
    return listener


def resume_gc() -> None:
    """Cyclic GC back on, if `python -m gym_compose.server` (its __main__) turned it off for the
    start; what the start made is frozen first, so the first collections do not walk it all."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def _may_serve_websockets(app: Any) -> bool:
    """Whether the app (under the runtime's own wrappers) has a websocket route or anything it
    cannot see into. Without one uvicorn is told `ws="none"` and does not import its websockets
    protocol and the websockets package (docs/performance.md)."""
    from starlette.routing import Mount, Route, WebSocketRoute

    for _ in range(16):  # ServerApp -> ErrorBoundary -> the app a server class built
        router = getattr(app, "router", None)
        if router is not None:
            routes = getattr(router, "routes", None)
            if routes is None:
                return True
            return any(isinstance(route, (WebSocketRoute, Mount)) or not isinstance(route, Route) for route in routes)
        inner = getattr(app, "inner", None) or getattr(app, "app", None)
        if inner is None:
            return True
        app = inner
    return True


class _CoalescingTransport:
    """A transport whose writes within one event-loop turn go out as one: uvicorn writes a
    response's head and its body separately, two syscalls, and on loopback the peer wakes up and
    reads twice. Joined at the end of the turn (call_soon), so nothing waits longer than the turn."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(data)

    def _flush(self) -> None:
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending = []
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(len(data) for data in self._pending)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _coalescing_protocol_class() -> type:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class CoalescingHttpToolsProtocol(HttpToolsProtocol):
        def connection_made(self, transport) -> None:
            super().connection_made(_CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]

    return CoalescingHttpToolsProtocol


def _quiet_server_class(server_class: type) -> type:
    """uvicorn's main loop wakes every 0.1 s to notice an exit request (and, every tenth time, to
    renew the Date header): most of an idle server's CPU, in every container of a waiting stack.
    This one wakes once a second for the Date header, and at once when asked to exit."""

    class QuietServer(server_class):
        _exit_requested: Optional[asyncio.Event] = None
        _loop: Optional[asyncio.AbstractEventLoop] = None

        def handle_exit(self, sig, frame) -> None:
            super().handle_exit(sig, frame)
            if self._exit_requested is not None and self._loop is not None:
                self._loop.call_soon_threadsafe(self._exit_requested.set)

        async def main_loop(self) -> None:
            self._loop, self._exit_requested = asyncio.get_running_loop(), asyncio.Event()
            ticks = 0  # on_tick renews the Date header when its count is a multiple of 10
            while not await self.on_tick(ticks):
                ticks = (ticks + 10) % 864000
                try:
                    await asyncio.wait_for(self._exit_requested.wait(), 1.0)
                except asyncio.TimeoutError:
                    pass

    return QuietServer
