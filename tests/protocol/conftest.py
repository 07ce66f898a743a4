"""Fixtures the protocol tests share: a config's servers on loopback (`start_stack`), fake
environment servers (`servers`), a sandbox broker on loopback on a fake backend (`broker`)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest
import uvicorn

from gym_compose.engine.targets.local_processes import LocalProcesses, with_local_addresses
from gym_compose.net.web import ErrorBoundary
from gym_compose.sandbox import client as sandbox_client
from gym_compose.sandbox.broker.app import build_app
from gym_compose.sandbox.broker.pool import SandboxPool
from gym_compose.sandbox.policy import BrokerSettings, SandboxPolicy
from gym_compose.sandbox.tokens import server_token
from tests.support.fake_environment import start_fake_server
from tests.support.ports import free_port
from tests.support.sandbox_fakes import FakeBackend

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVER_IMAGES = REPO_ROOT / "server_images"
NEMO_GYM_FIXTURES = REPO_ROOT / "tests" / "fixtures" / "nemo_gym"
BROKER_SECRET = "client-test-secret"


@pytest.fixture
def start_stack(tmp_path) -> Callable[..., LocalProcesses]:
    """start_stack(config, server_dirs={instance: folder}) -> a ready LocalProcesses stack (stopped after the test)."""
    stacks: list[LocalProcesses] = []

    def start(config: dict[str, Any], server_dirs: dict[str, Path] | None = None,
              timeout: float = 40.0, env: dict[str, str] | None = None) -> LocalProcesses:
        stack = LocalProcesses(with_local_addresses(config), server_dirs=dict(server_dirs or {}),
                               extra_env=dict(env or {}), log_dir=tmp_path)
        stacks.append(stack)
        return stack.start(timeout=timeout)

    yield start
    for stack in stacks:
        stack.down()


@pytest.fixture
def servers():
    started = []

    def start(mode: str, delay_s: float = 0.0) -> int:
        proc, port = start_fake_server(mode, delay_s)
        started.append(proc)
        return port

    yield start
    for proc in started:
        proc.kill()
        proc.wait(timeout=10)


class RecordingBackend(FakeBackend):
    async def info(self):
        self.loop = asyncio.get_running_loop()
        return await super().info()


class Broker:
    def __init__(self, engine: RecordingBackend, pool: SandboxPool):
        self.engine, self.pool = engine, pool

    def kill(self, name: str, oom: bool) -> None:
        asyncio.run_coroutine_threadsafe(self.engine.kill(name, oom=oom), self.engine.loop).result(30)

    def live(self) -> list[str]:
        return self.engine.live_names()


@pytest.fixture
def broker(tmp_path, monkeypatch, request):
    """A loopback broker for the server `coder` on the fake engine; its policy is the default one
    updated by the fixture's indirect parameter (a dict of SandboxPolicy fields), if any."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    engine = RecordingBackend()
    fields = {"network": "none", "memory_bytes": 256 << 20, "timeout_s": 20, **getattr(request, "param", {})}
    policy = SandboxPolicy(server="coder", image="img", workdir=str(workdir), **fields)
    pool = SandboxPool(engine, BrokerSettings(project="c", servers={"coder": policy}))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(ErrorBoundary(build_app(pool, BROKER_SECRET)), host="127.0.0.1", port=port,
                                           lifespan="on", log_level="warning", loop="asyncio"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the broker did not start"
        time.sleep(0.02)
    token_file = tmp_path / "token"
    token_file.write_text(server_token(BROKER_SECRET, "coder"))
    monkeypatch.setenv(sandbox_client.BROKER_ENV, f"http://127.0.0.1:{port}")
    monkeypatch.setenv(sandbox_client.TOKEN_FILE_ENV, str(token_file))
    monkeypatch.setenv(sandbox_client.INSTANCE_ENV, "coder")
    yield Broker(engine, pool)
    server.should_exit = True
    thread.join(30)
