"""Server instances in a merged config: top-level keys that hold one server type."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gym_compose.config.constants import RESERVED_KEYS, SERVER_TYPES

ENTRYPOINT = "entrypoint"


@dataclass(frozen=True)
class ServerInstance:
    name: str  # the routing key other servers use
    server_type: str  # one of SERVER_TYPES
    implementation: str  # e.g. simple_agent
    spec: dict[str, Any]  # config[name][server_type][implementation]


def is_instance(key: str, value: Any) -> bool:
    return key not in RESERVED_KEYS and isinstance(value, dict) and any(t in value for t in SERVER_TYPES)


def instances(data: dict[str, Any]) -> list[ServerInstance]:
    """Every server instance of a validated merged config (the head is not one), in config order.

    As in NeMo Gym, a block without an `entrypoint` key is config data, not a server (`without_entrypoint`).
    """
    return [block for block in server_blocks(data) if ENTRYPOINT in block.spec]


def without_entrypoint(data: dict[str, Any]) -> list[ServerInstance]:
    """Blocks shaped like a server but with no `entrypoint` key: overlays, or servers missing a line."""
    return [block for block in server_blocks(data) if ENTRYPOINT not in block.spec]


def server_blocks(data: dict[str, Any]) -> list[ServerInstance]:
    found: list[ServerInstance] = []
    for name, value in data.items():
        if not is_instance(name, value):
            continue
        server_type = next(t for t in SERVER_TYPES if t in value)
        implementations = value[server_type]
        if not isinstance(implementations, dict) or not implementations:
            continue
        implementation, spec = next(iter(implementations.items()))
        found.append(ServerInstance(name, server_type, implementation, spec if isinstance(spec, dict) else {}))
    return found
