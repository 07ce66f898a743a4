"""The sweeps' tables (bench_nemo_gym_servers.py, bench_nemo_gym_agents.py): aligned columns, the
listed problems and exclusions, and earlier results files merged for `--report`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def print_columns(rows: list[tuple[str, ...]]) -> None:
    """Rows of cells (the first the heading), each column as wide as its widest cell."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def print_listed(title: str, results: list[dict[str, Any]], name: str, field: str, counted: bool = False) -> None:
    """`title:` (`title (N):` if counted) and one line per result with `field` set, named by its `name` key."""
    listed = [r for r in results if r.get(field)]
    if listed:
        print(f"\n{title} ({len(listed)}):" if counted else f"\n{title}:")
        for r in listed:
            print(f"  {r[name]}: {r[field]}")


def latest_results(reports: list[Path], name: str) -> list[dict[str, Any]]:
    """Each `name`'s last result over the files (a re-run batch replaces a full sweep's line), by name."""
    latest: dict[str, dict[str, Any]] = {}
    for report in reports:
        for line in report.read_text().splitlines():
            if line.strip():
                result = json.loads(line)
                latest.pop(result[name], None)
                latest[result[name]] = result
    return sorted(latest.values(), key=lambda result: result[name])
