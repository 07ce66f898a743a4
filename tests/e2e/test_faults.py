"""Fault injection against the real engine: a dying CLI, dead and paused servers, a paused collector.

Each scenario ends with `down` (or the CLI's own clean-up) and a `--resume`, and checks that no
container, network or volume of the project is left, that the state folder (compose.yaml and the
secret files) is gone, that every rollout is in rollouts.jsonl exactly once, and that every
failure row names its cause. Bounded: every wait polls with a deadline, every command a timeout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e import PROJECT_PREFIX
from tests.support.e2e import CLI, free_port, gym_compose, labelled

pytestmark = [pytest.mark.docker, pytest.mark.timeout(480)]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_ROWS = REPO / "server_images/example_single_tool_call/data/example.jsonl"
SERVERS = {  # service -> instance (the name in the config and in the failure rows)
    "example-single-tool-call-environment-server": "example_single_tool_call_environment_server",
    "example-single-tool-call-simple-agent": "example_single_tool_call_simple_agent",
    "example-single-tool-call": "example_single_tool_call",
    "policy-model": "policy_model",
    "head": "head",
}
WAIT_S = 120


@pytest.fixture
def project(request, tmp_path, monkeypatch):
    name = f"{PROJECT_PREFIX}-fault-{request.node.name.replace('_', '-')[5:30].lower().strip('-')}"
    monkeypatch.setenv("GYM_COMPOSE_STATE_DIR", str(tmp_path / "state"))
    yield name
    subprocess.run(["docker", "compose", "-p", name, "down", "-v", "--timeout", "1"], capture_output=True, timeout=120)
    leftovers = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={name}"],
                               capture_output=True, text=True, timeout=60).stdout.split()
    if leftovers:
        subprocess.run(["docker", "rm", "-f", *leftovers], capture_output=True, timeout=120)


def rows_file(folder: Path, count: int) -> Path:
    lines = [line for line in EXAMPLE_ROWS.read_text().splitlines() if line.strip()]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "rows.jsonl"
    path.write_text("".join(lines[i % len(lines)] + "\n" for i in range(count)))
    return path


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_bytes().split(b"\n") if line.strip()]


def complete_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def wait_for(predicate, what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def run_dir(results: Path, name: str) -> Path:
    (found,) = [p for p in results.glob(f"{name}-*") if p.is_dir()]
    return found


def container(project: str, service: str) -> str:
    return f"{project}-{service}-1"


def one_off_containers(project: str) -> list[str]:
    return subprocess.run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}",
                           "--filter", "label=com.docker.compose.oneoff=True"],
                          capture_output=True, text=True, timeout=60).stdout.split()


def docker(*args: str) -> None:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def healthy(name: str) -> bool:
    state = subprocess.run(["docker", "inspect", "-f", "{{.State.Health.Status}}", name],
                           capture_output=True, text=True, timeout=60).stdout.strip()
    return state == "healthy"


def settled(project: str) -> bool:
    """The project's containers and their states read the same twice, a second apart."""
    def states() -> str:
        return subprocess.run(["docker", "ps", "-a", "--filter", f"label=io.gym-compose.project={project}",
                               "--format", "{{.Names}} {{.State}}"], capture_output=True, text=True, timeout=60).stdout
    first = states()
    time.sleep(1)
    return states() == first


def start_cli(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([*CLI, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ})


def assert_every_rollout_once(folder: Path, expected: int) -> None:
    keys = [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in read_jsonl(folder / "rollouts.jsonl")]
    assert len(keys) == len(set(keys)) == expected, (len(keys), len(set(keys)), expected)
    metrics = json.loads((folder / "rollouts_aggregate_metrics.json").read_text())
    assert sum(g["num_rollouts"] for entry in metrics for g in entry["group_level_metrics"]) == expected


def assert_nothing_left(project: str, state_dir: Path) -> None:
    for kind in ("container", "network", "volume"):
        assert labelled(kind, project) == [], kind
    assert one_off_containers(project) == []
    assert not (state_dir / "projects" / project).exists()


def test_each_server_killed_mid_run_stops_it_by_name_and_resume_gives_every_rollout_once(project, tmp_path):
    """One stack; each server kind is killed in turn during a collection, then restarted. A paused
    model times rollouts out naming it. A killed CLI takes its collector with it."""
    stack = ["-p", project, "--head-port", str(free_port()), "--resources-server", "example_single_tool_call",
             "++peer_request_timeout_seconds=4"]
    up = gym_compose("up", "-d", *stack, cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    total = 1200  # enough that each run is still going when its server is killed (~300 rollouts/s here)
    no_serve = ["eval", "run", "--no-serve", *stack]
    collect = [*no_serve, "--input", str(rows_file(tmp_path, total)), "--run-name", "main",
               "--num-samples-in-parallel", "8"]
    paused_rows = 200  # enough that the run is still going when the model is paused
    few = [*no_serve, "--input", str(rows_file(tmp_path / "few", paused_rows)), "--run-name", "paused"]
    results = tmp_path / "results"

    for number, (service, instance) in enumerate(SERVERS.items()):
        cli = start_cli(*collect, *(["--resume"] if number else []), cwd=tmp_path)
        folder = None
        try:
            wait_for(lambda: list(results.glob("main-*/progress.json")), "the collector to start")
            folder = run_dir(results, "main")
            before = complete_lines(folder / "rollouts.jsonl")
            failures_before = complete_lines(folder / "rollouts_failures.jsonl")
            wait_for(lambda folder=folder, before=before: complete_lines(folder / "rollouts.jsonl") >= before + 20,
                     "rollouts to flow")
            docker("kill", container(project, service))
            _, err = cli.communicate(timeout=WAIT_S)
        finally:
            if cli.poll() is None:
                cli.kill()
        assert cli.returncode == 1, err
        assert f"server {service} exited (exit code 137, killed (SIGKILL), not out of memory)" in err
        assert "--resume" in err.split("hint:")[-1] and "Traceback" not in err
        for failure in read_jsonl(folder / "rollouts_failures.jsonl")[failures_before:]:
            message = failure["_ng_failure_message"]
            assert f"server {service} exited" in message or instance in message, message
        assert one_off_containers(project) == []  # the collector went with the run
        docker("start", container(project, service))
        wait_for(lambda service=service: healthy(container(project, service)), f"{service} to be healthy again")

    # the model paused mid-run: its rollouts time out naming the model, and a resume finishes them
    cli = start_cli(*few, "--num-samples-in-parallel", "25", cwd=tmp_path)
    try:
        wait_for(lambda: any(complete_lines(p) >= 20 for p in results.glob("paused-*/rollouts.jsonl")),
                 "rollouts to flow")
        docker("pause", container(project, "policy-model"))
        try:
            _, err = cli.communicate(timeout=WAIT_S)
        finally:
            docker("unpause", container(project, "policy-model"))
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 1, err
    assert "server policy-model is paused" in err
    folder = run_dir(results, "paused")
    failures = read_jsonl(folder / "rollouts_failures.jsonl")
    assert failures and len(failures) + complete_lines(folder / "rollouts.jsonl") == paused_rows
    assert all(f["_ng_failure_message"].startswith("policy_model did not answer POST /v1/responses") for f in failures)
    wait_for(lambda: healthy(container(project, "policy-model")), "the model to be healthy again")
    resumed = gym_compose(*few, "--resume", cwd=tmp_path, timeout=WAIT_S)
    assert resumed.returncode == 0, resumed.stderr
    assert_every_rollout_once(folder, paused_rows)

    # the CLI killed outright: its collector stops by itself, and the folder is free for a resume
    folder = run_dir(results, "main")
    before = complete_lines(folder / "rollouts.jsonl")
    cli = start_cli(*collect, "--resume", cwd=tmp_path)
    wait_for(lambda: complete_lines(folder / "rollouts.jsonl") >= before + 20 or cli.poll() is not None,
             "rollouts to flow")
    cli.send_signal(signal.SIGKILL)
    cli.communicate(timeout=WAIT_S)
    wait_for(lambda: one_off_containers(project) == [], "the orphaned collector to stop by itself", timeout=60)

    final = gym_compose(*collect, "--resume", cwd=tmp_path, timeout=WAIT_S)
    assert final.returncode == 0, final.stderr
    assert_every_rollout_once(folder, total)

    down = gym_compose("down", "-p", project, cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert_nothing_left(project, tmp_path / "state")


def test_a_dying_cli_and_a_paused_collector_leave_nothing_after_down(project, tmp_path):
    rows = rows_file(tmp_path, 300)
    up_args = ["up", "-p", project, "--head-port", str(free_port()), "--resources-server", "example_single_tool_call",
               "--input", str(rows), "--run-name", "run", "--num-samples-in-parallel", "8"]
    results = tmp_path / "results"
    state = tmp_path / "state"

    # the terminal closes mid-collection: the CLI cleans up as for Ctrl-C
    cli = start_cli(*up_args, cwd=tmp_path)
    wait_for(lambda: any(complete_lines(p) >= 20 for p in results.glob("run-*/rollouts.jsonl")),
             "rollouts to flow", timeout=240)
    cli.send_signal(signal.SIGHUP)
    cli.communicate(timeout=WAIT_S)
    assert cli.returncode == 128 + signal.SIGHUP
    assert_nothing_left(project, state)
    folder = run_dir(results, "run")
    assert 0 < complete_lines(folder / "rollouts.jsonl") < 300

    # the collector paused, then the CLI killed: only `down` is left to clean up, and it does
    cli = start_cli(*up_args, "--resume", cwd=tmp_path)
    before = complete_lines(folder / "rollouts.jsonl")
    wait_for(lambda: complete_lines(folder / "rollouts.jsonl") >= before + 20, "rollouts to flow", timeout=240)
    (collector,) = one_off_containers(project)
    docker("pause", collector)
    cli.send_signal(signal.SIGKILL)
    cli.communicate(timeout=WAIT_S)
    assert one_off_containers(project) == [collector]  # frozen, it cannot see its lease end
    down = gym_compose("down", "-p", project, cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert "removed project" in down.stderr
    assert_nothing_left(project, state)

    # the CLI killed while the stack starts, then `down` killed half-way: a second `down` finishes
    cli = start_cli(*up_args, "--resume", cwd=tmp_path)
    wait_for(lambda: labelled("container", project) or cli.poll() is not None, "containers to be created")
    cli.send_signal(signal.SIGKILL)
    cli.communicate(timeout=WAIT_S)
    # its `compose up` may live on for a moment (or die of the broken pipe): let the project settle
    wait_for(lambda: settled(project), "the orphaned start to settle")
    created = len(labelled("container", project))
    interrupted_down = start_cli("down", "-p", project, cwd=tmp_path)
    wait_for(lambda: interrupted_down.poll() is not None or len(labelled("container", project)) < created,
             "down to begin removing", timeout=60)
    interrupted_down.send_signal(signal.SIGKILL)
    interrupted_down.communicate(timeout=WAIT_S)
    down = gym_compose("down", "-p", project, cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert_nothing_left(project, state)

    final = gym_compose(*up_args, "--resume", cwd=tmp_path, timeout=300)
    assert final.returncode == 0, final.stderr
    assert_every_rollout_once(folder, 300)
    assert_nothing_left(project, state)
