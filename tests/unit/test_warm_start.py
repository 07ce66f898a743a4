"""What the warm start's cuts must keep: up's wait wakes on engine events, the servers import less
at start without changing what they serve (docs/performance.md, "Warm start to all healthy")."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from starlette.applications import Starlette
from starlette.routing import Mount, Route, WebSocketRoute

from gym_compose.engine import docker_cli
from gym_compose.engine.targets.compose_project import HealthEvents
from gym_compose.net import web

REPO = Path(__file__).resolve().parents[2]


def python(code: str) -> str:
    """Run `code` in a fresh interpreter (import state is what is tested) and return its stdout."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def fake_docker(tmp_path: Path, monkeypatch, body: str) -> Path:
    script = tmp_path / "docker"
    script.write_text(f"#!/bin/sh\necho \"$*\" >> {tmp_path}/calls\n{body}\n")
    script.chmod(0o755)
    monkeypatch.setattr(docker_cli, "DOCKER", str(script))
    return tmp_path / "calls"


def test_health_events_wake_the_wait_and_time_out_when_nothing_comes(tmp_path, monkeypatch):
    calls = fake_docker(tmp_path, monkeypatch, 'printf "health_status: healthy\\ndie\\n"; exec sleep 30')
    events = HealthEvents.start("proj")
    try:
        assert events.wait(10) is True
        assert events.running
        wakes = [events.wait(0.2) for _ in range(3)]  # the second line: at most one more wake-up
        assert wakes[-1] is False and wakes.count(True) <= 1
        started = time.monotonic()
        assert events.wait(0.2) is False
        assert time.monotonic() - started >= 0.15
    finally:
        events.close()
    assert events._process is not None and events._process.poll() is not None  # close() ended it
    args = calls.read_text().split()
    assert args[0] == "events" and "label=com.docker.compose.project=proj" in args
    assert "event=health_status" in args and "event=die" in args


def test_closing_health_events_kills_and_reaps_a_follower_that_ignores_sigterm(tmp_path, monkeypatch):
    fake_docker(tmp_path, monkeypatch, "trap '' TERM; echo die; exec sleep 30")
    monkeypatch.setattr(HealthEvents, "STOP_GRACE_S", 0.3)
    events = HealthEvents.start("proj")
    assert events.wait(10) is True  # the follower runs, with SIGTERM ignored
    events.close()
    assert events._process is not None and events._process.returncode == -9  # killed, and reaped by close()


def test_health_events_that_end_leave_the_wait_to_polling(tmp_path, monkeypatch):
    fake_docker(tmp_path, monkeypatch, "exit 1")
    events = HealthEvents.start("proj")
    assert events.wait(10) is False
    assert not events.running
    events.close()


def test_websocket_protocol_is_loaded_only_for_apps_that_may_serve_websockets():
    async def endpoint(scope, receive, send):
        pass

    plain = Starlette(routes=[Route("/", endpoint)])
    assert not web._may_serve_websockets(web.ErrorBoundary(plain))
    assert web._may_serve_websockets(Starlette(routes=[WebSocketRoute("/ws", endpoint)]))
    assert web._may_serve_websockets(Starlette(routes=[Mount("/sub", app=plain)]))  # cannot see what a mount serves
    assert web._may_serve_websockets(endpoint)  # a bare ASGI callable: no router to read


def test_the_head_runtime_imports_no_pydantic_and_still_turns_validation_errors_into_422s():
    out = python("""
        import sys
        import gym_compose.server.head, gym_compose.server.runtime
        print("pydantic" in sys.modules)
        from pydantic import BaseModel
        from gym_compose.net.web import is_validation_error
        class M(BaseModel):
            x: int
        try:
            M(x="no")
        except Exception as error:
            print(is_validation_error(error), is_validation_error(ValueError()))
    """)
    assert out.split() == ["False", "True", "False"]


def test_compat_shims_import_the_runtime_on_first_use_and_serve_every_import_form():
    out = python("""
        import sys
        from gym_compose.server import compat
        compat.install(force=True)
        import nemo_gym.sandbox
        print("gym_compose.sandbox" in sys.modules, "gym_compose.server.reward_profile" in sys.modules)
        from nemo_gym.base_resources_server import SimpleResourcesServer
        from nemo_gym.sandbox import api
        from nemo_gym.reward_profile import *
        print(SimpleResourcesServer.__name__, api.AsyncSandbox.__name__, "AggregateMetricsMixin" in dir())
        print("gym_compose.sandbox" in sys.modules)
        try:
            nemo_gym.sandbox.no_such_name
        except AttributeError as error:
            print("AttributeError")
    """)
    assert out.split() == ["False", "False", "SimpleResourcesServer", "AsyncSandbox", "True", "True", "AttributeError"]


def test_plain_up_imports_no_sandbox_client():
    out = python("""
        import sys
        from gym_compose.plan.sandbox_plan import plan_sandboxes
        from gym_compose.engine.targets.sandbox_containers import docker_socket
        docker_socket()
        config = {"x": {"resources_servers": {"y": {"entrypoint": "app.py"}}}}
        print(plan_sandboxes(config, []), "gym_compose.sandbox" in sys.modules)
    """)
    assert out.split() == ["None", "False"]


def test_gc_is_off_for_the_start_and_back_on_for_serving():
    out = python("""
        import gc, runpy, sys
        sys.argv = ["x"]
        runpy.run_module("gym_compose.server.__main__", run_name="not_main")  # imports, does not serve
        print(gc.isenabled())
        from gym_compose.net.web import resume_gc
        resume_gc()
        print(gc.isenabled(), gc.get_freeze_count() > 0)
        resume_gc()  # once back on, again is nothing
        print(gc.isenabled())
    """)
    assert out.split() == ["False", "True", "True", "True"]


def test_the_cli_and_the_eval_run_command_import_no_asyncio():
    """asyncio is the collector's, not the host CLI's: importing it was ~15-40 ms of every `eval run`
    before its collector started (docs/performance.md)."""
    out = python("""
        import sys
        import gym_compose.cli.main, gym_compose.runs.eval_run, gym_compose.runs.supervision
        from gym_compose.collect.progress import ProgressTracker, read_progress
        print("asyncio" in sys.modules)
    """)
    assert out.split() == ["False"]
