"""What both built-in agents do: check the row, call the model, carry the task to the mock model,
close the session of a rollout that failed."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import TypeAdapter, ValidationError

from gym_compose.server.context import ServerConfigError, instance_block
from gym_compose.server.responses_api import ResponseCreateParams
from gym_compose.server.task_header import TASK_HEADER, decode_task_header, task_header

__all__ = ["TASK_HEADER", "decode_task_header", "task_header"]  # their home is task_header.py
from gym_compose.net.web import json_response, read_json_object, validation_error_response

LOG = logging.getLogger("gym_compose.server.agents")
CLOSE_TIMEOUT_S = 10.0  # a failed rollout's close: the idle reaper is the fallback, so no long wait

# Built once, asked on every rollout: building a TypeAdapter costs far more than a validation (docs/performance.md).
_BOOL = TypeAdapter(bool)


class RowError(Exception):
    """A /run body that is not a usable dataset row; becomes a 422 naming the field."""

    def __init__(self, error: ValidationError | str, location: tuple = ("body",)):
        self.error, self.location = error, location
        super().__init__(str(error))


def check_row(row: dict[str, Any]) -> dict[str, Any]:
    """Validate a row's `responses_create_params` (unknown keys rejected); returns them as sent."""
    params = row.get("responses_create_params")
    if not isinstance(params, dict):
        raise RowError("field required: responses_create_params (a JSON object)", ("body", "responses_create_params"))
    try:
        ResponseCreateParams.model_validate(params)
    except ValidationError as error:
        raise RowError(error, ("body", "responses_create_params")) from None
    return params


async def run_row_endpoint(request, run) -> Any:
    """An agent's POST /run: check the row (422 naming the field), then `run(row, cookies)`."""
    row = await read_json_object(request)
    try:
        check_row(row)
    except RowError as error:
        return row_error_response(error)
    return json_response(await run(row, dict(request.cookies)))


def row_error_response(error: RowError, location: tuple | None = None):
    """The 422 for a bad row, in FastAPI's `detail` shape."""
    if isinstance(error.error, str):
        return json_response({"detail": [{"loc": list(error.location), "msg": error.error, "type": "missing"}]}, 422)
    return validation_error_response(error.error, location or error.location)


def model_reads_task_header(global_config: Any, model_name: Any) -> bool:
    """Whether model server instance `model_name` takes the row in `x-gym-task`.

    That is a `mock_model`, or an `openai_model` with `forward_task_header: true` (set only when
    its upstream is a mock_model). Any other model (a user's own server that may forward headers
    to a provider) never gets the row: it carries the expected answers and can be large.
    """
    if not isinstance(global_config, dict) or not isinstance(model_name, str):
        return False
    try:
        _, implementation, spec = instance_block(global_config, model_name)
    except ServerConfigError:
        return False
    if implementation == "mock_model":
        return True
    if implementation == "openai_model":
        try:
            return _BOOL.validate_python(spec.get("forward_task_header", False))
        except ValidationError:
            return False
    return False


def agent_model_reads_task_header(global_config: Any, agent_name: Any) -> bool:
    """The same for the `model_server` of agent instance `agent_name`."""
    if not isinstance(global_config, dict) or not isinstance(agent_name, str):
        return False
    try:
        _, _, spec = instance_block(global_config, agent_name)
    except ServerConfigError:
        return False
    model = spec.get("model_server")
    return isinstance(model, dict) and model_reads_task_header(global_config, model.get("name"))


def global_config_of(server: Any) -> dict[str, Any]:
    """The whole config a server was started with (through its peer client)."""
    config = getattr(getattr(server, "server_client", None), "global_config", None)
    return config if isinstance(config, dict) else {}


def as_input_list(params_input: Any) -> list[Any]:
    if isinstance(params_input, str):
        return [{"role": "user", "content": params_input, "type": "message"}]
    return list(params_input)


def user_message(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text, "type": "message"}


async def close_session(server_client: Any, resources: str, cookies: dict[str, str]) -> None:
    """Give back a resources session whose rollout failed before /verify (its sandbox, at once)."""
    try:
        await server_client.post(resources, "/close_session", json={}, cookies=cookies, timeout=CLOSE_TIMEOUT_S)
    except Exception as error:  # noqa: BLE001 - the resources server's idle reaper gives it back later
        LOG.warning("could not close the session on %s: %s", resources, error)
