"""Where each row goes: the environment server that fronts its agent, or its taskset's route.

Reads the in-network NeMo Gym config: instance -> server type -> implementation -> spec,
where an environment server's spec names its agent in `agent_server: {type, name}` (or in any
other field whose value has `type: responses_api_agents`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gym_compose.contract import AGENTS, ENVIRONMENT_SERVERS
from gym_compose.errors import UserError

ENVIRONMENT_SERVER_TYPE = ENVIRONMENT_SERVERS
AGENT_SERVER_TYPE = AGENTS
ROUTES_KEY = "environment_server_routes"


@dataclass(frozen=True)
class EnvironmentServer:
    instance: str
    base_url: str
    agents: tuple[str, ...]


@dataclass
class RoutingTable:
    servers: dict[str, EnvironmentServer]
    taskset_routes: dict[str, str] = field(default_factory=dict)

    @property
    def agents(self) -> list[str]:
        return sorted({agent for server in self.servers.values() for agent in server.agents})

    def servers_for_agent(self, agent: str) -> list[EnvironmentServer]:
        return [server for server in self.servers.values() if agent in server.agents]

    def server_for_row(self, row: dict[str, Any], where: str) -> EnvironmentServer:
        """The server a row goes to; `where` names the row in errors (file and line)."""
        taskset = taskset_of(row)
        if taskset is not None:
            return self._server_for_taskset(taskset, where)
        agent = agent_name_of(row)
        if agent is None:
            if len(self.servers) == 1:
                return next(iter(self.servers.values()))
            raise UserError(
                f"{where}: the row has no agent_ref and there are {len(self.servers)} environment servers"
                f" ({', '.join(sorted(self.servers)) or 'none'}), so it cannot be routed",
                hint=f"add \"agent_ref\": {{\"name\": AGENT}} to the row or pass --agent AGENT;"
                f" agents: {', '.join(self.agents) or 'none'}",
            )
        servers = self.servers_for_agent(agent)
        if len(servers) == 1:
            return servers[0]
        if not servers:
            raise UserError(
                f"{where}: agent_ref names agent {agent!r}, which no environment server fronts",
                hint=f"agents there are: {', '.join(self.agents) or 'none'}",
            )
        raise UserError(
            f"{where}: agent {agent!r} is fronted by several environment servers"
            f" ({', '.join(sorted(s.instance for s in servers))}), so the row cannot choose one",
            hint="give each environment server its own agent, or route rows by taskset (task_id/task_input)",
        )

    def _server_for_taskset(self, taskset: str, where: str) -> EnvironmentServer:
        instance = self.taskset_routes.get(taskset)
        if instance is None:
            raise UserError(
                f"{where}: no environment_server_routes entry for taskset {taskset!r}",
                hint=f"routed tasksets: {', '.join(sorted(self.taskset_routes)) or 'none'}",
            )
        server = self.servers.get(instance)
        if server is None:
            raise UserError(
                f"environment_server_routes sends taskset {taskset!r} to {instance!r}, which is no environment server",
                hint=f"environment servers: {', '.join(sorted(self.servers)) or 'none'}",
            )
        return server


def taskset_of(row: dict[str, Any]) -> str | None:
    """The taskset of a `{task_id, task_input}` row, or None for a flat row."""
    task_id = row.get("task_id")
    if not isinstance(task_id, dict) or "task_input" not in row:
        return None
    taskset = task_id.get("taskset")
    return taskset if isinstance(taskset, str) and taskset else None


def agent_name_of(row: dict[str, Any]) -> str | None:
    agent_ref = row.get("agent_ref")
    if isinstance(agent_ref, dict) and agent_ref.get("name") is not None:
        return str(agent_ref["name"])
    return None


def routing_table_from_config(config: dict[str, Any]) -> RoutingTable:
    servers: dict[str, EnvironmentServer] = {}
    for instance, body in config.items():
        if not isinstance(body, dict) or not isinstance(body.get(ENVIRONMENT_SERVER_TYPE), dict):
            continue
        for spec in body[ENVIRONMENT_SERVER_TYPE].values():
            if not isinstance(spec, dict):
                continue
            servers[str(instance)] = EnvironmentServer(
                instance=str(instance),
                base_url=_base_url(str(instance), spec),
                agents=tuple(_agent_names(spec)),
            )
    routes = config.get(ROUTES_KEY) or {}
    if not isinstance(routes, dict):
        raise UserError(f"{ROUTES_KEY} must be a mapping of taskset -> environment server, got {type(routes).__name__}")
    return RoutingTable(servers=servers, taskset_routes={str(k): str(v) for k, v in routes.items()})


def _agent_names(spec: dict[str, Any]) -> list[str]:
    names = []
    for key, value in spec.items():
        if not isinstance(value, dict) or value.get("name") is None:
            continue
        if value.get("type") == AGENT_SERVER_TYPE or (key == "agent_server" and value.get("type") is None):
            names.append(str(value["name"]))
    return names


def _base_url(instance: str, spec: dict[str, Any]) -> str:
    host, port = spec.get("host"), spec.get("port")
    if not host or not port:
        raise UserError(
            f"environment server {instance!r} has no host/port in NEMO_GYM_CONFIG_DICT",
            hint="the collector needs the in-network config with host and port filled in for every server",
        )
    return f"http://{host}:{port}"
