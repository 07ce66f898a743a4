"""What both built-in agents do: check the row, call the model, carry the task to the mock model."""

from __future__ import annotations

import base64
from typing import Any, Optional

import orjson
from pydantic import ValidationError

from gym_compose.server.protocol import ResponseCreateParams

TASK_HEADER = "x-gym-task"


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


def task_header(row: dict[str, Any]) -> dict[str, str]:
    """The row's task fields (everything but the create params), for the mock model's oracle mode.

    Only `mock_model` reads it; `openai_model` drops it unless `forward_task_header: true`.
    """
    task = {key: value for key, value in row.items() if key != "responses_create_params"}
    if not task:
        return {}
    return {TASK_HEADER: base64.urlsafe_b64encode(orjson.dumps(task)).decode("ascii")}


def decode_task_header(value: Optional[str]) -> dict[str, Any]:
    if not value:
        return {}
    try:
        task = orjson.loads(base64.urlsafe_b64decode(value.encode("ascii")))
    except (ValueError, orjson.JSONDecodeError):
        return {}
    return task if isinstance(task, dict) else {}


def as_input_list(params_input: Any) -> list[Any]:
    if isinstance(params_input, str):
        return [{"role": "user", "content": params_input, "type": "message"}]
    return list(params_input)


def user_message(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text, "type": "message"}
