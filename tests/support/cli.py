"""The real CLI entry point in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The real entry point, with no `docker` on PATH: a check that should have stopped the command
    first shows up as a Docker error (or, worse, a start), never as a pass."""
    return subprocess.run([sys.executable, "-m", "gym_compose", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={"PATH": "/nonexistent", "HOME": str(cwd), "PYTHONPATH": str(REPO)})
