"""Readiness: a server is ready once it serves and each upstream model endpoint has answered.

Upstream endpoints are the `*base_url` values of the server's own config. Each must answer
`GET <base>/models` with any status. A host name that does not resolve on the first try is warned
about and skipped (NeMo Gym's rule). `model_endpoint_readiness_timeout_seconds` (default 600, 0 =
skip) bounds the wait; when it runs out the endpoints that never answered are logged and the
process exits 1, so compose reports the service unhealthy instead of waiting forever. A probe
that fails other than by a transport error (an invalid URL, say) can never succeed: the endpoint
and the error are logged and the process exits 1 at once; the head does the same for its servers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import time
from typing import Any
from urllib.parse import urlsplit

LOG = logging.getLogger("gym_compose.server.readiness")
PEER_POLL_SECONDS = 0.1  # the head asks its servers this often until all are ready
PEER_PROBE_TIMEOUT_SECONDS = 2.0


def upstream_base_urls(spec: dict[str, Any]) -> list[str]:
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and key.endswith("base_url"):
                    urls = item if isinstance(item, list) else [item]
                    found.extend(url for url in urls if isinstance(url, str) and url.startswith(("http://", "https://")))
                else:
                    walk(item)

    walk(spec)
    return list(dict.fromkeys(found))


class Readiness:
    def __init__(self, spec: dict[str, Any], global_config: dict[str, Any]):
        self.pending = upstream_base_urls(spec)
        self.timeout = float(global_config.get("model_endpoint_readiness_timeout_seconds", 600) or 0)
        self.ready = not self.pending or self.timeout <= 0
        self._task: asyncio.Task | None = None

    @property
    def reason(self) -> str:
        return "waiting for upstream model endpoints: " + ", ".join(self.pending)

    def start(self) -> None:
        if not self.ready:
            self._task = asyncio.get_running_loop().create_task(self._probe_all())

    async def _probe_all(self) -> None:
        import httpx

        deadline = time.monotonic() + self.timeout
        first_try = True
        base_url = None
        try:
            async with httpx.AsyncClient(timeout=5.0, verify=False) as client:
                while self.pending:
                    for base_url in list(self.pending):
                        if first_try and not await _resolves(base_url):
                            LOG.warning("upstream model endpoint %s does not resolve; not waiting for it", base_url)
                            self.pending.remove(base_url)
                            continue
                        try:
                            await client.get(base_url.rstrip("/") + "/models")
                        except (httpx.TransportError, OSError):
                            continue
                        self.pending.remove(base_url)
                    base_url = None
                    first_try = False
                    if not self.pending:
                        break
                    if time.monotonic() > deadline:
                        _give_up(
                            f"upstream model endpoints never answered within {self.timeout:.0f} s "
                            f"(model_endpoint_readiness_timeout_seconds): {', '.join(self.pending)}"
                        )
                        return
                    await asyncio.sleep(0.5)
        except Exception as error:  # noqa: BLE001 - a probe that cannot run must not leave the server unready forever
            where = (f"upstream model endpoint {base_url}" if base_url
                     else "upstream model endpoints " + ", ".join(self.pending))
            _give_up(f"probing {where} failed: {type(error).__name__}: {error}")
            return
        self.ready = True


def _give_up(message: str) -> None:
    """Readiness can never be reached: say why and exit 1, so compose reports the service unhealthy."""
    print(f"gym-compose: {message}", file=sys.stderr, flush=True)
    os._exit(1)


async def _resolves(url: str) -> bool:
    """Off the event loop: a slow DNS must not stop the server answering its readiness route."""
    host = urlsplit(url).hostname
    if not host:
        return False
    try:
        await asyncio.get_running_loop().getaddrinfo(host, None)
    except socket.gaierror:
        return False
    return True


class PeersReadiness:
    """The head's readiness: every server instance of the config reports ready.

    This is NeMo Gym's "the head is marked ready after both steps pass": servers start in
    parallel, and the head's own healthcheck turns healthy only once all of them are.
    """

    def __init__(self, global_config: dict[str, Any], root_ready: frozenset[str] = frozenset()):
        from gym_compose.server.context import HEAD_INSTANCE, SERVER_TYPES

        # NeMo Gym-runtime servers have no gym-compose route: any answer on `/` means ready
        self.root_ready = root_ready
        self.pending: dict[str, str] = {}
        for name, entry in global_config.items():
            if name == HEAD_INSTANCE or not isinstance(entry, dict):
                continue
            for server_type in SERVER_TYPES:
                implementations = entry.get(server_type)
                if isinstance(implementations, dict) and len(implementations) == 1:
                    spec = next(iter(implementations.values())) or {}
                    if spec.get("host") and spec.get("port") is not None:
                        self.pending[name] = f"http://{spec['host']}:{spec['port']}"
        self.ready = not self.pending
        self._task: asyncio.Task | None = None

    @property
    def reason(self) -> str:
        return "waiting for servers: " + ", ".join(sorted(self.pending))

    def start(self) -> None:
        if not self.ready:
            self._task = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        from gym_compose.net.web import READY_PATH

        class ProbeFailed(Exception):
            pass

        async def is_ready(name: str, url: str) -> bool:
            try:
                if name in self.root_ready:
                    return await http_status(url, "/", PEER_PROBE_TIMEOUT_SECONDS) is not None
                return await http_status(url, READY_PATH, PEER_PROBE_TIMEOUT_SECONDS) == 200
            except Exception as error:  # noqa: BLE001 - e.g. an invalid URL: it never gets ready
                raise ProbeFailed(f"probing server {name} at {url} failed: "
                                  f"{type(error).__name__}: {error}") from error

        try:
            while self.pending:
                names = list(self.pending)
                answers = await asyncio.gather(*(is_ready(name, self.pending[name]) for name in names))
                for name, ready in zip(names, answers, strict=True):
                    if ready:
                        del self.pending[name]
                if self.pending:
                    await asyncio.sleep(PEER_POLL_SECONDS)
        except ProbeFailed as error:
            _give_up(str(error))
            return
        except Exception as error:  # noqa: BLE001 - the head must not stay unready forever without a word
            _give_up(f"probing servers {', '.join(sorted(self.pending))} failed: {type(error).__name__}: {error}")
            return
        self.ready = True


async def http_status(url: str, path: str, timeout: float) -> int | None:
    """One `GET path` (HTTP/1.0) to the server at `url`: its status, or None when nothing (or no
    HTTP) answered. A raw connection rather than httpx: the head would import httpx for this alone
    (docs/performance.md), all servers starting beside it. An invalid URL raises."""
    parts = urlsplit(url)
    host, port = parts.hostname, parts.port  # .port raises ValueError when out of range
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except OSError:  # refused, unreachable, timed out (TimeoutError is an OSError)
        return None
    try:
        writer.write(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode("latin-1"))
        status_line = await asyncio.wait_for(reader.readline(), timeout)
    except OSError:
        return None
    finally:
        writer.close()
    words = status_line.split()
    if len(words) < 2 or not words[0].startswith(b"HTTP/") or not words[1].isdigit():
        return None
    return int(words[1])
