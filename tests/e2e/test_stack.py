"""End-to-end: the real CLI against the real Docker engine (marked `docker`, run by CI)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from gym_compose.plan.planner import service_name
from tests.e2e import PROJECT_PREFIX
from tests.support.e2e import CLI, REPO, free_port, gym_compose, labelled, remove_project

pytestmark = pytest.mark.docker

def test_up_serves_a_rollout_through_the_head_host_view_and_down_leaves_nothing(project, tmp_path):
    head_port = free_port()
    up = gym_compose("up", "-d", "--publish", "-p", project, "--head-port", str(head_port),
                     "--resources-server", "example_single_tool_call", cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    assert "healthy" in up.stdout

    head = f"http://127.0.0.1:{head_port}"
    instances = httpx.get(f"{head}/server_instances", timeout=10).json()
    environment = next(i for i in instances if i["server_type"] == "environment_servers")
    assert environment["host"] == "127.0.0.1"  # the host view: reachable from outside the network
    row = json.loads((REPO / "server_images/example_single_tool_call/data/example.jsonl").read_text().splitlines()[0])
    result = httpx.post(f"{environment['url']}/run", json=row, timeout=60).json()
    assert result["reward"] == 1.0
    assert any(item["type"] == "function_call" for item in result["response"]["output"])

    ps = gym_compose("ps", "-p", project, cwd=tmp_path)
    assert ps.returncode == 0 and ps.stdout.count("healthy") == 5

    from gym_compose.stack.state import project_dir

    state = project_dir(project)
    assert (state / "compose.yaml").is_file()
    down = gym_compose("down", "-p", project, cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    for kind in ("container", "network", "volume"):
        assert labelled(kind, project) == [], kind
    assert not state.exists()  # the rendered project goes with the stack


def test_model_upstream_that_never_answers_fails_up_naming_the_endpoint(project, tmp_path):
    up = gym_compose(
        "up", "-d", "-p", project, "--head-port", str(free_port()),
        "--resources-server", "example_single_tool_call", "--model-type", "openai_model",
        "--model-url", "http://127.0.0.1:9/v1", "-m", "some-model", "--model-api-key", "sk-e2e-secret",
        "++model_endpoint_readiness_timeout_seconds=4", cwd=tmp_path, timeout=300,
    )
    assert up.returncode == 4, up.stderr  # the stack failed (docs/cli.md)
    # the model server gave up after its 4 s readiness timeout and exited: up did not sit out the start period
    assert "policy-model stopped during start-up" in up.stderr, up.stderr
    assert "http://127.0.0.1:9/v1" in up.stderr
    assert "sk-e2e-secret" not in up.stderr + up.stdout
    assert "Traceback" not in up.stderr.split("last log lines")[0]
    assert labelled("container", project) == []


def test_server_crashing_at_start_fails_up_naming_it_with_its_log_tail(project, tmp_path):
    root = tmp_path / "extra"
    crashing = root / "server_images" / "crashing_server"
    (crashing / "configs").mkdir(parents=True)
    (crashing / "app.py").write_text("raise RuntimeError('boom: this server cannot start')\n")
    (crashing / "configs" / "crashing_server.yaml").write_text(
        "crashing_server:\n  resources_servers:\n    crashing_server:\n      entrypoint: app.py\n      domain: other\n"
    )
    up = gym_compose("up", "-d", "-p", project, "--head-port", str(free_port()),
                     "--search-dir", str(root), "--resources-server", "crashing_server", cwd=tmp_path, timeout=300)
    assert up.returncode == 4, up.stderr
    assert "crashing-server" in up.stderr
    assert "boom: this server cannot start" in up.stderr
    assert labelled("container", project) == []


def test_rendered_project_runs_with_plain_docker_compose(project, tmp_path):
    head_port = free_port()
    out = tmp_path / "rendered"
    render = gym_compose("render", "-o", str(out), "-p", project, "--head-port", str(head_port),
                         "--resources-server", "example_single_tool_call", cwd=tmp_path)
    assert render.returncode == 0, render.stderr
    compose_file = out / "compose.yaml"
    config = subprocess.run(["docker", "compose", "-f", str(compose_file), "config", "--quiet"],
                            capture_output=True, text=True, timeout=60)
    assert config.returncode == 0, config.stderr
    up = subprocess.run(["docker", "compose", "-f", str(compose_file), "up", "-d", "--wait", "--wait-timeout", "120"],
                        capture_output=True, text=True, timeout=300)
    assert up.returncode == 0, up.stderr
    status = httpx.get(f"http://127.0.0.1:{head_port}/", timeout=10).json()
    assert status == {"status": "ok"}
    assert len(labelled("container", project)) == 5


class AttachedUp:
    """`gym-compose up` (attached) in the background, its stderr collected line by line."""

    def __init__(self, project: str, cwd: Path):
        self.process = subprocess.Popen(
            [*CLI, "up", "-p", project, "--head-port", str(free_port()), "--resources-server", "example_single_tool_call"],
            cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.process.stderr), daemon=True)
        self.reader.start()

    def wait_attached(self, timeout: float = 240) -> None:
        """Until up has seen every service healthy and says it follows the logs (it is then attached)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            if any("following the logs" in line for line in self.lines):
                return
            time.sleep(0.2)
        self.process.kill()
        raise AssertionError("up never reported the stack healthy:\n" + "".join(self.lines))

    def finish(self, timeout: float = 120) -> tuple[int, str]:
        code = self.process.wait(timeout=timeout)
        self.reader.join(timeout=10)
        return code, "".join(self.lines)


def test_attached_up_stops_everything_on_ctrl_c(project, tmp_path):
    import signal

    up = AttachedUp(project, tmp_path)
    up.wait_attached()
    up.process.send_signal(signal.SIGINT)
    code, err = up.finish()
    assert code == 130, err  # interrupted, as documented, once everything is removed
    assert "stopping" in err and "gym-compose finished" in err
    assert labelled("container", project) == []


def test_a_second_up_of_a_project_another_up_owns_is_refused_and_removes_nothing(project, tmp_path):
    """The attached `up` owns the project for its whole life, so the second command arrives while
    the first holds it, by construction: refused at once, naming the owner; the first's containers
    untouched (issue 22: two `up -p SAME` in one second removed each other's)."""
    import signal

    owner = AttachedUp(project, tmp_path)
    owner.wait_attached()
    containers = sorted(labelled("container", project))
    second = gym_compose("up", "-d", "-p", project, "--head-port", str(free_port()),
                         "--resources-server", "example_single_tool_call", cwd=tmp_path, timeout=300)
    assert second.returncode == 2, second.stderr
    assert f"project {project!r} is being started or run by pid {owner.process.pid}" in second.stderr
    assert "Traceback" not in second.stderr and "starting" not in second.stderr
    assert sorted(labelled("container", project)) == containers
    states = subprocess.run(["docker", "inspect", "--format", "{{.State.Status}}", *containers],
                            capture_output=True, text=True, timeout=60).stdout.split()
    assert states == ["running"] * len(containers)
    owner.process.send_signal(signal.SIGINT)
    code, err = owner.finish()
    assert code == 130, err
    assert labelled("container", project) == []


def test_attached_up_reports_a_container_that_dies(project, tmp_path):
    up = AttachedUp(project, tmp_path)
    up.wait_attached()
    resources = service_name("example_single_tool_call", project)  # shortened when the project is long
    subprocess.run(["docker", "kill", f"{project}-{resources}-1"], capture_output=True, timeout=60)
    code, err = up.finish()
    assert code == 1, err
    assert f"server {resources} exited (exit code 137" in err
    assert labelled("container", project) == []


def test_down_all_reaps_every_labelled_project(tmp_path):
    projects = [f"{PROJECT_PREFIX}-reap-a", f"{PROJECT_PREFIX}-reap-b"]
    try:
        for name in projects:
            up = gym_compose("up", "-d", "-p", name, "--head-port", str(free_port()),
                             "--resources-server", "example_single_tool_call", cwd=tmp_path)
            assert up.returncode == 0, up.stderr
        # --match keeps the reaper to this test's projects: a developer's own stacks on the engine survive
        down = gym_compose("down", "--all", "--match", f"{PROJECT_PREFIX}-reap-*", cwd=tmp_path)
        assert down.returncode == 0, down.stderr
        for name in projects:
            assert name in down.stderr
            assert labelled("container", name) == [] and labelled("network", name) == []
    finally:
        for name in projects:
            remove_project(name)
