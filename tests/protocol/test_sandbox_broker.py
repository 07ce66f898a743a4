"""The broker's pool and HTTP API on a fake engine whose "containers" run the real sandbox agent
as local processes: leases, warm pools, the cap, eviction, deaths and their reasons, reaping."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from gym_compose.net.incarnation import CALLER_HEADER
from gym_compose.sandbox.broker.app import build_app
from gym_compose.sandbox.broker.broker_errors import NoCapacity, Refused, SandboxGone, StartFailed
from gym_compose.sandbox.broker.pool import SandboxPool
from gym_compose.sandbox.policy import BrokerSettings, ExecRequest, LeaseRequest, SandboxPolicy
from gym_compose.sandbox.tokens import SERVER_HEADER, server_token
from tests.support.sandbox_fakes import FakeBackend, run_async, until

pytestmark = pytest.mark.protocol
IMAGE = "gym-compose/sandbox:test"
SECRET = "project-secret"


def policy(tmp_path, server="coder", **fields) -> SandboxPolicy:
    fields.setdefault("network", "none")
    return SandboxPolicy(server=server, image=IMAGE, workdir=str(tmp_path), memory_bytes=256 << 20, **fields)


async def opened(tmp_path, *policies, **settings) -> tuple[SandboxPool, FakeBackend]:
    engine = FakeBackend()
    pool = SandboxPool(engine, BrokerSettings(project="t", servers={p.server: p for p in policies}, **settings))
    await pool.open()
    return pool, engine


@run_async
async def test_lease_exec_and_release(tmp_path):
    pool, engine = await opened(tmp_path, policy(tmp_path, env={"FROM_PLAN": "p"}))
    try:
        sandbox, warm = await pool.lease("coder", LeaseRequest(env={"FROM_LEASE": "l"}, metadata={"session": "s1"}))
        assert not warm and sandbox.state == "leased" and sandbox.describe()["session"] == "s1"
        result = await pool.exec(sandbox, ExecRequest(command="echo $FROM_PLAN $FROM_LEASE $FROM_EXEC; pwd; "
                                                              "echo oops >&2; exit 3", env={"FROM_EXEC": "e"}))
        assert result["return_code"] == 3 and result["error_type"] is None
        assert result["stdout"] == f"p l e\n{tmp_path}\n" and result["stderr"] == "oops\n"
        await pool.release(sandbox)
        assert engine.live_names() == [] and pool.live == 0
        with pytest.raises(SandboxGone, match="released"):
            pool.get("coder", sandbox.id)
    finally:
        await pool.close()


@run_async
async def test_timeout_kills_the_command_and_the_sandbox_lives_on(tmp_path):
    pool, _ = await opened(tmp_path, policy(tmp_path, timeout_s=0.5))
    try:
        sandbox, _ = await pool.lease("coder", LeaseRequest())
        started = time.monotonic()
        slow = await pool.exec(sandbox, ExecRequest(command="echo begun; sleep 30; echo never"))
        assert time.monotonic() - started < 20
        assert slow["error_type"] == "timeout" and slow["return_code"] == 124 and slow["stdout"] == "begun\n"
        assert "timed out after 0.5 s" in slow["reason"]
        assert (await pool.exec(sandbox, ExecRequest(command="echo alive")))["stdout"] == "alive\n"
    finally:
        await pool.close()


@run_async
async def test_output_is_capped_per_stream(tmp_path):
    pool, _ = await opened(tmp_path, policy(tmp_path, max_output_bytes=1000))
    try:
        sandbox, _ = await pool.lease("coder", LeaseRequest())
        result = await pool.exec(sandbox, ExecRequest(command="head -c 5000000 /dev/zero | tr '\\0' x"))
        assert result["return_code"] == 0 and result["truncated"] and result["stdout"] == "x" * 1000
        assert "output truncated to 1000 bytes" in result["stderr"]
    finally:
        await pool.close()


@run_async
async def test_warm_pool_serves_leases_and_refills(tmp_path):
    pool, _ = await opened(tmp_path, policy(tmp_path, warm_pool=2))
    try:
        await until(lambda: len(pool.warm["coder"]) == 2, "the warm pool to fill")
        first, warm = await pool.lease("coder", LeaseRequest())
        assert warm
        await until(lambda: len(pool.warm["coder"]) == 2, "the warm pool to refill")
        other_image, warm = await pool.lease("coder", LeaseRequest(memory_mib=128))
        assert not warm  # a request that differs from the declared sandbox starts its own
        assert pool.stats()["leases_warm"] == 1 and pool.stats()["leases_cold"] == 1
    finally:
        await pool.close()


class GatedStarts(FakeBackend):
    """Each container start waits for `gate`, counting the starts in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.in_start = self.peak_in_start = 0

    async def start(self, container_id: str) -> None:
        self.in_start += 1
        self.peak_in_start = max(self.peak_in_start, self.in_start)
        try:
            await self.gate.wait()
            await super().start(container_id)
        finally:
            self.in_start -= 1


@run_async
async def test_the_warm_pool_fills_with_several_starts_at_once_leaving_one_start_slot_to_leases(tmp_path):
    engine = GatedStarts()
    pool = SandboxPool(engine, BrokerSettings(project="t", servers={"coder": policy(tmp_path, warm_pool=5)},
                                              max_starting=3))
    await pool.open()
    try:
        await until(lambda: engine.in_start == 2, "two warm sandboxes starting at once")
        await asyncio.sleep(0.2)  # no third refill start while they do
        assert engine.in_start == 2 and pool.live == 2
        cold = asyncio.ensure_future(pool.lease("coder", LeaseRequest(memory_mib=128)))
        await until(lambda: engine.in_start == 3, "a cold lease starting in the slot the refill left")
        engine.gate.set()
        _, warm = await cold
        assert not warm
        await until(lambda: len(pool.warm["coder"]) == 5, "the warm pool to fill")
        assert engine.peak_in_start == 3 and pool.live == 6
    finally:
        await pool.close()


def for_session(session: str, image: str, **fields) -> LeaseRequest:
    return LeaseRequest(image=image, metadata={"session": session, **fields.pop("metadata", {})}, **fields)


@run_async
async def test_a_sessions_cold_lease_of_a_task_image_starts_one_spare_for_its_next_lease_of_it(tmp_path):
    pool, engine = await opened(tmp_path, policy(tmp_path, allowed_images=["swe/*"], warm_spare_s=60))
    try:
        agent, warm = await pool.lease("coder", for_session("s1", "swe/task-1"))
        assert not warm
        await until(lambda: ("coder", "swe/task-1", "s1") in pool.spares, "the spare of swe/task-1 to be ready")
        spare = pool.spares[("coder", "swe/task-1", "s1")]
        assert spare.state == "warm" and spare.image == "swe/task-1" and spare.id != agent.id
        # another session's lease of the same image does not take it (it gets its own spare)
        other_session, warm = await pool.lease("coder", for_session("s2", "swe/task-1"))
        assert not warm and other_session is not spare
        verify, warm = await pool.lease("coder", for_session("s1", "swe/task-1", metadata={"purpose": "verify"}))
        assert warm and verify is spare and verify.state == "leased"
        assert verify.metadata == {"session": "s1", "purpose": "verify"}
        # a warm take starts no spare, nor does the session's next cold lease of that image (a retry)
        retry, warm = await pool.lease("coder", for_session("s1", "swe/task-1"))
        assert not warm and ("coder", "swe/task-1", "s1") not in pool._sparing
        await until(lambda: not pool._sparing, "s2's spare to be ready")
        assert list(pool.spares) == [("coder", "swe/task-1", "s2")] and pool.stats()["spares"] == 1
        assert pool.stats()["leases_warm"] == 1 and len(engine.live_names()) == 5
        # a lease that comes while its spare is starting waits for it
        third, warm = await pool.lease("coder", for_session("s3", "swe/task-3"))
        assert not warm and ("coder", "swe/task-3", "s3") in pool._sparing
        fourth, warm = await pool.lease("coder", for_session("s3", "swe/task-3"))
        assert warm and fourth.id != third.id and ("coder", "swe/task-3", "s3") not in pool.spares
        # no spare: the declared image (the warm pool is for that), other limits, no session
        live = len(engine.live_names())
        await pool.lease("coder", LeaseRequest(metadata={"session": "s4"}))
        await pool.lease("coder", for_session("s4", "swe/task-4", memory_mib=128))
        await pool.lease("coder", LeaseRequest(image="swe/task-4"))
        assert not pool._sparing and len(engine.live_names()) == live + 3 and len(pool.spares) == 1
        result = await pool.exec(verify, ExecRequest(command="echo from the spare"))
        assert result["stdout"] == "from the spare\n"
    finally:
        await pool.close()
    assert engine.live_names() == []


@run_async
async def test_no_spare_without_warm_spare_s_and_an_untaken_spare_is_reaped(tmp_path):
    pool, engine = await opened(tmp_path, policy(tmp_path, "plain", allowed_images=["swe/*"]),
                                policy(tmp_path, "sparing", allowed_images=["swe/*"], warm_spare_s=0.2))
    try:
        await pool.lease("plain", for_session("s1", "swe/task-1"))
        await pool.lease("sparing", for_session("s1", "swe/task-1"))
        await until(lambda: ("sparing", "swe/task-1", "s1") in pool.spares, "the spare to be ready")
        assert list(pool.spares) == [("sparing", "swe/task-1", "s1")] and len(engine.live_names()) == 3
        spare = pool.spares[("sparing", "swe/task-1", "s1")]
        await asyncio.sleep(0.3)
        assert await pool.reap() == [spare.id]
        assert pool.spares == {} and len(engine.live_names()) == 2
        with pytest.raises(SandboxGone, match=r"spare not taken within warm_spare_s \(0.2 s\)"):
            pool.get("sparing", spare.id)
    finally:
        await pool.close()


@run_async
async def test_a_lease_waiting_for_a_slot_evicts_a_spare(tmp_path):
    pool, engine = await opened(tmp_path, policy(tmp_path, allowed_images=["swe/*"], warm_spare_s=600,
                                                 ready_timeout_s=30), max_live=2)
    try:
        await pool.lease("coder", for_session("s1", "swe/task-1"))
        await until(lambda: pool.spares, "the spare to be ready")
        second, warm = await asyncio.wait_for(pool.lease("coder", for_session("s2", "swe/task-2")), 30)
        assert not warm and second.image == "swe/task-2" and pool.live <= 2
        assert ("coder", "swe/task-1", "s1") not in pool.spares
    finally:
        await pool.close()


@run_async
async def test_a_lease_naming_no_workdir_works_in_its_images_workdir_unless_the_plan_names_one(tmp_path):
    repository = tmp_path / "app"  # the task image's WORKDIR (NeMo Gym: "default to the container's WORKDIR")
    repository.mkdir()
    pool, engine = await opened(tmp_path, policy(tmp_path, allowed_images=["swe/*"]),
                                policy(tmp_path, "declared", allowed_images=["swe/*"], workdir_declared=True))
    engine.image_workdirs["swe/task-1"] = str(repository)
    try:
        sandbox, _ = await pool.lease("coder", LeaseRequest(image="swe/task-1"))
        assert sandbox.workdir == str(repository) and sandbox.describe()["workdir"] == str(repository)
        assert (await pool.exec(sandbox, ExecRequest(command="pwd")))["stdout"] == f"{repository}\n"
        named, _ = await pool.lease("coder", LeaseRequest(image="swe/task-1", workdir=str(tmp_path)))
        assert named.workdir == str(tmp_path)  # the lease's own wins
        plain, _ = await pool.lease("coder", LeaseRequest())  # an image with no WORKDIR: the policy's
        declared, _ = await pool.lease("declared", LeaseRequest(image="swe/task-1"))  # sandbox_config's wins
        assert plain.workdir == declared.workdir == str(tmp_path)
    finally:
        await pool.close()


@run_async
async def test_cap_makes_a_lease_wait_for_a_release_and_fail_after_its_ready_timeout(tmp_path):
    pool, engine = await opened(tmp_path, policy(tmp_path, ready_timeout_s=30), max_live=2)
    try:
        held = [(await pool.lease("coder", LeaseRequest()))[0] for _ in range(2)]
        waiting = asyncio.ensure_future(pool.lease("coder", LeaseRequest()))
        await asyncio.sleep(0.3)
        assert not waiting.done() and len(engine.live_names()) == 2
        await pool.release(held[0])
        third, _ = await asyncio.wait_for(waiting, 30)
        assert third.state == "leased" and len(engine.live_names()) == 2
        with pytest.raises(NoCapacity, match="max_live 2"):
            await pool.lease("coder", LeaseRequest(ready_timeout_s=0.3))
    finally:
        await pool.close()


@run_async
async def test_a_waiting_lease_evicts_another_servers_idle_warm_sandboxes(tmp_path):
    pool, engine = await opened(tmp_path, policy(tmp_path, "warmer", warm_pool=2), policy(tmp_path, "coder"),
                                max_live=2)
    try:
        await until(lambda: len(pool.warm["warmer"]) == 2, "the warm pool to fill")
        sandbox, _ = await asyncio.wait_for(pool.lease("coder", LeaseRequest()), 30)
        assert sandbox.server == "coder" and pool.live <= 2
    finally:
        await pool.close()


@run_async
async def test_a_dead_sandbox_is_reported_with_its_reason(tmp_path):
    pool, engine = await opened(tmp_path, policy(tmp_path))
    try:
        sandbox, _ = await pool.lease("coder", LeaseRequest())
        await engine.kill(sandbox.id, oom=True)
        with pytest.raises(SandboxGone, match=r"sandbox OOM-killed \(memory 256m\)"):
            await pool.exec(sandbox, ExecRequest(command="true"))
        await until(lambda: sandbox.id not in engine.live_names(), "the dead sandbox to be removed")
        with pytest.raises(SandboxGone, match="OOM-killed"):
            pool.get("coder", sandbox.id)
        exited, _ = await pool.lease("coder", LeaseRequest())
        await engine.kill(exited.id)
        with pytest.raises(SandboxGone, match=r"sandbox exited \(exit code -9\)"):
            await pool.exec(exited, ExecRequest(command="true"))
    finally:
        await pool.close()


@run_async
async def test_reaper_destroys_idle_and_expired_leases(tmp_path):
    pool, engine = await opened(tmp_path, policy(tmp_path, ttl_s=3600), idle_timeout_s=0.2)
    try:
        idle, _ = await pool.lease("coder", LeaseRequest())
        expiring, _ = await pool.lease("coder", LeaseRequest(ttl_s=0.2))
        await asyncio.sleep(0.4)
        reaped = await pool.reap()
        assert sorted(reaped) == sorted([idle.id, expiring.id]) and engine.live_names() == []
        with pytest.raises(SandboxGone, match="time-to-live"):
            pool.get("coder", expiring.id)
        with pytest.raises(SandboxGone, match="idle"):
            pool.get("coder", idle.id)
    finally:
        await pool.close()


@run_async
async def test_plan_refusals(tmp_path):
    pool, engine = await opened(tmp_path, policy(tmp_path, allowed_images=["swe/*"], cpus=1.0))
    try:
        with pytest.raises(Refused, match="not in the plan"):
            await pool.lease("coder", LeaseRequest(image="python:3.12"))
        with pytest.raises(Refused, match="exceeds the plan's limit"):
            await pool.lease("coder", LeaseRequest(cpu=4))
        with pytest.raises(Refused, match="volumes refused"):
            await pool.lease("coder", LeaseRequest(provider_options={"volumes": ["/:/host"]}))
        with pytest.raises(Refused, match="declared no sandboxes"):
            await pool.lease("someone_else", LeaseRequest())
        task_image, _ = await pool.lease("coder", LeaseRequest(image="swe/task-1"))
        assert engine.created[-1]["Image"] == "swe/task-1"
    finally:
        await pool.close()


@run_async
async def test_an_egress_sandbox_has_the_nodes_published_ports_closed_before_it_is_leased(tmp_path):
    closed = {"closed_node_ports": [11003, 11000], "netns_image": "gym-compose/sandbox_broker:x"}
    pool, engine = await opened(tmp_path, policy(tmp_path, network="egress", network_name="t-sbx-coder"),
                                policy(tmp_path, server="inner", network="internal", network_name="t-sbx-inner"),
                                **closed)
    try:
        sandbox, _ = await pool.lease("coder", LeaseRequest())
        (helper,) = engine.helpers
        host = helper["HostConfig"]
        assert host["NetworkMode"] == f"container:{sandbox.container_id}" and helper["User"] == "0:0"
        assert host["CapDrop"] == ["ALL"] and host["CapAdd"] == ["NET_ADMIN"] and not host["Privileged"]
        assert helper["Image"] == "gym-compose/sandbox_broker:x" and helper["Entrypoint"] == ["nft"]
        assert 'oifname != "lo" tcp dport { 11000, 11003 } reject with tcp reset' in helper["Cmd"][0]
        assert helper["Labels"]["io.gym-compose.project"] == "t" and "io.gym-compose.sandbox" in helper["Labels"]
        await pool.lease("inner", LeaseRequest())  # no way out of its network: nothing to close
        assert len(engine.helpers) == 1
        engine.helper_result = (1, "Error: Could not process rule: Operation not permitted")
        with pytest.raises(StartFailed, match="could not close the node's published ports in it .nft, exit 1.: "
                                              "Error: Could not process rule"):
            await pool.lease("coder", LeaseRequest())
        assert len([name for name in engine.live_names() if "-coder-" in name]) == 1  # the failed one is gone
    finally:
        await pool.close()


@run_async
async def test_close_removes_every_sandbox(tmp_path):
    pool, engine = await opened(tmp_path, policy(tmp_path, warm_pool=1))
    await pool.lease("coder", LeaseRequest())
    await until(lambda: len(pool.warm["coder"]) == 1, "the warm pool to fill")
    await pool.close()
    assert engine.live_names() == [] and len(engine.removed) == 2


@run_async
async def test_http_api_authenticates_each_server_and_maps_errors(tmp_path):
    pool, engine = await opened(tmp_path, policy(tmp_path), policy(tmp_path, "other"))
    app = build_app(pool, SECRET)
    transport = httpx.ASGITransport(app=app)
    coder = {"authorization": f"Bearer {server_token(SECRET, 'coder')}", SERVER_HEADER: "coder"}
    other = {"authorization": f"Bearer {server_token(SECRET, 'other')}", SERVER_HEADER: "other"}
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://broker") as client:
            assert (await client.post("/v1/sandboxes", json={})).status_code == 401
            impostor = {**coder, SERVER_HEADER: "other"}
            assert (await client.post("/v1/sandboxes", json={}, headers=impostor)).status_code == 401
            refused = await client.post("/v1/sandboxes", json={"privileged": True}, headers=coder)
            assert refused.status_code == 422 and "privileged" in refused.text
            leased = await client.post("/v1/sandboxes", json={"metadata": {"session": "abc"}}, headers=coder)
            assert leased.status_code == 201, leased.text
            sandbox_id = leased.json()["sandbox_id"]
            ran = await client.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"command": "echo hi"}, headers=coder)
            assert ran.json()["stdout"] == "hi\n"
            foreign = await client.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"command": "id"}, headers=other)
            assert foreign.status_code == 403
            wrote = await client.put(f"/v1/sandboxes/{sandbox_id}/files", params={"path": "sub/f.bin"},
                                     content=bytes(range(256)) * 40000, headers=coder)
            assert wrote.json()["size"] == 256 * 40000
            read = await client.get(f"/v1/sandboxes/{sandbox_id}/files", params={"path": "sub/f.bin"}, headers=coder)
            assert read.content == bytes(range(256)) * 40000
            admin = await client.get("/v1/sandboxes", headers={"authorization": f"Bearer {SECRET}"})
            assert [s["session"] for s in admin.json()["sandboxes"]] == ["abc"]
            assert (await client.get("/v1/sandboxes", headers=other)).json()["sandboxes"] == []
            await engine.kill(sandbox_id, oom=True)
            dead = await client.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"command": "true"}, headers=coder)
            assert dead.status_code == 410 and dead.json()["reason"] == "sandbox OOM-killed (memory 256m)"
    finally:
        await pool.close()


@run_async
async def test_code_that_garbles_the_agents_stream_kills_only_its_own_sandbox(tmp_path):
    pool, engine = await opened(tmp_path, policy(tmp_path))
    try:
        victim, _ = await pool.lease("coder", LeaseRequest())
        bystander, _ = await pool.lease("coder", LeaseRequest())
        # The command runs as the agent's user, so it can write to the agent's protocol stream (fd 3).
        with pytest.raises(SandboxGone, match="garbled its agent's stream"):
            await pool.exec(victim, ExecRequest(command="printf '\\177\\377\\377\\377x' > /proc/$PPID/fd/3"))
        with pytest.raises(SandboxGone, match="garbled its agent's stream"):
            pool.get("coder", victim.id)
        assert (await pool.exec(bystander, ExecRequest(command="echo fine")))["stdout"] == "fine\n"
    finally:
        await pool.close()


@run_async
async def test_a_restarted_servers_earlier_leases_are_given_back_when_its_later_start_calls(tmp_path):
    # a resources server killed mid-run loses its sessions; its leases must not hold the cap for an hour
    pool, engine = await opened(tmp_path, policy(tmp_path, ready_timeout_s=20), policy(tmp_path, "other"), max_live=4)
    app = build_app(pool, SECRET)
    coder = {"authorization": f"Bearer {server_token(SECRET, 'coder')}", SERVER_HEADER: "coder"}
    other = {"authorization": f"Bearer {server_token(SECRET, 'other')}", SERVER_HEADER: "other"}
    first_start, later_start = {CALLER_HEADER: "coder-host@100"}, {CALLER_HEADER: "coder-host@200"}
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://broker") as client:
            async def lease(headers):
                answer = await client.post("/v1/sandboxes", json={}, headers=headers)
                assert answer.status_code == 201, answer.text
                return answer.json()["sandbox_id"]

            orphans = [await lease({**coder, **first_start}) for _ in range(2)]
            unnamed = await lease(coder)  # a caller that does not name its start is never given back
            others = await lease({**other, CALLER_HEADER: "other-host@100"})
            assert pool.live == 4
            again = await client.post(f"/v1/sandboxes/{orphans[0]}/exec", json={"command": "true"},
                                      headers={**coder, **first_start})
            assert again.status_code == 200  # the same start calling again changes nothing
            fresh = await lease({**coder, **later_start})  # waits for a slot the orphans give back
            await until(lambda: pool.live == 3, "the earlier start's sandboxes to go")
            for sandbox_id in orphans:
                gone = await client.get(f"/v1/sandboxes/{sandbox_id}", headers={**coder, **later_start})
                assert gone.status_code == 410 and "restarted" in gone.json()["reason"], gone.text
            live = {s["sandbox_id"] for s in (await client.get(
                "/v1/sandboxes", headers={"authorization": f"Bearer {SECRET}"})).json()["sandboxes"]}
            assert live == {unnamed, others, fresh} and len(engine.live_names()) == 3
    finally:
        await pool.close()


@run_async
async def test_a_lease_the_earlier_start_asked_for_is_given_back_once_it_is_granted(tmp_path):
    # the killed server's lease request waits for a slot; it is granted after the later start was seen
    pool, engine = await opened(tmp_path, policy(tmp_path, ready_timeout_s=20), max_live=1)
    app = build_app(pool, SECRET)
    coder = {"authorization": f"Bearer {server_token(SECRET, 'coder')}", SERVER_HEADER: "coder"}
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://broker") as client:
            held = await client.post("/v1/sandboxes", json={}, headers={**coder, CALLER_HEADER: "other-host@1"})
            waiting = asyncio.ensure_future(
                client.post("/v1/sandboxes", json={}, headers={**coder, CALLER_HEADER: "coder-host@100"}))
            await asyncio.sleep(0.2)
            assert not waiting.done()
            listed = await client.get("/v1/sandboxes", headers={**coder, CALLER_HEADER: "coder-host@200"})
            assert listed.status_code == 200  # the later start has called
            await client.delete(f"/v1/sandboxes/{held.json()['sandbox_id']}", headers=coder)
            late = await asyncio.wait_for(waiting, 20)
            assert late.status_code == 201
            await until(lambda: pool.live == 0, "the late lease to be given back")
            gone = await client.get(f"/v1/sandboxes/{late.json()['sandbox_id']}", headers=coder)
            assert gone.status_code == 410 and "restarted" in gone.json()["reason"]
            assert engine.live_names() == []
    finally:
        await pool.close()
