"""The keys NeMo Gym gives every rollout row, and the orderings of rows by them.

Shared by the collector (numbering, resume), the servers' and the collector's metrics, the
viewer and `eval compare`; pure and standard-library only (in the base image).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

TASK_INDEX = "_ng_task_index"
ROLLOUT_INDEX = "_ng_rollout_index"
ATTEMPT_INDEX = "_ng_attempt_index"
ENVIRONMENT_SERVER = "_ng_environment_server"


def rollout_key(row: dict[str, Any]) -> tuple[Any, Any]:
    return row[TASK_INDEX], row[ROLLOUT_INDEX]


def first_of_each_rollout(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each (task, rollout) once, the first row seen for it: a file that two writers appended to
    (before the run-folder lock existed, or copied together by hand) never counts a rollout twice."""
    seen: set[tuple[Any, Any]] = set()
    unique = []
    for row in rows:
        key = (row.get(TASK_INDEX), row.get(ROLLOUT_INDEX))
        if key in seen:
            continue
        seen.add(key)
        unique.append(row)
    return unique


def sortable(value: Any) -> tuple[int, Any, str]:
    """A sort key for index values of any JSON type: numbers in order, then strings, then the rest.

    Rows may bring their own `_ng_task_index`; a mix of ints and strings must not stop a sort.
    """
    if isinstance(value, (int, float)) and not (isinstance(value, float) and value != value):
        return (0, value, "")
    if isinstance(value, str):
        return (1, 0, value)
    return (2, 0, repr(value))


def sortable_rollout_key(row: dict[str, Any]) -> tuple[tuple[int, Any, str], tuple[int, Any, str]]:
    """rollout_key, orderable whatever the types of the indices."""
    return sortable(row[TASK_INDEX]), sortable(row[ROLLOUT_INDEX])
