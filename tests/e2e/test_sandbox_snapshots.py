"""Snapshots, forks, restore and pause on the real engine, through the broker's pool on the
Docker backend (the broker's own code, run in the test process, no stack): what a fork holds and
shares, what a restore brings back, that a paused process survives, and that `gym-compose down`
leaves no snapshot image behind a broker that never stopped."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.e2e import PROJECT_PREFIX
from tests.support.sandboxes import CLI, run

pytestmark = pytest.mark.docker
SNAPSHOT_LABEL = "io.gym-compose.snapshot"
# what the seed's background process is, by the pid it had: "sleep 600 " where it runs
SLEEPER = "tr '\\0' ' ' < /proc/$(cat /work/sleeper.pid)/cmdline 2>/dev/null; echo"
# The seed returns once its background process has exec'd sleep (nohup runs first under the same
# pid), so a snapshot taken after it always holds "sleep 600"; bounded at 10 s.
SEEDED = ("mkdir -p repo && echo seeded > repo/setup.txt && "
          "{ nohup sleep 600 >/dev/null 2>&1 & echo $! > /work/sleeper.pid; } && "
          f"for _ in $(seq 200); do [ \"$({SLEEPER})\" = 'sleep 600 ' ] && break; sleep 0.05; done")


def snapshot_images(project: str) -> list[str]:
    return run("docker", "image", "ls", "-q", "--filter", f"label=io.gym-compose.project={project}",
               "--filter", f"label={SNAPSHOT_LABEL}", timeout=60).stdout.split()


@pytest.fixture(scope="module")
def sandbox_image():
    from gym_compose.engine.images.lean_images import ensure_base_image
    from gym_compose.engine.images.sandbox_images import ensure_default_sandbox_image

    return ensure_default_sandbox_image(ensure_base_image(progress=lambda line: None), lambda line: None)


def opened_pool(project: str, image: str):
    from gym_compose.sandbox.broker.docker_backend import DockerBackend
    from gym_compose.sandbox.broker.pool import SandboxPool
    from gym_compose.sandbox.policy import BrokerSettings, SandboxPolicy

    policy = SandboxPolicy(server="s", image=image, network="none", memory_bytes=256 << 20)
    return SandboxPool(DockerBackend(), BrokerSettings(project=project, servers={"s": policy}))


def test_forks_see_the_seed_not_each_other_and_restore_brings_the_snapshot_back(sandbox_image, tmp_path):
    from gym_compose.sandbox.broker import branching
    from gym_compose.sandbox.policy import ExecRequest, ForkRequest, LeaseRequest

    project = f"{PROJECT_PREFIX}-snap-{tmp_path.name[-6:]}".lower()

    async def sh(pool, sandbox, command: str) -> str:
        done = await pool.exec(sandbox, ExecRequest(command=command))
        assert done["return_code"] == 0, done
        return done["stdout"]

    async def scenario():
        pool = opened_pool(project, sandbox_image)
        await pool.open()
        try:
            seed, _ = await pool.lease("s", LeaseRequest(env={"TASK": "t1"}))
            await sh(pool, seed, SEEDED)
            assert (await sh(pool, seed, SLEEPER)) == "sleep 600 \n"
            snapshot = await branching.snapshot(pool, seed)
            await sh(pool, seed, "echo after > repo/later.txt")  # after the snapshot: no fork sees it
            forks = [sandbox for sandbox, _ in await branching.fork(pool, snapshot, ForkRequest(n=3))]
            for index, fork in enumerate(forks):
                await sh(pool, fork, f"echo {index} > repo/mine.txt")
            seen = [(await sh(pool, fork, "cat repo/setup.txt; ls repo; cat repo/mine.txt; echo $TASK"),
                     await sh(pool, fork, SLEEPER)) for fork in forks]

            changed = forks[0]
            await sh(pool, changed, "rm repo/setup.txt; echo junk > repo/junk.txt")
            await branching.restore(pool, changed, snapshot)
            restored = await sh(pool, changed, "ls repo; cat repo/setup.txt")
            same_lease = pool.get("s", changed.id) is changed
            images_while_up = snapshot_images(project)
            return snapshot, seen, restored, same_lease, images_while_up
        finally:
            await pool.close()

    snapshot, seen, restored, same_lease, images_while_up = asyncio.run(scenario())
    for index, (listing, sleeper) in enumerate(seen):
        assert listing == f"seeded\nmine.txt\nsetup.txt\n{index}\nt1\n"  # the seed's files, its own change only
        assert "sleep 600" not in sleeper  # processes are not in a snapshot
    assert restored == "setup.txt\nseeded\n" and same_lease
    assert len(images_while_up) == 1 and snapshot.image.startswith(f"{project}-snapshot:")
    assert snapshot_images(project) == []  # the broker removes its snapshots as it stops


def test_a_paused_sandbox_keeps_its_running_process(sandbox_image, tmp_path):
    from gym_compose.sandbox.broker import branching
    from gym_compose.sandbox.broker.broker_errors import Conflict
    from gym_compose.sandbox.policy import ExecRequest, LeaseRequest

    project = f"{PROJECT_PREFIX}-pause-{tmp_path.name[-6:]}".lower()
    counter = "nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /work/count; sleep 0.1; done' >/dev/null 2>&1 & echo $!"

    async def until_count_above(pool, sandbox, floor: int) -> int:
        for _ in range(200):  # bounded: 200 reads
            done = await pool.exec(sandbox, ExecRequest(command="cat /work/count"))
            if done["return_code"] == 0 and done["stdout"].strip() and int(done["stdout"]) > floor:
                return int(done["stdout"])
            await asyncio.sleep(0.1)
        raise AssertionError(f"the counter never went past {floor}")

    async def scenario():
        pool = opened_pool(project, sandbox_image)
        await pool.open()
        try:
            sandbox, _ = await pool.lease("s", LeaseRequest())
            pid = (await pool.exec(sandbox, ExecRequest(command=counter)))["stdout"].strip()
            before = await until_count_above(pool, sandbox, 0)
            await branching.pause(pool, sandbox)
            state = json.loads(run("docker", "inspect", sandbox.container_id, timeout=60).stdout)[0]["State"]
            try:
                await pool.exec(sandbox, ExecRequest(command="true"))
                refused = ""
            except Conflict as error:
                refused = str(error)
            await branching.resume(pool, sandbox)
            after = await until_count_above(pool, sandbox, before)
            alive = await pool.exec(sandbox, ExecRequest(command=f"kill -0 {pid} && echo alive"))
            return state, refused, after > before, alive["stdout"]
        finally:
            await pool.close()

    state, refused, counted_on, alive = asyncio.run(scenario())
    assert state["Paused"] is True and state["Running"] is True
    assert "is paused; resume it first" in refused
    assert counted_on and alive == "alive\n"


def test_down_removes_the_snapshots_a_killed_broker_left(sandbox_image, tmp_path):
    from gym_compose.sandbox.broker import branching
    from gym_compose.sandbox.policy import LeaseRequest

    project = f"{PROJECT_PREFIX}-snapdown-{tmp_path.name[-6:]}".lower()

    async def scenario():
        pool = opened_pool(project, sandbox_image)
        await pool.open()
        sandbox, _ = await pool.lease("s", LeaseRequest())
        await branching.snapshot(pool, sandbox)
        await branching.snapshot(pool, sandbox)
        pool.backend.close()  # the broker dies: nothing of its own clean-up runs

    try:
        asyncio.run(scenario())
        assert len(snapshot_images(project)) == 2
        down = run(*CLI, "down", "-p", project, timeout=300, cwd=tmp_path)
        assert down.returncode == 0, down.stderr
        assert snapshot_images(project) == []
        assert run("docker", "ps", "-aq", "--filter", f"label=io.gym-compose.project={project}",
                   timeout=60).stdout.split() == []
    finally:
        for image in snapshot_images(project):
            run("docker", "image", "rm", "-f", image, timeout=120)


def test_the_ledger_matches_the_engines_own_figures(sandbox_image, tmp_path):
    """cpu_s against the sandbox cgroup's own CPU counter read inside it just before the release
    (tolerance: +1 s for what runs after the reading), peak memory against a 64 MiB allocation."""
    from gym_compose.sandbox.policy import ExecRequest, LeaseRequest

    project = f"{PROJECT_PREFIX}-ledger-{tmp_path.name[-6:]}".lower()
    burn = ("python3 -c \"import time\nx = b'x' * (64 << 20)\nt = time.process_time()\n"
            "while time.process_time() - t < 1.0: pass\"")
    counter = ("if [ -r /sys/fs/cgroup/cpuacct/cpuacct.usage ]; then cat /sys/fs/cgroup/cpuacct/cpuacct.usage; "
               "else awk '/^usage_usec/ {print $2 * 1000}' /sys/fs/cgroup/cpu.stat; fi")

    async def scenario():
        pool = opened_pool(project, sandbox_image)
        await pool.open()
        try:
            sandbox, _ = await pool.lease("s", LeaseRequest())
            assert (await pool.exec(sandbox, ExecRequest(command=burn)))["return_code"] == 0
            read = await pool.exec(sandbox, ExecRequest(command=counter))
            return int(float(read["stdout"])) / 1e9, await pool.release(sandbox)
        finally:
            await pool.close()

    inside_s, cost = asyncio.run(scenario())
    assert cost["commands"] == 2 and cost["leased_s"] >= 1.0
    assert inside_s >= 1.0 and inside_s <= cost["cpu_s"] <= inside_s + 1.0, (inside_s, cost)
    if "peak_memory_bytes" in cost:  # cgroup v1 engines report it
        assert 64 << 20 <= cost["peak_memory_bytes"] <= 256 << 20
