"""`gym-compose view --export FILE`: the page as one self-contained HTML file.

What the file holds, bounded so that a 100,000-rollout run still makes a file a browser opens:
- every run's summary (metrics, manifest, reward histogram, pass@k curves, failure groups);
- up to `max_tasks` tasks per run in the task table: all of them when there are no more; else
  the tasks with failed rollouts, then those furthest below the best reward, then the rest in
  task order;
- the trajectories of up to `max_rollouts` rollouts in all: failed rollouts first, then the
  lowest rewards, then one rollout of each remaining task, then the others;
- with several runs, the side-by-side table (up to `max_tasks` rows, the tasks that differ first).
The page says how much of each it holds.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gym_compose.view.page import export_page
from gym_compose.view.run_model import Task
from gym_compose.view.service import ViewService, compare_rows

DEFAULT_MAX_TASKS = 2000
DEFAULT_MAX_ROLLOUTS = 300


def _task_priority(task: Task, best: float | None) -> tuple:
    mean = task.mean_reward
    return (0 if task.failed else 1, mean if mean is not None else float("-inf"))


def choose_tasks(tasks: list[Task], limit: int) -> list[Task]:
    if len(tasks) <= limit:
        return tasks
    best = max((r for t in tasks for r in t.rewards), default=None)
    chosen = sorted(range(len(tasks)), key=lambda i: (_task_priority(tasks[i], best), i))[:limit]
    return [tasks[i] for i in sorted(chosen)]


def choose_rollouts(tasks: list[Task], limit: int) -> list[str]:
    """Rollout ids whose trajectories go into the file, most telling first."""
    failed = [cell.id for task in tasks for cell in task.cells if cell.status == "failed"]
    scored = sorted(((cell.reward, cell.id) for task in tasks for cell in task.cells if cell.reward is not None),
                    key=lambda pair: pair[0])
    best = scored[-1][0] if scored else None
    below_best = [cell_id for reward, cell_id in scored if reward != best]
    one_each = [task.cells[0].id for task in tasks if task.cells]
    rest = [cell.id for task in tasks for cell in task.cells]
    chosen: list[str] = []
    seen: set[str] = set()
    for cell_id in failed + below_best + one_each + rest:
        if len(chosen) >= limit:
            break
        if cell_id not in seen:
            seen.add(cell_id)
            chosen.append(cell_id)
    return chosen


def export_data(service: ViewService, max_tasks: int = DEFAULT_MAX_TASKS,
                max_rollouts: int = DEFAULT_MAX_ROLLOUTS) -> dict[str, Any]:
    service.refresh()
    summaries = service.summaries()
    tasks: dict[int, list[dict[str, Any]]] = {}
    rollouts: dict[str, Any] = {}
    counts = []
    per_run_budget = max(1, max_rollouts // max(1, len(service.runs)))
    for number, run in enumerate(service.runs):
        all_tasks = run.tasks()
        chosen = choose_tasks(all_tasks, max_tasks)
        service.fill_prompts(number, chosen)
        tasks[number] = [task.to_json() for task in chosen]
        ids = choose_rollouts(chosen, per_run_budget)
        for rollout_id in ids:
            rollouts[f"{number}:{rollout_id}"] = service.rollout(number, rollout_id)
        total_rollouts = sum(len(task.cells) for task in all_tasks)
        counts.append(f"{run.label}: {len(chosen)} of {len(all_tasks)} tasks, "
                      f"trajectories of {len(ids)} of {total_rollouts} rollouts")
    comparison = None
    if len(service.runs) > 1:
        rows = compare_rows(service.runs)
        comparison = {"runs": [run.label for run in service.runs], "data": rows[:max_tasks], "total": len(rows)}
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")
    note = (f"Exported report ({generated}). " + "; ".join(counts) + ". Failed and lowest-reward rollouts come first;"
            " open the run folder with `gym-compose view` to see every rollout.")
    return {"mode": "export", "generated_at": generated, "runs": summaries, "tasks": tasks, "rollouts": rollouts,
            "comparison": comparison, "note": note}


def write_export(folders: list[Path], output: Path, max_tasks: int = DEFAULT_MAX_TASKS,
                 max_rollouts: int = DEFAULT_MAX_ROLLOUTS) -> int:
    """Write the file atomically; returns its size in bytes."""
    html = export_page(export_data(ViewService(folders), max_tasks, max_rollouts)).encode("utf-8")
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.tmp")
    tmp.write_bytes(html)
    os.replace(tmp, output)
    return len(html)
