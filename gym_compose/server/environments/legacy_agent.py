"""legacy_agent: relay `/run` to the agent named by `agent_server`, body and status unchanged."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gym_compose.server.aggregation import aggregate_metrics_forwarding_route
from gym_compose.server.base import BaseServer, BaseServerConfig, ServerRef

_RELAYED_REQUEST_HEADERS = ("content-type", "x-gym-task", "traceparent")


class LegacyAgentConfig(BaseServerConfig):
    agent_server: ServerRef


class LegacyAgentEnvironmentServer(BaseServer):
    config: LegacyAgentConfig

    def setup_webserver(self) -> Starlette:
        return Starlette(routes=[
            Route("/run", self._relay, methods=["POST"]),
            aggregate_metrics_forwarding_route(self, self.config.agent_server.name),
        ])

    async def _relay(self, request: Request) -> Response:
        headers = {name: request.headers[name] for name in _RELAYED_REQUEST_HEADERS if name in request.headers}
        answer = await self.server_client.post(
            self.config.agent_server.name, "/run", content=await request.body(),
            headers=headers, cookies=dict(request.cookies) or None,
        )
        reply = Response(answer.body, status_code=answer.status,
                         media_type=answer.header("content-type") or "application/json")
        for name, value in answer.headers:
            if name.lower() == b"set-cookie":
                reply.raw_headers.append((b"set-cookie", value))
        return reply
