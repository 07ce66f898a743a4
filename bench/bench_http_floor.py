"""The framework floor of one HTTP exchange: CPU per request of a one-route server (the servers'
own `web.serve`: uvicorn, uvloop, httptools, Starlette) and of the peer client (`HttpClient`),
keep-alive on loopback, at --parallel requests in flight.

    .venv/bin/python -m bench.bench_http_floor [--requests 8000] [--parallel 8] [--rounds 3]
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
SERVER = textwrap.dedent("""
    import sys
    from starlette.applications import Starlette
    from starlette.routing import Route
    from gym_compose.net.web import json_response, serve
    BODY = {"id": "resp_1", "output": [{"type": "message", "content": "x" * 600}]}
    async def answer(request):
        await request.body()
        return json_response(BODY)
    serve(Starlette(routes=[Route("/x", answer, methods=["POST"])]), "127.0.0.1", int(sys.argv[1]))
""")


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


def wait_listening(port: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit("the server did not start")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=8000)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for _ in range(args.rounds):
        port = free_port()
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], env=env)
        try:
            wait_listening(port, time.monotonic() + 30)
            asyncio.run(drive(port, 800, args.parallel))  # warm-up
            server_before, client_before, started = cpu_seconds(server.pid), time.process_time(), time.monotonic()
            asyncio.run(drive(port, args.requests, args.parallel))
            wall = time.monotonic() - started
            per = 1e6 / args.requests
            print(f"server {per * (cpu_seconds(server.pid) - server_before):6.1f} µs/request   "
                  f"client {per * (time.process_time() - client_before):6.1f} µs/request   "
                  f"{args.requests / wall:7.0f} requests/s   load {Path('/proc/loadavg').read_text().split()[0]}",
                  flush=True)
        finally:
            server.terminate()
            server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
