"""Resources servers, seed/verify protocol: `/seed_session`, tool routes, `/verify`, `/close_session`,
and `/aggregate_metrics` (gym_compose.server.aggregation)."""

from __future__ import annotations

from enum import Enum
from typing import Any, ClassVar, Optional

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gym_compose.net.web import JSONResponse, json_response, read_json_object
from gym_compose.server.aggregation import (
    AGGREGATE_METRICS_PATH,
    AggregateMetricsHooks,
    AggregateMetricsRequest,
)
from gym_compose.server.base import BaseServer, BaseServerConfig
from gym_compose.server.mcp_exposure import CatchAll, McpTool
from gym_compose.server.responses_api import Response, ResponseCreateParams
from gym_compose.server.sessions import SESSION_ID_KEY


class ReverifyMode(str, Enum):
    """How `gym eval reverify` may re-score this server's rollouts (NeMo Gym 0.7)."""

    STATELESS = "stateless"
    UNSUPPORTED = "unsupported"
    UNKNOWN = "unknown"


class BaseResourcesServerConfig(BaseServerConfig):
    domain: Optional[str] = None
    expose_tools_over_mcp: bool = False
    REVERIFY_MODE: ClassVar[ReverifyMode] = ReverifyMode.UNKNOWN


class BaseRunRequest(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    responses_create_params: ResponseCreateParams


class BaseVerifyRequest(BaseRunRequest):
    response: Response


class BaseVerifyResponse(BaseVerifyRequest):
    reward: float
    mask_sample: bool = False
    failure_kind: Optional[str] = None
    failure_reason: Optional[str] = None


class BaseSeedSessionRequest(BaseModel):
    pass


class BaseSeedSessionResponse(BaseModel):
    pass


class ResourcesSeedSessionRequest(BaseModel):
    """An Environment Server's seed: a caller-chosen session id for one episode of one task."""

    model_config = ConfigDict(extra="forbid")
    resources_session_id: str = Field(min_length=1)
    episode_id: str
    task_id: str
    task_data: dict[str, Any]


class ResourcesSeedSessionResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")
    resources_session_id: str


class ResourcesCloseSessionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    resources_session_id: str
    episode_id: str


class ResourcesCloseSessionResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")
    resources_session_id: str


class SimpleResourcesServer(BaseServer, AggregateMetricsHooks):
    """Subclass it, add tool routes in `setup_webserver()`, implement `verify()`.

    Override `compute_metrics(tasks)` / `get_key_metrics(agent_metrics)` (or `aggregate_metrics`
    whole) to shape what `/aggregate_metrics` answers, as under NeMo Gym.

    Per-session state goes in a dict attribute keyed by `request.session[SESSION_ID_KEY]`; a
    `session_state` dict is reaped after `session_idle_timeout_seconds` of idleness and emptied
    for a session on `/close_session`.
    """

    config: BaseResourcesServerConfig

    def setup_webserver(self) -> FastAPI:
        app = FastAPI(default_response_class=JSONResponse, openapi_url=None, docs_url=None, redoc_url=None)
        self.setup_session_middleware(app)
        app.post("/seed_session")(self.seed_session)
        app.post("/verify")(self.verify)
        app.post("/close_session")(self._close_session_endpoint)
        add_aggregate_metrics_route(app, self)
        return app

    async def seed_session(self, body: BaseSeedSessionRequest) -> BaseSeedSessionResponse:
        return BaseSeedSessionResponse()

    def mcp_tools(self, harvested: list[McpTool], catchall: Optional[CatchAll]) -> Optional[list[McpTool]]:
        """The tools `/mcp` serves (`expose_tools_over_mcp: true`): by default the typed `POST /<tool>`
        routes. Override to leave some out, or to add tools behind the one catch-all route
        (`harvested + [catchall.tool(name, input_schema, description)]`); None or [] serves none."""
        return harvested

    def mcp_allowed_tools_for_session(self, seed_body: dict[str, Any]) -> Optional[list[str]]:
        """The tools one rollout's MCP token may list and call (None: all). `seed_body` is the JSON
        body of its `/seed_session` (an Environment Server's seed: its `task_data`)."""
        return None

    async def get_reverify_mode(self) -> ReverifyMode:
        return type(self.config).REVERIFY_MODE

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        raise NotImplementedError(f"{type(self).__name__} must implement verify()")

    async def close_resources_session(self, body: ResourcesCloseSessionRequest) -> ResourcesCloseSessionResponse:
        return ResourcesCloseSessionResponse(resources_session_id=body.resources_session_id)

    async def release_session_value(self, value: Any) -> None:
        """Give back what one session's state held outside this process (a sandbox lease): called when
        the session closes, is reaped for idleness, or the server stops. Override where needed."""

    async def close_session(self, session_id: Optional[str]) -> None:
        """Release what this server holds for a session. Safe to call repeatedly."""
        if session_id is None:
            return
        for state in self.session_states():
            value = state.pop(session_id, None)
            if value is not None:
                await self.release_session_value(value)

    async def _close_session_endpoint(self, request: Request) -> Any:
        raw = await request.body()
        body = await read_json_object(request) if raw.strip() else {}  # not JSON: 422, not 500
        await self.close_session(request.session.get(SESSION_ID_KEY))
        try:
            typed = ResourcesCloseSessionRequest.model_validate(body)
        except ValidationError:
            return {}
        closed = await self.close_resources_session(typed)
        return closed.model_dump() if isinstance(closed, BaseModel) else closed

    async def _release_reaped_session(self, session_id: str, value: Any) -> None:
        await self.release_session_value(value)
        await self.close_session(session_id)

    async def on_shutdown(self) -> None:
        for state in self.session_states():
            for session_id in list(state):
                await self.close_session(session_id)
        await super().on_shutdown()


BaseResourcesServer = SimpleResourcesServer


def add_aggregate_metrics_route(app: FastAPI, server: AggregateMetricsHooks) -> None:
    """`POST /aggregate_metrics` -> `server.aggregate_metrics(body)`; a malformed body is a 422."""

    async def aggregate_metrics_endpoint(request: Request) -> Any:
        # A whole run's rows in one body (100,000 at the end of a long run): parsed once with orjson and
        # checked for their shape only, answered without FastAPI's encoder, so the rows are held once,
        # not three times (it OOM-killed a 512 MiB server at 100,000 rows: docs/faults.md).
        body = await read_json_object(request)
        responses = body.get("verify_responses")
        if not isinstance(responses, list) or not all(isinstance(item, dict) for item in responses):
            return json_response({"detail": [{"loc": ["body", "verify_responses"], "type": "list_type",
                                              "msg": "Input should be a list of objects"}]}, 422)
        answer = await server.aggregate_metrics(AggregateMetricsRequest.model_construct(verify_responses=responses))
        return json_response(answer.model_dump() if isinstance(answer, BaseModel) else answer)

    app.post(AGGREGATE_METRICS_PATH)(aggregate_metrics_endpoint)

