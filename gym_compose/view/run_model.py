"""One run folder as the viewer sees it: rollouts grouped into tasks, failures, and the figures.

Only a small summary of each rollout stays in memory (`RolloutSummary`); the page reads a whole
rollout by its byte offset when it shows one. `Run.refresh()` picks up what a running collection
appended since the last call.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym_compose.collect.metrics import agent_of, pass_at_k_metrics
from gym_compose.collect.rows import ATTEMPT_INDEX, ROLLOUT_INDEX, TASK_INDEX, sortable
from gym_compose.view.jsonl_index import JsonlIndex
from gym_compose.view.run_folder import SmallFiles

PROMPT_CHARS = 200
NOTE_CHARS = 300
MAX_EXACT_BINS = 12  # at most this many distinct rewards get a bar each; more are binned
HISTOGRAM_BINS = 20


@dataclass(slots=True)
class RolloutSummary:
    task: Any
    rollout: Any
    attempt: Any
    agent: str
    reward: float | None
    verdict: str | None  # the verifier's failure_reason / failure_kind, when it gave one
    answer: Any  # extracted_answer (majority@k)
    prompt: str | None


@dataclass(slots=True)
class FailureSummary:
    task: Any
    rollout: Any
    attempt: Any
    agent: str
    failure_class: str
    message: str
    status: Any


def _excerpt(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


def prompt_of(record: dict[str, Any]) -> str | None:
    """The last user message of the rollout's input (what a person recognizes a task by)."""
    params = record.get("responses_create_params")
    if not isinstance(params, dict):
        task_input = record.get("task_input")
        return _excerpt(str(task_input), PROMPT_CHARS) if task_input is not None else None
    items = params.get("input")
    if isinstance(items, str):
        return _excerpt(items, PROMPT_CHARS)
    if isinstance(items, list):
        for item in reversed(items):
            if isinstance(item, dict) and item.get("role") == "user":
                return _excerpt(_text_of(item.get("content")), PROMPT_CHARS)
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def summarize_rollout(record: dict[str, Any]) -> RolloutSummary:
    verdict = record.get("failure_reason") or record.get("failure_kind")
    prompt = prompt_of(record)
    return RolloutSummary(
        task=record.get(TASK_INDEX, record.get("_ng_task_id")),
        rollout=record.get(ROLLOUT_INDEX),
        attempt=record.get(ATTEMPT_INDEX),
        agent=sys.intern(agent_of(record)),
        reward=_number(record.get("reward")),
        verdict=_excerpt(str(verdict), NOTE_CHARS) if verdict else None,
        answer=record.get("extracted_answer"),
        prompt=sys.intern(prompt) if prompt else None,
    )


def summarize_failure(record: dict[str, Any]) -> FailureSummary:
    return FailureSummary(
        task=record.get(TASK_INDEX),
        rollout=record.get(ROLLOUT_INDEX),
        attempt=record.get(ATTEMPT_INDEX),
        agent=sys.intern(agent_of(record)),
        failure_class=sys.intern(str(record.get("_ng_failure_class") or "failure")),
        message=_excerpt(str(record.get("_ng_failure_message") or record.get("_ng_failure_type") or ""), NOTE_CHARS),
        status=record.get("_ng_failure_http_status"),
    )


@dataclass
class RolloutCell:
    """One rollout of a task in the table: a success row ("r<n>") or its failed attempts ("f<n>")."""

    id: str
    rollout: Any
    reward: float | None
    status: str  # "ok", "failed" (no answer row), "retried" (answered after failed attempts)
    note: str | None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "i": self.rollout, "reward": self.reward, "status": self.status, "note": self.note}


@dataclass
class Task:
    agent: str
    index: Any
    prompt: str | None = None
    cells: list[RolloutCell] = field(default_factory=list)

    @property
    def rewards(self) -> list[float]:
        return [cell.reward for cell in self.cells if cell.reward is not None]

    @property
    def mean_reward(self) -> float | None:
        rewards = self.rewards
        return sum(rewards) / len(rewards) if rewards else None

    @property
    def failed(self) -> int:
        return sum(1 for cell in self.cells if cell.status == "failed")

    @property
    def note(self) -> str | None:
        failed = [cell.note for cell in self.cells if cell.status == "failed" and cell.note]
        verdicts = [cell.note for cell in self.cells if cell.status != "failed" and cell.note]
        return (failed or verdicts or [None])[0]

    def to_json(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "task": self.index,
            "prompt": self.prompt,
            "mean": self.mean_reward,
            "failed": self.failed,
            "note": self.note,
            "rollouts": [cell.to_json() for cell in self.cells],
        }


class Run:
    def __init__(self, folder: Path, label: str | None = None):
        self.folder = folder
        self.label = label or folder.name
        self.files = SmallFiles(folder)
        self.rollouts: JsonlIndex[RolloutSummary] = JsonlIndex(self.files.paths.rollouts, summarize_rollout)
        self.failures: JsonlIndex[FailureSummary] = JsonlIndex(self.files.paths.failures, summarize_failure)
        self._derived_for: tuple[int, int] | None = None
        self._tasks: list[Task] = []
        self._task_by_key: dict[tuple[str, Any], Task] = {}

    def refresh(self) -> None:
        self.rollouts.refresh()
        self.failures.refresh()

    # -- tasks ---------------------------------------------------------------------------------

    def tasks(self) -> list[Task]:
        """Tasks in index order (agents in order of first appearance), rebuilt when the files grew."""
        stamp = (self.rollouts.generation, self.failures.generation)
        if stamp != self._derived_for:
            self._tasks, self._task_by_key = self._group()
            self._derived_for = stamp
        return self._tasks

    def task(self, agent: str, index: Any) -> Task | None:
        self.tasks()
        return self._task_by_key.get((agent, _hashable(index)))

    def _group(self) -> tuple[list[Task], dict[tuple[str, Any], Task]]:
        by_key: dict[tuple[str, Any], Task] = {}

        def task_for(agent: str, index: Any) -> Task:
            key = (agent, _hashable(index))
            task = by_key.get(key)
            if task is None:
                task = by_key[key] = Task(agent, index)
            return task

        answered: dict[tuple[Any, Any], int] = {}
        for position, summary in enumerate(self.rollouts.all_entries()):
            task = task_for(summary.agent, summary.task)
            if task.prompt is None:
                task.prompt = summary.prompt
            answered[(_hashable(summary.task), _hashable(summary.rollout))] = len(task.cells)
            task.cells.append(RolloutCell(f"r{position}", summary.rollout, summary.reward, "ok", summary.verdict))
        latest_failure: dict[tuple[Any, Any], int] = {}
        for position, failure in enumerate(self.failures.all_entries()):
            latest_failure[(_hashable(failure.task), _hashable(failure.rollout))] = position
        failure_entries = self.failures.all_entries()
        for key, position in latest_failure.items():
            failure = failure_entries[position]
            task = task_for(failure.agent, failure.task)
            if key in answered:
                cell = task.cells[answered[key]]
                cell.status = "retried"
                cell.note = cell.note or f"answered after failed attempt(s): {failure.message}"
            else:
                task.cells.append(RolloutCell(f"f{position}", failure.rollout, None, "failed", failure.message))
        tasks = sorted(by_key.values(), key=lambda t: (sortable(t.index), t.agent))
        for task in tasks:
            task.cells.sort(key=lambda cell: sortable(cell.rollout))
        return tasks, by_key

    def failure_attempts(self, task: Any, rollout: Any) -> list[int]:
        """Positions in rollouts_failures.jsonl of every failed attempt of one rollout."""
        key = (_hashable(task), _hashable(rollout))
        return [p for p, f in enumerate(self.failures.all_entries()) if (_hashable(f.task), _hashable(f.rollout)) == key]

    # -- figures -------------------------------------------------------------------------------

    def live_metrics(self) -> dict[str, Any]:
        tasks = self.tasks()
        rewards = [cell.reward for task in tasks for cell in task.cells if cell.reward is not None]
        progress = self.files.progress() or {}
        return {
            "rollouts": len(self.rollouts),
            "failed_rollouts": sum(task.failed for task in tasks),
            "failed_attempts": len(self.failures),
            "tasks": len(tasks),
            "mean_reward": sum(rewards) / len(rewards) if rewards else None,
            "total": progress.get("total"),
            "finished": bool(progress.get("finished")),
            "rollouts_per_second": progress.get("rollouts_per_second"),
            "unreadable_lines": [
                {"file": index.path.name, "line": bad.line_no, "error": bad.error}
                for index in (self.rollouts, self.failures) for bad in index.bad_lines[:20]
            ],
        }

    def reward_histogram(self) -> list[dict[str, Any]]:
        rewards = [cell.reward for task in self.tasks() for cell in task.cells if cell.reward is not None]
        return reward_histogram(rewards)

    def pass_at_k(self) -> dict[str, dict[str, list[float]]]:
        """Per agent, the pass@k family of curves (index k-1 holds k), when some task has repeats."""
        by_agent: dict[str, list[list[dict[str, Any]]]] = {}
        rollouts = self.rollouts.all_entries()
        for task in self.tasks():
            scored = [
                {"reward": cell.reward, "extracted_answer": rollouts[int(cell.id[1:])].answer}
                for cell in task.cells if cell.reward is not None
            ]
            by_agent.setdefault(task.agent, []).append(scored)
        curves: dict[str, dict[str, list[float]]] = {}
        for agent, tasks in by_agent.items():
            if max((len(t) for t in tasks), default=0) < 2:
                continue
            metrics = pass_at_k_metrics(tasks)
            family: dict[str, list[float]] = {}
            for name, value in metrics.items():
                kind, _ = name.split("/", 1)
                family.setdefault(_curve_name(kind), []).append(value)
            curves[agent] = family
        return curves

    def failure_groups(self, limit: int = 20) -> list[dict[str, Any]]:
        """Failed rollouts grouped by failure class and message, largest group first."""
        counts: Counter = Counter()
        for task in self.tasks():
            for cell in task.cells:
                if cell.status == "failed":
                    counts[cell.note or "failed"] += 1
        return [{"message": message, "rollouts": count} for message, count in counts.most_common(limit)]


def _curve_name(kind: str) -> str:
    # "pass@3" -> "pass@k", "pass@1[avg-of-3]" -> "pass@1[avg-of-k]", "majority@3" -> "majority@k"
    head, _, rest = kind.partition("@")
    if "[" in rest:
        return f"{head}@1[avg-of-k]"
    return f"{head}@k"


def _hashable(value: Any) -> Any:
    if isinstance(value, (dict, list)):
        return repr(value)
    return value


def reward_histogram(rewards: list[float]) -> list[dict[str, Any]]:
    """Bars: one per distinct reward when there are few (the usual 0/1), else equal-width bins."""
    if not rewards:
        return []
    distinct = Counter(rewards)
    if len(distinct) <= MAX_EXACT_BINS:
        return [{"label": _format_reward(value), "lo": value, "hi": value, "count": count}
                for value, count in sorted(distinct.items())]
    low, high = min(rewards), max(rewards)
    width = (high - low) / HISTOGRAM_BINS
    counts = [0] * HISTOGRAM_BINS
    for reward in rewards:
        counts[min(int((reward - low) / width), HISTOGRAM_BINS - 1)] += 1
    bars = []
    for i, count in enumerate(counts):
        lo, hi = low + i * width, low + (i + 1) * width
        bars.append({"label": f"{_format_reward(lo)}–{_format_reward(hi)}", "lo": lo, "hi": hi, "count": count})
    return bars


def _format_reward(value: float) -> str:
    return f"{value:.4g}"
