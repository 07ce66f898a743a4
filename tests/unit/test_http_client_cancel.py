"""A cancelled request (a stopped run's rollout) ends, even when the cancellation lands as its
connection is made (gym_compose/net/http_client.py). With Python 3.11's asyncio.wait_for the
cancellation was lost there, and the request waited for an answer that never came: a CI run's
collector did not stop within 30 s of the end of its lease."""

from __future__ import annotations

import asyncio

from gym_compose.net.http_client import HttpClient


async def a_request_cancelled_as_it_connects() -> tuple[bool, bool]:
    """(ended within 10 s, ended cancelled), read before asyncio.run cancels what is left."""
    held = []  # the silent server's connections, kept open
    server = await asyncio.start_server(lambda reader, writer: held.append(writer), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = HttpClient(timeout=60, connect_timeout=10)
    loop = asyncio.get_running_loop()
    connect = loop.create_connection
    request: asyncio.Task | None = None

    async def connect_then_stop(*args, **kwargs):
        made = await connect(*args, **kwargs)
        assert request is not None
        request.cancel()  # the run's stop, landing the moment the connection is made
        return made

    loop.create_connection = connect_then_stop  # type: ignore[method-assign]
    request = asyncio.ensure_future(client.request("POST", "127.0.0.1", port, "/run", json={}))
    await asyncio.wait([request], timeout=10)
    ended, cancelled = request.done(), request.cancelled()
    server.close()
    await client.aclose()
    return ended, cancelled


def test_a_request_cancelled_as_its_connection_is_made_ends_cancelled():
    ended, cancelled = asyncio.run(a_request_cancelled_as_it_connects())
    assert ended, "the cancelled request still waited for the server's answer"
    assert cancelled
