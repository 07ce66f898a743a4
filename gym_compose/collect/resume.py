"""What earlier runs in an output folder already did: finished rollouts and failed attempts."""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from gym_compose.collect.artifacts import ArtifactPaths
from gym_compose.collect.dispatch import FAILURE_CLASS, SERVER_EXITED
from gym_compose.collect.jsonl import iter_output_rows, repair_torn_tail
from gym_compose.metrics.row_keys import ROLLOUT_INDEX, TASK_INDEX


@dataclass
class PriorRuns:
    done: set[tuple[Any, Any]] = field(default_factory=set)
    failed_attempts: Counter = field(default_factory=Counter)
    reward_sum: float = 0.0
    rewarded: int = 0

    def attempts_left(self, key: tuple[Any, Any], max_attempts: int) -> bool:
        return key not in self.done and self.failed_attempts[key] < max_attempts


def load_prior_runs(paths: ArtifactPaths) -> PriorRuns:
    """Reads rollouts and failures, first cutting off a last line that a crash left torn."""
    prior = PriorRuns()
    for path in (paths.rollouts, paths.failures):
        dropped = repair_torn_tail(path)
        if dropped:
            print(f"collect: dropped a torn last line ({dropped} bytes) from {path}", file=sys.stderr)
    for row in iter_output_rows(paths.rollouts):
        key = _key(row)
        if key is None or key in prior.done:
            continue
        prior.done.add(key)
        reward = row.get("reward")
        if isinstance(reward, (int, float)) and not isinstance(reward, bool):
            prior.reward_sum += reward
            prior.rewarded += 1
    for row in iter_output_rows(paths.failures):
        key = _key(row)
        # a rollout cut short because the run stopped (a server died) did not fail by itself
        if key is not None and row.get(FAILURE_CLASS) != SERVER_EXITED:
            prior.failed_attempts[key] += 1
    return prior


def _key(row: dict[str, Any]) -> tuple[Any, Any] | None:
    if TASK_INDEX not in row or ROLLOUT_INDEX not in row:
        return None
    return row[TASK_INDEX], row[ROLLOUT_INDEX]
