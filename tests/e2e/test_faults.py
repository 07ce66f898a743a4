"""Fault injection against the real engine: a dying CLI, dead and paused servers, a paused collector.

Each scenario ends with `down` (or the CLI's own clean-up) and a `--resume`, and checks that no
container, network or volume of the project is left, that the state folder (compose.yaml and the
secret files) is gone, that every rollout is in rollouts.jsonl exactly once, and that every
failure row names its cause. Bounded: every wait polls with a deadline, every command a timeout.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from gym_compose.plan.planner import service_name
from tests.e2e import PROJECT_PREFIX
from tests.support import waiting
from tests.support.e2e import CLI, free_port, gym_compose, labelled, remove_project, stuck_report
from tests.support.model_gate import calls_held, gated, open_gate

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_ROWS = REPO / "server_images/example_single_tool_call/data/example.jsonl"
INSTANCES = ["example_single_tool_call_environment_server", "example_single_tool_call_simple_agent",
             "example_single_tool_call", "policy_model", "head"]  # as in the config and the failure rows


def servers(project: str) -> dict[str, str]:
    """Service -> instance. A long project shortens the long service names (gym_compose/contract.py):
    the kills, the messages and the peers' addresses all use the shortened ones."""
    return {("head" if instance == "head" else service_name(instance, project)): instance for instance in INSTANCES}


WAIT_S = 120
# How long a CLI that was signalled, or whose run was stopped, may take to clean up and exit: a bound
# against a hang, not a speed check. Each step of the clean-up has its own timeout (compose down
# alone up to 120 s a try), and on an engine loaded by three test lanes such steps take minutes.
CLEANUP_S = 360
GATE = 80  # model calls answered per opening of its gate (two a rollout); tests/e2e/model_gate.py


@pytest.fixture
def project(request, tmp_path, monkeypatch):
    name = f"{PROJECT_PREFIX}-fault-{request.node.name.replace('_', '-')[5:30].lower().strip('-')}"
    monkeypatch.setenv("GYM_COMPOSE_STATE_DIR", str(tmp_path / "state"))
    yield name
    remove_project(name)
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
    waiting.wait_for(predicate, what, timeout)


def flowing_then_held(project: str, folder: Path, before: int):
    """A run's rollouts flowed (20 more written), then the gated model held its next calls: mid-run."""
    return lambda: complete_lines(folder / "rollouts.jsonl") >= before + 20 and calls_held(project)


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


def ended(cli: subprocess.Popen, timeout: float = CLEANUP_S) -> tuple[str, str]:
    """The CLI's stdout and stderr once it exits; a CLI still running after `timeout` fails the test
    with where each of its threads was (SIGUSR1: gym_compose/cli/main.py), then is killed."""
    try:
        return cli.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(stuck_report(cli, timeout))


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
    """One stack; each server kind is killed in turn during a collection, then restarted; then the
    CLI is killed outright. The model answers GATE calls, then holds the rest until the test lets
    more through (model_gate.py), so every fault lands mid-run by construction."""
    stack = ["-p", project, "--head-port", str(free_port()), "--resources-server", "example_single_tool_call",
             gated(GATE)]
    up = gym_compose("up", "-d", *stack, cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    # more rollouts than the six openings of the gate let through (each at most GATE / 2 + held + in flight)
    total = 600
    collect = ["eval", "run", "--no-serve", *stack, "--input", str(rows_file(tmp_path, total)), "--run-name", "main",
               "--num-samples-in-parallel", "8"]
    results = tmp_path / "results"

    folder = None
    for number, (service, instance) in enumerate(servers(project).items()):
        # counted before the collector starts: it may finish rollouts before the test looks
        before = complete_lines(folder / "rollouts.jsonl") if folder else 0
        failures_before = complete_lines(folder / "rollouts_failures.jsonl") if folder else 0
        if number:
            open_gate(project, GATE)  # the held calls of the last run go; GATE more, then it holds again
        cli = start_cli(*collect, *(["--resume"] if number else []), cwd=tmp_path)
        try:
            wait_for(lambda: list(results.glob("main-*/progress.json")), "the collector to start")
            folder = run_dir(results, "main")
            wait_for(flowing_then_held(project, folder, before), "rollouts to flow, then the model to hold calls")
            docker("kill", container(project, service))
            _, err = ended(cli)
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
        wait_for(functools.partial(healthy, container(project, service)), f"{service} to be healthy again")

    # the CLI killed outright: its collector stops by itself, and the folder is free for a resume
    folder = run_dir(results, "main")
    before = complete_lines(folder / "rollouts.jsonl")
    open_gate(project, GATE)
    cli = start_cli(*collect, "--resume", cwd=tmp_path)
    try:
        wait_for(flowing_then_held(project, folder, before), "rollouts to flow, then the model to hold calls")
        assert cli.poll() is None
    finally:
        cli.send_signal(signal.SIGKILL)
        cli.communicate(timeout=WAIT_S)
    wait_for(lambda: one_off_containers(project) == [], "the orphaned collector to stop by itself", timeout=60)

    open_gate(project, None)
    final = gym_compose(*collect, "--resume", cwd=tmp_path, timeout=WAIT_S)
    assert final.returncode == 0, final.stderr
    assert_every_rollout_once(folder, total)

    down = gym_compose("down", "-p", project, cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert_nothing_left(project, tmp_path / "state")


def test_a_paused_model_times_its_rollouts_out_naming_it_and_resume_finishes_them(project, tmp_path):
    stack = ["-p", project, "--head-port", str(free_port()), "--resources-server", "example_single_tool_call",
             "++peer_request_timeout_seconds=4", gated(GATE)]
    up = gym_compose("up", "-d", *stack, cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    # the gate answers GATE calls (GATE // 2 rollouts) and holds the rest: by construction, not by the
    # machine's speed, the run has rows left when the model is paused (calls_held checks it)
    rows = 200
    assert rows > GATE // 2
    paused = ["eval", "run", "--no-serve", *stack, "--input", str(rows_file(tmp_path, rows)), "--run-name", "paused",
              "--num-samples-in-parallel", "25"]
    results = tmp_path / "results"
    cli = start_cli(*paused, cwd=tmp_path)
    try:
        wait_for(lambda: any(complete_lines(p) >= 10 for p in results.glob("paused-*/rollouts.jsonl"))
                 and calls_held(project), "rollouts to flow, then the model to hold calls")
        docker("pause", container(project, "policy-model"))
        try:
            _, err = ended(cli)
        finally:
            docker("unpause", container(project, "policy-model"))
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 1, err
    assert "server policy-model is paused" in err
    folder = run_dir(results, "paused")
    failures = read_jsonl(folder / "rollouts_failures.jsonl")
    assert failures and len(failures) + complete_lines(folder / "rollouts.jsonl") == rows
    assert all(f["_ng_failure_message"].startswith("policy_model did not answer POST /v1/responses") for f in failures)
    wait_for(lambda: healthy(container(project, "policy-model")), "the model to be healthy again")
    open_gate(project, None)
    resumed = gym_compose(*paused, "--resume", cwd=tmp_path, timeout=WAIT_S)
    assert resumed.returncode == 0, resumed.stderr
    assert_every_rollout_once(folder, rows)
    down = gym_compose("down", "-p", project, cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert_nothing_left(project, tmp_path / "state")


def test_a_dying_cli_and_a_paused_collector_leave_nothing_after_down(project, tmp_path):
    rows = rows_file(tmp_path, 300)  # more than the gated model lets through in the first two starts
    up_args = ["up", "-p", project, "--head-port", str(free_port()), "--resources-server", "example_single_tool_call",
               "--input", str(rows), "--run-name", "run", "--num-samples-in-parallel", "8"]
    results = tmp_path / "results"
    state = tmp_path / "state"

    # the terminal closes mid-collection: the CLI cleans up as for Ctrl-C
    cli = start_cli(*up_args, gated(GATE), cwd=tmp_path)
    wait_for(lambda: any(complete_lines(p) >= 20 for p in results.glob("run-*/rollouts.jsonl"))
             and calls_held(project), "rollouts to flow, then the model to hold calls", timeout=240)
    cli.send_signal(signal.SIGHUP)
    ended(cli)
    assert cli.returncode == 128 + signal.SIGHUP
    assert_nothing_left(project, state)
    folder = run_dir(results, "run")
    assert 0 < complete_lines(folder / "rollouts.jsonl") < 300

    # the collector paused, then the CLI killed: only `down` is left to clean up, and it does
    before = complete_lines(folder / "rollouts.jsonl")
    cli = start_cli(*up_args, "--resume", gated(GATE), cwd=tmp_path)
    wait_for(flowing_then_held(project, folder, before), "rollouts to flow, then the model to hold calls",
             timeout=240)
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
