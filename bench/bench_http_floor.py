"""The framework floor of one HTTP exchange: CPU per request of a one-route server (the servers'
own `web.serve`: uvicorn, uvloop, httptools, Starlette) and of the peer client (`HttpClient`),
keep-alive on loopback, at --parallel requests in flight.

    .venv/bin/python -m bench.bench_http_floor [--requests 8000] [--parallel 8] [--rounds 3]
        [--servers uvicorn granian]

`--servers` interleaves rounds of other ASGI servers serving the same Starlette app (granian, a
Rust HTTP server: `pip install granian` into the venv first; its embedded server in the process, one
runtime thread, on uvloop, as `web.serve` runs uvicorn). CPU counts every thread of the server.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from gym_compose.net.http_client import HttpClient

REPO = Path(__file__).resolve().parents[1]

TICKS = os.sysconf("SC_CLK_TCK")
APP = textwrap.dedent("""
    from starlette.applications import Starlette
    from starlette.routing import Route
    from gym_compose.net.web import json_response, serve
    BODY = {"id": "resp_1", "output": [{"type": "message", "content": "x" * 600}]}
    async def answer(request):
        await request.body()
        return json_response(BODY)
    app = Starlette(routes=[Route("/x", answer, methods=["POST"])])
""")
SERVERS = {
    "uvicorn": lambda port: ["-c", APP + f"serve(app, '127.0.0.1', {port})"],
    "granian": lambda port: ["-c", APP + "from granian.server.embed import Server\n" + "import asyncio, uvloop\n"
                             "from granian.constants import HTTPModes, Interfaces\n"
                             f"server = Server(app, address='127.0.0.1', port={port}, interface=Interfaces.ASGI, "
                             "http=HTTPModes.http1, websockets=False, log_level='warning')\n"
                             "uvloop.install()\nasyncio.run(server.serve())"],
}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


async def drive(port: int, total: int, parallel: int) -> None:
    client = HttpClient()

    async def worker() -> None:
        for _ in range(total // parallel):
            await client.request("POST", "127.0.0.1", port, "/x", json={"a": 1})

    await asyncio.gather(*(worker() for _ in range(parallel)))
    await client.aclose()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_listening(server: subprocess.Popen, port: int, deadline: float) -> None:
    while time.monotonic() < deadline and server.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"the server did not start (exit code {server.poll()})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=8000)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--servers", nargs="+", choices=sorted(SERVERS), default=["uvicorn"],
                        help="ASGI servers to compare, one round of each in turn")
    args = parser.parse_args()
    for _ in range(args.rounds):
        for kind in args.servers:
            measure(kind, args.requests, args.parallel)
    return 0


def measure(kind: str, requests: int, parallel: int) -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    server = subprocess.Popen([sys.executable, *SERVERS[kind](port)], env=env)
    try:
        wait_listening(server, port, time.monotonic() + 30)
        asyncio.run(drive(port, 800, parallel))  # warm-up
        server_before, client_before, started = cpu_seconds(server.pid), time.process_time(), time.monotonic()
        asyncio.run(drive(port, requests, parallel))
        wall = time.monotonic() - started
        per = 1e6 / requests
        print(f"{kind:8} server {per * (cpu_seconds(server.pid) - server_before):6.1f} µs/request   "
              f"client {per * (time.process_time() - client_before):6.1f} µs/request   "
              f"{requests / wall:7.0f} requests/s   load {Path('/proc/loadavg').read_text().split()[0]}",
              flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    raise SystemExit(main())
