"""NeMo Gym-style config: load, merge, override, validate (host side only; no Docker here)."""

from gym_compose.config.constants import RESERVED_KEYS, SERVER_TYPES
from gym_compose.config.instances import ServerInstance, instances
from gym_compose.config.loader import LoadedConfig, load
from gym_compose.config.redact import redact, redact_for_display
from gym_compose.config.request import ConfigRequest
from gym_compose.config.search import discover, find_implementation_dir, resolve_path, search_roots

__all__ = [
    "ConfigRequest",
    "LoadedConfig",
    "RESERVED_KEYS",
    "SERVER_TYPES",
    "ServerInstance",
    "discover",
    "find_implementation_dir",
    "instances",
    "load",
    "redact",
    "redact_for_display",
    "resolve_path",
    "search_roots",
]
