"""simple_agent: seed the resources session, loop model -> tool calls -> model, then verify.

Tool calls go straight to the resources server's `/<tool>` route with the session cookie. The
episode loop runs in-process (NeMo Gym's agent calls its own `/v1/responses` over HTTP; that hop
buys nothing and costs a request). `max_steps` bounds the model turns.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from gym_compose.net.web import json_response, read_json_object
from gym_compose.server.agents.agent_cost import AgentLedger, with_agent_cost
from gym_compose.server.agents.common import (
    TASK_HEADER,
    RowError,
    as_input_list,
    check_row,
    close_session,
    global_config_of,
    model_reads_task_header,
    row_error_response,
    run_row_endpoint,
    task_header,
)
from gym_compose.server.aggregation import aggregate_metrics_forwarding_route
from gym_compose.server.base import BaseServer, BaseServerConfig, ServerRef
from gym_compose.server.responses_api import add_usage

LOG = logging.getLogger("gym_compose.server.simple_agent")


class SimpleAgentConfig(BaseServerConfig):
    resources_server: ServerRef
    model_server: ServerRef
    max_steps: Optional[int] = None


def unknown_tool_output(name: str, status: int) -> str:
    return orjson.dumps({
        "error": f"unknown tool {name!r}: the resources server has no such tool (HTTP {status})"
    }).decode()


class SimpleAgent(BaseServer):
    config: SimpleAgentConfig

    def setup_webserver(self) -> Starlette:
        return Starlette(routes=[
            Route("/run", self._run_endpoint, methods=["POST"]),
            aggregate_metrics_forwarding_route(self, self.config.resources_server.name),
            Route("/v1/responses", self._responses_endpoint, methods=["POST"]),
        ])

    async def _run_endpoint(self, request: Request):
        return await run_row_endpoint(request, self.run)

    async def _responses_endpoint(self, request: Request):
        params = await read_json_object(request)
        try:
            check_row({"responses_create_params": params})
        except RowError as error:
            return row_error_response(error, ("body",))
        forwarded = {}
        if TASK_HEADER in request.headers and self._model_reads_task_header():
            forwarded = {TASK_HEADER: request.headers[TASK_HEADER]}
        response, cookies = await self.run_episode(params, dict(request.cookies), forwarded)
        reply = json_response(response)
        for name, value in cookies.items():
            reply.set_cookie(name, value)
        return reply

    async def run(self, row: dict[str, Any], cookies: dict[str, str]) -> dict[str, Any]:
        resources = self.config.resources_server.name
        ledger = AgentLedger()
        _, seeded = await self.server_client.post_json(resources, "/seed_session", json=row, cookies=cookies)
        ledger.phase_done("seed")
        cookies = {**cookies, **seeded.cookies}
        try:
            response, cookies = await self.run_episode(
                row["responses_create_params"], cookies, task_header(row, self._model_reads_task_header()), ledger
            )
        except BaseException:  # what the session holds (a sandbox) goes back now, not at the idle reaper
            await close_session(self.server_client, resources, cookies)
            raise
        ledger.phase_done("episode")
        verified, _ = await self.server_client.post_json(
            resources, "/verify", json={**row, "response": response}, cookies=cookies
        )
        ledger.phase_done("verify")
        return {**row, **with_agent_cost(verified, ledger)}

    def _model_reads_task_header(self) -> bool:
        return model_reads_task_header(global_config_of(self), self.config.model_server.name)

    async def run_episode(
        self, params: dict[str, Any], cookies: dict[str, str], model_headers: dict[str, str],
        ledger: Optional[AgentLedger] = None,
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """Model turns and tool calls until the model answers without a tool call or max_steps."""
        model = self.config.model_server.name
        resources = self.config.resources_server.name
        history = as_input_list(params["input"])
        new_items: list[Any] = []
        usage = None
        step = 0
        model_cookies: dict[str, str] = {}
        while True:
            step += 1
            call = self.server_client.post_json(
                model, "/v1/responses", json={**params, "input": history + new_items},
                headers=model_headers, cookies=model_cookies or None,
            )
            reply, raw = await (ledger.model_call(call) if ledger else call)
            model_cookies.update(raw.cookies)
            output = reply.get("output") or []
            new_items.extend(output)
            usage = add_usage(usage, reply.get("usage"))
            if reply.get("incomplete_details"):
                break
            calls = [item for item in output if item.get("type") == "function_call"]
            if not calls:
                break
            for call in calls:
                new_items.append({
                    "type": "function_call_output",
                    "call_id": call.get("call_id"),
                    "output": await self._call_tool(resources, call, cookies),
                })
            if self.config.max_steps and step >= self.config.max_steps:
                break
        reply["output"] = new_items
        reply["usage"] = usage
        return reply, cookies

    async def _call_tool(self, resources: str, call: dict[str, Any], cookies: dict[str, str]) -> str:
        name = str(call.get("name") or "")
        try:
            arguments = orjson.loads(call.get("arguments") or "{}")
        except orjson.JSONDecodeError as error:
            return orjson.dumps({"error": f"invalid tool call arguments: {error}"}).decode()
        if not name or "/" in name or name.startswith("_"):
            return unknown_tool_output(name, 404)
        answer = await self.server_client.post(resources, f"/{name}", json=arguments, cookies=cookies)
        cookies.update(answer.cookies)
        if answer.status in (404, 405):
            return unknown_tool_output(name, answer.status)
        return answer.body.decode("utf-8", "replace")
