"""Mid-episode checkpoints of an agent that works in a sandbox (coding_agent's `checkpoint_every`).

Every N steps the agent saves the sandbox's files with its transcript so far as the broker's
checkpoint of the rollout it works (sandbox/broker/checkpoints.py; the rollout is the collector's,
server/rollout_identity.py). When that rollout runs again, after a crash and `--resume`, the agent
restores its fresh sandbox to the checkpoint and goes on from the step it saved instead of from
the first. An episode that ends forgets its checkpoint. A checkpoint that cannot be saved (the
snapshot cap, a read-only sandbox) is logged and the episode goes on without it.

Where this is sound and where it is not: docs/sandboxes.md#mid-episode-checkpoints.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from gym_compose.sandbox.types import SandboxError
from gym_compose.server.rollout_identity import current_rollout

LOG = logging.getLogger("gym_compose.server.checkpoints")


@dataclass
class EpisodeState:
    """Where an episode is: its steps so far and the items they added to the transcript."""

    step: int = 0
    items: list[Any] = field(default_factory=list)
    usage: Optional[dict[str, Any]] = None
    commands: int = 0
    timeouts: int = 0

    @classmethod
    def from_saved(cls, saved: Any) -> Optional["EpisodeState"]:
        if not isinstance(saved, dict) or not isinstance(saved.get("step"), int) \
                or not isinstance(saved.get("items"), list):
            return None
        return cls(step=saved["step"], items=saved["items"], usage=saved.get("usage"),
                   commands=int(saved.get("commands") or 0), timeouts=int(saved.get("timeouts") or 0))


class EpisodeCheckpoints:
    def __init__(self, sandbox: Any, key: Optional[str], every: int):
        self.sandbox, self.key, self.every = sandbox, key, every
        self.saved = 0
        self.failures = 0

    @classmethod
    def for_rollout(cls, agent: str, sandbox: Any, every: int) -> "EpisodeCheckpoints":
        """Checkpoints under `agent`/the rollout this request serves; none when `every` is 0 or the
        request names no rollout (one not sent by the collector)."""
        rollout = current_rollout()
        return cls(sandbox, f"{agent}/{rollout}" if every > 0 and rollout else None, every)

    async def resume(self) -> Optional[EpisodeState]:
        """The episode's state at its checkpoint, the sandbox restored to it; None: start afresh."""
        if self.key is None:
            return None
        saved = await self.sandbox.restore_checkpoint(self.key)
        if saved is None:
            return None
        state = EpisodeState.from_saved(saved)
        if state is None:
            raise SandboxError(f"checkpoint {self.key!r} holds no episode state this agent wrote: {str(saved)[:200]}")
        LOG.info("rollout %s goes on from its checkpoint at step %d", self.key, state.step)
        return state

    async def after_step(self, state: EpisodeState) -> None:
        if self.key is None or state.step % self.every:
            return
        try:
            await self.sandbox.checkpoint(self.key, asdict(state))
            self.saved += 1
        except SandboxError as error:
            self.failures += 1
            LOG.warning("checkpoint of %s at step %d failed, going on without it: %s", self.key, state.step, error)

    async def forget(self) -> None:
        if self.key is None:
            return
        try:
            await self.sandbox.forget_checkpoint(self.key)
        except SandboxError as error:  # the broker removes it with the stack at the latest
            LOG.warning("forgetting checkpoint %s failed: %s", self.key, error)
