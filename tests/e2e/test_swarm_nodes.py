"""Several swarm nodes on this one machine: a worker lost mid-run, its tasks rescheduled, --resume.

Runs bench/bench_swarm_nodes.py (further dockerd engines in network namespaces, joined to the
host engine's swarm; docs/deploy.md) at a small size and checks what it reports. Needs root, and
the session's swarm on the nodes' bridge (tests/e2e/conftest.py: swarm_manager), which the
scenario joins its nodes to and leaves in place: the session leaves it at its end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.e2e.conftest import NODES_MANAGER_ADDRESS, SWARM_NODES, swarm_state
from tests.support.e2e import REPO

pytestmark = [pytest.mark.docker,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces and further dockerd")]

SCENARIO_TIMEOUT_S = 600  # the scenario's own bound; the clean-up below and pytest's limit come after it


@pytest.mark.timeout(SCENARIO_TIMEOUT_S + 600)
def test_a_lost_worker_is_rescheduled_and_resume_completes_each_rollout_once(swarm_manager, tmp_path):
    if swarm_manager != NODES_MANAGER_ADDRESS:
        pytest.skip(f"the engine is in a swarm advertising {swarm_manager}; the nodes need one on "
                    f"{NODES_MANAGER_ADDRESS} (scripts/swarm_nodes.py)")
    out, log = tmp_path / "figures.json", tmp_path / "scenario.log"
    with log.open("w") as sink:  # its steps, with their times, say where a scenario that does not end stood
        scenario = subprocess.Popen([sys.executable, "-m", "bench.bench_swarm_nodes", "--rows", "400",
                                     "--kill-after", "40", "--model-latency", "0.5", "--json", str(out)],
                                    stdout=sink, stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True,
                                    env={**os.environ, "PYTHONPATH": str(REPO)})
        try:
            returncode = scenario.wait(timeout=SCENARIO_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(scenario.pid, signal.SIGKILL)  # the bench and the gym-compose commands it runs
            scenario.wait(timeout=60)
            returncode = None
        finally:  # a killed scenario had no clean-up of its own: leave no node or namespace behind
            if not out.exists():
                subprocess.run(["docker", "stack", "rm", "gcnodes"], capture_output=True, timeout=120)
                subprocess.run([*SWARM_NODES, "down", "--keep-swarm"], capture_output=True, timeout=300)
    said = log.read_text()[-5000:]
    assert returncode is not None, f"the scenario did not end within {SCENARIO_TIMEOUT_S} s; it said:\n{said}"
    assert returncode == 0, said
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
    # the nodes left the session's swarm; the engine is still its manager, the only node
    assert swarm_state() == ("active", NODES_MANAGER_ADDRESS)
    nodes = subprocess.run(["docker", "node", "ls", "--format", "{{.Hostname}}"], capture_output=True, text=True,
                           timeout=60).stdout.split()
    assert len(nodes) == 1 and not nodes[0].startswith("gymnode"), nodes
