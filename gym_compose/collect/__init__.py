"""Rollout collection: one POST /run per row to the environment server fronting its agent.

Public API: `collect(config, options, progress=None) -> CollectResult`, `CollectOptions`,
`read_progress(output_dir)`. Entry: `python -m gym_compose.collect --input FILE --output-dir DIR`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gym_compose.collect.collector import collect
    from gym_compose.collect.options import CollectOptions, CollectResult
    from gym_compose.collect.progress import read_progress

__all__ = ["collect", "CollectOptions", "CollectResult", "read_progress"]

# Resolved on first use: the host imports the light submodules (jsonl, progress, rows) without
# the collector's asyncio client stack (docs/performance.md).
_HOMES = {"collect": "collector", "CollectOptions": "options", "CollectResult": "options", "read_progress": "progress"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value
