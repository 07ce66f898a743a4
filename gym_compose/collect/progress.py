"""progress.json: what a run has done so far, rewritten atomically; and the host's reader for it."""

from __future__ import annotations

import secrets
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from gym_compose.collect.jsonl import write_atomically

if TYPE_CHECKING:
    import asyncio

PROGRESS_FILE = "progress.json"
MIN_INTERVAL_S = 0.5


def run_id_for(output_dir: str | Path, resume: bool) -> str:
    """The run folder's id, which names its rollouts to the servers (their checkpoints): kept
    across `--resume` in progress.json, new for a new run (or a folder whose progress is lost)."""
    prior = read_progress(output_dir) if resume else None
    kept = prior.get("run_id") if prior else None
    if isinstance(kept, str) and kept.isalnum() and len(kept) <= 64:
        return kept
    return secrets.token_hex(8)


def read_progress(output_dir: str | Path) -> dict[str, Any] | None:
    """The last progress a run wrote into `output_dir`, or None when there is none (yet) or it cannot be read."""
    try:
        data = orjson.loads((Path(output_dir) / PROGRESS_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


class ProgressTracker:
    """Counts a run's rollouts and writes progress.json at most every MIN_INTERVAL_S, and at the end.
    A count that comes sooner is written once the interval is over (on the running event loop), so
    the file never lags behind a burst that nothing follows (a run waiting on a slow or held model).

    `done` counts successful rollouts, those of earlier runs included (resume); `failed` counts
    rollouts whose latest attempt in this run failed; `rollouts_per_second` is this run's pace.
    """

    def __init__(self, output_dir: Path, total: int, done_before: int = 0, reward_sum_before: float = 0.0,
                 rewarded_before: int = 0, callback=None, run_id: str | None = None):
        self.path = Path(output_dir) / PROGRESS_FILE
        self.run_id = run_id
        self.total = total
        self.done = done_before
        self.failed = 0
        self._done_this_run = 0
        self._reward_sum = reward_sum_before
        self._rewarded = rewarded_before
        self._started_monotonic = time.monotonic()
        self.started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self._last_write = 0.0
        self._trailing: asyncio.TimerHandle | None = None
        self._callback = callback

    def record_success(self, result: dict[str, Any]) -> None:
        self.done += 1
        self._done_this_run += 1
        reward = result.get("reward")
        if isinstance(reward, (int, float)) and not isinstance(reward, bool):
            self._reward_sum += reward
            self._rewarded += 1
        self._maybe_write()

    def record_failure(self) -> None:
        self.failed += 1
        self._maybe_write()

    def snapshot(self, finished: bool = False) -> dict[str, Any]:
        elapsed = time.monotonic() - self._started_monotonic
        return {
            "total": self.total,
            "done": self.done,
            "failed": self.failed,
            "rollouts_per_second": round(self._done_this_run / elapsed, 3) if elapsed > 0 else 0.0,
            "mean_reward": self._reward_sum / self._rewarded if self._rewarded else None,
            "started_at": self.started_at,
            "finished": finished,
            **({"run_id": self.run_id} if self.run_id else {}),
        }

    def write(self, finished: bool = False) -> None:
        if self._trailing is not None:
            self._trailing.cancel()
            self._trailing = None
        snapshot = self.snapshot(finished)
        write_atomically(self.path, orjson.dumps(snapshot))
        self._last_write = time.monotonic()
        if self._callback is not None:
            self._callback(snapshot)

    def _maybe_write(self) -> None:
        wait = MIN_INTERVAL_S - (time.monotonic() - self._last_write)
        if wait <= 0:
            self.write()
        elif self._trailing is None:
            import asyncio  # here: the host CLI reads progress and never needs asyncio (20-28 ms of its start)

            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop (a synchronous caller): the next count or the end writes it
                return
            self._trailing = loop.call_later(wait, self.write)
