"""Helpers for a resources server's own unit tests (server_images/<name>/tests/)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_app(server_dir: Path, entrypoint: str = "app.py") -> ModuleType:
    """Import a server's app.py as the container would (NeMo Gym names available), without serving it."""
    from gym_compose.server import compat

    compat.install()
    server_dir = Path(server_dir).resolve()
    if str(server_dir) not in sys.path:
        sys.path.insert(0, str(server_dir))
    spec = importlib.util.spec_from_file_location(f"{server_dir.name}_app", server_dir / entrypoint)
    assert spec is not None and spec.loader is not None  # a .py file always has a spec and a loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as for any import (dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module
