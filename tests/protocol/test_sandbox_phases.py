"""Egress phases through the broker's HTTP API and the sandbox client, on the fake engine (it
records which network each sandbox is on). A sandbox leases in a phase or moves to one; a move
leaves the old network before it joins the new one, and a move that fails destroys the sandbox.
What a phase reaches on the real engine: tests/e2e/test_sandbox_egress_allow.py."""

from __future__ import annotations

import httpx
import pytest

from gym_compose.sandbox import AsyncSandbox, SandboxError, SandboxSpec
from gym_compose.sandbox.broker.app import build_app
from gym_compose.sandbox.broker.broker_errors import BackendError, Unsupported
from gym_compose.sandbox.broker.pool import SandboxPool
from gym_compose.sandbox.policy import BrokerSettings, SandboxPolicy
from gym_compose.sandbox.tokens import SERVER_HEADER, server_token
from tests.support.sandbox_fakes import FakeBackend, run_async, until

pytestmark = pytest.mark.protocol
SECRET = "project-secret"
DEFAULT_PROXY, VERIFY_PROXY = "http://coder-egress-proxy:8888", "http://coder-egress-proxy-verify:8888"
PHASED = {"network": "allowlist", "network_name": "t-sbx-coder", "egress_allow": ["pypi.org"],
          "proxy_url": DEFAULT_PROXY, "egress_phases": {"verify": ["files.example.org"], "offline": []},
          "phase_networks": {"verify": "t-sbx-coder-verify"}, "phase_proxy_urls": {"verify": VERIFY_PROXY}}
HEADERS = {"authorization": f"Bearer {server_token(SECRET, 'coder')}", SERVER_HEADER: "coder"}


async def started(tmp_path, engine: FakeBackend | None = None, **fields):
    policy = SandboxPolicy(server="coder", image="img:test", workdir=str(tmp_path), memory_bytes=256 << 20,
                           **{**PHASED, **fields})
    engine = engine or FakeBackend()
    pool = SandboxPool(engine, BrokerSettings(project="t", servers={"coder": policy}))
    await pool.open()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=build_app(pool, SECRET)), base_url="http://b")
    return pool, engine, client


async def proxy_seen(client: httpx.AsyncClient, sandbox_id: str, env: dict | None = None) -> str:
    ran = await client.post(f"/v1/sandboxes/{sandbox_id}/exec", headers=HEADERS,
                            json={"command": "printf %s \"$HTTPS_PROXY|$http_proxy\"", "env": env or {}})
    assert ran.status_code == 200, ran.text
    https, http = ran.json()["stdout"].split("|")
    assert https == http
    return https


@run_async
async def test_a_sandbox_moves_between_phases_leaving_one_network_before_it_joins_the_next(tmp_path):
    pool, engine, client = await started(tmp_path)
    try:
        lease = (await client.post("/v1/sandboxes", json={}, headers=HEADERS)).json()
        sandbox_id = lease["sandbox_id"]
        assert lease["phase"] == "default" and engine.network_of(sandbox_id) == "t-sbx-coder"
        assert engine.created[-1]["Labels"]["io.gym-compose.sandbox.phase"] == "default"
        assert await proxy_seen(client, sandbox_id) == DEFAULT_PROXY
        # a declared or a command's own proxy does not win over the phase's
        assert await proxy_seen(client, sandbox_id, {"HTTPS_PROXY": "http://x:1", "http_proxy": "http://x:1"}) \
            == DEFAULT_PROXY

        moved = await client.post(f"/v1/sandboxes/{sandbox_id}/phase", json={"phase": "verify"}, headers=HEADERS)
        assert moved.status_code == 200, moved.text
        assert moved.json() | {"took_s": 0} == {"sandbox_id": sandbox_id, "phase": "verify", "previous": "default",
                                                "changed": True, "took_s": 0}
        assert engine.network_calls == [("move", sandbox_id, "t-sbx-coder", "t-sbx-coder-verify")]
        assert await proxy_seen(client, sandbox_id, {"HTTPS_PROXY": "http://x:1"}) == VERIFY_PROXY
        again = await client.post(f"/v1/sandboxes/{sandbox_id}/phase", json={"phase": "verify"}, headers=HEADERS)
        assert again.json()["changed"] is False and len(engine.network_calls) == 1

        await client.post(f"/v1/sandboxes/{sandbox_id}/phase", json={"phase": "offline"}, headers=HEADERS)
        assert engine.network_calls[-1] == ("move", sandbox_id, "t-sbx-coder-verify", None)
        assert await proxy_seen(client, sandbox_id) == ""  # no proxy: nothing would answer
        await client.post(f"/v1/sandboxes/{sandbox_id}/phase", json={"phase": "default"}, headers=HEADERS)
        assert engine.network_calls[-1] == ("move", sandbox_id, None, "t-sbx-coder")
        assert await proxy_seen(client, sandbox_id) == DEFAULT_PROXY
        status = (await client.get(f"/v1/sandboxes/{sandbox_id}", headers=HEADERS)).json()
        assert status["phase"] == "default"

        refused = await client.post(f"/v1/sandboxes/{sandbox_id}/phase", json={"phase": "build"}, headers=HEADERS)
        assert refused.status_code == 403
        assert "phase 'build' is not declared" in refused.json()["error"]
        assert "declared: default, verify, offline" in refused.json()["error"]
        bad = await client.post(f"/v1/sandboxes/{sandbox_id}/phase", json={"phase": 3, "x": 1}, headers=HEADERS)
        assert bad.status_code == 422
        await client.post(f"/v1/sandboxes/{sandbox_id}/pause", headers=HEADERS)
        paused = await client.post(f"/v1/sandboxes/{sandbox_id}/phase", json={"phase": "verify"}, headers=HEADERS)
        assert paused.status_code == 409 and "resume it" in paused.json()["error"]
    finally:
        await client.aclose()
        await pool.close()


@run_async
async def test_a_lease_starts_in_its_phase_and_one_with_no_host_is_off_every_network_before_it_runs(tmp_path):
    pool, engine, client = await started(tmp_path)
    try:
        verify = (await client.post("/v1/sandboxes", json={"phase": "verify"}, headers=HEADERS)).json()
        assert verify["phase"] == "verify" and engine.network_of(verify["sandbox_id"]) == "t-sbx-coder-verify"
        env = dict(item.split("=", 1) for item in engine.created[-1]["Env"])
        assert env["HTTPS_PROXY"] == VERIFY_PROXY
        assert engine.network_calls == []

        offline = (await client.post("/v1/sandboxes", json={"phase": "offline"}, headers=HEADERS)).json()
        # created on the default network (a container made with none could never join one), then
        # detached before its start (FakeBackend.detach asserts that)
        assert engine.created[-1]["HostConfig"]["NetworkMode"] == "t-sbx-coder"
        assert engine.network_calls == [("detach", offline["sandbox_id"], "t-sbx-coder", None)]
        assert engine.network_of(offline["sandbox_id"]) is None
        assert await proxy_seen(client, offline["sandbox_id"]) == ""

        refused = await client.post("/v1/sandboxes", json={"phase": "build"}, headers=HEADERS)
        assert refused.status_code == 403 and "network.egress.phases" in refused.json()["error"]
    finally:
        await client.aclose()
        await pool.close()


@run_async
async def test_a_warm_sandbox_is_moved_to_the_phase_asked_for(tmp_path):
    pool, engine, client = await started(tmp_path, warm_pool=1)
    try:
        await until(lambda: len(pool.warm["coder"]) == 1, "a warm sandbox")
        lease = (await client.post("/v1/sandboxes", json={"phase": "verify"}, headers=HEADERS)).json()
        assert lease["warm"] is True and lease["phase"] == "verify"
        assert engine.network_calls == [("move", lease["sandbox_id"], "t-sbx-coder", "t-sbx-coder-verify")]
        assert await proxy_seen(client, lease["sandbox_id"]) == VERIFY_PROXY
    finally:
        await client.aclose()
        await pool.close()


@run_async
async def test_a_move_that_fails_destroys_the_sandbox_and_says_why(tmp_path):
    pool, engine, client = await started(tmp_path)
    try:
        sandbox_id = (await client.post("/v1/sandboxes", json={}, headers=HEADERS)).json()["sandbox_id"]
        engine.move_error = BackendError("network t-sbx-coder-verify not found")
        failed = await client.post(f"/v1/sandboxes/{sandbox_id}/phase", json={"phase": "verify"}, headers=HEADERS)
        assert failed.status_code == 502 and "not found" in failed.json()["error"]
        assert sandbox_id in engine.removed
        gone = await client.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"command": "true"}, headers=HEADERS)
        assert gone.status_code == 410 and "could not be moved to egress phase 'verify'" in gone.text
    finally:
        await client.aclose()
        await pool.close()


class PodsLikeBackend(FakeBackend):
    """A backend that, like Kubernetes, keeps a sandbox in the phase it was created in."""

    moves_phases = False

    async def move_to_phase(self, container_id, leave, join, phase):
        raise Unsupported("moving a sandbox to another egress phase needs the Docker backend")


@run_async
async def test_where_sandboxes_cannot_move_a_phase_is_leased_cold_and_a_move_says_why(tmp_path):
    pool, engine, client = await started(tmp_path, engine=PodsLikeBackend(), warm_pool=1)
    try:
        await until(lambda: len(pool.warm["coder"]) == 1, "a warm sandbox")
        lease = (await client.post("/v1/sandboxes", json={"phase": "verify"}, headers=HEADERS)).json()
        assert lease["warm"] is False and lease["phase"] == "verify" and len(pool.warm["coder"]) == 1
        said = await client.post(f"/v1/sandboxes/{lease['sandbox_id']}/phase", json={"phase": "default"},
                                 headers=HEADERS)
        assert said.status_code == 501 and "needs the Docker backend" in said.json()["error"]
        assert await proxy_seen(client, lease["sandbox_id"]) == VERIFY_PROXY  # still alive, still in its phase
    finally:
        await client.aclose()
        await pool.close()


@pytest.mark.parametrize("broker", [PHASED], indirect=True)
@run_async
async def test_the_client_leases_in_a_phase_and_moves(broker):
    sandbox = await AsyncSandbox().start(SandboxSpec(provider_options={"phase": "offline"}))
    forks: list[AsyncSandbox] = []
    try:
        assert broker.engine.network_of(sandbox.sandbox_id) is None
        assert await sandbox.set_phase("verify") is True
        assert await sandbox.set_phase("verify") is False
        assert broker.engine.network_of(sandbox.sandbox_id) == "t-sbx-coder-verify"
        assert (await sandbox.exec("printf %s \"$HTTPS_PROXY\"")).stdout == VERIFY_PROXY
        with pytest.raises(SandboxError, match="phase 'nope' is not declared"):
            await sandbox.set_phase("nope")
        forks = await sandbox.fork(1, phase="offline")
        assert broker.engine.network_of(forks[0].sandbox_id) is None
    finally:
        for fork in forks:
            await fork.stop()
        await sandbox.stop()
