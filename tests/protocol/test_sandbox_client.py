"""The sandbox API (AsyncSandbox, Sandbox, NeMo Gym's provider config) against a real broker on
loopback, itself on a fake engine whose sandboxes are local agent processes."""

from __future__ import annotations

import asyncio

import pytest

from gym_compose.sandbox import (
    AsyncSandbox,
    Sandbox,
    SandboxCreateError,
    SandboxSpec,
    SandboxStatus,
    create_provider,
    resolve_provider_config,
)
from gym_compose.sandbox import client as sandbox_client
from tests.support.sandbox_fakes import run_async

pytestmark = pytest.mark.protocol


@run_async
async def test_async_sandbox_runs_commands_and_moves_files(broker, tmp_path):
    sandbox = await AsyncSandbox().start(SandboxSpec(env={"GREETING": "hi"}, files={"seed/in.txt": "seeded"}))
    try:
        result = await sandbox.exec("echo $GREETING; cat seed/in.txt; exit 4")
        assert (result.return_code, result.stdout, result.error_type) == (4, "hi\nseeded", None)
        local = tmp_path / "local.bin"
        local.write_bytes(b"\x00\x01binary\xff")
        await sandbox.upload(local, "up/copy.bin")
        await sandbox.download("up/copy.bin", tmp_path / "back" / "copy.bin")
        assert (tmp_path / "back" / "copy.bin").read_bytes() == b"\x00\x01binary\xff"
        await sandbox.write_file("note.txt", "written")
        assert await sandbox.read_file("note.txt") == b"written"
        slow = await sandbox.exec("sleep 20", timeout_s=0.3)
        assert slow.error_type == "timeout" and "timed out after 0.3 s" in slow.reason
        assert await sandbox.status() == SandboxStatus.RUNNING
        assert (await sandbox.serialize())["sandbox_id"] == sandbox.sandbox_id
    finally:
        await sandbox.stop()
        await sandbox.stop()  # idempotent
    assert await sandbox.status() == SandboxStatus.STOPPED and broker.live() == []


@run_async
async def test_a_dead_sandbox_is_told_apart_from_a_failed_command(broker):
    async with AsyncSandbox() as sandbox:
        await sandbox.start()
        failed = await sandbox.exec("false")
        assert failed.return_code == 1 and failed.error_type is None
        await asyncio.to_thread(broker.kill, sandbox.sandbox_id, True)
        dead = await sandbox.exec("echo hi")
        assert dead.error_type == "sandbox" and dead.return_code == 125
        assert dead.reason == "sandbox OOM-killed (memory 256m)" and "sandbox is dead" in dead.stderr
        assert await sandbox.status() == SandboxStatus.STOPPED


@run_async
async def test_nemo_gym_provider_blocks_run_on_the_broker_with_one_notice(broker, capsys):
    sandbox_client._noticed.clear()
    config = {"sandbox": {"docker": {"exec": {"concurrency": 8}}, "default_metadata": {"team": "x"}}}
    for _ in range(2):
        provider = create_provider(resolve_provider_config("sandbox", config))
        async with AsyncSandbox(provider) as sandbox:
            await sandbox.start(SandboxSpec(resources={"cpu": 0.5}))
            assert (await sandbox.exec("echo ok")).stdout == "ok\n"
    notices = [line for line in capsys.readouterr().err.splitlines() if "gym-compose sandboxes" in line]
    assert len(notices) == 1 and "'docker'" in notices[0]


@run_async
async def test_refused_leases_raise_with_the_brokers_reason(broker):
    with pytest.raises(SandboxCreateError, match="not in the plan"):
        await AsyncSandbox().start(SandboxSpec(image="python:3.12"))
    with pytest.raises(SandboxCreateError, match="volumes refused"):
        await AsyncSandbox().start(SandboxSpec(provider_options={"volumes": ["/:/h"]}))
    with pytest.raises(SandboxCreateError, match="publish no ports"):
        await AsyncSandbox().start(SandboxSpec(ports=[8080]))
    assert broker.live() == []


def test_blocking_sandbox_twin(broker):
    with Sandbox() as sandbox:
        sandbox.start()
        assert sandbox.exec("echo sync").stdout == "sync\n"
    assert sandbox.status() == SandboxStatus.STOPPED and broker.live() == []


@run_async
async def test_a_server_without_a_broker_is_told_how_to_declare_sandboxes(monkeypatch):
    monkeypatch.delenv(sandbox_client.BROKER_ENV, raising=False)
    with pytest.raises(SandboxCreateError, match="sandbox_config"):
        await AsyncSandbox().start()
