"""The task header: a row's task fields, carried from the agent to the mock model's oracle mode.

Its own module: the model servers read it and would otherwise import the agents' row checks and
their pydantic models (docs/performance.md).
"""

from __future__ import annotations

import base64
from typing import Any, Optional

import orjson

TASK_HEADER = "x-gym-task"


def task_header(row: dict[str, Any], send: bool = True) -> dict[str, str]:
    """The row's task fields (everything but the create params), for the mock model's oracle mode.

    Callers pass `send=model_reads_task_header(...)`: only a mock_model (directly or behind an
    openai_model with `forward_task_header: true`) gets it.
    """
    if not send:
        return {}
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
