"""One rollout over HTTP: POST /run to its environment server, and the record that comes of it.

Returns ("ok", rollout row) or ("failed", failure row); never raises for a server's fault, so
one dead server turns its rollouts into failure rows while the run goes on. A failure row names
the cause: for an error answer, the exception type and message of the server where it started
(carried out through every hop in the error body's `cause`), not just the status.
"""

from __future__ import annotations

import asyncio
from functools import lru_cache
from typing import Any, Literal, Optional
from urllib.parse import urlsplit

import orjson

from gym_compose.collect.routing import EnvironmentServer, taskset_of
from gym_compose.contract import ROLLOUT_HEADER, TIME_LEFT_HEADER
from gym_compose.metrics.row_keys import ATTEMPT_INDEX, ENVIRONMENT_SERVER, ROLLOUT_INDEX, TASK_INDEX
from gym_compose.net.http_client import HttpClient, HttpResponse, PeerConnectError, PeerTimeout

REQUEST_FAILED = "agent_request_failed"  # no answer, or a gateway status: the rollout may not have run
RUN_ERROR = "agent_run_error"  # the server answered with an error: the rollout ran and broke
ENVIRONMENT_FAILURE = "environment_server_failure"  # an episode reply that carries a `failure`
FAILURE_CLASS = "_ng_failure_class"
SERVER_EXITED = "server_exited"  # in flight when the host saw a server of the stack die
NOT_RUN_STATUSES = frozenset({429, 502, 503, 504})
MAX_BODY_CHARS = 2000
MAX_CAUSE_CHARS = 500
# a refused connection sent nothing, so it is retried, briefly: a dead server fails its rollouts fast
CONNECT_RETRY_DELAYS_S = (0.1, 0.25, 0.5)

Outcome = tuple[Literal["ok", "failed"], dict[str, Any]]


def request_body(row: dict[str, Any]) -> dict[str, Any]:
    """A flat row goes as it is (NeMo Gym posts the row); a taskset row as an episode request."""
    if taskset_of(row) is None:
        return row
    return {
        "episode_id": {"rollout_id": f"{row[TASK_INDEX]}-{row[ROLLOUT_INDEX]}", "attempt": row.get(ATTEMPT_INDEX, 0)},
        "task": {"task_id": row["task_id"], "task_input": row["task_input"]},
    }


@lru_cache(maxsize=64)
def _address(base_url: str) -> tuple[str, int, str]:
    """(host, port, path of /run) of an environment server's base URL (always plain HTTP, in-network)."""
    parts = urlsplit(base_url)
    return parts.hostname or "", parts.port or 80, parts.path.rstrip("/") + "/run"


def rollout_id(run_id: str, row: dict[str, Any]) -> str:
    """RUN/TASK/ROLLOUT: the same for every attempt of a rollout in one run folder (resume included)."""
    return f"{run_id}/{row.get(TASK_INDEX)}/{row.get(ROLLOUT_INDEX)}"


async def _post_run(client: HttpClient, server: EnvironmentServer, row: dict[str, Any],
                    run_id: Optional[str]) -> HttpResponse:
    content = orjson.dumps(request_body(row))
    host, port, path = _address(server.base_url)
    headers = {TIME_LEFT_HEADER: f"{client.timeout:.3f}"}
    if run_id is not None:
        headers[ROLLOUT_HEADER] = rollout_id(run_id, row)
    for delay in (*CONNECT_RETRY_DELAYS_S, None):
        try:
            return await client.request("POST", host, port, path, content=content, headers=headers)
        except PeerConnectError:
            if delay is None:
                raise
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")


async def run_rollout(client: HttpClient, server: EnvironmentServer, row: dict[str, Any],
                      run_id: Optional[str] = None) -> Outcome:
    """One POST /run through `client` (the collector's one pooled keep-alive client); `run_id`
    (the run folder's) names the rollout to the servers (contract.ROLLOUT_HEADER)."""
    status = None
    body = b""
    try:
        response = await _post_run(client, server, row, run_id)
        status, body = response.status, response.body
        if status >= 400:
            error_type, message = describe_error_answer(server, status, body)
            return "failed", failure_row(row, server, RUN_ERROR if status not in NOT_RUN_STATUSES else REQUEST_FAILED,
                                         error_type, message, status, body)
        result = orjson.loads(body)
    except PeerTimeout as error:
        return "failed", failure_row(row, server, REQUEST_FAILED, type(error).__name__,
                                     f"no answer from {server.instance} within the request timeout "
                                     f"({error or 'timed out'})")
    except PeerConnectError as error:
        return "failed", failure_row(row, server, REQUEST_FAILED, type(error).__name__,
                                     f"cannot reach {server.instance} at {server.base_url}: "
                                     f"{error or type(error).__name__}")
    except OSError as error:  # sent, then the connection broke: the server went away mid-rollout
        return "failed", failure_row(row, server, REQUEST_FAILED, type(error).__name__,
                                     f"{server.instance} dropped the connection during POST /run"
                                     f" ({error or type(error).__name__})")
    except orjson.JSONDecodeError as error:
        return "failed", failure_row(row, server, RUN_ERROR, "JSONDecodeError",
                                     f"{server.instance} answered {status} with a body that is not JSON: {error}",
                                     status, body)
    if not isinstance(result, dict):
        return "failed", failure_row(row, server, RUN_ERROR, "UnexpectedResponse",
                                     f"{server.instance} answered with a JSON {type(result).__name__}, not an object",
                                     status, body)
    if taskset_of(row) is not None and _is_episode_response(result):
        if result.get("failure") is not None:
            failure = (result["failure"] if isinstance(result["failure"], dict)
                       else {"failure_reason": str(result["failure"])})
            record = failure_row(row, server, ENVIRONMENT_FAILURE, "EpisodeFailure", str(failure.get("failure_reason")),
                                 status)
            record["_ng_failure_terminal"] = bool(failure.get("terminal", False))
            return "failed", record
        result = dict(result["result"]) if isinstance(result.get("result"), dict) else {"result": result.get("result")}
        result["_ng_task_id"] = row["task_id"]
    return "ok", stamp_identity(result, row)


def describe_error_answer(server: EnvironmentServer, status: int, body: bytes) -> tuple[str, str]:
    """(exception type, message) for an error answer: the cause the body carries, where it started."""
    prefix = f"{server.instance} answered {status}"
    try:
        answer = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        answer = None
    if isinstance(answer, dict):
        raw_cause = answer.get("cause")
        cause: dict[str, Any] = raw_cause if isinstance(raw_cause, dict) else answer
        if isinstance(cause.get("error"), str):
            error_type = str(cause.get("type") or "ServerError")
            where = cause.get("server")
            via = f", via {server.instance}" if where and where != server.instance else ""
            return error_type, f"{_clip(cause['error'])} ({error_type} in {where or server.instance}{via})"
        detail = answer.get("detail")
        if isinstance(detail, list):  # a 422: which fields of the row were wrong
            problems = "; ".join(f"{'.'.join(str(p) for p in entry.get('loc', []))}: {entry.get('msg')}"
                                 for entry in detail if isinstance(entry, dict))
            return "RequestValidationError", _clip(f"{prefix}: the row was refused: {problems}")
        if isinstance(detail, str):
            return "HTTPException", _clip(f"{prefix}: {detail}")
    text = body[:MAX_CAUSE_CHARS].decode("utf-8", "replace").strip()
    return "HTTPStatusError", f"{prefix}" + (f": {text}" if text else " with an empty body")


def _clip(text: str) -> str:
    return text if len(text) <= MAX_CAUSE_CHARS else text[:MAX_CAUSE_CHARS] + "…"


def stopped_failure_row(row: dict[str, Any], server: EnvironmentServer, reason: str) -> dict[str, Any]:
    """The failure row of a rollout in flight when the run was stopped because a server died."""
    return failure_row(row, server, SERVER_EXITED, "ServerExited", f"the run was stopped: {reason}")


def stamp_identity(record: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    record[TASK_INDEX] = row[TASK_INDEX]
    record[ROLLOUT_INDEX] = row[ROLLOUT_INDEX]
    if "agent_ref" in row:
        record["agent_ref"] = row["agent_ref"]
    if ATTEMPT_INDEX in row:
        record[ATTEMPT_INDEX] = row[ATTEMPT_INDEX]
    return record


def failure_row(row: dict[str, Any], server: EnvironmentServer, failure_class: str, error_type: str,
                message: str, status: int | None = None, body: bytes = b"") -> dict[str, Any]:
    record = stamp_identity({}, row)
    record.setdefault(ATTEMPT_INDEX, 0)
    record[ENVIRONMENT_SERVER] = server.instance
    record[FAILURE_CLASS] = failure_class
    record["_ng_failure_type"] = error_type
    record["_ng_failure_message"] = message
    record["_ng_failure_http_status"] = status
    record["_ng_failure_response_body"] = _excerpt(body)
    return record


def _excerpt(body: bytes) -> str | None:
    if not body:
        return None
    text = body[: MAX_BODY_CHARS * 4].decode("utf-8", "replace")
    return text[:MAX_BODY_CHARS] + ("…" if len(text) > MAX_BODY_CHARS else "")


def _is_episode_response(result: dict[str, Any]) -> bool:
    return (isinstance(result.get("episode_id"), dict) and isinstance(result.get("task_id"), dict)
            and ("result" in result or "failure" in result))
