"""The broker's HTTP API (JSON; every /v1 route needs a server's token, see gym_compose/sandbox/tokens.py).

    POST   /v1/sandboxes                     lease (LeaseRequest)
                                             -> 201 {sandbox_id, image, workdir, warm, start_s}
    GET    /v1/sandboxes                     the caller's live sandboxes (the project secret: all of them)
    GET    /v1/sandboxes/{id}                status
    DELETE /v1/sandboxes/{id}                release: the sandbox is destroyed
    POST   /v1/sandboxes/{id}/exec           run a command (ExecRequest)
                                             -> {return_code, stdout, stderr, error_type, ...}
    PUT    /v1/sandboxes/{id}/files?path=P   write the body to P (&mode=octal)
    GET    /v1/sandboxes/{id}/files?path=P   read P
    GET    /v1/stats                         counts and limits

A server holding another's grant for a sandbox (header x-gym-sandbox-grant, from the owner's lease)
may use that sandbox's status, exec and files routes; only the owner releases it.

Errors: 401 no or wrong token, 403 refused by the plan, 404 unknown sandbox, 410 the sandbox is dead
(`reason` says why: "sandbox OOM-killed (memory 512m)", ...), 422 a body with unknown or bad fields,
502 a sandbox that could not start, 503 no slot free within the ready timeout.
"""

from __future__ import annotations

import hmac
import logging
from contextlib import asynccontextmanager
from typing import Optional

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gym_compose.net.web import READY_PATH, json_response, read_json_object, validation_error_response
from gym_compose.sandbox.broker.broker_errors import BrokerError, SandboxGone, Unauthorized
from gym_compose.sandbox.broker.pool import SandboxPool
from gym_compose.sandbox.policy import ExecRequest, LeaseRequest
from gym_compose.sandbox.tokens import GRANT_HEADER, SERVER_HEADER, grant_matches, sandbox_grant, token_matches

LOG = logging.getLogger("gym_compose.sandbox.broker")
FILE_CHUNK = 4 << 20
MAX_FILE_BYTES = 128 << 20  # one upload or download (the broker holds it in memory)
ADMIN = "*"


def build_app(pool: SandboxPool, project_secret: str) -> Starlette:
    def caller(request: Request) -> Optional[str]:
        """The server instance the token belongs to; None for the project secret itself (admin)."""
        presented = request.headers.get("authorization", "")
        token = presented[7:] if presented.lower().startswith("bearer ") else ""
        if token and hmac.compare_digest(token, project_secret):
            return None
        server = request.headers.get(SERVER_HEADER, "")
        if not token or not server or server == ADMIN or not token_matches(project_secret, server, token):
            raise Unauthorized()
        return server

    def guarded(handler):
        async def endpoint(request: Request) -> Response:
            try:
                server = caller(request)
                return await handler(request, server)
            except ValidationError as error:
                return validation_error_response(error)
            except SandboxGone as error:
                return json_response({"error": str(error), "reason": str(error), "error_type": "sandbox"}, 410)
            except BrokerError as error:
                return json_response({"error": str(error)}, error.status)

        return endpoint

    def sandbox_of(request: Request, server: Optional[str]):
        """The sandbox a request names: the caller's own, or one whose grant it presents."""
        sandbox_id = request.path_params["sandbox_id"]
        grant = request.headers.get(GRANT_HEADER, "")
        if grant and server is not None and grant_matches(project_secret, sandbox_id, grant):
            return pool.get(None, sandbox_id)
        return pool.get(server, sandbox_id)

    async def lease(request: Request, server: Optional[str]) -> Response:
        if server is None:
            return json_response({"error": "lease as a server (its own token), not with the project secret"}, 403)
        body = LeaseRequest.model_validate(await read_json_object(request))
        sandbox, warm = await pool.lease(server, body)
        return json_response({"sandbox_id": sandbox.id, "image": sandbox.image, "workdir": sandbox.workdir,
                              "warm": warm, "start_s": round(sandbox.start_s, 4), "uid": sandbox.uid,
                              "timeout_s": sandbox.policy.timeout_s,
                              "grant": sandbox_grant(project_secret, sandbox.id)}, 201)

    async def listing(request: Request, server: Optional[str]) -> Response:
        return json_response({"sandboxes": pool.list(server)})

    async def status(request: Request, server: Optional[str]) -> Response:
        sandbox = sandbox_of(request, server)
        return json_response({**sandbox.describe(), "status": "running"})

    async def release(request: Request, server: Optional[str]) -> Response:
        sandbox_id = request.path_params["sandbox_id"]
        try:
            sandbox = pool.get(server, sandbox_id)
        except SandboxGone:
            return json_response({"released": False, "reason": pool.tombstones.get(sandbox_id)})
        await pool.release(sandbox)
        return json_response({"released": True})

    async def run(request: Request, server: Optional[str]) -> Response:
        sandbox = sandbox_of(request, server)
        body = ExecRequest.model_validate(await read_json_object(request))
        return json_response(await pool.exec(sandbox, body))

    async def put_file(request: Request, server: Optional[str]) -> Response:
        sandbox = sandbox_of(request, server)
        path = request.query_params.get("path")
        if not path:
            return json_response({"error": "query parameter `path` is required"}, 422)
        mode = request.query_params.get("mode")
        if int(request.headers.get("content-length") or 0) > MAX_FILE_BYTES:
            return json_response({"error": f"file larger than {MAX_FILE_BYTES} bytes; split it, or build it "
                                           "into the sandbox image"}, 413)
        data = await request.body()
        if len(data) > MAX_FILE_BYTES:
            return json_response({"error": f"file larger than {MAX_FILE_BYTES} bytes"}, 413)
        size = await pool.write_file(sandbox, path, data, int(mode, 8) if mode else None, FILE_CHUNK)
        return json_response({"size": size})

    async def get_file(request: Request, server: Optional[str]) -> Response:
        sandbox = sandbox_of(request, server)
        path = request.query_params.get("path")
        if not path:
            return json_response({"error": "query parameter `path` is required"}, 422)
        data = await pool.read_file(sandbox, path, FILE_CHUNK, MAX_FILE_BYTES)
        return Response(data, media_type="application/octet-stream")

    async def stats(request: Request, server: Optional[str]) -> Response:
        return json_response(pool.stats())

    async def root(request: Request) -> Response:
        return json_response({"status": "ok"})

    async def ready(request: Request) -> Response:
        return json_response({"ready": pool.ready}, 200 if pool.ready else 503)

    @asynccontextmanager
    async def lifespan(app):
        await pool.open()
        try:
            yield
        finally:
            await pool.close()

    return Starlette(lifespan=lifespan, routes=[
        Route("/", root, methods=["GET"]),
        Route(READY_PATH, ready, methods=["GET"]),
        Route("/v1/stats", guarded(stats), methods=["GET"]),
        Route("/v1/sandboxes", guarded(lease), methods=["POST"]),
        Route("/v1/sandboxes", guarded(listing), methods=["GET"]),
        Route("/v1/sandboxes/{sandbox_id}", guarded(status), methods=["GET"]),
        Route("/v1/sandboxes/{sandbox_id}", guarded(release), methods=["DELETE"]),
        Route("/v1/sandboxes/{sandbox_id}/exec", guarded(run), methods=["POST"]),
        Route("/v1/sandboxes/{sandbox_id}/files", guarded(put_file), methods=["PUT"]),
        Route("/v1/sandboxes/{sandbox_id}/files", guarded(get_file), methods=["GET"]),
    ])
