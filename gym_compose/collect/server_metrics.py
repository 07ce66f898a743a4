"""The aggregate metrics file, as NeMo Gym 0.7's collector makes it: one `/aggregate_metrics` call per server.

Rollouts are grouped by the environment server each ran through and posted there (heavy fields
stripped, `response.usage` kept); the environment server forwards to the agent or resources
server, so a server's own `compute_metrics` / `get_key_metrics` shape its entry. A server without
the route (404/405) gets the same computation done here, without its hooks. On top of NeMo Gym's
entry, when rows were repeated and the server reported no `pass@` metric, the default pass@k,
pass@1[avg-of-k] and majority@k of the reward are added (docs/collect.md).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from gym_compose.collect.routing import EnvironmentServer, RoutingTable
from gym_compose.metrics.agent_metrics import pass_at_k_metrics
from gym_compose.metrics.aggregate import compute_aggregate_metrics
from gym_compose.metrics.row_keys import ENVIRONMENT_SERVER, TASK_INDEX, rollout_key, sortable, sortable_rollout_key

AGGREGATE_METRICS_PATH = "/aggregate_metrics"
HEAVY_FIELDS = ("response", "responses_create_params", "ng_agent_observations", "ng_model_call_capture",
                "ng_trajectory")
ENTRY_FIELDS = ("agent_metrics", "key_metrics", "group_level_metrics", "repeat_level_metrics")

Post = Callable[[str, dict[str, Any]], "tuple[int, Any]"]


def stripped(result: dict[str, Any]) -> dict[str, Any]:
    """What NeMo Gym posts for one rollout: everything but the heavy fields, plus response usage/incomplete_details."""
    entry = {k: v for k, v in result.items() if k not in HEAVY_FIELDS}
    response = result.get("response") or {}
    kept = {k: response[k] for k in ("usage", "incomplete_details") if isinstance(response, dict)
            and response.get(k) is not None}
    if kept:
        entry["response"] = kept
    return entry


def aggregate_through_servers(results: list[dict[str, Any]], rows: list[dict[str, Any]], routing: RoutingTable,
                              repeated: bool, post: Post | None = None,
                              ask_servers: bool = True) -> list[dict[str, Any]]:
    """One entry per environment server, in order of its first rollout. `ask_servers=False`
    computes every entry here, without the servers' own hooks."""
    post = post or post_json
    server_of = {rollout_key(row): routing.server_for_row(row, "materialized row") for row in rows}
    groups: dict[str, list[dict[str, Any]]] = {}
    servers: dict[str, EnvironmentServer] = {}
    for result in sorted(results, key=sortable_rollout_key):
        server = server_of.get(rollout_key(result)) or routing.server_for_row(result, "rollout")
        servers[server.instance] = server
        groups.setdefault(server.instance, []).append(result)
    entries = []
    for instance, group in groups.items():
        server = servers[instance]
        verify_responses = [stripped(r) for r in group]
        answer = _ask(server, verify_responses, post) if ask_servers else compute_aggregate_metrics(verify_responses)
        entry = {"agent_ref": {"name": _label(server, group)}, ENVIRONMENT_SERVER: instance,
                 **{field: answer.get(field, [] if field.endswith("_level_metrics") else {}) for field in ENTRY_FIELDS}}
        if answer.get("perf_summary") is not None:
            entry["perf_summary"] = answer["perf_summary"]
        if repeated and not any(key.startswith("pass@") for key in entry["agent_metrics"]):
            by_task: dict[Any, list[dict[str, Any]]] = {}
            for result in group:
                by_task.setdefault(result[TASK_INDEX], []).append(result)
            entry["agent_metrics"].update(pass_at_k_metrics([by_task[t] for t in sorted(by_task, key=sortable)]))
        entries.append(entry)
    return entries


def _ask(server: EnvironmentServer, verify_responses: list[dict[str, Any]], post: Post) -> dict[str, Any]:
    body = {"verify_responses": verify_responses}
    try:
        status, answer = post(server.base_url + AGGREGATE_METRICS_PATH, body)
    except (OSError, TimeoutError, ValueError) as error:  # PeerConnectError, PeerTimeout among them
        status, answer = None, f"{type(error).__name__}: {error}"
    if status == 200 and isinstance(answer, dict):
        return answer
    if status not in (404, 405):
        print(f"collect: warning: {server.instance} answered /aggregate_metrics with"
              f" {status or 'no answer'} ({str(answer)[:300]}); its metrics are computed here,"
              " without the server's own compute_metrics", file=sys.stderr)
    return compute_aggregate_metrics(verify_responses)


def _label(server: EnvironmentServer, group: list[dict[str, Any]]) -> str:
    for result in group:
        agent_ref = result.get("agent_ref")
        if isinstance(agent_ref, dict) and agent_ref.get("name") is not None:
            return str(agent_ref["name"])
    return server.agents[0] if len(server.agents) == 1 else server.instance


def post_json(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    """POST `body` with the servers' own HTTP client (the collector's); (status, decoded JSON or text)."""
    from gym_compose.net.http_client import HttpClient

    parts = urlsplit(url)

    async def post() -> tuple[int, Any]:
        client = HttpClient(timeout=600.0, connect_timeout=30.0)
        try:
            answer = await client.request("POST", parts.hostname or "", parts.port or 80, parts.path, json=body)
        finally:
            await client.aclose()
        try:
            return answer.status, answer.json()
        except ValueError:
            return answer.status, answer.body.decode("utf-8", "replace")

    return asyncio.run(post())
