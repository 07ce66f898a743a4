"""The broker's HTTP API (JSON; every /v1 route needs a server's token, see gym_compose/sandbox/tokens.py).

    POST   /v1/sandboxes                     lease (LeaseRequest)
                                             -> 201 {sandbox_id, image, workdir, warm, start_s}
    GET    /v1/sandboxes                     the caller's live sandboxes (the project secret: all of them)
    GET    /v1/sandboxes/{id}                status
    DELETE /v1/sandboxes/{id}                release: the sandbox is destroyed -> {released, cost}
    POST   /v1/sandboxes/{id}/exec           run a command (ExecRequest)
                                             -> {return_code, stdout, stderr, error_type, ...}
    PUT    /v1/sandboxes/{id}/files?path=P   write the body to P (&mode=octal)
    GET    /v1/sandboxes/{id}/files?path=P   read P
    POST   /v1/sandboxes/{id}/snapshot       its filesystem as a snapshot -> 201 {snapshot_id, image, took_s, ...}
    POST   /v1/sandboxes/{id}/fork           a new snapshot of it (or ForkRequest.snapshot), then n sandboxes
                                             of it (ForkRequest) -> 201 {snapshot_id, forks: [lease, ...]}
    POST   /v1/sandboxes/{id}/restore        its filesystem back to a snapshot (RestoreRequest) -> {took_s}
    POST   /v1/sandboxes/{id}/pause          freeze its processes -> {state, changed}
    POST   /v1/sandboxes/{id}/resume         thaw them -> {state, changed}
    POST   /v1/sandboxes/{id}/phase          move it to another egress phase (PhaseRequest)
                                             -> {phase, previous, changed, took_s}
    POST   /v1/sandboxes/{id}/checkpoint     snapshot it as its server's checkpoint KEY, with the
                                             caller's state (CheckpointRequest) -> 201 {key, snapshot_id, ...}
    POST   /v1/sandboxes/{id}/checkpoint/restore   its filesystem back to checkpoint KEY of its
                                             server (CheckpointKey) -> {key, found, state, snapshot_id, took_s}
    POST   /v1/sandboxes/{id}/checkpoint/forget    remove checkpoint KEY -> {key, forgotten}
    GET    /v1/snapshots                     the caller's snapshots
    POST   /v1/snapshots/{id}/fork           n sandboxes of a snapshot (ForkRequest) -> 201 {snapshot_id, forks}
    DELETE /v1/snapshots/{id}                remove a snapshot (sandboxes forked from it run on)
    GET    /v1/stats                         counts and limits

Every server names the start of its container (header x-gym-compose-caller, net/incarnation.py):
the sandboxes an earlier start of the same container leased are given back when a later one calls.

A server holding another's grant for a sandbox (header x-gym-sandbox-grant, from the owner's lease)
may use that sandbox's status, exec, files and checkpoint routes (an agent checkpoints the
sandbox it works in; checkpoints.py); only the owner releases, snapshots, forks,
restores, pauses, resumes or moves it to another phase. The project secret (the CLI) may do all
of these to any sandbox; forks belong to the snapshot's server.

Errors: 401 no or wrong token, 403 refused by the plan, 404 unknown sandbox or snapshot, 409 a
paused sandbox asked for a command (or one being restored), 410 the sandbox is dead (`reason` says
why: "sandbox OOM-killed (memory 512m)", ...), 422 a body with unknown or bad fields, 501 not
possible on this backend (snapshots and pause on Kubernetes), 502 a sandbox that could not start,
503 no slot free within the ready timeout (or the snapshot budget spent).
"""

from __future__ import annotations

import hmac
import logging
from contextlib import asynccontextmanager
from typing import Optional

import orjson
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gym_compose.net.incarnation import CALLER_HEADER
from gym_compose.net.web import READY_PATH, json_response, read_json_object, validation_error_response
from gym_compose.sandbox.broker import branching
from gym_compose.sandbox.broker.broker_errors import BrokerError, SandboxGone, Unauthorized
from gym_compose.sandbox.broker.checkpoints import checked_key
from gym_compose.sandbox.broker.pool import SandboxPool
from gym_compose.sandbox.policy import (
    CheckpointKey,
    CheckpointRequest,
    ExecRequest,
    ForkRequest,
    LeaseRequest,
    PhaseRequest,
    RestoreRequest,
)
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
                if server is not None:
                    pool.caller_seen(request.headers.get(CALLER_HEADER))
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
        pool.leased_for([sandbox], request.headers.get(CALLER_HEADER))
        return json_response(branching.lease_answer(sandbox, sandbox_grant(project_secret, sandbox.id), warm), 201)

    def own_sandbox(request: Request, server: Optional[str]):
        """The caller's own sandbox (a grant does not reach these routes)."""
        return pool.get(server, request.path_params["sandbox_id"])

    async def take_snapshot(request: Request, server: Optional[str]) -> Response:
        sandbox = own_sandbox(request, server)
        return json_response((await branching.snapshot(pool, sandbox)).describe(), 201)

    async def forks_answer(request: Request, snapshot, body: ForkRequest) -> Response:
        forks = await branching.fork(pool, snapshot, body)
        pool.leased_for([sandbox for sandbox, _ in forks], request.headers.get(CALLER_HEADER))
        return json_response({"snapshot_id": snapshot.id, "forks": [
            branching.lease_answer(sandbox, sandbox_grant(project_secret, sandbox.id), False, took)
            for sandbox, took in forks]}, 201)

    async def fork_sandbox(request: Request, server: Optional[str]) -> Response:
        sandbox = own_sandbox(request, server)
        body = ForkRequest.model_validate(await read_json_object(request))
        snapshot = (pool.snapshots.get(sandbox.server, body.snapshot) if body.snapshot
                    else await branching.snapshot(pool, sandbox))
        return await forks_answer(request, snapshot, body)

    async def fork_snapshot(request: Request, server: Optional[str]) -> Response:
        snapshot = pool.snapshots.get(server, request.path_params["snapshot_id"])
        body = ForkRequest.model_validate(await read_json_object(request))
        if body.snapshot and body.snapshot != snapshot.id:
            return json_response({"error": "the route names the snapshot; leave `snapshot` out of the body"}, 422)
        return await forks_answer(request, snapshot, body)

    async def restore(request: Request, server: Optional[str]) -> Response:
        sandbox = own_sandbox(request, server)
        body = RestoreRequest.model_validate(await read_json_object(request))
        snapshot = pool.snapshots.get(sandbox.server, body.snapshot)
        took = await branching.restore(pool, sandbox, snapshot)
        return json_response({"sandbox_id": sandbox.id, "snapshot_id": snapshot.id, "took_s": round(took, 4)})

    async def pause(request: Request, server: Optional[str]) -> Response:
        return json_response(await branching.pause(pool, own_sandbox(request, server)))

    async def resume(request: Request, server: Optional[str]) -> Response:
        return json_response(await branching.resume(pool, own_sandbox(request, server)))

    async def move(request: Request, server: Optional[str]) -> Response:
        sandbox = own_sandbox(request, server)
        body = PhaseRequest.model_validate(await read_json_object(request))
        return json_response(await branching.move_to_phase(pool, sandbox, body.phase))

    async def checkpoint(request: Request, server: Optional[str]) -> Response:
        sandbox = sandbox_of(request, server)
        body = CheckpointRequest.model_validate(await read_json_object(request))
        taken = await branching.checkpoint(pool, sandbox, checked_key(body.key), orjson.dumps(body.state))
        return json_response(taken, 201)

    async def restore_checkpoint(request: Request, server: Optional[str]) -> Response:
        sandbox = sandbox_of(request, server)
        body = CheckpointKey.model_validate(await read_json_object(request))
        return json_response(await branching.restore_checkpoint(pool, sandbox, checked_key(body.key)))

    async def forget_checkpoint(request: Request, server: Optional[str]) -> Response:
        sandbox = sandbox_of(request, server)
        body = CheckpointKey.model_validate(await read_json_object(request))
        return json_response({"key": body.key,
                              "forgotten": await pool.checkpoints.forget(sandbox.server, checked_key(body.key))})

    async def snapshots(request: Request, server: Optional[str]) -> Response:
        return json_response({"snapshots": pool.snapshots.list(server)})

    async def delete_snapshot(request: Request, server: Optional[str]) -> Response:
        await pool.snapshots.delete(pool.snapshots.get(server, request.path_params["snapshot_id"]))
        return json_response({"deleted": True})

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
        return json_response({"released": True, "cost": await pool.release(sandbox)})

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
        Route("/v1/sandboxes/{sandbox_id}/snapshot", guarded(take_snapshot), methods=["POST"]),
        Route("/v1/sandboxes/{sandbox_id}/fork", guarded(fork_sandbox), methods=["POST"]),
        Route("/v1/sandboxes/{sandbox_id}/restore", guarded(restore), methods=["POST"]),
        Route("/v1/sandboxes/{sandbox_id}/pause", guarded(pause), methods=["POST"]),
        Route("/v1/sandboxes/{sandbox_id}/resume", guarded(resume), methods=["POST"]),
        Route("/v1/sandboxes/{sandbox_id}/phase", guarded(move), methods=["POST"]),
        Route("/v1/sandboxes/{sandbox_id}/checkpoint", guarded(checkpoint), methods=["POST"]),
        Route("/v1/sandboxes/{sandbox_id}/checkpoint/restore", guarded(restore_checkpoint), methods=["POST"]),
        Route("/v1/sandboxes/{sandbox_id}/checkpoint/forget", guarded(forget_checkpoint), methods=["POST"]),
        Route("/v1/snapshots", guarded(snapshots), methods=["GET"]),
        Route("/v1/snapshots/{snapshot_id}/fork", guarded(fork_snapshot), methods=["POST"]),
        Route("/v1/snapshots/{snapshot_id}", guarded(delete_snapshot), methods=["DELETE"]),
    ])
