"""A small keep-alive HTTP/1.1 client for plain-HTTP calls between servers.

Why not httpx: on loopback a rollout makes about ten internal calls, and httpx spends several
hundred microseconds of CPU on each; this client parses with httptools (the parser uvicorn uses)
and costs a fraction of that. It speaks only what peers need: http://, JSON or raw bodies,
Content-Length, chunked or close-delimited responses, pooled connections per (host, port).
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any, Optional

import httptools
import orjson

MAX_MESSAGE_CHARS = 2000


class PeerError(Exception):
    """A call to another server failed: it could not be reached (PeerConnectError), did not answer
    in time (PeerTimeout), or answered an error status (PeerStatusError). The family of every
    server-to-server call; the servers' HTTP border (net/web.py) answers for it."""


class PeerConnectError(PeerError, ConnectionError):
    """The peer did not accept a connection (safe to retry: nothing was sent)."""


class PeerTimeout(PeerError, TimeoutError):
    pass


class PeerStatusError(PeerError):
    """A peer answered with an error status; `status` and `body` say what it was, and `cause`
    (type, error, server) where the error started, when the body carries it."""

    def __init__(self, server_name: str, path: str, status: int, body: bytes):
        self.server_name, self.path, self.status, self.body = server_name, path, status, body
        self.cause = error_cause(body, server_name)
        if self.cause is not None:
            detail = f"{self.cause['type']}: {self.cause['error']}"
        else:
            detail = body[:MAX_MESSAGE_CHARS].decode("utf-8", "replace")
        super().__init__(f"{server_name}{path} answered HTTP {status}: {detail}")


def error_cause(body: bytes, server_name: str) -> Optional[dict[str, Any]]:
    """The innermost {type, error, server, path} of an error body, if it is one of ours."""
    try:
        answer = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return None
    if not isinstance(answer, dict):
        return None
    if isinstance(answer.get("cause"), dict):
        return answer["cause"]
    if isinstance(answer.get("error"), str):
        return {"type": str(answer.get("type") or "ServerError"), "error": answer["error"][:MAX_MESSAGE_CHARS],
                "server": answer.get("server") or server_name, "path": answer.get("path")}
    return None


# A reused keep-alive connection that the peer closes within this long of the request being
# written was closed while idle, before the peer read the request: the request is resent on
# another connection. Any later close may come after the peer processed the request (a /run or
# /step must never run twice), so it is raised instead.
IDLE_CLOSE_WINDOW_SECONDS = 0.03  # generous for a busy event loop; far below any real processing

# A pooled connection idle longer than this is closed instead of reused: far inside the servers'
# keep-alive (gym-compose's 75 s, NeMo Gym's 30 s). A request written just as that keep-alive
# closes the connection is reset unread, and on a loaded machine the reset arrives after the window
# above, so it is raised: most likely what lost 16 blackjack rollouts in CI, in a run that began
# ~75 s after the agent's last calls to the game. NeMo Gym's client keeps idle connections 15 s too.
IDLE_EXPIRY_SECONDS = 15.0

# A peer whose machine is gone (a lost swarm node) neither answers nor resets: a request on a pooled
# connection to it would wait the whole request timeout. The kernel closes a connection whose
# request bytes stay unacknowledged this long (a slow but live peer acknowledges them at once), and
# an idle one whose keepalive probes go unanswered (10 s idle, then 3 probes 5 s apart).
UNACKNOWLEDGED_LIMIT_MS = 20_000
KEEPALIVE = ((socket.SOL_SOCKET, "SO_KEEPALIVE", 1), (socket.IPPROTO_TCP, "TCP_KEEPIDLE", 10),
             (socket.IPPROTO_TCP, "TCP_KEEPINTVL", 5), (socket.IPPROTO_TCP, "TCP_KEEPCNT", 3),
             (socket.IPPROTO_TCP, "TCP_USER_TIMEOUT", UNACKNOWLEDGED_LIMIT_MS))


def _close_when_peer_is_gone(sock: socket.socket | None) -> None:
    for level, name, value in KEEPALIVE:
        option = getattr(socket, name, None)  # Linux names; elsewhere the defaults stay
        if sock is not None and option is not None:
            sock.setsockopt(level, option, value)


@dataclass
class HttpResponse:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    _cookies: Optional[dict[str, str]] = field(default=None, repr=False)

    def json(self) -> Any:
        return orjson.loads(self.body)

    def header(self, name: str) -> Optional[str]:
        wanted = name.lower().encode()
        for key, value in self.headers:
            if key.lower() == wanted:
                return value.decode("latin-1")
        return None

    @property
    def cookies(self) -> dict[str, str]:
        """Cookies this response sets (name -> value)."""
        if self._cookies is None:
            jar: dict[str, str] = {}
            for key, value in self.headers:
                if key.lower() == b"set-cookie":
                    parsed = SimpleCookie()
                    parsed.load(value.decode("latin-1"))
                    jar.update({name: morsel.value for name, morsel in parsed.items()})
            self._cookies = jar
        return self._cookies

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport  # set by connection_made, before the connection is handed out
        self.closed = False
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: Optional[asyncio.Future] = None
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self.received_any = False
        self.sent_at: Optional[float] = None
        self.lost_at: Optional[float] = None
        self.write_failed = False
        self._headers_done = False
        self.idle_since = 0.0  # when it went back to the pool (loop time)

    # asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        _close_when_peer_is_gone(transport.get_extra_info("socket"))

    def data_received(self, data: bytes) -> None:
        self.received_any = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as error:
            self._fail(ConnectionError(f"malformed HTTP response: {error}"))
            self.transport.close()

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.lost_at = asyncio.get_running_loop().time()
        if exc is None and self._waiter is not None and self._headers_done and not self._declares_length():
            # no Content-Length, not chunked: the body is whatever came before the close (RFC 9112 6.3)
            self.on_message_complete()
            return
        cause = f" ({exc})" if isinstance(exc, TimeoutError) else ""  # ETIMEDOUT: the peer stopped acknowledging
        self._fail(ConnectionResetError(f"connection closed before the response was complete{cause}"))

    def _declares_length(self) -> bool:
        for name, value in self._headers:
            name = name.lower()
            if name == b"content-length" or (name == b"transfer-encoding" and b"chunked" in value.lower()):
                return True
        return False

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._headers_done = True

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        waiter, self._waiter = self._waiter, None
        response = HttpResponse(self._parser.get_status_code(), self._headers, b"".join(self._body))
        if not self._parser.should_keep_alive():
            self.closed = True
            self.transport.close()
        self._parser = httptools.HttpResponseParser(self)
        if waiter is not None and not waiter.done():
            waiter.set_result(response)

    def _fail(self, error: Exception) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    def send(self, payload: bytes) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        self._headers, self._body, self.received_any, self._headers_done = [], [], False, False
        waiter = self._waiter = loop.create_future()
        self.sent_at, self.lost_at, self.write_failed = loop.time(), None, False
        if self.closed or self.transport.is_closing():
            self.write_failed = True
            self._fail(ConnectionResetError("connection closed before the request was written"))
            return waiter
        try:
            self.transport.write(payload)
        except (OSError, RuntimeError) as error:
            self.write_failed = True
            self._fail(ConnectionResetError(f"writing the request failed: {error}"))
        return waiter

    def closed_before_reading_request(self) -> bool:
        """The peer closed this (idle) connection before it could have read the request just sent."""
        if self.received_any:
            return False
        if self.write_failed:
            return True
        return (self.lost_at is not None and self.sent_at is not None
                and self.lost_at - self.sent_at <= IDLE_CLOSE_WINDOW_SECONDS)


class HttpClient:
    """Pooled keep-alive client. One per server process; safe for concurrent use in one event loop."""

    def __init__(self, timeout: float = 600.0, connect_timeout: float = 10.0, max_idle_per_host: int = 256,
                 idle_expiry_s: float = IDLE_EXPIRY_SECONDS):
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_idle_per_host = max_idle_per_host
        self.idle_expiry_s = idle_expiry_s
        self._idle: dict[tuple[str, int], list[_Connection]] = {}

    async def _open(self, host: str, port: int) -> _Connection:
        loop = asyncio.get_running_loop()
        # asyncio.timeout, not wait_for (here and in _exchange): Python 3.11's wait_for returns a result
        # that is ready when its task is cancelled, and the cancellation is lost: a stopped run's
        # rollout then waited for an answer that never came (tests/unit/test_http_client_cancel.py)
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, connection = await loop.create_connection(_Connection, host, port)
        except OSError as error:  # TimeoutError included
            raise PeerConnectError(f"cannot connect to {host}:{port}: {error}") from error
        return connection

    def _release(self, key: tuple[str, int], connection: _Connection) -> None:
        idle = self._idle.setdefault(key, [])
        if connection.closed or len(idle) >= self.max_idle_per_host:
            if not connection.closed:
                connection.transport.close()
            return
        connection.idle_since = asyncio.get_running_loop().time()
        idle.append(connection)

    def _reusable(self, key: tuple[str, int]) -> Optional[_Connection]:
        """The most recently used pooled connection that is open and not idle past the expiry."""
        idle = self._idle.get(key)
        expired_before = asyncio.get_running_loop().time() - self.idle_expiry_s
        while idle:
            connection = idle.pop()
            if connection.closed:
                continue
            if connection.idle_since < expired_before:
                connection.transport.close()  # the rest of the pool went idle even earlier
                for older in idle:
                    if not older.closed:
                        older.transport.close()
                idle.clear()
                return None
            return connection
        return None

    async def request(
        self,
        method: str,
        host: str,
        port: int,
        path: str,
        *,
        json: Any = None,
        content: Optional[bytes] = None,
        headers: Optional[dict[str, str]] = None,
        cookies: Optional[dict[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> HttpResponse:
        if json is not None:
            content = orjson.dumps(json)
        lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}"]
        if content is not None:
            lines.append(f"Content-Length: {len(content)}")
            if not headers or not any(name.lower() == "content-type" for name in headers):
                lines.append("Content-Type: application/json")
        if headers:
            lines.extend(f"{name}: {value}" for name, value in headers.items())
        if cookies:
            lines.append("Cookie: " + "; ".join(f"{name}={value}" for name, value in cookies.items()))
        payload = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (content or b"")

        key = (host, port)
        while (connection := self._reusable(key)) is not None:
            try:
                response = await self._exchange(connection, payload, timeout)
            except ConnectionResetError:
                if not connection.closed_before_reading_request():
                    raise  # the peer may have processed the request: resending could run it twice
                continue  # the peer had closed this idle connection; the request never reached it
            self._release(key, connection)
            return response
        connection = await self._open(host, port)
        response = await self._exchange(connection, payload, timeout)
        self._release(key, connection)
        return response

    async def _exchange(self, connection: _Connection, payload: bytes, timeout: Optional[float]) -> HttpResponse:
        waiter = connection.send(payload)
        try:
            async with asyncio.timeout(timeout or self.timeout):
                return await waiter
        except TimeoutError as error:
            connection.transport.close()
            raise PeerTimeout(f"no response within {timeout or self.timeout:.0f} s") from error
        except asyncio.CancelledError:
            connection.transport.close()
            raise

    async def aclose(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                if not connection.closed:
                    connection.transport.close()
        self._idle.clear()
