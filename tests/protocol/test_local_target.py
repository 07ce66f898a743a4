"""The deployment seam: the plan `up` deploys, on the local-process target, driven through
`DeployedStack` by the same host code that drives a compose project (start and wait, ps, the
collector's supervision, a dying server, down)."""

from __future__ import annotations

import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from gym_compose.config import ConfigRequest, load
from gym_compose.engine.targets.deployed_stack import StackNotHealthy
from gym_compose.engine.targets.local_processes import LocalProcesses
from gym_compose.plan.model import CollectorRun
from gym_compose.plan.planner import plan_stack
from gym_compose.runs.supervision import run_collector

pytestmark = pytest.mark.protocol

REPO = Path(__file__).resolve().parents[2]
ROWS = REPO / "server_images/example_single_tool_call/data/example.jsonl"
WAIT_S = 60


def example_stack(*overrides: str):
    loaded = load(ConfigRequest(resources_servers=["example_single_tool_call"], overrides=list(overrides)))
    return plan_stack(loaded.data, loaded.search_roots)


def deploy(tmp_path: Path, *overrides: str) -> tuple[LocalProcesses, list[str], Path]:
    stack = example_stack(*overrides)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copyfile(ROWS, run_dir / "input.jsonl")
    collector = CollectorRun(input_file=run_dir / "input.jsonl", output_dir=run_dir, args=["--host-lease"])
    deployed = LocalProcesses.for_stack(stack, tmp_path / "logs", collector=collector)
    return deployed, [s.name for s in stack.services], run_dir


def test_a_plan_runs_on_local_processes_and_its_collection_is_supervised_there(tmp_path):
    deployed, services, run_dir = deploy(tmp_path)
    try:
        deployed.up(WAIT_S)
        states = deployed.ps()
        assert sorted(s.service for s in states) == sorted(services)  # the plan's service names
        assert all(s.serving for s in states)
        outcome = run_collector(deployed, run_dir, services)
        assert (outcome.exit_code, outcome.stopped_for) == (0, None)
        assert len((run_dir / "rollouts.jsonl").read_text().splitlines()) == 5
    finally:
        removed = deployed.down()
    assert sorted(removed.containers) == sorted(services)
    assert deployed.ps() == []  # nothing of the stack runs any more


def test_a_server_that_dies_while_collecting_stops_the_run_naming_it(tmp_path, capsys):
    deployed, services, run_dir = deploy(tmp_path, "++peer_request_timeout_seconds=300")
    model = None
    try:
        deployed.up(WAIT_S)
        model = deployed.processes["policy_model"]
        model.send_signal(signal.SIGSTOP)  # rollouts wait for it: the run is in progress when the agent dies
        agent = deployed.processes["example_single_tool_call_simple_agent"]

        def kill_the_agent_once_collecting() -> None:
            deadline = time.monotonic() + WAIT_S
            while not (run_dir / "progress.json").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            agent.kill()

        killer = threading.Thread(target=kill_the_agent_once_collecting)
        killer.start()
        outcome = run_collector(deployed, run_dir, services)
        killer.join()
    finally:
        if model is not None:
            model.send_signal(signal.SIGCONT)
        deployed.down()
    assert outcome.stopped_for == ("server example-single-tool-call-simple-agent exited "
                                   "(exit code 137, killed (SIGKILL), not out of memory)")
    assert "last log lines of example-single-tool-call-simple-agent" in capsys.readouterr().err


def test_a_server_that_exits_during_start_up_fails_the_start_with_its_last_words(tmp_path):
    app = tmp_path / "broken"
    shutil.copytree(REPO / "server_images/example_single_tool_call", app)
    (app / "app.py").write_text("raise SystemExit('the tool table is missing')\n")
    stack = example_stack()
    resources = next(s for s in stack.services if s.role == "resources")
    resources.source_dir = app
    deployed = LocalProcesses.for_stack(stack, tmp_path / "logs")
    with pytest.raises(StackNotHealthy) as failure:
        deployed.start(WAIT_S)
    message = str(failure.value)
    assert f"{resources.name} stopped during start-up" in message
    assert "the tool table is missing" in message
    assert deployed.processes == {}  # start() removed what it started


def test_a_port_is_held_from_its_choice_until_its_server_serves_and_refuses_once_the_server_dies(tmp_path):
    import socket

    import httpx

    deployed, _, _ = deploy(tmp_path)
    port = deployed.port("example_single_tool_call")
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
    with squatter, pytest.raises(OSError, match="in use"):  # chosen, not yet served: nobody else gets it
        squatter.bind(("127.0.0.1", port))
    try:
        deployed.up(WAIT_S)
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=5).status_code < 500
        process = deployed.processes["example_single_tool_call"]
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        with pytest.raises(httpx.ConnectError):  # this process keeps no copy that would queue connections
            httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
        deployed.up(WAIT_S, ["example_single_tool_call"])  # started again on the same port
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=5).status_code < 500
    finally:
        deployed.down()
