"""Resources servers, gymnasium protocol: `/reset` and `/step`; a session closes when its episode ends."""

from __future__ import annotations

import json
from abc import abstractmethod
from typing import Any, Optional

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field

from gym_compose.net.web import JSONResponse
from gym_compose.server.resources import SimpleResourcesServer, add_aggregate_metrics_route
from gym_compose.server.responses_api import FunctionCall, Response, ResponseCreateParams, output_text_of
from gym_compose.server.sessions import SESSION_ID_KEY


class EnvResetRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    responses_create_params: ResponseCreateParams


class EnvResetResponse(BaseModel):
    observation: Optional[str] = None
    info: dict = Field(default_factory=dict)


class EnvStepRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    responses_create_params: ResponseCreateParams
    response: Response


class EnvStepResponse(BaseModel):
    observation: Optional[str] = None
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict = Field(default_factory=dict)


def extract_text(response: Response) -> str:
    """All assistant text of a response, concatenated."""
    return output_text_of(response.output)


class GymnasiumServer(SimpleResourcesServer):
    """Subclass it and implement `step()` (and `reset()` when the episode needs a start state).

    `self.session_state` is keyed by session id, emptied when `step()` returns terminated or
    truncated, and reaped after an idle timeout.
    """

    session_state: dict[str, Any] = Field(default_factory=dict)

    def setup_webserver(self) -> FastAPI:
        app = FastAPI(default_response_class=JSONResponse, openapi_url=None, docs_url=None, redoc_url=None)
        self.setup_session_middleware(app)
        app.post("/reset")(self._reset_endpoint)
        app.post("/step")(self._step_endpoint)
        app.post("/close_session")(self._close_session_endpoint)
        add_aggregate_metrics_route(app, self)
        return app

    async def _reset_endpoint(self, body: EnvResetRequest, request: Request) -> dict:
        observation, info = await self.reset(body.model_extra or {}, request.session.get(SESSION_ID_KEY))
        return {"observation": observation, "info": info or {}}

    async def _step_endpoint(self, body: EnvStepRequest, request: Request) -> dict:
        session_id = request.session.get(SESSION_ID_KEY)
        observation, reward, terminated, truncated, info = await self.step(body.response, body.model_extra or {},
                                                                            session_id)
        if terminated or truncated:
            await self.close_session(session_id)
        return {"observation": observation, "reward": float(reward), "terminated": bool(terminated),
                "truncated": bool(truncated), "info": info or {}}

    async def close_session(self, session_id: Optional[str]) -> None:
        """Ends a session: the state dicts (values given to `release_session_value`), then NeMo Gym's
        `_cleanup_session` hook (override it for state of your own)."""
        await super().close_session(session_id)
        self._cleanup_session(session_id)

    def _cleanup_session(self, session_id: Optional[str]) -> None:
        """Release state owned by a session. Safe to call repeatedly."""
        self.session_state.pop(session_id, None)  # type: ignore[arg-type]

    async def reset(self, metadata: dict, session_id: Optional[str] = None) -> tuple[Optional[str], dict]:
        return None, {}

    @abstractmethod
    async def step(
        self, action: Response, metadata: dict, session_id: Optional[str] = None
    ) -> tuple[Optional[str], float, bool, bool, dict]: ...

    @staticmethod
    def tool_output(call: FunctionCall, result: Any) -> dict:
        return {"call_id": call.call_id, "output": json.dumps(result, default=str)}

    async def verify(self, body) -> None:  # type: ignore[override]
        raise NotImplementedError("GymnasiumServer scores in /step, not /verify; pair it with gymnasium_agent")
