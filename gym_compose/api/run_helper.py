"""`RunHelper`: NeMo Gym 0.7's `nemo_gym.cli.RunHelper` interface, with the servers in containers.

A trainer that starts Gym in-process (NeMo RL's `NemoGym._spinup`, veRL's nemo_gym agent loop)
swaps one import and keeps its calls:

    rh = RunHelper()
    rh.start(GlobalConfigDictParserConfig(initial_global_config_dict=..., dotenv_path=..., skip_load_from_cli=True))
    rh.poll()        # raises RuntimeError when a server died
    rh.shutdown()

The global config dict means what it means to NeMo Gym: `config_paths` are loaded first, then the
dotenv file (`env.yaml`), then the dict itself over both (and, unless `skip_load_from_cli`, the
process's command-line overrides). `head_server: {host, port}` is where the head listens (the
trainer's `0.0.0.0` and free port); every server is published on that address, from the head's port
up, and the host view names `default_host` (the trainer's node IP) for them; `policy_base_url`
(one URL or a list) is the model's upstreams, loopback ones rewritten to host.docker.internal.
The Ray, port-range and aiohttp keys NeMo Gym's own processes read mean nothing here and are kept
as plain values. The project is `gym-compose-<head port>` unless `gym_compose_project` names one.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gym_compose.api.stack import Stack
from gym_compose.api.upstreams import reachable_from_containers
from gym_compose.contract import HEAD_INSTANCE, HEAD_PORT
from gym_compose.errors import UserError

PROJECT_KEY = "gym_compose_project"


@dataclass
class GlobalConfigDictParserConfig:
    """NeMo Gym's `GlobalConfigDictParserConfig` (the fields RunHelper reads); NeMo Gym's own
    object, or any with these attributes, is accepted as well."""

    dotenv_path: Path | None = None
    initial_global_config_dict: Any = None  # a dict or an OmegaConf DictConfig
    skip_load_from_cli: bool = False
    skip_load_from_dotenv: bool = False


def plain_dict(value: Any) -> dict[str, Any]:
    """A plain dict from a dict or an OmegaConf DictConfig (interpolations left to the loader)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        from omegaconf import DictConfig, OmegaConf

        if isinstance(value, DictConfig):
            value = OmegaConf.to_container(value, resolve=False)
    if not isinstance(value, dict):
        raise UserError(f"initial_global_config_dict must be a mapping, got {type(value).__name__}")
    return dict(value)


def with_reachable_policy_urls(config: dict[str, Any]) -> dict[str, Any]:
    urls = config.get("policy_base_url")
    if isinstance(urls, str):
        config["policy_base_url"] = reachable_from_containers(urls)
    elif isinstance(urls, list):
        config["policy_base_url"] = [reachable_from_containers(u) if isinstance(u, str) else u for u in urls]
    return config


def stack_from_global_config(parser_config: Any) -> Stack:
    """The planned stack for a NeMo Gym global config dict (see the module's docstring)."""
    config = with_reachable_policy_urls(plain_dict(getattr(parser_config, "initial_global_config_dict", None)))
    config_paths = config.pop("config_paths", None) or []
    if isinstance(config_paths, str):
        config_paths = [config_paths]
    if not isinstance(config_paths, list) or not all(isinstance(p, str) for p in config_paths):
        raise UserError(f"config_paths must be a list of paths, got {config_paths!r}")
    head = config.get(HEAD_INSTANCE) or {}
    if not isinstance(head, dict):
        raise UserError(f"{HEAD_INSTANCE} must be a mapping {{host, port}}, got {head!r}")
    host = str(head.get("host") or "127.0.0.1")
    port = int(head.get("port") or HEAD_PORT)
    project = str(config.pop(PROJECT_KEY, None) or f"gym-compose-{port}")
    default_host = config.get("default_host")
    advertise = str(default_host) if default_host and host in ("0.0.0.0", "::") else None
    overrides = [] if getattr(parser_config, "skip_load_from_cli", False) else list(sys.argv[1:])
    dotenv = getattr(parser_config, "dotenv_path", None)
    return Stack.from_configs(
        config_paths, overrides, initial_config=config, env_file=dotenv,
        skip_env_file=bool(getattr(parser_config, "skip_load_from_dotenv", False)),
        project=project, head_port=port, bind_address=host, advertise_host=advertise, publish=True)


class RunHelper:
    """NeMo Gym's RunHelper: `start` the stack and wait until it is ready, `poll`, `shutdown`."""

    def __init__(self) -> None:
        self.stack: Stack | None = None

    def start(self, global_config_dict_parser_config: Any) -> None:
        """Start the head and every configured server in containers and wait until all are ready.
        A failure removes whatever was started, then raises."""
        try:
            self.stack = stack_from_global_config(global_config_dict_parser_config)
            self.stack.up()
        except BaseException:
            self.shutdown()
            raise

    def poll(self) -> None:
        """Raise RuntimeError (as NeMo Gym does) when a server of the stack has died."""
        if self.stack is None or not self.stack.running:
            raise RuntimeError("gym-compose RunHelper: the stack is not running (start() it first)")
        dead = self.stack.dead_servers()
        if dead:
            raise RuntimeError(f"Servers finished unexpectedly: {', '.join(dead)} "
                               f"(see `gym-compose logs -p {self.stack.project} SERVICE`)")

    def shutdown(self) -> None:
        """Remove the stack (idempotent)."""
        if self.stack is not None:
            self.stack.down()

    @property
    def head_url(self) -> str | None:
        return self.stack.head_url if self.stack is not None else None
