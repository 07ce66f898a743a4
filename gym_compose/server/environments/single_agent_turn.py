"""single_agent_turn: seed the resources session, ask the agent for one response, verify, close.

Accepts a flat dataset row or NeMo Gym's task form `{episode_id, task: {task_id, task_input}}`
(the row is then `task_input`, with `task_data` fields merged in).
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from gym_compose.net.web import json_response, read_json_object
from gym_compose.server.agents.common import (
    RowError,
    agent_model_reads_task_header,
    check_row,
    global_config_of,
    row_error_response,
    task_header,
)
from gym_compose.server.aggregation import aggregate_metrics_forwarding_route
from gym_compose.server.base import BaseServer, BaseServerConfig, ServerRef

LOG = logging.getLogger("gym_compose.server.single_agent_turn")


class SingleAgentTurnConfig(BaseServerConfig):
    agent_server: ServerRef
    resources_server: ServerRef


def row_of(body: dict[str, Any]) -> dict[str, Any]:
    task = body.get("task")
    if not isinstance(task, dict):
        return body
    row = dict(task.get("task_input") or {})
    task_data = row.pop("task_data", None)
    if isinstance(task_data, dict):
        row = {**task_data, **row}
    return row


class SingleAgentTurnEnvironmentServer(BaseServer):
    config: SingleAgentTurnConfig

    def setup_webserver(self) -> Starlette:
        return Starlette(routes=[
            Route("/run", self._run_endpoint, methods=["POST"]),
            aggregate_metrics_forwarding_route(self, self.config.resources_server.name),
        ])

    async def _run_endpoint(self, request: Request):
        row = row_of(await read_json_object(request))
        try:
            check_row(row)
        except RowError as error:
            return row_error_response(error)
        return json_response(await self.run(row))

    async def run(self, row: dict[str, Any]) -> dict[str, Any]:
        client = self.server_client
        resources, agent = self.config.resources_server.name, self.config.agent_server.name
        _, seeded = await client.post_json(resources, "/seed_session", json=row)
        cookies = dict(seeded.cookies)
        headers = task_header(row, agent_model_reads_task_header(global_config_of(self), agent))
        try:
            response, answered = await client.post_json(
                agent, "/v1/responses", json=row["responses_create_params"], cookies=cookies, headers=headers
            )
            cookies.update(answered.cookies)
            verified, _ = await client.post_json(resources, "/verify", json={**row, "response": response},
                                                 cookies=cookies)
        finally:
            await self._close_resources_session(resources, cookies)
        return {**row, **verified}

    async def _close_resources_session(self, resources: str, cookies: dict[str, str]) -> None:
        """Best effort: a failed close must neither erase a finished verdict nor hide the episode's own error."""
        try:
            answer = await self.server_client.post(resources, "/close_session", json={}, cookies=cookies)
        except Exception as error:  # noqa: BLE001 - the session is reaped for idleness anyway
            LOG.warning("closing the %s session failed: %s", resources, error)
            return
        if not answer.ok:
            LOG.warning("closing the %s session answered HTTP %s", resources, answer.status)
