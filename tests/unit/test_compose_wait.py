"""The compose project's wait, ps and failure report against a real engine's recorded answers.

tests/fixtures/engine/ holds what Docker Engine 20.10 with Compose v2.40 printed for a project
whose `head` turns healthy, `agent` stays unhealthy, `model` is OOM-killed and `crash` exits 3,
and for a second project that publishes a port the first holds (record.py re-records them). A
stand-in `docker` replays them; a fake clock makes the waits instant and exact.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym_compose.engine import docker_cli
from gym_compose.engine.targets.compose_project import WAIT_POLL_SECONDS, ComposeProject
from gym_compose.engine.targets.deployed_stack import StackNotHealthy
from gym_compose.errors import UserError
from tests.fakes.clock import FakeClock

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "engine"
PROJECT = "rec-31447"


def listed(frame_text: str) -> str:
    """The same moment as `docker ps` lines in quick_states' format, from the recorded `compose ps`
    rows (Compose passes the engine's own State and Status strings through)."""
    def label(row: dict, key: str) -> str:
        return next((item.partition("=")[2] for item in row["Labels"].split(",") if item.startswith(f"{key}=")), "")
    rows = [json.loads(line) for line in frame_text.splitlines() if line.strip()]
    return "".join("\t".join([row["Name"], row["State"], row["Status"], row["Service"],
                               label(row, "com.docker.compose.oneoff"), label(row, "io.gym-compose.runtime")]) + "\n"
                   for row in rows)


def frame(name: str, services: set[str]) -> str:
    """One recorded `compose ps --format json` answer, cut down to some services."""
    lines = (RECORDED / f"ps_{name}.jsonl").read_text().splitlines()
    return "".join(line + "\n" for line in lines if json.loads(line)["Service"] in services)


@pytest.fixture
def engine(tmp_path, monkeypatch):
    """engine(frames, up_fails=False): a `docker` that answers `compose ps` (and `docker ps`, the same
    frame as quick_states lists it) with the given frames in turn (the last one repeated), `inspect` and `logs` from the recording; returns the call log."""

    def install(frames: list[str], up_fails: bool = False):
        for number, text in enumerate(frames, 1):
            (tmp_path / f"frame{number}").write_text(text)
            (tmp_path / f"frame{number}.tsv").write_text(listed(text))
        log, counter = tmp_path / "calls", tmp_path / "ps-count"
        up = f"cat {RECORDED}/up_port_allocated.txt >&2; exit 1" if up_fails else "exit 0"
        script = tmp_path / "docker"
        script.write_text(f"""#!/bin/sh
echo "$*" >> {log}
case "$*" in
*" up --detach"*) {up} ;;
*" ps --all --format json")
  n=$(( $(cat {counter} 2>/dev/null || echo 0) + 1 )); echo $n > {counter}
  [ $n -gt {len(frames)} ] && n={len(frames)}
  cat {tmp_path}/frame$n ;;
"ps --all --no-trunc --filter label=com.docker.compose.project={PROJECT} "*)
  n=$(( $(cat {counter} 2>/dev/null || echo 0) + 1 )); echo $n > {counter}
  [ $n -gt {len(frames)} ] && n={len(frames)}
  cat {tmp_path}/frame$n.tsv ;;
"inspect {PROJECT}-"*) service=${{2#{PROJECT}-}}; cat {RECORDED}/inspect_${{service%-1}}.json ;;
*" logs --no-color --no-log-prefix --tail 15 "*) for last; do :; done; cat {RECORDED}/logs_$last.txt ;;
esac
""")
        script.chmod(0o755)
        monkeypatch.setattr(docker_cli, "DOCKER", str(script))
        return lambda: log.read_text().splitlines()

    return install


def project() -> ComposeProject:
    return ComposeProject(PROJECT, clock=FakeClock())


def test_up_returns_once_every_server_is_healthy(engine):
    calls = engine([frame("starting", {"head"}), frame("settled", {"head"})])
    stack = project()
    stack.up(wait_timeout=60)
    assert stack.clock.now == WAIT_POLL_SECONDS  # one poll saw `starting`, the next `healthy`
    assert sum(" ps " in f" {call} " for call in calls()) == 2


def test_a_server_that_exits_during_start_up_fails_at_once_with_its_code_and_last_words(engine):
    engine([frame("starting", {"head", "crash"}), frame("settled", {"head", "crash"})])
    with pytest.raises(StackNotHealthy) as failure:
        project().up(wait_timeout=600)
    message = str(failure.value)
    assert message.startswith("crash stopped during start-up:")
    assert "  - crash: exited, exit code 3; last log lines:\n      reading config" in message
    assert "head" not in message.split("\n", 1)[1]  # a healthy service is not reported
    assert "the stack was removed" in failure.value.hint


def test_an_oom_killed_server_is_reported_as_such(engine):
    engine([frame("starting", {"head", "model"}), frame("settled", {"head", "model"})])
    stack = project()
    with pytest.raises(StackNotHealthy) as failure:
        stack.up(wait_timeout=600)
    assert "  - model: exited, exit code 137; OOM-killed; last log lines:\n      loading weights" in str(failure.value)
    model = next(s for s in stack.ps() if s.service == "model")
    assert stack.describe_death(model) == ("server model exited (exit code 137, OOM-killed: it ran out of memory; "
                                           "raise its `docker: memory:`)")


def test_a_server_that_never_turns_healthy_times_out_with_its_healthcheck_output(engine):
    calls = engine([frame("starting", {"head", "agent"}), frame("settled", {"head", "agent"})])
    stack = project()
    with pytest.raises(StackNotHealthy) as failure:
        stack.up(wait_timeout=3)
    message = str(failure.value)
    assert message.startswith("not healthy within 3 s:")
    assert "  - agent: running (unhealthy); last log lines:\n      agent waiting for its model" in message
    assert "      healthcheck: model policy_model not ready: connection refused" in message
    assert 3 < stack.clock.now <= 3 + WAIT_POLL_SECONDS
    assert sum(" ps " in f" {call} " for call in calls()) == 3 / WAIT_POLL_SECONDS + 3  # the polls and the report's


def test_a_port_that_is_already_allocated_says_which_and_how_to_pick_another(engine):
    calls = engine([frame("settled", {"head"})], up_fails=True)
    with pytest.raises(UserError) as failure:
        project().up(wait_timeout=60)
    assert "a port this stack publishes is already in use" in str(failure.value)
    assert "Bind for 127.0.0.1:18447 failed: port is already allocated" in str(failure.value)
    assert "--head-port" in failure.value.hint
    assert not any(" ps " in f" {call} " for call in calls())  # nothing to wait for


def test_check_stack_counts_exited_servers_as_dead_and_an_unhealthy_one_as_alive(engine):
    engine([frame("settled", {"head", "agent", "model", "crash"})])
    check = project().check_stack(["head", "agent", "model", "crash"])
    assert sorted((s.service, s.exit_code) for s in check.dead) == [("crash", 3), ("model", 137)]
    assert check.paused == [] and not check.empty
