"""Generated `legacy_agent` environment servers for agents that no environment server fronts.

Rollout collection reaches an agent only through an environment server; like NeMo Gym, a config
written before environment servers existed still runs, with a deprecation warning.
"""

from __future__ import annotations

from typing import Any

from gym_compose.config.constants import AGENTS, ENVIRONMENT_SERVERS
from gym_compose.config.instances import instances
from gym_compose.errors import UserError

SUFFIX = "_environment_server"
ERROR_SWITCH = "error_on_agent_without_environment_server"


def _fronted_agents(data: dict[str, Any]) -> set[str]:
    fronted: set[str] = set()
    for instance in instances(data):
        if instance.server_type != ENVIRONMENT_SERVERS:
            continue
        for field, value in instance.spec.items():
            if isinstance(value, dict) and (value.get("type") == AGENTS or field == "agent_server"):
                if isinstance(value.get("name"), str):
                    fronted.add(value["name"])
    return fronted


def legacy_environment_server_name(agent_name: str, agent_type: str) -> str:
    """NeMo Gym 0.7's name for an agent's generated environment server.

    Strip `_<agent type>` (or the type itself), else a trailing `_agent`, then append
    `_environment_server`: `workplace_assistant_simple_agent` -> `workplace_assistant_environment_server`.
    """
    stem = agent_name.removesuffix(f"_{agent_type}").removesuffix(agent_type).rstrip("_")
    if stem == agent_name:
        stem = agent_name.removesuffix("_agent").rstrip("_")
    return f"{stem or agent_type}{SUFFIX}"


def legacy_environment_server(agent_name: str) -> dict[str, Any]:
    return {
        ENVIRONMENT_SERVERS: {
            "legacy_agent": {"entrypoint": "app.py", "agent_server": {"type": AGENTS, "name": agent_name}}
        }
    }


def add_legacy_environment_servers(data: dict[str, Any]) -> list[str]:
    """Add one generated environment server per unfronted agent, in place; return the warnings."""
    fronted = _fronted_agents(data)
    unfronted = {
        i.name: i.implementation for i in instances(data)
        if i.server_type == AGENTS and i.name not in fronted and i.spec.get("entrypoint") is not None
    }
    if not unfronted:
        return []
    if data.get(ERROR_SWITCH):
        names = ", ".join(unfronted)
        raise UserError(
            f"agent(s) with no environment server in front: {names}; rollout collection cannot reach them",
            hint="declare an environment server whose agent_server names each agent (e.g. implementation "
            f"legacy_agent), or unset {ERROR_SWITCH} to have one generated",
        )
    generated: dict[str, str] = {}
    for agent, agent_type in unfronted.items():
        # as NeMo Gym: a taken name falls back to `<agent>_environment_server`, suffixed until free
        name = legacy_environment_server_name(agent, agent_type)
        if name in data or name in generated.values():
            name = agent + SUFFIX
        while name in data:
            name += SUFFIX
        data[name] = legacy_environment_server(agent)
        generated[agent] = name
    listing = ", ".join(f"{server} -> {agent}" for agent, server in generated.items())
    return [
        f"DEPRECATED: agent(s) without an environment server; generated legacy_agent environment "
        f"server(s) {listing}. Declare them in your config (instance with environment_servers: "
        f"legacy_agent: {{entrypoint: app.py, agent_server: {{type: {AGENTS}, name: <agent>}}}}), or set "
        f"{ERROR_SWITCH}: true to make this an error."
    ]
