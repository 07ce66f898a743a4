"""The pooled keep-alive client against raw asyncio servers that misbehave on purpose."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from gym_compose.net.http_client import HttpClient

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + (await reader.readexactly(length) if length else b"")


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST (SO_LINGER 0), as a crashed or killed peer does."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class AnswersOk:
    """A peer that answers every request 200 and counts the connections it accepted."""

    def __init__(self) -> None:
        self.connections = 0

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                await _read_request(reader)
                writer.write(OK)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return


async def _serve(handler) -> tuple[asyncio.AbstractServer, int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@pytest.mark.parametrize("close", ["reset", "eof"])
def test_a_request_the_peer_held_is_never_resent(close):
    """The peer read the /run, worked on it, then died: replaying it would run the rollout twice."""
    received: list[bytes] = []

    async def handler(reader, writer):
        try:
            while True:
                request = await _read_request(reader)
                received.append(request)
                if b"/first" in request:
                    writer.write(OK)
                    await writer.drain()
                    continue
                await asyncio.sleep(0.1)  # "processing"
                if close == "reset":
                    _reset(writer)
                else:
                    writer.close()
                return
        except (asyncio.IncompleteReadError, ConnectionError):
            return

    async def scenario():
        server, port = await _serve(handler)
        client = HttpClient(timeout=5)
        try:
            assert (await client.request("POST", "127.0.0.1", port, "/first", json={})).status == 200
            with pytest.raises(ConnectionResetError):
                await client.request("POST", "127.0.0.1", port, "/run", json={"row": 1})
        finally:
            await client.aclose()
            server.close()

    asyncio.run(scenario())
    assert sum(b"/run" in request for request in received) == 1


def test_a_reused_connection_the_peer_closed_at_once_is_resent():
    """The peer dropped the idle connection as the request arrived: it never read it; resend."""
    connections = 0

    async def handler(reader, writer):
        nonlocal connections
        connections += 1
        first_connection = connections == 1
        try:
            while True:
                request = await _read_request(reader)
                if first_connection and b"/second" in request:
                    _reset(writer)
                    return
                writer.write(OK)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return

    async def scenario():
        server, port = await _serve(handler)
        client = HttpClient(timeout=5)
        try:
            assert (await client.request("POST", "127.0.0.1", port, "/first", json={})).status == 200
            answer = await client.request("POST", "127.0.0.1", port, "/second", json={})
            assert answer.status == 200 and answer.body == b"ok"
        finally:
            await client.aclose()
            server.close()

    asyncio.run(scenario())
    assert connections == 2


def test_a_connection_idle_past_the_expiry_is_not_reused_as_its_peers_keep_alive_closes_it():
    """The peer's keep-alive timer fires while a request on its idle connection sits unread (a busy
    peer), and the reset reaches the client late: too late to know the request was never read. A
    client that does not reuse connections idle longer than its expiry never meets that race."""
    keep_alive_s, expiry_s = 0.4, 0.2
    connections, served = 0, []

    async def handler(reader, writer):
        nonlocal connections
        connections += 1
        loop = asyncio.get_running_loop()
        idle_since = loop.time()
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")  # only the head: the body stays unread
                if loop.time() - idle_since >= keep_alive_s:
                    await asyncio.sleep(0.1)  # the timer fires now: the request was never read
                    _reset(writer)
                    return
                served.append(head.split(b" ")[1])
                await reader.readexactly(2)  # the body: {}
                writer.write(OK)
                await writer.drain()
                idle_since = loop.time()
        except (asyncio.IncompleteReadError, ConnectionError):
            return

    async def scenario(client):
        server, port = await _serve(handler)
        try:
            assert (await client.request("POST", "127.0.0.1", port, "/first", json={})).status == 200
            await asyncio.sleep(keep_alive_s + 0.1)
            return await client.request("POST", "127.0.0.1", port, "/second", json={})
        finally:
            await client.aclose()
            server.close()

    answer = asyncio.run(scenario(HttpClient(timeout=5, idle_expiry_s=expiry_s)))
    assert answer.status == 200 and served == [b"/first", b"/second"] and connections == 2
    with pytest.raises(ConnectionResetError):  # a client that reuses it: the request is lost
        asyncio.run(scenario(HttpClient(timeout=5, idle_expiry_s=60)))


def test_connections_idle_within_the_expiry_are_reused():
    peer = AnswersOk()

    async def scenario():
        server, port = await _serve(peer)
        client = HttpClient(timeout=5, idle_expiry_s=60)
        try:
            for _ in range(3):
                assert (await client.request("GET", "127.0.0.1", port, "/")).status == 200
        finally:
            await client.aclose()
            server.close()

    asyncio.run(scenario())
    assert peer.connections == 1


def test_a_connection_closed_before_the_write_is_resent():
    async def scenario():
        server, port = await _serve(AnswersOk())
        client = HttpClient(timeout=5)
        try:
            await client.request("GET", "127.0.0.1", port, "/")
            (pooled,) = client._idle[("127.0.0.1", port)]
            pooled.transport.close()  # closing, but connection_lost has not run yet
            assert (await client.request("GET", "127.0.0.1", port, "/")).status == 200
        finally:
            await client.aclose()
            server.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("status_line", [b"HTTP/1.1 200 OK", b"HTTP/1.0 200 OK"])
def test_a_body_ended_by_closing_the_connection_is_complete(status_line):
    async def handler(reader, writer):
        await _read_request(reader)
        writer.write(status_line + b"\r\nContent-Type: application/json\r\n\r\n" + b'{"answer": ')
        await writer.drain()
        await asyncio.sleep(0.02)
        writer.write(b"42}")
        await writer.drain()
        writer.close()

    async def scenario():
        server, port = await _serve(handler)
        client = HttpClient(timeout=5)
        try:
            return await client.request("GET", "127.0.0.1", port, "/")
        finally:
            await client.aclose()
            server.close()

    answer = asyncio.run(scenario())
    assert answer.status == 200 and answer.json() == {"answer": 42}


@pytest.mark.parametrize("declared", [b"Content-Length: 100\r\n\r\n{\"a\"", b"Transfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n"])
def test_a_declared_body_cut_by_the_close_is_still_incomplete(declared):
    async def handler(reader, writer):
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n" + declared)
        await writer.drain()
        writer.close()

    async def scenario():
        server, port = await _serve(handler)
        client = HttpClient(timeout=5)
        try:
            with pytest.raises(ConnectionResetError, match="before the response was complete"):
                await client.request("GET", "127.0.0.1", port, "/")
        finally:
            await client.aclose()
            server.close()

    asyncio.run(scenario())


def test_pooled_connections_are_closed_by_the_kernel_when_the_peer_is_gone():
    """A lost machine never resets: the kernel must give up on unacknowledged requests and on idle
    connections whose keepalive probes go unanswered (what a lost swarm node's replicas need)."""
    async def handler(reader, writer):
        await _read_request(reader)
        writer.write(OK)
        await writer.drain()

    async def scenario():
        server, port = await _serve(handler)
        client = HttpClient(timeout=5)
        try:
            assert (await client.request("GET", "127.0.0.1", port, "/")).status == 200
            (pooled,) = client._idle[("127.0.0.1", port)]
            sock = pooled.transport.get_extra_info("socket")
            return (sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                    sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                    sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT))
        finally:
            await client.aclose()
            server.close()

    keepalive, idle_s, unacknowledged_ms = asyncio.run(scenario())
    assert keepalive and idle_s <= 10 and 0 < unacknowledged_ms <= 30_000
