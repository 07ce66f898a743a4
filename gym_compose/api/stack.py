"""`Stack`: one gym-compose project driven from Python, through the layers the CLI drives.

`from_configs` loads and plans (config errors are raised here, before anything starts); `up`
builds, renders and starts it and waits until every server is healthy (as `gym-compose up -d`:
afterwards `gym-compose ps/logs/down -p PROJECT` see it too); `down` removes it. Servers are
published on the host by default, so the head's host view, `rollouts` and a trainer's own client
reach every one of them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from gym_compose.api import rollouts as rollout_calls
from gym_compose.api.upstreams import put_upstreams, reachable_from_containers
from gym_compose.collect.routing import RoutingTable, routing_table_from_config
from gym_compose.config.request import ConfigRequest
from gym_compose.contract import ENVIRONMENT_SERVERS, HEAD_PORT, MODELS
from gym_compose.engine.targets.deployed_stack import DeployedStack
from gym_compose.engine.targets.registry import TargetOptions
from gym_compose.errors import UserError
from gym_compose.plan.model import Stack as PlannedStack
from gym_compose.plan.model import StackOptions
from gym_compose.stack.lifecycle import StackArgs, load_and_plan, serve, stack_service_names
from gym_compose.stack.state import owning_project
from gym_compose.stack.teardown import down_quietly


class Stack:
    """A planned gym-compose project; `up()` starts it, `down()` (or leaving `with`) removes it."""

    def __init__(self, plan: PlannedStack, target: TargetOptions | None = None):
        self.plan = plan
        self.target = target or TargetOptions()
        self._deployed: DeployedStack | None = None

    @classmethod
    def from_configs(cls, paths: Sequence[str | Path] = (), overrides: Sequence[str] = (), *,
                     resources_servers: Sequence[str] = (), benchmarks: Sequence[str] = (),
                     environments: Sequence[str] = (), model_types: Sequence[str] = (),
                     agent_types: Sequence[str] = (), model_name: str | None = None, model_url: str | None = None,
                     model_api_key: str | None = None, search_dirs: Sequence[str | Path] = (),
                     env_file: str | Path | None = None, skip_env_file: bool = False,
                     initial_config: dict[str, Any] | None = None,
                     project: str = "gym-compose", head_port: int = HEAD_PORT, bind_address: str = "127.0.0.1",
                     advertise_host: str | None = None, publish: bool = True) -> Stack:
        """Load and plan NeMo Gym configs: `paths` (config files) and the CLI's selectors, then the
        `key=value` `overrides` (Hydra's grammar); `initial_config` (a dict) merges over the files
        and `env_file`, under the overrides. `bind_address` is where the head and the published
        servers listen (e.g. 0.0.0.0), `advertise_host` the address the host view names (default:
        the bind address, 127.0.0.1 for 0.0.0.0). A `model_url` on the host's loopback becomes
        host.docker.internal, as the containers reach the host."""
        if not 0 < head_port < 65536:
            raise UserError(f"head_port must be a TCP port (1-65535), got {head_port}")
        request = ConfigRequest(
            config_files=[Path(p) for p in paths], resources_servers=list(resources_servers),
            model_types=list(model_types), agent_types=list(agent_types), benchmarks=list(benchmarks),
            environments=list(environments), model_name=model_name,
            model_url=reachable_from_containers(model_url) if model_url else None,
            model_api_key=model_api_key, search_dirs=[Path(p) for p in search_dirs], overrides=list(overrides),
            env_file=Path(env_file) if env_file is not None else None, skip_env_file=skip_env_file,
            initial_config=initial_config)
        options = StackOptions(project=project, head_port=head_port, publish_all=publish, bind_address=bind_address,
                               advertise_host=advertise_host)
        _, plan = load_and_plan(StackArgs(request, options))
        return cls(plan)

    # ---- life ----

    def up(self) -> Stack:
        """Build what is missing, start every server, wait until all are healthy. Raises
        `errors.StackNotHealthy` (with each failing server's last log lines) and removes what it
        started when one is not."""
        if self._deployed is not None:
            raise UserError(f"stack {self.project!r} is already up")
        with owning_project(self.project):
            self._deployed = serve(self.plan, self.target)
        return self

    def down(self) -> None:
        """Remove every container and network of the stack (results and caches are kept). Idempotent."""
        deployed, self._deployed = self._deployed, None
        if deployed is not None:
            down_quietly(deployed)

    def __enter__(self) -> Stack:
        return self.up()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.down()

    @property
    def running(self) -> bool:
        return self._deployed is not None

    def dead_servers(self) -> list[str]:
        """The services of the running stack that exited (empty while all are alive)."""
        check = self._require_up().check_stack(stack_service_names(self.plan))
        return [state.service for state in check.dead]

    # ---- where things are ----

    @property
    def project(self) -> str:
        return self.plan.project

    @property
    def head_url(self) -> str:
        """The head as clients on the host (or, with advertise_host, elsewhere) reach it."""
        options = self.plan.options
        return f"http://{options.host_view_address}:{options.head_port}"

    @property
    def host_config(self) -> dict[str, Any]:
        """The host view of the config (what the head serves at /global_config_dict_yaml)."""
        return self.plan.host_config

    def server_url(self, instance: str) -> str:
        """The published address of the server instance `instance`."""
        for service in self.plan.services:
            if service.instance == instance:
                if not service.published_port:
                    raise UserError(f"server {instance!r} is not published",
                                    hint="start the stack with publish=True, or `docker: {publish: true}` on it")
                return f"http://{self.plan.options.host_view_address}:{service.published_port}"
        known = sorted(s.instance for s in self.plan.services if s.instance)
        raise UserError(f"no server instance {instance!r} in the stack", hint=f"instances: {', '.join(known)}")

    # ---- model upstreams ----

    def set_model_urls(self, instance: str, urls: Sequence[str]) -> list[str]:
        """Point the running model server `instance` (e.g. "policy_model") at new base URLs, without
        a restart; rollouts started afterwards use them. Loopback URLs become host.docker.internal."""
        self._require_up()
        if not any(s.instance == instance and s.role == "model" for s in self.plan.services):
            models = sorted(name for name, body in self.plan.host_config.items()
                            if isinstance(body, dict) and MODELS in body)
            raise UserError(f"no model server {instance!r} in the stack", hint=f"model servers: {', '.join(models)}")
        return put_upstreams(instance, self.server_url(instance), list(urls))

    # ---- rollouts ----

    def routing(self) -> RoutingTable:
        """The environment servers at their published addresses."""
        for name, body in self.plan.host_config.items():
            if isinstance(body, dict) and ENVIRONMENT_SERVERS in body:
                self.server_url(str(name))  # raises when one is not published
        return routing_table_from_config(self.plan.host_config)

    def rollouts(self, rows: Iterable[dict[str, Any]], parallel: int = 32,
                 timeout_seconds: float = rollout_calls.DEFAULT_TIMEOUT_SECONDS) -> AsyncIterator[dict[str, Any]]:
        """An async iterator of NeMo Gym rollout rows, in the order they finish, at most `parallel`
        at once. A rollout that failed is a failure row (`is_failure(row)`), not an exception."""
        self._require_up()
        return rollout_calls.rollouts(self.routing(), rows, parallel, timeout_seconds)

    def aggregate_metrics(self, results: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """NeMo Gym's aggregate metrics (per environment server: agent_metrics, key_metrics,
        group_level_metrics) of finished rollouts, from the servers' own /aggregate_metrics.
        Blocking: from async code, `await asyncio.to_thread(stack.aggregate_metrics, rows)`."""
        self._require_up()
        return rollout_calls.aggregate_metrics(self.routing(), results)

    def _require_up(self) -> DeployedStack:
        if self._deployed is None:
            raise UserError(f"stack {self.project!r} is not up", hint="call stack.up() (or use `with stack:`) first")
        return self._deployed
