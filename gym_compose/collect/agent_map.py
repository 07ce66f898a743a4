"""Re-routing rows to agents, as NeMo Gym 0.7's collector does: `--agent`, `agent_map`, legacy agent names.

`agent_map: {<agent_ref.name or task_source in the data>: <agent>, _default: <agent>}` (a
top-level config key, `+agent_map=...`); `--agent NAME` (NeMo Gym's `agent_name`) is shorthand for
`agent_map._default`. Precedence: agent_map[row's agent] > agent_map[row's task_source] >
agent_map._default > the row's own agent_ref. Agents NeMo Gym renamed keep working under their
old names while the config holds the new instance (`LEGACY_AGENT_ALIASES`).
"""

from __future__ import annotations

import sys
from typing import Any

from gym_compose.errors import UserError

DEFAULT_KEY = "_default"
AGENT_MAP_KEY = "agent_map"
AGENT_NAME_KEY = "agent_name"
TASK_SOURCE_KEY = "task_source"

# NeMo Gym 0.7 `_config_aliases.LEGACY_ENVIRONMENT_ALIASES`: old environment name -> new one;
# its agents are `<name>_agent`.
_LEGACY_ENVIRONMENTS = {
    "reasoning_gym_claude_code": "claude_code_reasoning_gym",
    "reasoning_gym_hermes": "hermes_reasoning_gym",
    "reasoning_gym_orchestrator": "langgraph_orchestrator_reasoning_gym",
    "reasoning_gym_parallel_thinking": "langgraph_parallel_thinking_reasoning_gym",
    "reasoning_gym_reflection": "langgraph_reflection_reasoning_gym",
    "reasoning_gym_rewoo": "langgraph_rewoo_reasoning_gym",
}
LEGACY_AGENT_ALIASES = {f"{old}_agent": f"{new}_agent" for old, new in _LEGACY_ENVIRONMENTS.items()}


def agent_map_from(config: dict[str, Any], agent_flag: str | None) -> dict[str, str]:
    """The effective map: the config's `agent_map`, `--agent` (or `agent_name`) as `_default`, legacy aliases."""
    declared = config.get(AGENT_MAP_KEY) or {}
    if not isinstance(declared, dict) or not all(isinstance(v, str) for v in declared.values()):
        raise UserError(f"{AGENT_MAP_KEY} must map row agent names (or {DEFAULT_KEY}) to agent instance names,"
                        f" got {declared!r}", hint="e.g. +agent_map={old_agent: new_agent, _default: my_agent}")
    routes = {str(key): value for key, value in declared.items()}
    selected = agent_flag if agent_flag is not None else config.get(AGENT_NAME_KEY)
    aliases = {old: routes.get(new, new) for old, new in LEGACY_AGENT_ALIASES.items()
               if old not in config and routes.get(new, new) in config}
    if selected is not None:
        selected = aliases.get(str(selected), str(selected))
        if routes.get(DEFAULT_KEY, selected) != selected:
            raise UserError(f"--agent/agent_name {selected!r} conflicts with agent_map._default"
                            f" {routes[DEFAULT_KEY]!r}", hint="give one of them")
        routes[DEFAULT_KEY] = selected
    routes = {key: aliases.get(value, value) for key, value in routes.items()}
    for old, destination in aliases.items():
        routes.setdefault(old, destination)
    return routes


def route(row: dict[str, Any], routes: dict[str, str], overridden: set[tuple[str, str]]) -> dict[str, Any]:
    """The row with its agent_ref re-routed by `routes` (unchanged when no entry applies)."""
    if not routes:
        return row
    agent_ref = row.get("agent_ref")
    current = agent_ref.get("name") if isinstance(agent_ref, dict) else None
    task_source = row.get(TASK_SOURCE_KEY)
    keys = [key for key in (current, task_source) if isinstance(key, str)]
    mapped = next((routes[key] for key in keys if key in routes), routes.get(DEFAULT_KEY))
    if mapped is None:
        return row
    if current is not None and current != mapped:
        overridden.add((str(current), mapped))
    return {**row, "agent_ref": {"name": mapped}}


def warn_overridden(overridden: set[tuple[str, str]]) -> None:
    if overridden:
        listing = ", ".join(f"{old} -> {new}" for old, new in sorted(overridden))
        print(f"collect: warning: agent_map/--agent re-routed rows that named another agent: {listing}",
              file=sys.stderr)
