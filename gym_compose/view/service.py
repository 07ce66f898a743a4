"""What the page asks for, answered as JSON-ready dicts: run summaries, a page of tasks, one
rollout, the side-by-side comparison. The web server (server.py) and the export (export.py) both
answer from here, so the live page and the exported file show the same things.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import yaml

from gym_compose.contract import MODELS
from gym_compose.metrics.row_keys import ROLLOUT_INDEX, TASK_INDEX, sortable
from gym_compose.view.jsonl_index import JsonlIndex
from gym_compose.view.run_model import Run, Task, hashable_key, prompt_of
from gym_compose.view.trajectory import conversation, failed_rollout, failure_block

STATUS_FILTERS = ("all", "failed", "imperfect", "perfect")
TASK_ORDERS = ("task", "agent", "mean", "failed", "prompt", "note")
COMPARE_ORDERS = ("differs", "task", "prompt")
MAX_PAGE = 500


@dataclass(frozen=True)
class TaskQuery:
    start: int = 0
    length: int = 25
    search: str = ""
    order: str = "task"
    descending: bool = False
    status: str = "all"

    def checked(self) -> "TaskQuery":
        if self.order not in TASK_ORDERS:
            raise ValueError(f"order must be one of {', '.join(TASK_ORDERS)}")
        if self.status not in STATUS_FILTERS:
            raise ValueError(f"status must be one of {', '.join(STATUS_FILTERS)}")
        return TaskQuery(max(0, self.start), min(max(1, self.length), MAX_PAGE), self.search, self.order,
                         self.descending, self.status)


def manifest_view(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest as the page shows it: command, times, versions, images, models, config."""
    raw_config = manifest.get("resolved_config")
    config: dict[str, Any] = raw_config if isinstance(raw_config, dict) else {}
    models, servers = [], []
    try:
        from gym_compose.config.instances import instances

        for instance in instances(config):
            entry = {"instance": instance.name, "type": instance.server_type, "implementation": instance.implementation}
            servers.append(entry)
            if instance.server_type == MODELS:
                spec = instance.spec
                models.append({**entry, "model": spec.get("model") or spec.get("model_name"),
                               "base_url": spec.get("base_url") or spec.get("openai_base_url")})
    except Exception:  # a manifest from another version: show what there is, never fail the page
        pass
    raw_images = manifest.get("images")
    images: dict[str, Any] = raw_images if isinstance(raw_images, dict) else {}
    command = manifest.get("command")
    cost = manifest.get("cost")
    return {
        "command": " ".join(map(str, command)) if isinstance(command, list) else command,
        "started_at": manifest.get("started_at"),
        "finished_at": manifest.get("finished_at"),
        "collector_exit_code": manifest.get("collector_exit_code"),
        "gym_compose_version": manifest.get("gym_compose_version"),
        "images": [
            {"service": name, "image": (value or {}).get("image"), "id": (value or {}).get("id")}
            for name, value in images.items() if isinstance(value, dict)
        ],
        "models": models,
        "servers": servers,
        "cost": {key: value for key, value in cost.items() if isinstance(value, (int, float))}
        if isinstance(cost, dict) else {},
        "config_yaml": yaml.safe_dump(config, sort_keys=False, allow_unicode=True) if config else None,
    }


class ViewService:
    def __init__(self, folders: list[Path]):
        labels = _unique_labels(folders)
        self.runs = [Run(folder, label) for folder, label in zip(folders, labels, strict=True)]
        self._sent: dict[int, tuple[JsonlIndex, dict, int]] = {}
        self._manifests: dict[int, tuple[dict, dict]] = {}
        self._sent_lock = threading.Lock()  # the server's start-up thread indexes these too

    def run(self, number: int) -> Run:
        if not 0 <= number < len(self.runs):
            raise LookupError(f"no run {number}; there are {len(self.runs)}")
        return self.runs[number]

    def refresh(self) -> None:
        """Index what the collectors appended since the last call."""
        for run in self.runs:
            run.refresh()

    # -- summaries -----------------------------------------------------------------------------

    def summary(self, number: int) -> dict[str, Any]:
        run = self.run(number)
        return {
            "number": number,
            "label": run.label,
            "folder": str(run.folder),
            "live": run.live_metrics(),
            "metrics": [
                {"agent": entry["agent_ref"].get("name") if isinstance(entry.get("agent_ref"), dict) else None,
                 "key_metrics": entry.get("key_metrics") or {},
                 "agent_metrics": entry.get("agent_metrics") or {}}
                for entry in run.files.aggregate_metrics()
            ],
            "progress": run.files.progress(),
            "manifest": self._manifest_view(number),
            "histogram": run.reward_histogram(),
            "pass_at_k": run.pass_at_k(),
            "failure_groups": run.failure_groups(),
            "agents": sorted({task.agent for task in run.tasks()}),
        }

    def _manifest_view(self, number: int) -> dict[str, Any]:
        manifest = self.run(number).files.manifest()  # the same object until the file changes
        cached = self._manifests.get(number)
        if cached is None or cached[0] is not manifest:
            cached = self._manifests[number] = (manifest, manifest_view(manifest))
        return cached[1]

    def summaries(self) -> list[dict[str, Any]]:
        return [self.summary(number) for number in range(len(self.runs))]

    # -- tasks ---------------------------------------------------------------------------------

    def task_page(self, number: int, query: TaskQuery) -> dict[str, Any]:
        tasks = self.run(number).tasks()
        query = query.checked()
        selected = select_tasks(tasks, query)
        page = selected[query.start: query.start + query.length]
        self.fill_prompts(number, page, wait=False)
        return {"recordsTotal": len(tasks), "recordsFiltered": len(selected), "data": [task.to_json() for task in page]}

    def fill_prompts(self, number: int, tasks: list[Task], wait: bool = True) -> None:
        """A task whose rollouts all failed has no answer line to take its prompt from: take it
        from the rollout as sent. With wait=False, only when that file is indexed already (the
        first screen of a large run must not wait for it; warm_sent_inputs indexes it meanwhile)."""
        needed = [t for t in tasks if t.prompt is None and t.cells and t.cells[0].status == "failed"]
        if not needed or not self._sent_lock.acquire(blocking=wait):
            return
        try:
            if not wait and self._sent_is_stale(number):
                return
            for task in needed:
                sent = self._sent_record(number, task.index, task.cells[0].rollout)
                task.prompt = prompt_of(sent) if sent else None
        finally:
            self._sent_lock.release()

    def warm_sent_inputs(self) -> None:
        """Index rollouts_materialized_inputs.jsonl of every run with failed rollouts (server start)."""
        for number, run in enumerate(self.runs):
            if any(task.failed for task in run.tasks()):
                with self._sent_lock:
                    self._sent_positions(number)

    # -- one rollout ---------------------------------------------------------------------------

    def rollout(self, number: int, rollout_id: str) -> dict[str, Any]:
        run = self.run(number)
        kind, position = rollout_id[:1], rollout_id[1:]
        if kind not in ("r", "f") or not position.isdigit():
            raise LookupError(
                f"no rollout {rollout_id!r}: ids are r<n> (rollouts.jsonl) or f<n> (rollouts_failures.jsonl)")
        index = run.rollouts if kind == "r" else run.failures
        position_n = int(position)
        if position_n >= len(index):
            raise LookupError(f"no rollout {rollout_id!r} in {run.label}: reload the page")
        record = index.read_record(position_n)
        if kind == "r":
            view = conversation(record)
            attempts = run.failure_attempts(record.get(TASK_INDEX), record.get(ROLLOUT_INDEX))
            if attempts:
                view["failures"] = [failure_block(run.failures.read_record(p)) for p in attempts]
            return view
        failures = [run.failures.read_record(p)
                    for p in run.failure_attempts(record.get(TASK_INDEX), record.get(ROLLOUT_INDEX))]
        return failed_rollout(failures or [record], self._sent_rollout(number, record))

    def _sent_rollout(self, number: int, failure: dict[str, Any]) -> dict[str, Any] | None:
        with self._sent_lock:
            return self._sent_record(number, failure.get(TASK_INDEX), failure.get(ROLLOUT_INDEX))

    def _sent_is_stale(self, number: int) -> bool:
        sent = self._sent.get(number)
        return sent is None or sent[0].generation != sent[2]

    def _sent_positions(self, number: int) -> tuple[JsonlIndex, dict]:
        """rollouts_materialized_inputs.jsonl indexed by (task, rollout); call with _sent_lock held."""
        sent = self._sent.get(number)
        if sent is None:
            sent = (JsonlIndex(self.run(number).files.paths.materialized_inputs, identity_of), {}, -1)
        index, positions, generation = sent
        index.refresh()
        if generation != index.generation:
            positions = {identity: p for p, identity in reversed(list(enumerate(index.all_entries())))}
        self._sent[number] = (index, positions, index.generation)
        return index, positions

    def _sent_record(self, number: int, task: Any, rollout: Any) -> dict[str, Any] | None:
        """The rollout as sent; call with _sent_lock held."""
        index, positions = self._sent_positions(number)
        position = positions.get((hashable_key(task), hashable_key(rollout)))
        return index.read_record(position) if position is not None else None

    # -- several runs side by side -------------------------------------------------------------

    def comparison(self, query: TaskQuery, differing_only: bool = False) -> dict[str, Any]:
        """Tasks across runs. query.order: "differs" (differing tasks first, widest spread
        first), "task" or "prompt"; query.status is not used."""
        if query.order not in COMPARE_ORDERS:
            raise ValueError(f"order must be one of {', '.join(COMPARE_ORDERS)}")
        start, length = max(0, query.start), min(max(1, query.length), MAX_PAGE)
        rows = compare_rows(self.runs)
        total = len(rows)
        if differing_only:
            rows = [row for row in rows if row["differs"]]
        needle = query.search.lower().strip()
        if needle:
            rows = [row for row in rows if needle in _search_text(row)]
        if query.order == "task":
            rows.sort(key=lambda row: (sortable(row["task"]), row["agent"] or ""))
        elif query.order == "prompt":
            rows.sort(key=lambda row: row["prompt"] or "")
        if query.descending:
            rows.reverse()
        return {
            "runs": [run.label for run in self.runs],
            "recordsTotal": total,
            "recordsFiltered": len(rows),
            "data": rows[start: start + length],
        }


class _Identity(msgspec.Struct):
    task: Any = msgspec.field(name=TASK_INDEX, default=None)
    rollout: Any = msgspec.field(name=ROLLOUT_INDEX, default=None)


_decode_identity = msgspec.json.Decoder(_Identity).decode


def identity_of(line: bytes, side: dict) -> tuple[Any, Any]:
    fields = _decode_identity(line)
    return (hashable_key(fields.task), hashable_key(fields.rollout))


def _search_text(row: dict[str, Any]) -> str:
    return f"{row.get('task')} {row.get('agent') or ''} {row.get('prompt') or ''} {row.get('note') or ''}".lower()


def select_tasks(tasks: list[Task], query: TaskQuery) -> list[Task]:
    selected = tasks
    if query.status == "failed":
        selected = [t for t in selected if t.failed]
    elif query.status in ("imperfect", "perfect"):
        best = max((r for t in tasks for r in t.rewards), default=None)
        def perfect(t: Task) -> bool:
            return not t.failed and bool(t.rewards) and all(r == best for r in t.rewards)
        selected = [t for t in selected if perfect(t) == (query.status == "perfect")]
    needle = query.search.lower().strip()
    if needle:
        selected = [t for t in selected
                    if needle in _search_text({"task": t.index, "agent": t.agent, "prompt": t.prompt, "note": t.note})]
    key = {
        "task": lambda t: (sortable(t.index), t.agent),
        "agent": lambda t: (t.agent, sortable(t.index)),
        # ascending: worst first, a task whose rollouts all failed (no reward) before a 0
        "mean": lambda t: (t.mean_reward is not None, t.mean_reward or 0.0, sortable(t.index)),
        "failed": lambda t: (t.failed, sortable(t.index)),
        "prompt": lambda t: (t.prompt or "", sortable(t.index)),
        "note": lambda t: (t.note or "", sortable(t.index)),
    }[query.order]
    if selected is tasks and query.order == "task" and not query.descending:
        return tasks  # already in this order
    return sorted(selected, key=key, reverse=query.descending)


def compare_rows(runs: list[Run]) -> list[dict[str, Any]]:
    """One row per task across runs (a cell per run), the tasks whose results differ first."""
    by_agent = any(len({t.agent for t in run.tasks()}) > 1 for run in runs)
    rows: dict[Any, dict[str, Any]] = {}
    for number, run in enumerate(runs):
        for task in run.tasks():
            key = (task.agent, hashable_key(task.index)) if by_agent else hashable_key(task.index)
            row = rows.get(key)
            if row is None:
                row = rows[key] = {"task": task.index, "agent": task.agent if by_agent else None,
                                   "prompt": task.prompt, "note": None, "cells": [None] * len(runs)}
            row["prompt"] = row["prompt"] or task.prompt
            row["note"] = row["note"] or task.note
            row["cells"][number] = {"mean": task.mean_reward, "failed": task.failed,
                                    "rollouts": [cell.to_json() for cell in task.cells]}
    result = []
    for row in rows.values():
        means = [cell["mean"] if cell else None for cell in row["cells"]]
        present = [m for m in means if m is not None]
        missing = len(present) < len(means)
        row["spread"] = (max(present) - min(present)) if present else 0.0
        row["differs"] = missing or row["spread"] > 0 or any(cell and cell["failed"] for cell in row["cells"])
        result.append(row)
    result.sort(key=lambda row: (not row["differs"], -row["spread"], sortable(row["task"]), row["agent"] or ""))
    return result


def _unique_labels(folders: list[Path]) -> list[str]:
    labels = [folder.name or str(folder) for folder in folders]
    if len(set(labels)) == len(labels):
        return labels
    return [str(folder) for folder in folders]

