"""python_sandbox: a `run_python` tool that runs the model's code in the session's own sandbox;
the reward checks the final answer.

Each session leases a sandbox in /seed_session (from the broker's warm pool when one is ready) and
gives it back when /verify has scored the rollout (or on /close_session, or when the idle-session
reaper finds it); a sandbox given back is destroyed, never reused. A sandbox that dies or is
OOM-killed fails the rollout with that reason ("sandbox OOM-killed (memory 256m)") instead of
scoring it. Written against NeMo Gym's sandbox API (`nemo_gym.sandbox`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, Optional, Union

from fastapi import FastAPI, Request
from pydantic import BaseModel, Field

from nemo_gym.base_resources_server import (
    BaseResourcesServerConfig, BaseSeedSessionRequest, BaseSeedSessionResponse, BaseVerifyRequest, BaseVerifyResponse,
    SimpleResourcesServer,
)
from nemo_gym.global_config import get_global_config_dict
from nemo_gym.sandbox import AsyncSandbox, SandboxSpec, create_provider
from nemo_gym.sandbox.config import resolve_provider_config
from nemo_gym.server_utils import SESSION_ID_KEY


class PythonSandboxConfig(BaseResourcesServerConfig):
    sandbox_provider: Union[str, dict, None] = None
    sandbox_config: dict[str, Any] = Field(default_factory=dict)
    code_timeout_s: float = 30.0
    max_output_chars: int = 4000


class RunPythonRequest(BaseModel):
    code: str


class PythonSandboxVerifyRequest(BaseVerifyRequest):
    expected_answer: Union[str, int, float]


class PythonSandboxVerifyResponse(PythonSandboxVerifyRequest, BaseVerifyResponse):
    answered: Optional[str] = None
    cost: Optional[dict[str, Any]] = None  # what the rollout cost (docs/sandboxes.md#what-a-rollout-cost)


def rollout_cost(sandbox: Optional[AsyncSandbox], usage: Any) -> dict[str, Any]:
    """The rollout's `cost` block: the broker's figures for its sandbox (gym-compose's broker
    only: `AsyncSandbox.cost`), the model's tokens from the response's usage."""
    cost: dict[str, Any] = {}
    sandbox_cost = getattr(sandbox, "cost", None)
    if isinstance(sandbox_cost, dict):
        cost.update({f"sandbox_{key}": value for key, value in sandbox_cost.items()})
    for key in ("input_tokens", "output_tokens"):
        value = getattr(usage, key, None)
        if isinstance(value, int):
            cost[f"model_{key}"] = value
    return cost


class SandboxFailure(RuntimeError):
    """The session's sandbox died or was OOM-killed: the rollout cannot be scored."""


@dataclass
class Lease:
    sandbox: AsyncSandbox
    failure: Optional[str] = None


def final_answer(text: str) -> Optional[str]:
    """The last non-empty line of the model's final message, without a leading "answer:"."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return None
    return re.sub(r"^(final\s+)?answer\s*[:=]\s*", "", lines[-1], flags=re.IGNORECASE).strip()


def same_answer(answered: Optional[str], expected: Union[str, int, float]) -> bool:
    if answered is None:
        return False
    try:
        return abs(float(answered) - float(expected)) < 1e-9
    except (TypeError, ValueError):
        return answered.strip() == str(expected).strip()


class PythonSandboxServer(SimpleResourcesServer):
    config: PythonSandboxConfig
    session_state: dict[str, Lease] = Field(default_factory=dict)  # reaped when idle (session_idle_timeout_seconds)

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/run_python")(self.run_python)
        return app

    def _new_sandbox(self) -> AsyncSandbox:
        if not self.config.sandbox_provider:
            return AsyncSandbox()  # gym-compose's broker
        return AsyncSandbox(create_provider(resolve_provider_config(self.config.sandbox_provider,
                                                                    get_global_config_dict())))

    async def seed_session(self, request: Request, body: BaseSeedSessionRequest) -> BaseSeedSessionResponse:
        session_id = request.session[SESSION_ID_KEY]
        await self._give_back(self.session_state.pop(session_id, None))  # a session seeded again starts clean
        sandbox = self._new_sandbox()
        await sandbox.start(SandboxSpec(metadata={"session": session_id}))
        self.session_state[session_id] = Lease(sandbox)
        return BaseSeedSessionResponse()

    async def run_python(self, request: Request, body: RunPythonRequest) -> dict[str, Any]:
        lease = self.session_state.get(request.session[SESSION_ID_KEY])
        if lease is None:
            return {"error": "this session has no sandbox (seed it with /seed_session first)"}
        if lease.failure:
            raise SandboxFailure(lease.failure)
        result = await lease.sandbox.exec(f"python3 -I -c {shlex.quote(body.code)}",
                                          timeout_s=self.config.code_timeout_s)
        if result.error_type in ("oom", "sandbox"):
            lease.failure = result.reason or (result.stderr or "sandbox failed").strip()
            raise SandboxFailure(lease.failure)
        limit = self.config.max_output_chars
        output = {"return_code": result.return_code, "stdout": (result.stdout or "")[:limit],
                  "stderr": (result.stderr or "")[-limit:]}
        if result.error_type == "timeout":
            output["error"] = f"the code ran longer than {self.config.code_timeout_s:g} s and was stopped"
        return output

    async def verify(self, request: Request, body: PythonSandboxVerifyRequest) -> PythonSandboxVerifyResponse:
        lease = self.session_state.pop(request.session[SESSION_ID_KEY], None)
        await self._give_back(lease)
        if lease is not None and lease.failure:
            raise SandboxFailure(lease.failure)
        text = ""
        for item in body.response.output:
            if item.type == "message" and item.role == "assistant" and not isinstance(item.content, str):
                text = "".join(getattr(part, "text", "") for part in item.content)
        answered = final_answer(text)
        return PythonSandboxVerifyResponse(**body.model_dump(), answered=answered,
                                           reward=float(same_answer(answered, body.expected_answer)),
                                           cost=rollout_cost(lease.sandbox if lease else None, body.response.usage))

    async def release_session_value(self, value: Any) -> None:
        await self._give_back(value)

    @staticmethod
    async def _give_back(lease: Optional[Lease]) -> None:
        if lease is not None:
            await lease.sandbox.stop()


if __name__ == "__main__":
    PythonSandboxServer.run_webserver()
