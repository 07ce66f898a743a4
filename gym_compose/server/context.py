"""What a server learns from its environment: the whole config, its own instance, where to bind."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gym_compose.contract import (
    BIND_HOST_ENV,
    CONFIG_DICT_ENV,
    CONFIG_PATH_ENV,
    HEAD_INSTANCE,
    HEAD_VIEW_ENV,
    SECRET_PREFIX,
    SECRETS_DIR,
    SECRETS_DIR_ENV,
    SERVER_DIR_ENV,
    SERVER_TYPES,
)

__all__ = ["BIND_HOST_ENV", "CONFIG_DICT_ENV", "CONFIG_PATH_ENV", "HEAD_INSTANCE", "HEAD_VIEW_ENV", "SECRET_PREFIX",
           "SECRETS_DIR_ENV", "SERVER_DIR_ENV", "SERVER_TYPES", "ServerConfigError", "ServerContext"]


class ServerConfigError(RuntimeError):
    """The environment does not describe a server this runtime can start."""


@dataclass(frozen=True)
class ServerContext:
    name: str
    server_type: str  # "head_server" for the head
    implementation: str
    spec: dict[str, Any]  # this instance's own block: config[name][type][implementation]
    global_config: dict[str, Any]
    bind_host: str
    port: int
    server_dir: Path | None = None
    head_view: dict[str, Any] = field(default_factory=dict)

    @property
    def is_head(self) -> bool:
        return self.server_type == HEAD_INSTANCE


def resolve_secrets(value: Any, secrets_dir: Path) -> Any:
    """Replace every string `secret://NAME` with the stripped content of secrets_dir/NAME."""
    if isinstance(value, dict):
        return {key: resolve_secrets(item, secrets_dir) for key, item in value.items()}
    if isinstance(value, list):
        return [resolve_secrets(item, secrets_dir) for item in value]
    if isinstance(value, str) and value.startswith(SECRET_PREFIX):
        name = value[len(SECRET_PREFIX):]
        path = secrets_dir / name
        if not name or "/" in name or not path.is_file():
            raise ServerConfigError(f"secret {name!r} is not a file in {secrets_dir} ({SECRETS_DIR_ENV})")
        return path.read_text().strip()
    return value


def instance_block(config: dict[str, Any], name: str) -> tuple[str, str, dict[str, Any]]:
    """(server_type, implementation, spec) of instance `name`, with a clear error when it is not one."""
    entry = config.get(name)
    if not isinstance(entry, dict):
        raise ServerConfigError(f"{CONFIG_PATH_ENV}={name!r} names no instance in the config")
    for server_type in SERVER_TYPES:
        implementations = entry.get(server_type)
        if isinstance(implementations, dict) and len(implementations) == 1:
            implementation, spec = next(iter(implementations.items()))
            return server_type, implementation, dict(spec or {})
    raise ServerConfigError(
        f"instance {name!r} must hold exactly one of {', '.join(SERVER_TYPES)} with one implementation"
    )


def instance_address(config: dict[str, Any], name: str) -> tuple[str, int]:
    """(host, port) of a server instance or of the head, as the config says."""
    if name == HEAD_INSTANCE:
        spec = config.get(HEAD_INSTANCE) or {}
    else:
        spec = instance_block(config, name)[2]
    host, port = spec.get("host"), spec.get("port")
    if not host or port is None:
        raise ServerConfigError(f"instance {name!r} has no host/port in the config")
    return str(host), int(port)


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: faster per config parsed (docs/performance.md)


def _parse_yaml(text: str, variable: str) -> dict[str, Any]:
    try:
        data = yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as error:
        raise ServerConfigError(f"{variable} is not valid YAML: {error}") from error
    if not isinstance(data, dict):
        raise ServerConfigError(f"{variable} must be a YAML mapping")
    return data


def load_context(environ: dict[str, str] | None = None) -> ServerContext:
    environ = dict(os.environ if environ is None else environ)
    if CONFIG_DICT_ENV not in environ or CONFIG_PATH_ENV not in environ:
        raise ServerConfigError(f"both {CONFIG_DICT_ENV} and {CONFIG_PATH_ENV} must be set")
    secrets_dir = Path(environ.get(SECRETS_DIR_ENV, SECRETS_DIR))
    raw_config = _parse_yaml(environ[CONFIG_DICT_ENV], CONFIG_DICT_ENV)
    config = raw_config
    name = environ[CONFIG_PATH_ENV]
    server_dir = Path(environ[SERVER_DIR_ENV]) if environ.get(SERVER_DIR_ENV) else None

    if name == HEAD_INSTANCE:
        server_type, implementation, spec = HEAD_INSTANCE, HEAD_INSTANCE, dict(config.get(HEAD_INSTANCE) or {})
        head_view = _parse_yaml(environ[HEAD_VIEW_ENV], HEAD_VIEW_ENV) if environ.get(HEAD_VIEW_ENV) else raw_config
    else:
        server_type, implementation, spec = instance_block(config, name)
        # Only this server's own block: a container gets only its own secrets mounted.
        spec = resolve_secrets(spec, secrets_dir)
        head_view = {}
    host, port = instance_address(config, name)
    spec.setdefault("name", name)
    return ServerContext(
        name=name,
        server_type=server_type,
        implementation=implementation,
        spec=spec,
        global_config=config,
        bind_host=environ.get(BIND_HOST_ENV) or host,
        port=port,
        server_dir=server_dir,
        head_view=head_view,
    )
