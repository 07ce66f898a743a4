"""Fixtures the end-to-end tests share."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import after_the_other_lanes
from tests.e2e import PROJECT_PREFIX
from tests.support.e2e import REPO, remove_project

SWARM_NODES = [sys.executable, str(REPO / "scripts/swarm_nodes.py")]
NODES_MANAGER_ADDRESS = "198.18.231.1"  # scripts/swarm_nodes.py's MANAGER_ADDRESS


@pytest.fixture
def project(request) -> str:
    name = f"{PROJECT_PREFIX}-{request.node.name.replace('_', '-')[:30].lower()}"
    yield name
    remove_project(name)


def swarm_state() -> tuple[str, str]:
    info = subprocess.run(["docker", "info", "--format", "{{.Swarm.LocalNodeState}} {{.Swarm.NodeAddr}}"],
                          capture_output=True, text=True, timeout=60).stdout.split()
    return (info[0], info[1] if len(info) > 1 else "") if info else ("unknown", "")


@pytest.fixture(scope="session")
def swarm_manager() -> str:
    """This engine as a swarm manager for the session; the address it advertises.

    An engine already in a swarm is used as it is. Otherwise the swarm is made here: as root by
    scripts/swarm_nodes.py on its nodes' bridge (test_swarm_nodes joins further engines to it),
    else on loopback; and left only when the session ends, once every other lane has run its last
    Docker module: leaving a swarm takes name resolution from every network on the engine at that
    moment (Docker Engine 20.10: a stack that is up answers "Name or service not known" until its
    containers restart; docs/troubleshooting.md), so no other lane's stack may be up then."""
    state, address = swarm_state()
    if state == "active":
        return address
    assert state == "inactive", f"the engine's swarm state is {state!r}"
    if os.geteuid() == 0:
        made = subprocess.run([*SWARM_NODES, "up", "--nodes", "0"], capture_output=True, text=True, timeout=300)
        leave = [*SWARM_NODES, "down"]
    else:
        made = subprocess.run(["docker", "swarm", "init", "--advertise-addr", "127.0.0.1"], capture_output=True,
                              text=True, timeout=120)
        leave = ["docker", "swarm", "leave", "--force"]
    after_the_other_lanes(lambda: subprocess.run(leave, capture_output=True, timeout=600))
    assert made.returncode == 0, made.stderr + made.stdout
    return swarm_state()[1]
