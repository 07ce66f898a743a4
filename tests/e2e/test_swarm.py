"""End-to-end on Docker Swarm: the same project deployed as a stack (`--target swarm`).

One stack for the module: the example benchmark beside the stateful counter with two replicas,
deployed through a real registry (Debian's docker-registry, the distribution registry, on
loopback: `--registry` tags, pushes and deploys by digest). The engine is a swarm manager for the
session (tests/e2e/conftest.py: swarm_manager, left at the session's end if made there). The
sandboxed stack runs without a registry.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request

import pytest

from tests.e2e import PROJECT_PREFIX
from tests.support.e2e import REPO, free_port, gym_compose
from tests.support.registry import start_registry

pytestmark = pytest.mark.docker

PROJECT = f"{PROJECT_PREFIX}-sw"  # Swarm service names: PROJECT_SERVICE, at most 63 characters
COUNTER_AGENT = "stateful_counter_simple_agent"
REGISTRY = f"127.0.0.1:{free_port()}"  # the engine trusts loopback registries over plain HTTP
STACK_ARGS = ["--target", "swarm", "-p", PROJECT, "--benchmark", "example_single_tool_call",
              "--resources-server", "stateful_counter",
              "++stateful_counter.resources_servers.stateful_counter.docker.replicas=2",
              "--registry", f"{REGISTRY}/gym"]


def docker(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


def of_stack(kind: str) -> list[str]:
    names = set()
    for label in ("io.gym-compose.project", "com.docker.stack.namespace"):
        listing = docker(kind, "ls", "--filter", f"label={label}={PROJECT}", "--format", "{{.Name}}")
        names.update(listing.stdout.split())
    return sorted(names)


@pytest.fixture(scope="module")
def swarm_stack(swarm_manager, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("swarm")
    registry = start_registry(cwd / "registry", REGISTRY)
    try:
        up = gym_compose("up", "-d", *STACK_ARGS, "--head-port", str(free_port()), cwd=cwd)
        assert up.returncode == 0, up.stderr
        yield cwd, up
    finally:
        docker("stack", "rm", PROJECT)
        for service in of_stack("service"):
            docker("service", "rm", service)
        registry.stop()
        for image in docker("images", "--format", "{{.Repository}}:{{.Tag}}", f"{REGISTRY}/gym/*").stdout.split():
            docker("rmi", image)


def test_stack_is_healthy_with_replicas_and_ps_logs_see_it(swarm_stack):
    cwd, up = swarm_stack
    assert "all 8 services healthy" in up.stderr
    ps = gym_compose("ps", "-p", PROJECT, cwd=cwd)
    assert ps.returncode == 0, ps.stderr
    header, *lines = ps.stdout.splitlines()
    state = header.split().index("STATE")  # after INSTANCE when a long name was shortened
    rows = [line.split() for line in lines]
    assert [row[0] for row in rows].count("stateful-counter") == 2  # one line per replica
    assert all(row[state:state + 2] == ["running", "healthy"] for row in rows), ps.stdout
    # every service runs the image built here, pushed to the registry and named by its digest
    images = docker("service", "ls", "--filter", f"label=com.docker.stack.namespace={PROJECT}",
                    "--format", "{{.Image}}").stdout.split()
    assert images and all(image.startswith(f"{REGISTRY}/gym/") and "@sha256:" in image for image in images), images
    catalog = json.loads(urllib.request.urlopen(f"http://{REGISTRY}/v2/_catalog", timeout=10).read())
    assert {"gym/base", "gym/stateful_counter"} <= set(catalog["repositories"]), catalog


def test_collects_the_example_benchmark_and_counter_sessions_across_replicas(swarm_stack, tmp_path):
    cwd, _ = swarm_stack
    results = tmp_path / "results"
    run = gym_compose("eval", "run", "--no-serve", *STACK_ARGS, "--results-dir", str(results), "--run-name", "example",
                      cwd=cwd)
    assert run.returncode == 0, run.stderr
    (run_dir,) = results.glob("example*")
    rollouts = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert rollouts and all(r["reward"] == 1.0 for r in rollouts)  # the job's results reached this folder

    # stateful rollouts: each session's calls may reach either replica; the state must follow
    rows = tmp_path / "counter.jsonl"
    lines = (REPO / "server_images/stateful_counter/data/example.jsonl").read_text().splitlines()
    rows.write_text("".join(json.dumps({**json.loads(line), "agent_ref": {"name": COUNTER_AGENT}}) + "\n"
                            for line in lines))
    run = gym_compose("eval", "run", "--no-serve", *STACK_ARGS, "--input", str(rows), "--num-repeats", "6",
                      "--num-samples-in-parallel", "12", "--results-dir", str(results), "--run-name", "counter",
                      cwd=cwd)
    assert run.returncode == 0, run.stderr
    (counter_dir,) = results.glob("counter*")
    rollouts = [json.loads(line) for line in (counter_dir / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 6 * len(lines) and all(r["reward"] == 1.0 for r in rollouts)
    tasks = docker("service", "ps", "--format", "{{.Name}}", f"{PROJECT}_stateful-counter").stdout.split()
    assert len(tasks) == 2
    logs = gym_compose("logs", "stateful-counter", "-p", PROJECT, cwd=cwd)  # both replicas' lines
    assert logs.returncode == 0, logs.stderr
    assert "passing requests of sessions held by another replica" in logs.stdout + logs.stderr


def test_down_leaves_no_service_network_secret_or_config(swarm_stack):
    cwd, _ = swarm_stack
    down = gym_compose("down", "-p", PROJECT, cwd=cwd)
    assert down.returncode == 0, down.stderr
    for kind in ("service", "network", "secret", "config"):
        assert of_stack(kind) == [], kind
    assert docker("ps", "-aq", "--filter", f"label=com.docker.stack.namespace={PROJECT}").stdout.split() == []
    # the collector job's container too (Swarm keeps a completed job task's container)
    assert docker("ps", "-aq", "--filter", f"label=io.gym-compose.project={PROJECT}").stdout.split() == []


def test_a_sandboxed_benchmark_collects_on_swarm_and_leaves_nothing(swarm_stack, tmp_path):
    """The broker on the swarm node starts sandboxes through its engine, on the attachable internal
    overlay network; python_sandbox's rows reward 1.0 only when the tool's output came back."""
    project = f"{PROJECT_PREFIX}-swsb"
    rows = REPO / "server_images/python_sandbox/data/example.jsonl"
    up = gym_compose("up", "--target", "swarm", "-p", project, "--head-port", str(free_port()),
                     "--resources-server", "python_sandbox", "--input", str(rows), "--run-name", "sandboxed",
                     cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    (run_dir,) = (tmp_path / "results").glob("sandboxed*")
    rollouts = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == len(rows.read_text().splitlines()) and all(r["reward"] == 1.0 for r in rollouts)
    for label in ("io.gym-compose.project", "com.docker.stack.namespace"):
        assert docker("ps", "-aq", "--filter", f"label={label}={project}").stdout.split() == []
        assert docker("service", "ls", "-q", "--filter", f"label={label}={project}").stdout.split() == []


def test_nothing_of_the_project_answers_a_sandbox_on_swarm(swarm_manager, tmp_path):
    """tests/e2e/test_sandbox_reach.py's checks on overlay networks: the guard finds the overlay
    interface by its alias, and no server, broker or head answers a sandbox of any policy."""
    from tests.support.sandbox_reach import POLICIES, check_reach, start_stack

    project = f"{PROJECT_PREFIX}-swr"
    try:
        stack = start_stack(tmp_path, project, "--target", "swarm")
        for policy in POLICIES:
            check_reach(stack, policy)
    finally:
        gym_compose("down", "-p", project, cwd=tmp_path)


def test_an_allow_listed_sandbox_reaches_its_hosts_alone_on_swarm(swarm_manager, tmp_path):
    """tests/e2e/test_sandbox_egress_allow.py's checks on overlay networks: the proxy is a Swarm
    service on the internal sandbox overlay and the (attachable) egress overlay, where the test's
    own server stands under the allowed and refused names; a sandbox moved between egress phases
    leaves one overlay for the next."""
    from tests.support.egress_allow import CONFIG, check_allowed_and_refused, check_phases, start_index_server
    from tests.support.sandbox_reach import check_reach, start_stack

    project = f"{PROJECT_PREFIX}-swa"
    index = None
    try:
        stack = start_stack(tmp_path, project, "--target", "swarm", config_text=CONFIG)
        index = start_index_server(project)
        check_allowed_and_refused(stack, index)
        check_phases(stack)
        check_reach(stack, "allowlist")
    finally:
        if index:
            docker("rm", "-f", index)
        gym_compose("down", "-p", project, cwd=tmp_path)
