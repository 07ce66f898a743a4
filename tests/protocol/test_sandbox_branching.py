"""Snapshot, fork, restore, pause and resume through the broker's HTTP API and the sandbox
client, on the fake engine (its commits record images; its pause is SIGSTOP of the agent's process
group). What a snapshot holds on the real engine: tests/e2e/test_sandbox_snapshots.py."""

from __future__ import annotations

import httpx
import pytest

from gym_compose.sandbox import AsyncSandbox, SandboxCreateError, SandboxError, SandboxSnapshot
from gym_compose.sandbox.broker.app import build_app
from gym_compose.sandbox.broker.broker_errors import Unsupported
from gym_compose.sandbox.broker.pool import SandboxPool
from gym_compose.sandbox.policy import BrokerSettings, SandboxPolicy
from gym_compose.sandbox.tokens import SERVER_HEADER, server_token
from tests.support.sandbox_fakes import FakeBackend, run_async

pytestmark = pytest.mark.protocol
SECRET = "project-secret"


def headers(server: str) -> dict[str, str]:
    return {"authorization": f"Bearer {server_token(SECRET, server)}", SERVER_HEADER: server}


async def started(tmp_path, **settings):
    policies = {name: SandboxPolicy(server=name, image="img:test", workdir=str(tmp_path), network="none",
                                    memory_bytes=256 << 20) for name in ("coder", "other")}
    engine = FakeBackend()
    pool = SandboxPool(engine, BrokerSettings(project="t", servers=policies, **settings))
    await pool.open()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=build_app(pool, SECRET)), base_url="http://b")
    return pool, engine, client


@run_async
async def test_snapshot_fork_restore_and_delete_over_http(tmp_path):
    pool, engine, client = await started(tmp_path)
    coder, other = headers("coder"), headers("other")
    try:
        lease = (await client.post("/v1/sandboxes", json={"env": {"SEEDED": "yes"}}, headers=coder)).json()
        source = lease["sandbox_id"]
        taken = await client.post(f"/v1/sandboxes/{source}/snapshot", headers=coder)
        assert taken.status_code == 201, taken.text
        snapshot = taken.json()
        assert snapshot["image"] == f"t-snapshot:{snapshot['snapshot_id']}" and snapshot["source"] == source
        assert engine.committed[snapshot["image"]]["io.gym-compose.project"] == "t"
        assert engine.committed[snapshot["image"]]["io.gym-compose.snapshot"] == snapshot["snapshot_id"]

        forked = await client.post(f"/v1/snapshots/{snapshot['snapshot_id']}/fork", json={"n": 3}, headers=coder)
        assert forked.status_code == 201, forked.text
        forks = forked.json()["forks"]
        assert len({fork["sandbox_id"] for fork in forks}) == 3 and source not in {f["sandbox_id"] for f in forks}
        assert {fork["forked_from"] for fork in forks} == {snapshot["snapshot_id"]}
        assert [config["Image"] for config in engine.created[-3:]] == [snapshot["image"]] * 3
        ran = await client.post(f"/v1/sandboxes/{forks[0]['sandbox_id']}/exec", json={"command": "echo $SEEDED"},
                                headers=coder)
        assert ran.json()["stdout"] == "yes\n"  # the source's env goes with its files

        # one call: a new snapshot of the sandbox, and its forks
        both = await client.post(f"/v1/sandboxes/{source}/fork", json={"n": 2}, headers=coder)
        assert both.status_code == 201 and both.json()["snapshot_id"] != snapshot["snapshot_id"]

        # another server can neither fork, restore to, list nor delete this server's snapshots
        assert (await client.post(f"/v1/snapshots/{snapshot['snapshot_id']}/fork", json={"n": 1},
                                  headers=other)).status_code == 403
        assert (await client.get("/v1/snapshots", headers=other)).json()["snapshots"] == []
        assert len((await client.get("/v1/snapshots", headers=coder)).json()["snapshots"]) == 2
        assert (await client.delete(f"/v1/snapshots/{snapshot['snapshot_id']}", headers=other)).status_code == 403

        restored = await client.post(f"/v1/sandboxes/{source}/restore", json={"snapshot": snapshot["snapshot_id"]},
                                     headers=coder)
        assert restored.status_code == 200, restored.text
        again = await client.post(f"/v1/sandboxes/{source}/exec", json={"command": "echo $SEEDED"}, headers=coder)
        assert again.json()["stdout"] == "yes\n"  # same id, same lease, a new container
        assert engine.created[-1]["Image"] == snapshot["image"] and source in engine.live_names()

        unknown = await client.post(f"/v1/sandboxes/{source}/restore", json={"snapshot": "snap-nope"}, headers=coder)
        assert unknown.status_code == 404 and "no snapshot 'snap-nope'" in unknown.json()["error"]
        too_many = await client.post(f"/v1/sandboxes/{source}/fork", json={"n": 65}, headers=coder)
        assert too_many.status_code == 422
        assert (await client.delete(f"/v1/snapshots/{snapshot['snapshot_id']}", headers=coder)).status_code == 200
        assert snapshot["image"] not in engine.committed
    finally:
        await client.aclose()
        await pool.close()
    assert engine.committed == {}  # the broker removes its snapshots as it stops


@run_async
async def test_pause_refuses_commands_until_resume_and_the_process_lives_on(tmp_path):
    pool, engine, client = await started(tmp_path)
    coder = headers("coder")
    try:
        sandbox_id = (await client.post("/v1/sandboxes", json={}, headers=coder)).json()["sandbox_id"]
        assert (await client.post(f"/v1/sandboxes/{sandbox_id}/pause", headers=coder)).json() == {
            "state": "paused", "changed": True}
        refused = await client.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"command": "true"}, headers=coder)
        assert refused.status_code == 409 and "is paused; resume it first" in refused.json()["error"]
        listed = (await client.get(f"/v1/sandboxes/{sandbox_id}", headers=coder)).json()
        assert listed["state"] == "paused"
        assert (await client.post(f"/v1/sandboxes/{sandbox_id}/resume", headers=coder)).json()["changed"]
        ran = await client.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"command": "echo back"}, headers=coder)
        assert ran.json()["stdout"] == "back\n"
    finally:
        await client.aclose()
        await pool.close()


@run_async
async def test_snapshot_budget_and_read_only_sandboxes_are_refused_with_the_fix(tmp_path):
    pool, engine, client = await started(tmp_path, max_snapshots=1)
    coder = headers("coder")
    try:
        sandbox_id = (await client.post("/v1/sandboxes", json={}, headers=coder)).json()["sandbox_id"]
        assert (await client.post(f"/v1/sandboxes/{sandbox_id}/snapshot", headers=coder)).status_code == 201
        spent = await client.post(f"/v1/sandboxes/{sandbox_id}/snapshot", headers=coder)
        assert spent.status_code == 503 and "max_snapshots 1" in spent.json()["error"]
        pool.settings.servers["coder"].read_only = True
        read_only = await client.post(f"/v1/sandboxes/{sandbox_id}/fork", json={"n": 1}, headers=coder)
        assert read_only.status_code == 403 and "read_only: false" in read_only.json()["error"]
    finally:
        await client.aclose()
        await pool.close()


@run_async
async def test_a_backend_without_snapshots_says_so(tmp_path):
    pool, engine, client = await started(tmp_path)

    async def no_commit(*args, **kwargs):
        raise Unsupported("sandbox snapshots (snapshot, fork, restore) need the Docker backend")

    engine.commit = no_commit
    try:
        sandbox_id = (await client.post("/v1/sandboxes", json={}, headers=headers("coder"))).json()["sandbox_id"]
        said = await client.post(f"/v1/sandboxes/{sandbox_id}/snapshot", headers=headers("coder"))
        assert said.status_code == 501 and "need the Docker backend" in said.json()["error"]
    finally:
        await client.aclose()
        await pool.close()


@run_async
async def test_the_client_forks_restores_and_pauses(broker):
    sandbox = await AsyncSandbox().start()
    forks: list[AsyncSandbox] = []
    try:
        snapshot = await sandbox.snapshot()
        assert isinstance(snapshot, SandboxSnapshot) and snapshot.source == sandbox.sandbox_id
        forks = await sandbox.fork(2)
        assert len({fork.sandbox_id for fork in forks} | {sandbox.sandbox_id}) == 3
        assert (await forks[0].exec("echo fork")).stdout == "fork\n"
        more = await AsyncSandbox.from_snapshot(snapshot, 1)
        forks += more
        await sandbox.restore(snapshot)
        await sandbox.pause()
        paused = await sandbox.exec("true")
        assert paused.error_type == "sandbox" and "is paused" in paused.reason
        with pytest.raises(SandboxError, match="is paused"):
            await sandbox.write_file("f", "x")
        await sandbox.resume()
        assert (await sandbox.exec("echo on")).stdout == "on\n"
        await sandbox.delete_snapshot(snapshot)
        with pytest.raises(SandboxCreateError, match="no snapshot"):
            await AsyncSandbox.from_snapshot(snapshot, 1)
    finally:
        for fork in forks:
            await fork.stop()
        await sandbox.stop()
    assert broker.live() == []


@run_async
async def test_fork_from_seed_sets_up_each_task_once_per_group(broker):
    import asyncio

    from gym_compose.sandbox import SandboxSpec
    from gym_compose.sandbox.seed_forks import SeedForks

    forks = SeedForks(4)
    set_up: list[str] = []

    async def setup(sandbox: AsyncSandbox) -> None:
        set_up.append(sandbox.sandbox_id)
        await sandbox.exec("echo ready > seeded.txt")

    leased = await asyncio.gather(*(forks.lease(task, SandboxSpec(metadata={"session": f"{task}-{i}"}), setup)
                                    for task in ("a", "b") for i in range(4)))
    try:
        assert len(set_up) == 2 and forks.set_ups == 2 and forks.forked == 6
        assert len({sandbox.sandbox_id for sandbox in leased}) == 8
        assert broker.pool.snapshots.by_id == {}  # each group's snapshot is deleted once its forks started
        sessions = [broker.pool.get(None, sandbox.sandbox_id).metadata["session"] for sandbox in leased]
        assert sessions == [f"{task}-{i}" for task in ("a", "b") for i in range(4)]
        again = await forks.lease("a", SandboxSpec(), setup)  # a fifth session of task a: a new group
        leased.append(again)
        assert forks.set_ups == 3
    finally:
        for sandbox in leased:
            await sandbox.stop()


@run_async
async def test_a_failed_set_up_fails_the_waiting_sessions_and_the_next_one_retries(broker):
    import asyncio

    from gym_compose.sandbox import SandboxSpec
    from gym_compose.sandbox.seed_forks import SeedForks

    forks = SeedForks(3)
    attempts = []

    async def setup(sandbox: AsyncSandbox) -> None:
        attempts.append(sandbox.sandbox_id)
        if len(attempts) == 1:
            raise RuntimeError("clone failed")

    first = await asyncio.gather(*(forks.lease("t", SandboxSpec(), setup) for _ in range(3)), return_exceptions=True)
    assert [str(result) for result in first] == ["clone failed"] * 3
    retried = await forks.lease("t", SandboxSpec(), setup)
    try:
        assert len(attempts) == 2 and broker.live() == [retried.sandbox_id]
    finally:
        await retried.stop()


@run_async
async def test_a_release_reports_what_the_sandbox_cost(broker):
    sandbox = await AsyncSandbox().start()
    assert sandbox.cost is None
    for _ in range(3):
        await sandbox.exec("true")
    await sandbox.stop()
    assert sandbox.cost["commands"] == 3 and sandbox.cost["leased_s"] > 0
    assert "cpu_s" not in sandbox.cost  # the fake engine has no stats: left out, not zero


def test_cost_figures_from_one_engine_stats_reading():
    from gym_compose.sandbox.broker.ledger import usage_of

    reading = {"cpu_stats": {"cpu_usage": {"total_usage": 2_500_000_000}}, "memory_stats": {"max_usage": 7 << 20}}
    assert usage_of(reading) == {"cpu_s": 2.5, "peak_memory_bytes": 7 << 20}
    assert usage_of({"cpu_stats": {}, "memory_stats": {"usage": 5}}) == {}  # cgroup v2: no high-water mark


@run_async
async def test_kubernetes_says_snapshots_and_pause_are_not_possible_there():
    from gym_compose.sandbox.broker.kubernetes_backend import KubernetesBackend

    backend = KubernetesBackend(api_url="http://127.0.0.1:9", namespace="ns", token="", owners={})
    try:
        with pytest.raises(Unsupported, match="Kubernetes API cannot commit a pod's filesystem"):
            await backend.commit("pod", "repo", "tag", {})
        with pytest.raises(Unsupported, match="no pause for a pod's containers"):
            await backend.pause("pod")
        assert await backend.stats("pod") == {} and await backend.images(["x"]) == []
    finally:
        await backend.http.aclose()


@run_async
async def test_the_clis_broker_call_script_speaks_the_api_with_the_project_secret(broker, tmp_path):
    """The script `gym-compose sandbox snapshot|fork|...` runs inside the broker's container
    (engine/targets/sandbox_containers.py), here against the loopback broker."""
    import asyncio
    import json
    import os
    import subprocess
    import sys

    from gym_compose.engine.targets.sandbox_containers import BROKER_CALL, BROKER_CALL_TIMEOUT_S
    from tests.protocol.conftest import BROKER_SECRET

    secret = tmp_path / "secret"
    secret.write_text(BROKER_SECRET)
    port = int(os.environ["GYM_COMPOSE_SANDBOX_BROKER"].rsplit(":", 1)[1])
    script = BROKER_CALL % (str(secret), port, BROKER_CALL_TIMEOUT_S)

    def call(method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        done = subprocess.run([sys.executable, "-c", script, method, path, json.dumps(body) if body else ""],
                              capture_output=True, text=True, timeout=60)
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        return answer["status"], json.loads(answer["body"])

    sandbox = await AsyncSandbox().start()
    try:
        status, taken = await asyncio.to_thread(call, "POST", f"/v1/sandboxes/{sandbox.sandbox_id}/snapshot")
        assert status == 201 and taken["source"] == sandbox.sandbox_id
        status, forked = await asyncio.to_thread(call, "POST", f"/v1/snapshots/{taken['snapshot_id']}/fork", {"n": 2})
        assert status == 201 and len(forked["forks"]) == 2
        status, refused = await asyncio.to_thread(call, "POST", f"/v1/sandboxes/{sandbox.sandbox_id}/restore",
                                                  {"snapshot": "snap-missing"})
        assert status == 404 and "no snapshot" in refused["error"]
        status, listed = await asyncio.to_thread(call, "GET", "/v1/snapshots")
        assert status == 200 and [s["snapshot_id"] for s in listed["snapshots"]] == [taken["snapshot_id"]]
    finally:
        await sandbox.stop()
