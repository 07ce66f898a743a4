"""Fork from seed vs a fresh lease each, for one group of rollouts: the broker's pool on the Docker
backend in this process (the broker's own code, no stack, no HTTP: what the broker itself pays),
on the default sandbox image. `bench_sandboxes.py --forks` prints it.

- fresh: `group` leases at once, each running the set-up itself;
- fork from seed: one lease runs the set-up, is snapshotted (`docker commit`), and the snapshot is
  forked `group - 1` times at once (the seed serves the first rollout, as SeedForks does).
Per way: the wall time until every sandbox of the group is set up, and per sandbox the lease
time (fork latency in the burst: each fork's lease time, throttle queue included, p50/p95); then
`singles` forks one at a time (a fork's latency on an otherwise idle broker, p50/p95).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

# A set-up of a few seconds that leaves files behind: a virtual environment (what a SWE task's
# dependency install makes, without the network) and 2000 small modules byte-compiled.
SETUP = ("python3 -m venv --without-pip /work/venv && mkdir -p /work/repo && "
         "python3 -c \"[open(f'/work/repo/m{i}.py','w').write(f'X = {i}\\n' * 50) for i in range(2000)]\" && "
         "python3 -m compileall -q /work/repo")


async def _figures(image: str, group: int, project: str, singles: int) -> dict[str, Any]:
    from gym_compose.sandbox.broker import branching
    from gym_compose.sandbox.broker.docker_backend import DockerBackend
    from gym_compose.sandbox.broker.pool import SandboxPool
    from gym_compose.sandbox.policy import BrokerSettings, ExecRequest, ForkRequest, LeaseRequest, SandboxPolicy

    policy = SandboxPolicy(server="bench", image=image, network="none", memory_bytes=256 << 20, timeout_s=600)
    pool = SandboxPool(DockerBackend(), BrokerSettings(project=project, servers={"bench": policy}))
    await pool.open()
    try:
        async def set_up(sandbox) -> float:
            began = time.monotonic()
            done = await pool.exec(sandbox, ExecRequest(command=SETUP))
            if done["return_code"] != 0:
                raise SystemExit(f"the set-up failed: {done['stderr'][-500:]}")
            return time.monotonic() - began

        async def fresh_one() -> tuple[float, float]:
            began = time.monotonic()
            sandbox, _ = await pool.lease("bench", LeaseRequest())
            leased = time.monotonic() - began
            took = await set_up(sandbox)
            await pool.release(sandbox)
            return leased, took

        began = time.monotonic()
        fresh = await asyncio.gather(*(fresh_one() for _ in range(group)))
        fresh_wall = time.monotonic() - began

        began = time.monotonic()
        seed, _ = await pool.lease("bench", LeaseRequest())
        seed_setup = await set_up(seed)
        snapshot = await branching.snapshot(pool, seed)
        forks = await branching.fork(pool, snapshot, ForkRequest(n=group - 1))
        fork_wall = time.monotonic() - began
        check = await pool.exec(forks[-1][0], ExecRequest(command="ls /work/repo | wc -l; test -x /work/venv/bin/python"))
        if check["return_code"] != 0 or check["stdout"].strip() != "2001":  # 2000 modules, __pycache__
            raise SystemExit(f"a fork lacks the seed's files: {check}")
        for sandbox, _ in forks:
            await pool.release(sandbox)
        single = []
        for _ in range(singles):  # one fork at a time: the latency of a fork on an idle broker
            (fork, took), = await branching.fork(pool, snapshot, ForkRequest(n=1))
            single.append(took)
            await pool.release(fork)
        await pool.release(seed)
        return {"fork_alone_lease_s": single, "group": group, "fresh_wall_s": fresh_wall, "fresh_lease_s": [lease for lease, _ in fresh],
                "fresh_setup_s": [took for _, took in fresh], "fork_wall_s": fork_wall, "seed_setup_s": seed_setup,
                "snapshot_s": snapshot.took_s, "fork_lease_s": [took for _, took in forks]}
    finally:
        await pool.close()


def fork_figures(image: str, group: int, project: str, singles: int = 10) -> dict[str, Any]:
    return asyncio.run(_figures(image, group, project, singles))
