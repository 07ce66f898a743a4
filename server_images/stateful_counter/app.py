"""A stateful seed/verify example: each session owns a counter that the tools read and change.

`/seed_session` starts the counter at the row's `initial_value` (default 0); `increment` adds
`amount`; `read_counter` returns it. The reward is 1.0 when the final counter equals the row's
`expected_answer` and the last assistant message states that number.
"""

import re
from typing import Any

from fastapi import FastAPI, Request
from pydantic import BaseModel, Field

from nemo_gym.base_resources_server import (
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)
from nemo_gym.server_utils import SESSION_ID_KEY


class CounterSeedRequest(BaseSeedSessionRequest):
    initial_value: int = 0


class IncrementRequest(BaseModel):
    amount: int


class ReadCounterRequest(BaseModel):
    pass


class CounterVerifyRequest(BaseVerifyRequest):
    expected_answer: int


class CounterVerifyResponse(BaseVerifyResponse):
    expected_answer: int
    final_value: int | None = None


class CounterServer(SimpleResourcesServer):
    session_state: dict[str, Any] = Field(default_factory=dict)

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/increment")(self.increment)
        app.post("/read_counter")(self.read_counter)
        return app

    async def seed_session(self, request: Request, body: CounterSeedRequest) -> BaseSeedSessionResponse:
        self.session_state[request.session[SESSION_ID_KEY]] = {"value": body.initial_value}
        return BaseSeedSessionResponse()

    def _counter(self, request: Request) -> dict:
        session_id = request.session[SESSION_ID_KEY]
        if session_id not in self.session_state:
            raise KeyError(f"session {session_id} was never seeded (or was reaped after idling)")
        return self.session_state[session_id]

    async def increment(self, request: Request, body: IncrementRequest) -> dict:
        counter = self._counter(request)
        counter["value"] += body.amount
        return {"value": counter["value"]}

    async def read_counter(self, request: Request, body: ReadCounterRequest) -> dict:
        return {"value": self._counter(request)["value"]}

    async def verify(self, request: Request, body: CounterVerifyRequest) -> CounterVerifyResponse:
        session_id = request.session[SESSION_ID_KEY]
        try:
            final_value = self.session_state.get(session_id, {}).get("value")
            text = ""
            for item in body.response.output:
                if item.type == "message" and item.role == "assistant" and not isinstance(item.content, str):
                    text = "".join(getattr(part, "text", "") for part in item.content)
            stated = re.findall(r"-?\d+", text)
            correct = final_value == body.expected_answer and bool(stated) and int(stated[-1]) == final_value
            return CounterVerifyResponse(**body.model_dump(), final_value=final_value, reward=float(correct))
        finally:
            self.session_state.pop(session_id, None)


if __name__ == "__main__":
    CounterServer.run_webserver()
