"""Several swarm nodes on this one machine: a worker lost mid-run, its tasks rescheduled, --resume.

Runs bench/bench_swarm_nodes.py (further dockerd engines in network namespaces, joined to the
host engine's swarm; docs/deploy.md) at a small size and checks what it reports. Needs root, and
an engine not in a swarm already (the script makes it the manager and leaves the swarm after).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.support.e2e import REPO

pytestmark = pytest.mark.docker

SCENARIO_TIMEOUT_S = 600  # the scenario's own bound; the clean-up below and pytest's limit come after it


@pytest.mark.timeout(SCENARIO_TIMEOUT_S + 600)
def test_a_lost_worker_is_rescheduled_and_resume_completes_each_rollout_once(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root: network namespaces and further dockerd")
    swarm = subprocess.run(["docker", "info", "--format", "{{.Swarm.LocalNodeState}}"], capture_output=True,
                           text=True, timeout=60).stdout.strip()
    if swarm != "inactive":
        pytest.skip(f"the engine is already in a swarm ({swarm}); the nodes need one of their own")
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
        finally:  # a killed scenario had no clean-up of its own: leave no swarm, node or namespace behind
            if not out.exists():
                subprocess.run(["docker", "stack", "rm", "gcnodes"], capture_output=True, timeout=120)
                subprocess.run([sys.executable, str(REPO / "scripts/swarm_nodes.py"), "down"], capture_output=True,
                               timeout=300)
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
    assert subprocess.run(["docker", "info", "--format", "{{.Swarm.LocalNodeState}}"], capture_output=True,
                          text=True, timeout=60).stdout.strip() == "inactive"
