"""The service table that `ps` and `up` print on stdout."""

from __future__ import annotations

from collections.abc import Sequence

from gym_compose.engine.target import ServiceState


def print_services(states: Sequence[ServiceState]) -> None:
    rows = [("SERVICE", "STATE", "HEALTH", "PUBLISHED")]
    rows += [(s.service, s.state, s.health or "-", ", ".join(s.published) or "-") for s in states]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
