"""Several swarm nodes on this one machine: a worker lost mid-run, its tasks rescheduled, --resume.

Runs bench/bench_swarm_nodes.py (further dockerd engines in network namespaces, joined to the
host engine's swarm; docs/deploy.md) at a small size and checks what it reports. Needs root, and
an engine not in a swarm already (the script makes it the manager and leaves the swarm after).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.e2e import REPO

pytestmark = pytest.mark.docker


def test_a_lost_worker_is_rescheduled_and_resume_completes_each_rollout_once(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root: network namespaces and further dockerd")
    swarm = subprocess.run(["docker", "info", "--format", "{{.Swarm.LocalNodeState}}"], capture_output=True,
                           text=True, timeout=60).stdout.strip()
    if swarm != "inactive":
        pytest.skip(f"the engine is already in a swarm ({swarm}); the nodes need one of their own")
    out = tmp_path / "figures.json"
    try:
        result = subprocess.run([sys.executable, "-m", "bench.bench_swarm_nodes", "--rows", "400",
                                 "--kill-after", "40", "--model-latency", "0.5", "--json", str(out)],
                                capture_output=True, text=True, timeout=600, cwd=tmp_path,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:  # a timed-out scenario is killed before its own clean-up: leave no swarm, node or namespace behind
        if not out.exists():
            subprocess.run(["docker", "stack", "rm", "gcnodes"], capture_output=True, timeout=120)
            subprocess.run([sys.executable, str(REPO / "scripts/swarm_nodes.py"), "down"], capture_output=True,
                           timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert len(figures["image_copies"]) == 2, figures  # `up --node-engine` loaded the images into both workers
    assert len(figures["tasks_per_node"]) == 3, figures  # the stack was spread over every node
    assert figures["killed"]["tasks"] >= 1 and figures["killed"]["node"] not in figures["tasks_per_node_after"]
    assert figures["first_run_exit"] != 0  # the run stopped on the lost servers
    assert figures["resume_exit"] == 0
    assert figures["rollouts"] == figures["distinct_rows"] == 400 and figures["duplicates"] == 0
    assert figures["rewards"] == {"1.0": 400}
    leftover = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    assert "gymnode" not in leftover
    assert subprocess.run(["docker", "info", "--format", "{{.Swarm.LocalNodeState}}"], capture_output=True,
                          text=True, timeout=60).stdout.strip() == "inactive"
