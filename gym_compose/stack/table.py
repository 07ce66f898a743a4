"""The service table that `ps` and `up` print on stdout."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gym_compose.contract import was_shortened
from gym_compose.engine.targets.deployed_stack import ServiceState


def print_services(states: Sequence[ServiceState], instances: Mapping[str, str] | None = None) -> None:
    """`instances`: service -> instance name; shown when a service name is not simply its
    instance's (shortened to fit a target's limits, names.py)."""
    instances = instances or {}
    with_runtime = any(s.runtime for s in states)  # containers rendered before runtimes were labelled have none
    with_node = any(s.node for s in states)  # a swarm: which node runs each replica
    with_instance = any(was_shortened(s.service, instances[s.service]) for s in states if s.service in instances)
    header = ("SERVICE", *(("INSTANCE",) if with_instance else ()), "STATE", "HEALTH", "PUBLISHED",
              *(("RUNTIME",) if with_runtime else ()), *(("NODE",) if with_node else ()))
    rows: list[tuple[str, ...]] = [header]
    for s in states:
        rows.append((s.service, *((instances.get(s.service, "-"),) if with_instance else ()), s.state,
                     s.health or "-", ", ".join(s.published) or "-",
                     *((s.runtime or "-",) if with_runtime else ()), *((s.node or "-",) if with_node else ())))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for line in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
