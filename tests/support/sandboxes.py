"""Helpers of the sandbox end-to-end tests (tests/e2e/test_sandboxes.py, test_sandbox_reach.py,
test_swarm.py): the docker and gym-compose calls they make, and the probe run inside containers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import REPO
from tests.support.e2e import labelled  # noqa: F401  (the sandbox tests' one way to list what is left)
from tests.support.ports import free_port  # noqa: F401  (the sandbox tests take it from here)

CLI = [sys.executable, "-m", "gym_compose"]
PROBE = REPO / "tests" / "e2e" / "sandbox_probe.py"
LABEL = "io.gym-compose.project"
SANDBOX_LABEL = "io.gym-compose.sandbox"



def run(*argv: str, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kwargs)


def gym_compose(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    return run(*CLI, *args, cwd=cwd, timeout=timeout)


def inspect(*ids: str) -> list[dict]:
    return json.loads(run("docker", "inspect", *ids, timeout=60).stdout or "[]")
