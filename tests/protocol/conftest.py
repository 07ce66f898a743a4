"""Shared fixture: start a config's servers with the container entry on loopback, tear them down."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from gym_compose.engine.targets.local_processes import LocalProcesses, with_local_addresses

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVER_IMAGES = REPO_ROOT / "server_images"
NEMO_GYM_FIXTURES = REPO_ROOT / "tests" / "fixtures" / "nemo_gym"


@pytest.fixture
def start_stack(tmp_path) -> Callable[..., LocalProcesses]:
    """start_stack(config, server_dirs={instance: folder}) -> a ready LocalProcesses stack (stopped after the test)."""
    stacks: list[LocalProcesses] = []

    def start(config: dict[str, Any], server_dirs: dict[str, Path] | None = None,
              timeout: float = 40.0, env: dict[str, str] | None = None) -> LocalProcesses:
        stack = LocalProcesses(with_local_addresses(config), server_dirs=dict(server_dirs or {}),
                               extra_env=dict(env or {}), log_dir=tmp_path)
        stacks.append(stack)
        return stack.start(timeout=timeout)

    yield start
    for stack in stacks:
        stack.down()
