"""The run-level `cache_dir`, defaulted and made absolute the way NeMo Gym 0.7 does it.

NeMo Gym's config parser (global_config.py) sets `cache_dir` to `<working dir>/cache` when absent
(the working directory is the current one for an installed nemo-gym) and makes any value absolute,
before interpolations resolve: a server block with `cache_dir: ${oc.select:cache_dir,null}`
(finance_sec_search) gets that path, not null. gym-compose does the same on the host; in the
containers' copy of the config the host path becomes the containers' writable cache folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from gym_compose.contract import CONTAINER_CACHE_DIR
from gym_compose.errors import UserError

CACHE_DIR_KEY = "cache_dir"


def default_cache_dir(merged: DictConfig, cwd: Path) -> None:
    """Set `cache_dir` (before interpolations resolve) as NeMo Gym 0.7's parser does."""
    if CACHE_DIR_KEY in merged and OmegaConf.is_missing(merged, CACHE_DIR_KEY):
        return  # `???`: reported with the other unset values
    value = merged.get(CACHE_DIR_KEY, None) if CACHE_DIR_KEY in merged else str(cwd / "cache")
    if not isinstance(value, str) or not value:
        raise UserError(f"{CACHE_DIR_KEY} must be a non-empty path string, got {value!r}",
                        hint=f"e.g. ++{CACHE_DIR_KEY}=/path/to/cache, or leave it out for ./cache")
    path = Path(value).expanduser()
    merged[CACHE_DIR_KEY] = str((path if path.is_absolute() else cwd / path).resolve())


def in_containers(config: dict[str, Any]) -> dict[str, Any]:
    """`config` with the host's cache_dir (and every value under it) moved to CONTAINER_CACHE_DIR."""
    host = config.get(CACHE_DIR_KEY)
    if not isinstance(host, str) or not host:
        return config

    def move(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: move(item) for key, item in value.items()}
        if isinstance(value, list):
            return [move(item) for item in value]
        if isinstance(value, str) and (value == host or value.startswith(host.rstrip("/") + "/")):
            return CONTAINER_CACHE_DIR + value[len(host.rstrip("/")):]
        return value

    return move(config)
