"""`fork_from_seed: N`: a task's set-up done once, its snapshot forked for the group's rollouts.

GRPO-style collection runs N rollouts of each task (`num_repeats`), each seeded in `/seed_session`.
A server whose set-up is slow (clone, dependency install) declares `fork_from_seed: N` in its
`sandbox_config` and leases through `SeedForks.lease(task, spec, setup)`:

    forks = SeedForks(self.config.sandbox_config.get("fork_from_seed", 0), self._new_sandbox)
    sandbox = await forks.lease(str(body.model_extra.get("_ng_task_index")), SandboxSpec(...), set_up_task)

The first session of a task leases a sandbox, runs `setup` in it and snapshots it; that sandbox
serves the first rollout. The other N-1 sessions of the task (at once or later) wait for that
snapshot and get a fork of it: the set-up's files, none of its processes. After N leases the
snapshot is deleted. A set-up that fails fails every session waiting on it (with its error) and
the next session of the task tries again. N of 0 or 1: every session sets up its own sandbox.
Sound only where `setup` depends on the task alone (not on the session or the time).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gym_compose.sandbox.api import AsyncSandbox
from gym_compose.sandbox.types import SandboxError, SandboxSnapshot, SandboxSpec

Setup = Callable[[AsyncSandbox], Awaitable[None]]


@dataclass
class _Seed:
    snapshot: "asyncio.Future[tuple[SandboxSnapshot, Any]]"  # and the provider that took it
    handed: int = 1  # sessions of the task given a sandbox (the seed's own first)
    pending: int = 0  # forks being started


class SeedForks:
    def __init__(self, group_size: int, new_sandbox: Callable[[], AsyncSandbox] = AsyncSandbox):
        self.group_size = int(group_size or 0)
        self._new_sandbox = new_sandbox
        self._seeds: dict[str, _Seed] = {}
        self.set_ups = 0  # how many times `setup` ran (what forking saves)
        self.forked = 0

    async def lease(self, task: str, spec: SandboxSpec, setup: Setup) -> AsyncSandbox:
        if self.group_size <= 1:
            return await self._set_up(spec, setup)
        seed = self._seeds.get(task)
        if seed is None:
            return await self._seed(task, spec, setup)
        seed.handed += 1
        seed.pending += 1
        if seed.handed >= self.group_size:
            self._seeds.pop(task, None)  # the group is served; a later session of the task seeds again
        snapshot, provider = await asyncio.shield(seed.snapshot)
        try:
            (fork,) = await AsyncSandbox.from_snapshot(snapshot, 1, provider=provider, env=dict(spec.env),
                                                       metadata=dict(spec.metadata))
        finally:
            seed.pending -= 1
            if seed.handed >= self.group_size and seed.pending == 0:  # the last fork of the group has started
                try:
                    await provider.delete_snapshot(snapshot.snapshot_id)
                except SandboxError:
                    pass  # `down` removes it
        self.forked += 1
        return fork

    async def _seed(self, task: str, spec: SandboxSpec, setup: Setup) -> AsyncSandbox:
        seed = _Seed(asyncio.get_running_loop().create_future())
        self._seeds[task] = seed
        try:
            sandbox = await self._set_up(spec, setup)
            try:
                snapshot = await sandbox.snapshot()
            except BaseException:
                await sandbox.stop()
                raise
        except BaseException as error:
            if self._seeds.get(task) is seed:
                self._seeds.pop(task)
            seed.snapshot.set_exception(error if isinstance(error, Exception) else RuntimeError("set-up cancelled"))
            seed.snapshot.exception()  # retrieved: nobody may be waiting
            raise
        seed.snapshot.set_result((snapshot, sandbox._provider))
        return sandbox

    async def _set_up(self, spec: SandboxSpec, setup: Setup) -> AsyncSandbox:
        sandbox = await self._new_sandbox().start(spec)
        try:
            await setup(sandbox)
        except BaseException:
            await sandbox.stop()
            raise
        self.set_ups += 1
        return sandbox
