"""Fixtures the end-to-end tests share."""

from __future__ import annotations

import subprocess

import pytest

from tests.e2e import PROJECT_PREFIX


@pytest.fixture
def project(request) -> str:
    name = f"{PROJECT_PREFIX}-{request.node.name.replace('_', '-')[:30].lower()}"
    yield name
    subprocess.run(["docker", "compose", "-p", name, "down", "-v", "--timeout", "1"], capture_output=True, timeout=120)
