"""The service table that `ps` and `up` print on stdout."""

from __future__ import annotations

from collections.abc import Sequence

from gym_compose.engine.target import ServiceState


def print_services(states: Sequence[ServiceState]) -> None:
    with_runtime = any(s.runtime for s in states)  # containers rendered before runtimes were labelled have none
    rows: list[tuple[str, ...]] = [("SERVICE", "STATE", "HEALTH", "PUBLISHED", "RUNTIME")[:5 if with_runtime else 4]]
    for s in states:
        cells = (s.service, s.state, s.health or "-", ", ".join(s.published) or "-", s.runtime or "-")
        rows.append(cells[:5 if with_runtime else 4])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for line in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
