"""gymnasium_agent: `/reset`, then model -> `/step` until terminated or truncated; rewards summed.

Reaching `max_steps` (default 10) without an end marks the episode truncated and closes the
environment's session so its state is not left behind.
"""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from gym_compose.server.agents.common import (
    as_input_list,
    global_config_of,
    model_reads_task_header,
    run_row_endpoint,
    task_header,
    user_message,
)
from gym_compose.server.aggregation import aggregate_metrics_forwarding_route
from gym_compose.server.base import BaseServer, BaseServerConfig, ServerRef
from gym_compose.server.responses_api import add_usage


class GymnasiumAgentConfig(BaseServerConfig):
    resources_server: ServerRef
    model_server: ServerRef
    max_steps: int = 10


class GymnasiumAgent(BaseServer):
    config: GymnasiumAgentConfig

    def setup_webserver(self) -> Starlette:
        return Starlette(routes=[
            Route("/run", self._run_endpoint, methods=["POST"]),
            aggregate_metrics_forwarding_route(self, self.config.resources_server.name),
        ])

    async def _run_endpoint(self, request: Request):
        return await run_row_endpoint(request, self.run)

    async def run(self, row: dict[str, Any], cookies: dict[str, str]) -> dict[str, Any]:
        client = self.server_client
        environment = self.config.resources_server.name
        model = self.config.model_server.name
        reset, answer = await client.post_json(environment, "/reset", json=row, cookies=cookies)
        cookies = {**cookies, **answer.cookies}

        params = dict(row["responses_create_params"])
        params["input"] = as_input_list(params["input"])
        if reset.get("observation"):
            params["input"].append(user_message(reset["observation"]))
        headers = task_header(row, model_reads_task_header(global_config_of(self), model))
        new_items: list[Any] = []
        total_reward, usage = 0.0, None
        step: dict[str, Any] = {"terminated": False, "truncated": False, "info": {}}
        finished = False
        reply: dict[str, Any] = {}
        for _ in range(max(1, self.config.max_steps)):
            reply, _ = await client.post_json(
                model, "/v1/responses", json={**params, "input": params["input"] + new_items}, headers=headers
            )
            new_items.extend(reply.get("output") or [])
            usage = add_usage(usage, reply.get("usage"))
            step, answer = await client.post_json(environment, "/step", json={**row, "response": reply},
                                                  cookies=cookies)
            cookies.update(answer.cookies)
            total_reward += float(step.get("reward") or 0.0)
            if step.get("terminated") or step.get("truncated"):
                finished = True
                break
            info = step.get("info") or {}
            for tool_output in info.get("tool_outputs") or []:
                new_items.append({"type": "function_call_output", "call_id": tool_output["call_id"],
                                  "output": tool_output["output"]})
            if step.get("observation"):
                new_items.append(user_message(step["observation"]))
        if not finished:
            step = {**step, "truncated": True}
            await client.post(environment, "/close_session", json={}, cookies=cookies)
        reply["output"] = new_items
        reply["usage"] = usage
        return {
            **row,
            "responses_create_params": params,
            "response": reply,
            "reward": total_reward,
            "terminated": bool(step.get("terminated")),
            "truncated": bool(step.get("truncated")),
            "info": step.get("info") or {},
        }
