"""One run folder as the viewer sees it: rollouts grouped into tasks, failures, and the figures.

Only a small summary of each rollout stays in memory (`RolloutSummary`); the page reads a whole
rollout by its byte offset when it shows one. `Run.refresh()` picks up what a running collection
appended since the last call.
"""

from __future__ import annotations

import gc
import math
import re
import sys
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from gym_compose.metrics.agent_metrics import agent_of, pass_at_k_metrics
from gym_compose.metrics.row_keys import ATTEMPT_INDEX, ROLLOUT_INDEX, TASK_INDEX, sortable
from gym_compose.view.jsonl_index import JsonlIndex
from gym_compose.view.run_folder import SmallFiles

PROMPT_CHARS = 200
NOTE_CHARS = 300
MAX_EXACT_BINS = 12  # at most this many distinct rewards get a bar each; more are binned
HISTOGRAM_BINS = 20
FAILURE_GROUPS = 20
PASS_METRIC = re.compile(r"(?P<head>pass|majority)@(?P<k>\d+)(?:\[avg-of-(?P<avg>\d+)\])?/accuracy")


class RolloutSummary(msgspec.Struct, gc=False):  # gc=False: 100,000 of these hold no cycles
    task: Any
    rollout: Any
    attempt: Any
    agent: str
    reward: float | None
    verdict: str | None  # the verifier's failure_reason / failure_kind, when it gave one
    answer: Any  # extracted_answer (majority@k)


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
        return " ".join(part.get("text", "") for part in content
                        if isinstance(part, dict) and isinstance(part.get("text"), str))
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


class _RolloutFields(msgspec.Struct, gc=False):
    """The top-level fields of a rollouts.jsonl line the index keeps; the rest of the line (the
    whole `response`, the tools, ...) is skipped by the decoder without building any object."""

    task: Any = msgspec.field(name=TASK_INDEX, default=None)
    task_id: Any = msgspec.field(name="_ng_task_id", default=None)
    rollout: Any = msgspec.field(name=ROLLOUT_INDEX, default=None)
    attempt: Any = msgspec.field(name=ATTEMPT_INDEX, default=None)
    agent_ref: Any = None
    environment_server: Any = msgspec.field(name="_ng_environment_server", default=None)
    reward: Any = None
    failure_reason: Any = None
    failure_kind: Any = None
    extracted_answer: Any = None
    params: msgspec.Raw = msgspec.field(name="responses_create_params", default=msgspec.Raw(b"null"))
    task_input: msgspec.Raw = msgspec.field(name="task_input", default=msgspec.Raw(b"null"))


class _FailureFields(msgspec.Struct):
    task: Any = msgspec.field(name=TASK_INDEX, default=None)
    rollout: Any = msgspec.field(name=ROLLOUT_INDEX, default=None)
    attempt: Any = msgspec.field(name=ATTEMPT_INDEX, default=None)
    agent_ref: Any = None
    environment_server: Any = msgspec.field(name="_ng_environment_server", default=None)
    failure_class: Any = msgspec.field(name="_ng_failure_class", default=None)
    failure_type: Any = msgspec.field(name="_ng_failure_type", default=None)
    failure_message: Any = msgspec.field(name="_ng_failure_message", default=None)
    http_status: Any = msgspec.field(name="_ng_failure_http_status", default=None)


_decode_rollout = msgspec.json.Decoder(_RolloutFields).decode
_decode_failure = msgspec.json.Decoder(_FailureFields).decode


def _agent(fields: _RolloutFields | _FailureFields) -> str:
    ref = fields.agent_ref
    if type(ref) is dict and type(ref.get("name")) is str:
        return sys.intern(ref["name"])
    return sys.intern(agent_of({"agent_ref": ref, "_ng_environment_server": fields.environment_server}))


def summarize_rollout(line: bytes, prompts: dict[tuple[str, Any], str | None]) -> RolloutSummary:
    """One rollouts.jsonl line's figures; its prompt goes into `prompts` (one per task: repeats share it)."""
    fields = _decode_rollout(line)
    task = fields.task if fields.task is not None else fields.task_id
    agent = _agent(fields)
    key = (agent, hashable_key(task))
    if key not in prompts:
        prompts[key] = prompt_of({"responses_create_params": msgspec.json.decode(fields.params),
                                  "task_input": msgspec.json.decode(fields.task_input)})
    verdict = fields.failure_reason or fields.failure_kind
    reward = fields.reward
    return RolloutSummary(
        task, fields.rollout, fields.attempt, agent,
        float(reward) if type(reward) is float or type(reward) is int else _number(reward),
        _excerpt(str(verdict), NOTE_CHARS) if verdict else None,
        fields.extracted_answer,
    )


def summarize_failure(line: bytes, side: dict) -> FailureSummary:
    fields = _decode_failure(line)
    return FailureSummary(
        task=fields.task,
        rollout=fields.rollout,
        attempt=fields.attempt,
        agent=_agent(fields),
        failure_class=sys.intern(str(fields.failure_class or "failure")),
        message=_excerpt(str(fields.failure_message or fields.failure_type or ""), NOTE_CHARS),
        status=fields.http_status,
    )


@contextmanager
def bulk_allocation():
    """Pause the cyclic garbage collector while building many small objects that hold no cycles,
    then move them out of its sight (gc.freeze: they live as long as the index).

    Indexing 100,000 rollouts otherwise triggers hundreds of collections that find nothing
    (a third of the indexing time), and every later full collection would walk them all.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


@dataclass(slots=True)
class RolloutCell:
    """One rollout of a task in the table: line `position` of rollouts.jsonl (id "r<n>"), or,
    for a rollout that never got an answer, of rollouts_failures.jsonl (its latest attempt, "f<n>")."""

    position: int
    rollout: Any
    reward: float | None
    status: str  # "ok", "failed" (no answer row), "retried" (answered after failed attempts)
    note: str | None

    @property
    def id(self) -> str:
        return f"{'f' if self.status == 'failed' else 'r'}{self.position}"

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
        return next(iter(failed or verdicts), None)

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
        self._figures_for: tuple | None = None
        self._figures: dict[str, Any] = {}

    def refresh(self) -> None:
        """Index what the collector appended since the last call."""
        with bulk_allocation():
            self.rollouts.refresh()
            self.failures.refresh()

    # -- tasks ---------------------------------------------------------------------------------

    def tasks(self) -> list[Task]:
        """Tasks by task index (then agent), rebuilt when the files grew."""
        stamp = (self.rollouts.generation, self.failures.generation)
        if stamp != self._derived_for:
            with bulk_allocation():
                self._tasks = self._group()
            self._derived_for = stamp
        return self._tasks

    def _group(self) -> list[Task]:
        by_key: dict[tuple[str, Any], Task] = {}
        prompts = self.rollouts.side
        answered: dict[tuple[Any, Any], RolloutCell] = {}
        for position, summary in enumerate(self.rollouts.all_entries()):
            key = (summary.agent, hashable_key(summary.task))
            task = by_key.get(key)
            if task is None:
                task = by_key[key] = Task(summary.agent, summary.task, prompts.get(key))
            cell = RolloutCell(position, summary.rollout, summary.reward, "ok", summary.verdict)
            task.cells.append(cell)
            answered[(key[1], hashable_key(summary.rollout))] = cell
        latest_failure: dict[tuple[Any, Any], tuple[int, FailureSummary]] = {}
        for position, failure in enumerate(self.failures.all_entries()):
            latest_failure[(hashable_key(failure.task), hashable_key(failure.rollout))] = (position, failure)
        for key, (position, failure) in latest_failure.items():
            answer = answered.get(key)
            if answer is not None:
                answer.status = "retried"
                answer.note = answer.note or f"answered after failed attempt(s): {failure.message}"
                continue
            task_key = (failure.agent, key[0])
            task = by_key.get(task_key)
            if task is None:
                task = by_key[task_key] = Task(failure.agent, failure.task, prompts.get(task_key))
            task.cells.append(RolloutCell(position, failure.rollout, None, "failed", failure.message))
        tasks = sorted(by_key.values(), key=lambda t: (sortable(t.index), t.agent))
        for task in tasks:
            if len(task.cells) > 1:
                task.cells.sort(key=lambda cell: sortable(cell.rollout))
        return tasks

    def failure_attempts(self, task: Any, rollout: Any) -> list[int]:
        """Positions in rollouts_failures.jsonl of every failed attempt of one rollout."""
        key = (hashable_key(task), hashable_key(rollout))
        return [p for p, f in enumerate(self.failures.all_entries())
                if (hashable_key(f.task), hashable_key(f.rollout)) == key]

    # -- figures -------------------------------------------------------------------------------

    def metrics_are_current(self) -> bool:
        """True when the aggregate metrics file was written after the last rollout (not a resumed run's old one)."""
        try:
            return self.files.paths.aggregate_metrics.stat().st_mtime >= self.files.paths.rollouts.stat().st_mtime
        except OSError:
            return False

    def figures(self) -> dict[str, Any]:
        """live metrics, reward histogram, pass@k curves, failure groups; computed once per change."""
        tasks = self.tasks()
        stamp = (self._derived_for, self.metrics_are_current())
        if self._figures_for == stamp:
            return self._figures
        rewards = [cell.reward for task in tasks for cell in task.cells if cell.reward is not None]
        failed_notes = Counter(cell.note or "failed"
                               for task in tasks for cell in task.cells if cell.status == "failed")
        self._figures = {
            "live": {
                "rollouts": len(self.rollouts),
                "failed_rollouts": sum(failed_notes.values()),
                "failed_attempts": len(self.failures),
                "tasks": len(tasks),
                "mean_reward": sum(rewards) / len(rewards) if rewards else None,
            },
            "histogram": reward_histogram(rewards),
            "pass_at_k": self._pass_at_k_from_file() if stamp[1] else None,
            "failure_groups": [{"message": m, "rollouts": n} for m, n in failed_notes.most_common(FAILURE_GROUPS)],
        }
        if self._figures["pass_at_k"] is None:
            self._figures["pass_at_k"] = self._pass_at_k_from_rollouts(tasks)
        self._figures_for = stamp
        return self._figures

    def live_metrics(self) -> dict[str, Any]:
        progress = self.files.progress() or {}
        return {
            **self.figures()["live"],
            "total": progress.get("total"),
            "finished": bool(progress.get("finished")),
            "rollouts_per_second": progress.get("rollouts_per_second"),
            "unreadable_lines": [
                {"file": index.path.name, "line": bad.line_no, "error": bad.error}
                for index in (self.rollouts, self.failures) for bad in index.bad_lines[:20]
            ],
        }

    def _pass_at_k_from_file(self) -> dict[str, dict[str, list[float]]] | None:
        """The pass@k family per agent as the collector wrote it, when it wrote any."""
        curves: dict[str, dict[str, list[float]]] = {}
        for entry in self.files.aggregate_metrics():
            agent = (entry.get("agent_ref") or {}).get("name") if isinstance(entry.get("agent_ref"), dict) else None
            points: dict[str, dict[int, float]] = {}
            for name, value in (entry.get("agent_metrics") or {}).items():
                match = PASS_METRIC.fullmatch(name)
                if match and isinstance(value, (int, float)):
                    kind = f"{match['head']}@1[avg-of-k]" if match["avg"] else f"{match['head']}@k"
                    points.setdefault(kind, {})[int(match["avg"] or match["k"])] = float(value)
            family = {kind: [by_k[k] for k in sorted(by_k)] for kind, by_k in points.items()}
            if family and max(len(v) for v in family.values()) > 1:
                curves[str(agent)] = family
        return curves or None

    def _pass_at_k_from_rollouts(self, tasks: list[Task]) -> dict[str, dict[str, list[float]]]:
        """The same family computed by the collector's own code from the rollouts so far."""
        by_agent: dict[str, list[list[dict[str, Any]]]] = {}
        rollouts = self.rollouts.all_entries()
        for task in tasks:
            scored = [
                {"reward": cell.reward, "extracted_answer": rollouts[cell.position].answer}
                for cell in task.cells if cell.reward is not None
            ]
            by_agent.setdefault(task.agent, []).append(scored)
        curves: dict[str, dict[str, list[float]]] = {}
        for agent, agent_tasks in by_agent.items():
            if max((len(t) for t in agent_tasks), default=0) < 2:
                continue
            family: dict[str, list[float]] = {}
            for name, value in pass_at_k_metrics(agent_tasks).items():
                kind, _ = name.split("/", 1)
                family.setdefault(_curve_name(kind), []).append(value)
            curves[agent] = family
        return curves

    def reward_histogram(self) -> list[dict[str, Any]]:
        return self.figures()["histogram"]

    def pass_at_k(self) -> dict[str, dict[str, list[float]]]:
        """Per agent, the pass@k family of curves (index k-1 holds k), when some task has repeats."""
        return self.figures()["pass_at_k"]

    def failure_groups(self) -> list[dict[str, Any]]:
        """Failed rollouts grouped by failure message, largest group first."""
        return self.figures()["failure_groups"]


def _curve_name(kind: str) -> str:
    # "pass@3" -> "pass@k", "pass@1[avg-of-3]" -> "pass@1[avg-of-k]", "majority@3" -> "majority@k"
    head, _, rest = kind.partition("@")
    if "[" in rest:
        return f"{head}@1[avg-of-k]"
    return f"{head}@k"


def hashable_key(value: Any) -> Any:
    if type(value) is int or type(value) is str:
        return value
    return repr(value) if isinstance(value, (dict, list)) else value


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
