"""Rollouts from the host: rows posted to the stack's published environment servers, as the collector does.

Each row goes to `POST /run` of the environment server that fronts its agent (`collect.routing`
on the host view), through the collector's own client and rollout call (`collect.dispatch`): a
rollout that fails comes back as a failure row (`_ng_failure_class`, `_ng_failure_message`, ...),
never as an exception. Rows are numbered (`_ng_task_index`, `_ng_rollout_index`) when they are not.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any

from gym_compose.collect.dispatch import FAILURE_CLASS, run_rollout
from gym_compose.collect.routing import EnvironmentServer, RoutingTable
from gym_compose.collect.server_metrics import aggregate_through_servers
from gym_compose.errors import UserError
from gym_compose.metrics.row_keys import ROLLOUT_INDEX, TASK_INDEX
from gym_compose.net.http_client import HttpClient

DEFAULT_TIMEOUT_SECONDS = 10_800.0  # NeMo Gym's own /run timeout (3 hours)


def is_failure(row: dict[str, Any]) -> bool:
    """Whether a row from `rollouts()` is a failure row rather than a finished rollout."""
    return FAILURE_CLASS in row


def numbered(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with `_ng_task_index` (their position) and `_ng_rollout_index` (0) where they lack them."""
    out = []
    for position, row in enumerate(rows):
        if not isinstance(row, dict):
            raise UserError(f"rows[{position}] is a {type(row).__name__}, not a dataset row (a dict)",
                            hint="pass NeMo Gym dataset rows: {'responses_create_params': {...}, ...}")
        out.append({**row, TASK_INDEX: row.get(TASK_INDEX, position), ROLLOUT_INDEX: row.get(ROLLOUT_INDEX, 0)})
    return out


async def rollouts(routing: RoutingTable, rows: Iterable[dict[str, Any]], parallel: int,
                   timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS) -> AsyncIterator[dict[str, Any]]:
    """Every row's rollout (or failure row), in the order they finish, at most `parallel` at once."""
    if parallel < 1:
        raise UserError(f"parallel must be 1 or more, got {parallel}")
    work = [(routing.server_for_row(row, f"rows[{i}]"), row) for i, row in enumerate(numbered(rows))]
    client = HttpClient(timeout=timeout_seconds, connect_timeout=30.0)
    gate = asyncio.Semaphore(parallel)

    async def one(server: EnvironmentServer, row: dict[str, Any]) -> dict[str, Any]:
        async with gate:
            return (await run_rollout(client, server, row))[1]

    tasks = [asyncio.ensure_future(one(server, row)) for server, row in work]
    try:
        for finished in asyncio.as_completed(tasks):
            yield await finished
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.aclose()


def aggregate_metrics(routing: RoutingTable, results: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """NeMo Gym's aggregate metrics file, one entry per environment server, for finished rollouts
    (failure rows are left out): each server's own `/aggregate_metrics`, as the collector asks it.
    Rows without `_ng_task_index` (e.g. from NeMo Gym's own client) count as one task each."""
    finished = numbered(row for row in results if not is_failure(row))  # rows of another client may lack indices
    repeated = any(row.get(ROLLOUT_INDEX, 0) for row in finished)
    return aggregate_through_servers(finished, [], routing, repeated)
