"""The service table that `ps` and `up` print on stdout."""

from __future__ import annotations

from collections.abc import Sequence

from gym_compose.engine.targets.deployed_stack import ServiceState


def print_services(states: Sequence[ServiceState]) -> None:
    with_runtime = any(s.runtime for s in states)  # containers rendered before runtimes were labelled have none
    with_node = any(s.node for s in states)  # a swarm: which node runs each replica
    header = ("SERVICE", "STATE", "HEALTH", "PUBLISHED", *(("RUNTIME",) if with_runtime else ()),
              *(("NODE",) if with_node else ()))
    rows: list[tuple[str, ...]] = [header]
    for s in states:
        rows.append((s.service, s.state, s.health or "-", ", ".join(s.published) or "-",
                     *((s.runtime or "-",) if with_runtime else ()), *((s.node or "-",) if with_node else ())))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for line in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
