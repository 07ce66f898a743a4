"""Who may start a sandbox now: the `max_live` slots and the `max_starting` throttle.

Every sandbox holds one of `max_live` slots from its start to its removal; a lease that finds none
free waits (up to its ready timeout) for one to come free, and meanwhile idle warm sandboxes are
evicted for it (the pool does that, counting here who waits and what is being evicted). At most
`max_starting` sandboxes start at once.
"""

from __future__ import annotations

import asyncio
import time

from gym_compose.sandbox.broker.broker_errors import NoCapacity
from gym_compose.sandbox.broker.sandboxes import Limits


class Admission:
    def __init__(self) -> None:
        self.limits = Limits(max_live=1, max_starting=1)
        self.live = 0  # slots held
        self.waiting = 0  # leases waiting for a slot
        self.evicting = 0  # warm sandboxes being destroyed for those leases
        self._capacity = asyncio.Condition()
        self._start_slots = asyncio.Semaphore(1)

    def set_limits(self, limits: Limits) -> None:
        self.limits = limits
        self._start_slots = asyncio.Semaphore(limits.max_starting)

    def reserve_now(self) -> bool:
        """Take one of the max_live slots if one is free (no await: nothing can slip in between)."""
        if self.live >= self.limits.max_live:
            return False
        self.live += 1
        return True

    async def give_back(self) -> None:
        """A sandbox is gone: its slot is free, and waiting leases look again."""
        self.live -= 1
        await self.changed()

    async def wait_for_change(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise NoCapacity(f"no sandbox slot came free within the ready timeout: {self.live} of max_live "
                             f"{self.limits.max_live} are in use; release sandboxes sooner, lower the parallelism, "
                             "or raise sandbox.gym_compose.max_live")
        async with self._capacity:
            try:
                await asyncio.wait_for(self._capacity.wait(), remaining)
            except asyncio.TimeoutError:
                pass

    async def changed(self) -> None:
        """A slot came free or a warm sandbox is ready: waiting leases look again."""
        async with self._capacity:
            self._capacity.notify_all()

    async def start_slot(self, deadline: float) -> None:
        """One of the max_starting start slots (give it back with `end_start`)."""
        try:
            await asyncio.wait_for(self._start_slots.acquire(), max(0.0, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            raise NoCapacity("sandbox starts are throttled and none began within the ready timeout") from None

    def end_start(self) -> None:
        self._start_slots.release()
