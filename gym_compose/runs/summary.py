"""The key metrics of a finished run, printed on stdout from its aggregate metrics file."""

from __future__ import annotations

import json
from pathlib import Path

METRICS_FILE = "rollouts_aggregate_metrics.json"


def print_summary(run_dir: Path) -> None:
    path = run_dir / METRICS_FILE
    if not path.is_file():
        return
    try:
        per_agent = json.loads(path.read_text())
    except json.JSONDecodeError:
        return
    for entry in per_agent if isinstance(per_agent, list) else []:
        name = (entry.get("agent_ref") or {}).get("name", "?")
        print(f"{name}:")
        for key, value in (entry.get("key_metrics") or {}).items():
            shown = f"{value:.4g}" if isinstance(value, float) else value
            print(f"  {key:40} {shown}")
