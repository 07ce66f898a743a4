"""A stand-in for the Kubernetes API server (and a kubelet) on loopback, for the broker's Kubernetes
backend: it records every request, keeps pods, and runs each pod's command as a local process,
with its stdio behind the pod's `attach` and its execs behind `exec`, both over WebSockets in the
`v4.channel.k8s.io` protocol. The broker's pool, channel and the real sandbox agent run on top."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.support.ports import free_port

PROTOCOL = "v4.channel.k8s.io"
TOKEN = "fake-service-account-token"
NAMESPACE = "gym"


class FakeKubernetes:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.pods: dict[str, dict[str, Any]] = {}
        self.processes: dict[str, asyncio.subprocess.Process] = {}
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        prefix = "/api/v1/namespaces/{namespace}/pods"
        self.app = Starlette(routes=[
            Route(prefix, self.pods_route, methods=["GET", "POST"]),
            Route(prefix + "/{name}", self.pod_route, methods=["GET", "DELETE"]),
            WebSocketRoute(prefix + "/{name}/attach", self.attach),
            WebSocketRoute(prefix + "/{name}/exec", self.exec),
        ])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "FakeKubernetes":
        self.port = free_port()
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning", ws="websockets-sansio")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the fake Kubernetes API did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        for process in self.processes.values():
            if process.returncode is None:
                process.kill()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _record(self, method: str, path: str, query: Any, headers: Any, body: Any = None) -> None:
        self.requests.append({"method": method, "path": path, "query": list(query.multi_items()),
                              "authorization": headers.get("authorization"), "body": body})

    def _authorized(self, headers: Any) -> bool:
        return headers.get("authorization") == f"Bearer {TOKEN}"

    # -- REST ------------------------------------------------------------------------------------

    async def pods_route(self, request: Request) -> JSONResponse:
        body = await request.json() if request.method == "POST" else None
        self._record(request.method, request.url.path, request.query_params, request.headers, body)
        if not self._authorized(request.headers):
            return JSONResponse({"kind": "Status", "message": "Unauthorized"}, 401)
        if request.method == "GET":
            wanted = dict(pair.split("=", 1) for pair in request.query_params.get("labelSelector", "").split(",")
                          if pair)
            items = [pod for pod in self.pods.values()
                     if all(pod["metadata"]["labels"].get(k) == v for k, v in wanted.items())]
            return JSONResponse({"kind": "PodList", "items": items})
        name = body["metadata"]["name"]
        if name in self.pods:
            return JSONResponse({"kind": "Status", "message": f'pods "{name}" already exists'}, 409)
        pod = {**body, "status": {"phase": "Pending"}}
        self.pods[name] = pod
        await self._run(name)
        return JSONResponse(pod, 201)

    async def _run(self, name: str) -> None:
        """The kubelet: the container's command, stdin open, in its working folder."""
        container = self.pods[name]["spec"]["containers"][0]
        env = {item["name"]: item["value"] for item in container.get("env", [])}
        process = await asyncio.create_subprocess_exec(
            *container["command"], stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, cwd=container.get("workingDir"), env={"PATH": "/usr/bin:/bin", **env})
        self.processes[name] = process
        self.pods[name]["status"] = {"phase": "Running", "containerStatuses": [
            {"name": container["name"], "state": {"running": {"startedAt": "now"}}}]}

        async def reap() -> None:
            code = await process.wait()
            if name in self.pods:
                self.pods[name]["status"] = {"phase": "Succeeded" if code == 0 else "Failed", "containerStatuses": [
                    {"name": container["name"], "state": {"terminated": {"exitCode": code, "reason": "Error"}}}]}

        asyncio.get_running_loop().create_task(reap())

    async def pod_route(self, request: Request) -> JSONResponse:
        body = await request.json() if request.method == "DELETE" and await request.body() else None
        self._record(request.method, request.url.path, request.query_params, request.headers, body)
        if not self._authorized(request.headers):
            return JSONResponse({"kind": "Status", "message": "Unauthorized"}, 401)
        name = request.path_params["name"]
        if name not in self.pods:
            return JSONResponse({"kind": "Status", "message": f'pods "{name}" not found'}, 404)
        if request.method == "DELETE":
            process = self.processes.pop(name, None)
            if process is not None and process.returncode is None:
                process.kill()
            return JSONResponse(self.pods.pop(name))
        return JSONResponse(self.pods[name])

    # -- streams ---------------------------------------------------------------------------------

    async def _accept(self, websocket: WebSocket) -> asyncio.subprocess.Process | None:
        self._record("WEBSOCKET", websocket.url.path, websocket.query_params, websocket.headers)
        if not self._authorized(websocket.headers) or PROTOCOL not in websocket.headers.get(
                "sec-websocket-protocol", ""):
            await websocket.close(code=4001)
            return None
        process = self.processes.get(websocket.path_params["name"])
        if process is None:
            await websocket.close(code=4004)
            return None
        await websocket.accept(subprotocol=PROTOCOL)
        return process

    async def attach(self, websocket: WebSocket) -> None:
        process = await self._accept(websocket)
        if process is None:
            return
        assert process.stdin and process.stdout and process.stderr

        async def forward(stream: asyncio.StreamReader, channel: int) -> None:
            while chunk := await stream.read(65536):
                await websocket.send_bytes(bytes([channel]) + chunk)

        outputs = asyncio.gather(forward(process.stdout, 1), forward(process.stderr, 2))
        try:
            while True:
                message = await websocket.receive_bytes()
                if message[:1] == b"\x00":
                    process.stdin.write(message[1:])
                    await process.stdin.drain()
        except (WebSocketDisconnect, ConnectionError, RuntimeError):
            pass
        finally:
            process.stdin.close()  # stdinOnce: the attach ending closes the container's stdin
            outputs.cancel()

    async def exec(self, websocket: WebSocket) -> None:
        if await self._accept(websocket) is None:
            return
        name = websocket.path_params["name"]
        command = websocket.query_params.getlist("command")
        container = self.pods[name]["spec"]["containers"][0]
        process = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.PIPE,
                                                       stderr=asyncio.subprocess.PIPE, cwd=container.get("workingDir"))
        out, err = await process.communicate()
        await websocket.send_bytes(b"\x01" + out)
        await websocket.send_bytes(b"\x02" + err)
        status = {"status": "Success"} if process.returncode == 0 else {
            "status": "Failure", "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(process.returncode)}]}}
        await websocket.send_bytes(b"\x03" + json.dumps(status).encode())
        await websocket.close()
