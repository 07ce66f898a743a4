"""Input rows -> the materialized rollout rows: prompt, agent, overrides, task/rollout indices, repeats.

NeMo Gym's numbering: identical input lines share one `_ng_task_index` (a row may bring its own);
`_ng_rollout_index` counts the rollouts of one task, across repeats and duplicate lines.
Repeats are in place: a a b b.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gym_compose.collect.agent_map import DEFAULT_KEY, route, warn_overridden
from gym_compose.collect.options import CollectOptions
from gym_compose.collect.prompt import PromptConfig, apply_prompt
from gym_compose.collect.routing import RoutingTable, agent_name_of, taskset_of
from gym_compose.errors import UserError
from gym_compose.metrics.row_keys import ROLLOUT_INDEX, TASK_INDEX

RESPONSES_CREATE_PARAMS = "responses_create_params"


def materialize_rows(
    input_rows: list[tuple[int, str, dict[str, Any]]],
    input_path: Path,
    options: CollectOptions,
    routing: RoutingTable,
    prompt: PromptConfig | None = None,
    row_check: Callable[[dict[str, Any], str, str | None], None] | None = None,
) -> list[dict[str, Any]]:
    """Every rollout to run, in order; raises UserError (file, line) before anything runs.
    `row_check(row, where, agent)` sees each routed row (the host's checks of what servers refuse)."""
    if options.num_repeats < 1:
        raise UserError(f"--num-repeats must be at least 1, got {options.num_repeats}")
    overrides = options.responses_create_params_overrides()
    task_index_of_line: dict[str, int] = {}
    next_rollout_index: Counter = Counter()
    rollouts: list[dict[str, Any]] = []
    routes = options.agent_map if options.agent_map is not None else (
        {DEFAULT_KEY: options.agent_name} if options.agent_name is not None else {})
    overridden: set[tuple[str, str]] = set()
    for line_no, text, row in input_rows:
        where = f"{input_path}, line {line_no}"
        is_taskset_row = taskset_of(row) is not None
        if prompt is not None and not is_taskset_row:
            row = apply_prompt(prompt, row, where)
        if not is_taskset_row:
            row = route(row, routes, overridden)
        if is_taskset_row:
            if overrides:
                raise UserError(
                    f"{where}: --temperature/--top-p/--max-output-tokens do not apply to task_id/task_input rows",
                    hint="set sampling parameters in the taskset, or drop those options",
                )
        else:
            params = row.get(RESPONSES_CREATE_PARAMS)
            if not isinstance(params, dict):
                raise UserError(
                    f"{where}: the row has no `responses_create_params` object",
                    hint="each row needs responses_create_params (or task_id + task_input for a taskset)",
                )
            if overrides:
                row = {**row, RESPONSES_CREATE_PARAMS: params | overrides}
        server = routing.server_for_row(row, where)
        if not is_taskset_row and agent_name_of(row) is None and len(server.agents) == 1:
            # the only place this row can go: name its agent, so metrics and outputs say which
            row = {**row, "agent_ref": {"name": server.agents[0]}}
        if row_check is not None and not is_taskset_row:
            row_check(row, where, agent_name_of(row))
        if TASK_INDEX not in row:
            row = {**row, TASK_INDEX: task_index_of_line.setdefault(text, len(task_index_of_line))}
        for _ in range(options.num_repeats):
            rollout = dict(row)
            rollout[ROLLOUT_INDEX] = next_rollout_index[row[TASK_INDEX]]
            next_rollout_index[row[TASK_INDEX]] += 1
            rollouts.append(rollout)
    warn_overridden(overridden)
    return rollouts
