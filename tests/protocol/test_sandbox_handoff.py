"""What SWE tasks need of the broker, on the fake engine: a sandbox handed to another server with
its grant (NeMo Gym's serialize/connect), per-task images asked for by their plan alias, and images
pulled on demand (once, however many leases wait for them)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from gym_compose.sandbox.broker.app import build_app
from gym_compose.sandbox.broker.broker_errors import BackendError, NoCapacity, Refused, StartFailed
from gym_compose.sandbox.broker.pool import SandboxPool
from gym_compose.sandbox.policy import BrokerSettings, ExecRequest, LeaseRequest, SandboxPolicy
from gym_compose.sandbox.tokens import GRANT_HEADER, SERVER_HEADER, sandbox_grant, server_token
from tests.support.sandbox_fakes import FakeBackend, run_async, until

pytestmark = pytest.mark.protocol
SECRET = "project-secret"


def policy(tmp_path, server, **fields) -> SandboxPolicy:
    return SandboxPolicy(server=server, image="gym-compose/sandbox:test", workdir=str(tmp_path), network="none",
                         **fields)


def headers(server: str, **extra: str) -> dict[str, str]:
    return {"authorization": f"Bearer {server_token(SECRET, server)}", SERVER_HEADER: server, **extra}


@run_async
async def test_a_granted_sandbox_is_usable_by_another_server_but_released_only_by_its_owner(tmp_path):
    engine = FakeBackend()
    pool = SandboxPool(engine, BrokerSettings(project="t", servers={
        "verifier": policy(tmp_path, "verifier"), "agent": policy(tmp_path, "agent"),
        "stranger": policy(tmp_path, "stranger")}))
    await pool.open()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=build_app(pool, SECRET)),
                                     base_url="http://broker") as client:
            leased = (await client.post("/v1/sandboxes", json={}, headers=headers("verifier"))).json()
            sandbox_id, grant = leased["sandbox_id"], leased["grant"]
            assert grant == sandbox_grant(SECRET, sandbox_id)
            granted = headers("agent", **{GRANT_HEADER: grant})
            ran = await client.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"command": "echo from-agent > f"},
                                    headers=granted)
            assert ran.status_code == 200 and ran.json()["return_code"] == 0
            read = await client.get(f"/v1/sandboxes/{sandbox_id}/files", params={"path": "f"}, headers=granted)
            assert read.content == b"from-agent\n"
            assert (await client.get(f"/v1/sandboxes/{sandbox_id}", headers=granted)).status_code == 200
            # without the grant, or with another sandbox's, the other server is refused
            assert (await client.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"command": "true"},
                                      headers=headers("stranger"))).status_code == 403
            wrong = headers("stranger", **{GRANT_HEADER: sandbox_grant(SECRET, "another-sandbox")})
            assert (await client.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"command": "true"},
                                      headers=wrong)).status_code == 403
            # a grant alone, without a server token, is nothing
            assert (await client.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"command": "true"},
                                      headers={GRANT_HEADER: grant})).status_code == 401
            assert (await client.delete(f"/v1/sandboxes/{sandbox_id}", headers=granted)).status_code == 403
            assert engine.live_names() == [sandbox_id]
            released = await client.delete(f"/v1/sandboxes/{sandbox_id}", headers=headers("verifier"))
            assert released.json()["released"] is True and engine.live_names() == []
            assert released.json()["cost"]["commands"] == 1  # the grant holder's command is in the owner's ledger
    finally:
        await pool.close()


@run_async
async def test_a_task_image_is_leased_by_its_alias_and_nothing_else_is(tmp_path):
    engine = FakeBackend()
    aliases = {"swebench-mini:pager": "gym-compose/swebench-mini:pager-0123456789abcdef"}
    pool = SandboxPool(engine, BrokerSettings(project="t", servers={
        "verifier": policy(tmp_path, "verifier", image_aliases=aliases)}))
    await pool.open()
    try:
        sandbox, _ = await pool.lease("verifier", LeaseRequest(image="swebench-mini:pager"))
        assert sandbox.image == aliases["swebench-mini:pager"]
        assert engine.created[-1]["Image"] == aliases["swebench-mini:pager"]
        with pytest.raises(Refused, match="not in the plan"):
            await pool.lease("verifier", LeaseRequest(image="swebench-mini:unknown"))
    finally:
        await pool.close()


@run_async
async def test_missing_allowed_images_are_pulled_once_and_a_failed_pull_says_why(tmp_path):
    engine = FakeBackend(images={"gym-compose/sandbox:test"})
    engine.pullable = {"registry.example/task:a"}
    pool = SandboxPool(engine, BrokerSettings(project="t", servers={
        "verifier": policy(tmp_path, "verifier", allowed_images=["registry.example/task:*"], pull=True),
        "no_pull": policy(tmp_path, "no_pull", allowed_images=["registry.example/task:*"])}))
    await pool.open()
    try:
        leases = await asyncio.gather(*(pool.lease("verifier", LeaseRequest(image="registry.example/task:a"))
                                        for _ in range(3)))
        assert engine.pulls == ["registry.example/task:a"]
        assert all(sandbox.image == "registry.example/task:a" for sandbox, _ in leases)
        assert pool.stats()["pulled"][0]["image"] == "registry.example/task:a"
        with pytest.raises(StartFailed, match="cannot pull image 'registry.example/task:b': pull access denied"):
            await pool.lease("verifier", LeaseRequest(image="registry.example/task:b"))
        with pytest.raises(StartFailed, match="build it first"):
            await pool.lease("no_pull", LeaseRequest(image="registry.example/task:c"))
        assert engine.pulls == ["registry.example/task:a", "registry.example/task:b"]
    finally:
        await pool.close()


async def budgeted_pool(tmp_path, budget_bytes: int, pullable: set[str], present: frozenset | set = frozenset()
                        ) -> tuple[SandboxPool, FakeBackend]:
    """An open pool whose one server pulls registry.example/task:* within an image budget."""
    engine = FakeBackend(images={"gym-compose/sandbox:test", *present})
    engine.pullable = set(pullable)
    pool = SandboxPool(engine, BrokerSettings(project="t", image_cache_bytes=budget_bytes, servers={
        "verifier": policy(tmp_path, "verifier", allowed_images=["registry.example/task:*"], pull=True)}))
    await pool.open()
    return pool, engine


@run_async
async def test_the_image_budget_removes_the_least_recently_used_pulled_image_no_sandbox_uses(tmp_path):
    task = "registry.example/task:{}".format
    pool, engine = await budgeted_pool(tmp_path, int(2.5 * (1 << 30)), {task(name) for name in "abc"},
                                       present={"registry.example/task:built-here"})

    async def lease(name: str):
        sandbox, _ = await pool.lease("verifier", LeaseRequest(image=task(name)))
        return sandbox

    try:
        await pool.release(await lease("a"))
        held_b = await lease("b")
        await pool.release(await lease("built-here"))  # on the engine before: never the budget's
        assert engine.removed_images == [] and pool.stats()["pulled_images_bytes"] == 2 << 30
        c = await lease("c")  # 3 GiB pulled: a, used least recently and by nobody, goes
        await until(lambda: engine.removed_images == [task("a")], "the budget to remove task:a")
        await pool.release(c)
        again = await lease("a")  # pulled again; c (released) goes, b (held all along) stays
        await until(lambda: engine.removed_images == [task("a"), task("c")], "the budget to remove task:c")
        assert engine.pulls == [task("a"), task("b"), task("c"), task("a")]
        assert held_b.state == "leased" and task("b") in engine.known_images
        assert (await pool.exec(held_b, ExecRequest(command="echo still here")))["stdout"] == "still here\n"
        stats = pool.stats()
        assert stats["images_evicted"] == 2 and stats["pulled_images_bytes"] == 2 << 30
        assert [entry["image"] for entry in stats["evicted"]] == [task("a"), task("c")]
        await pool.release(again)
        await pool.release(held_b)
        assert engine.removed_images == [task("a"), task("c")]  # 2 GiB held: within the budget
    finally:
        await pool.close()


@run_async
async def test_the_ledger_counts_the_wait_for_a_pull_only_for_the_lease_that_waited(tmp_path):
    pool, engine = await budgeted_pool(tmp_path, 8 << 30, {"registry.example/task:a"})
    try:
        first, _ = await pool.lease("verifier", LeaseRequest(image="registry.example/task:a"))
        second, _ = await pool.lease("verifier", LeaseRequest(image="registry.example/task:a"))
        pulled, found = await pool.release(first), await pool.release(second)
        assert engine.pulls == ["registry.example/task:a"]
        assert pulled["image_pull_s"] >= 0.05  # the fake registry's pull takes 0.05 s
        assert pulled["lease_wait_s"] >= pulled["image_pull_s"]
        assert found["image_pull_s"] == 0.0 and found["lease_wait_s"] > 0.0  # a cold start, no pull
    finally:
        await pool.close()


class FaultyRegistry(FakeBackend):
    """A registry whose `:hangs` images pull until the test lets them finish, and whose `:full`
    images fail as a pull onto a full disk does."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hung_pull_may_end = asyncio.Event()

    async def pull(self, image: str, progress) -> None:
        if image.endswith((":hangs", ":full")):
            self.pulls.append(image)
            if image.endswith(":full"):
                raise BackendError("write /var/lib/docker/tmp/GetImageBlob1: no space left on device")
            await self.hung_pull_may_end.wait()
            self.known_images.add(image)
            return
        await super().pull(image, progress)


@run_async
async def test_a_hung_pull_and_a_full_disk_fail_only_the_leases_of_their_images(tmp_path):
    task = "registry.example/task:{}".format
    engine = FaultyRegistry(images={"gym-compose/sandbox:test"})
    engine.pullable = {task("fine")}
    pool = SandboxPool(engine, BrokerSettings(project="t", servers={
        "verifier": policy(tmp_path, "verifier", allowed_images=["registry.example/task:*"], pull=True)}))
    await pool.open()
    try:
        hung = asyncio.ensure_future(pool.lease("verifier", LeaseRequest(image=task("hangs"), ready_timeout_s=1.0)))
        with pytest.raises(StartFailed, match="cannot pull image 'registry.example/task:full': .*no space left"):
            await pool.lease("verifier", LeaseRequest(image=task("full")))
        fine, _ = await pool.lease("verifier", LeaseRequest(image=task("fine")))  # while the other pull hangs
        assert (await pool.exec(fine, ExecRequest(command="echo unaffected")))["stdout"] == "unaffected\n"
        await pool.release(fine)
        with pytest.raises(NoCapacity, match="still being pulled after the lease's ready timeout"):
            await hung
        engine.hung_pull_may_end.set()  # the pull went on without its lease: the next lease finds the image
        await until(lambda: task("hangs") in engine.known_images, "the hung pull to end")
        later, _ = await pool.lease("verifier", LeaseRequest(image=task("hangs")))
        assert engine.pulls.count(task("hangs")) == 1
        await pool.release(later)
    finally:
        engine.hung_pull_may_end.set()
        await pool.close()


@run_async
async def test_a_budget_smaller_than_one_image_keeps_it_while_its_sandbox_lives(tmp_path):
    pool, engine = await budgeted_pool(tmp_path, 1 << 20, {"registry.example/task:big"})
    try:
        sandbox, _ = await pool.lease("verifier", LeaseRequest(image="registry.example/task:big"))
        assert (await pool.exec(sandbox, ExecRequest(command="echo ran")))["stdout"] == "ran\n"
        assert engine.removed_images == []
        await pool.release(sandbox)
        await until(lambda: engine.removed_images == ["registry.example/task:big"], "the image to go")
    finally:
        await pool.close()
