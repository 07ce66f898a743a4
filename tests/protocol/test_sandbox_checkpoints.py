"""Mid-episode checkpoints through the broker's HTTP API and the sandbox client, on the fake engine:
an agent holding a sandbox's grant saves its files with a state under a key; a later sandbox of the
same server is restored to it and gets the state back; a newer checkpoint replaces the older one
(whose snapshot goes); another server never sees it. The agent's side: tests/unit/test_episode_checkpoints.py;
on the real engine, after a killed sandbox and --resume: tests/e2e/test_swebench.py."""

from __future__ import annotations

import httpx
import pytest

from gym_compose.sandbox import AsyncSandbox
from gym_compose.sandbox.broker.app import build_app
from gym_compose.sandbox.broker.pool import SandboxPool
from gym_compose.sandbox.policy import BrokerSettings, SandboxPolicy
from gym_compose.sandbox.tokens import GRANT_HEADER, SERVER_HEADER, server_token
from tests.support.sandbox_fakes import FakeBackend, run_async

pytestmark = pytest.mark.protocol
SECRET = "project-secret"


def headers(server: str, **extra: str) -> dict[str, str]:
    return {"authorization": f"Bearer {server_token(SECRET, server)}", SERVER_HEADER: server, **extra}


async def started(tmp_path, **settings):
    policies = {name: SandboxPolicy(server=name, image="img:test", workdir=str(tmp_path / name), network="none",
                                    memory_bytes=256 << 20) for name in ("verifier", "other")}
    for name in policies:
        (tmp_path / name).mkdir()
    engine = FakeBackend()
    pool = SandboxPool(engine, BrokerSettings(project="t", servers=policies, **settings))
    await pool.open()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=build_app(pool, SECRET)), base_url="http://b")
    return pool, engine, client


async def lease(client: httpx.AsyncClient, server: str = "verifier") -> tuple[str, dict[str, str]]:
    """A sandbox the server leased, and the headers of the agent it was handed to (its grant)."""
    leased = (await client.post("/v1/sandboxes", json={}, headers=headers(server))).json()
    return leased["sandbox_id"], headers("agent", **{GRANT_HEADER: leased["grant"]})


@run_async
async def test_an_agent_saves_a_checkpoint_and_a_later_sandbox_goes_on_from_it(tmp_path):
    pool, engine, client = await started(tmp_path)
    try:
        first, agent = await lease(client)
        taken = await client.post(f"/v1/sandboxes/{first}/checkpoint", headers=agent,
                                  json={"key": "agent/run1/0/0", "state": {"step": 1, "items": ["a"]}})
        assert taken.status_code == 201, taken.text
        one = taken.json()
        assert one["key"] == "agent/run1/0/0" and one["server"] == "verifier" and one["state_bytes"] > 0
        assert engine.committed[f"t-snapshot:{one['snapshot_id']}"]["io.gym-compose.project"] == "t"
        again = (await client.post(f"/v1/sandboxes/{first}/checkpoint", headers=agent,
                                   json={"key": "agent/run1/0/0", "state": {"step": 2, "items": ["a", "b"]}})).json()
        # one checkpoint per key: the older one's snapshot is gone
        assert f"t-snapshot:{one['snapshot_id']}" not in engine.committed
        assert f"t-snapshot:{again['snapshot_id']}" in engine.committed
        assert [s["snapshot_id"] for s in pool.snapshots.list("verifier")] == [again["snapshot_id"]]

        await client.delete(f"/v1/sandboxes/{first}", headers=headers("verifier"))  # the crash
        second, agent = await lease(client)
        restored = await client.post(f"/v1/sandboxes/{second}/checkpoint/restore", headers=agent,
                                     json={"key": "agent/run1/0/0"})
        assert restored.status_code == 200, restored.text
        assert restored.json()["found"] is True and restored.json()["state"] == {"step": 2, "items": ["a", "b"]}
        assert engine.created[-1]["Image"] == f"t-snapshot:{again['snapshot_id']}"  # relaunched from it
        assert pool.get(None, second).state == "leased"

        missing = await client.post(f"/v1/sandboxes/{second}/checkpoint/restore", headers=agent,
                                    json={"key": "agent/run1/5/0"})
        assert missing.json() == {"key": "agent/run1/5/0", "found": False}
        # the next checkpoint of the restored sandbox replaces the one it runs from: that image
        # is untagged at once and removed once the sandbox is gone
        image_id = pool.snapshots.by_id[again["snapshot_id"]].image_id
        await client.post(f"/v1/sandboxes/{second}/checkpoint", headers=agent, json={"key": "agent/run1/0/0"})
        forgotten = await client.post(f"/v1/sandboxes/{second}/checkpoint/forget", headers=agent,
                                      json={"key": "agent/run1/0/0"})
        assert forgotten.json() == {"key": "agent/run1/0/0", "forgotten": True}
        assert pool.snapshots.list("verifier") == [] and engine.committed == {}
        assert image_id not in engine.removed_images and pool.snapshots.retired == {image_id}
        await client.delete(f"/v1/sandboxes/{second}", headers=headers("verifier"))
        assert image_id in engine.removed_images and pool.snapshots.retired == set()
    finally:
        await client.aclose()
        await pool.close()


@run_async
async def test_checkpoints_are_the_sandbox_servers_own_and_bad_ones_are_refused(tmp_path):
    pool, engine, client = await started(tmp_path, max_snapshots=1)
    try:
        mine, agent = await lease(client)
        assert (await client.post(f"/v1/sandboxes/{mine}/checkpoint", headers=agent,
                                  json={"key": "k", "state": [1]})).status_code == 201
        theirs, other_agent = await lease(client, "other")
        elsewhere = await client.post(f"/v1/sandboxes/{theirs}/checkpoint/restore", headers=other_agent,
                                      json={"key": "k"})
        assert elsewhere.json()["found"] is False  # another server's sandbox never sees it
        # without the grant the agent reaches no sandbox
        assert (await client.post(f"/v1/sandboxes/{mine}/checkpoint", headers=headers("agent"),
                                  json={"key": "k"})).status_code == 403
        # at the snapshot cap a key's own older checkpoint makes the room; another key finds none
        assert (await client.post(f"/v1/sandboxes/{mine}/checkpoint", headers=agent,
                                  json={"key": "k", "state": [2]})).status_code == 201
        full = await client.post(f"/v1/sandboxes/{mine}/checkpoint", headers=agent, json={"key": "j"})
        assert full.status_code == 503 and "max_snapshots 1" in full.json()["error"]
        for body, status, message in (({"key": ""}, 403, "a checkpoint key is a printable string"),
                                      ({"key": "a\nb"}, 403, "a checkpoint key is a printable string"),
                                      ({"key": "k", "state": "x" * (17 << 20)}, 403, "at most 16 MiB"),
                                      ({"key": "k", "extra": 1}, 422, "extra")):
            said = await client.post(f"/v1/sandboxes/{mine}/checkpoint", headers=agent, json=body)
            assert said.status_code == status and message in said.text, (body, said.text[:300])
        await client.post(f"/v1/sandboxes/{mine}/pause", headers=headers("verifier"))
        paused = await client.post(f"/v1/sandboxes/{mine}/checkpoint", headers=agent, json={"key": "k"})
        assert paused.status_code == 409
    finally:
        await client.aclose()
        await pool.close()


@run_async
async def test_the_client_checkpoints_a_sandbox_handed_over_to_it(broker):
    owner = await AsyncSandbox().start()
    later = await AsyncSandbox().start()
    try:
        await owner.write_file("done.txt", "step one")
        handed = await AsyncSandbox.connect(await owner.serialize())
        await handed.checkpoint("agent/r/1/0", {"step": 1})
        assert await later.restore_checkpoint("agent/r/1/0") == {"step": 1}
        assert (await later.read_file("done.txt")) == b"step one"
        assert await later.restore_checkpoint("agent/r/2/0") is None
        assert await later.forget_checkpoint("agent/r/1/0") is True
        assert await later.forget_checkpoint("agent/r/1/0") is False
        await handed.disconnect()
    finally:
        await later.stop()
        await owner.stop()
