"""The key metrics of a finished run, printed on stdout from its aggregate metrics file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gym_compose.metrics.agent_metrics import COST_KEY

METRICS_FILE = "rollouts_aggregate_metrics.json"
COST_SUM_PREFIX = f"sum/{COST_KEY}."  # what an agent's rollouts cost in all (agent_metrics.cost_sums)


def read_agent_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The aggregate metrics file's entries, one per agent; none when it is absent or unreadable."""
    path = run_dir / METRICS_FILE
    try:
        per_agent = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return []
    return [entry for entry in per_agent if isinstance(entry, dict)] if isinstance(per_agent, list) else []


def cost_totals(run_dir: Path) -> dict[str, float]:
    """What the whole run cost: each agent's `sum/cost.KEY` added up over the agents, as KEY."""
    return totals_of(read_agent_metrics(run_dir))


def totals_of(per_agent: list[dict[str, Any]]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for entry in per_agent:
        for name, value in (entry.get("agent_metrics") or {}).items():
            if name.startswith(COST_SUM_PREFIX) and isinstance(value, (int, float)) and not isinstance(value, bool):
                key = name[len(COST_SUM_PREFIX):]
                totals[key] = round(totals.get(key, 0) + value, 4)
    return totals


def print_summary(run_dir: Path) -> None:
    per_agent = read_agent_metrics(run_dir)  # read once: the key metrics, then the totals
    for entry in per_agent:
        name = (entry.get("agent_ref") or {}).get("name", "?")
        print(f"{name}:")
        for key, value in (entry.get("key_metrics") or {}).items():
            shown = f"{value:.4g}" if isinstance(value, float) else value
            print(f"  {key:40} {shown}")
    totals = totals_of(per_agent)
    if totals:
        print("cost, all agents:")
        for key, value in sorted(totals.items()):
            print(f"  {key:40} {value:.6g}")
