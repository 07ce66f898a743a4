"""The last log lines of servers that died, as `up` and `eval run` show them.

Each dead service's tail is read once, all at the same time: on a swarm, the log of a service
whose node is gone answers only when its read times out, and a lost node takes several servers
with it; read one after another, four such servers kept a run's error waiting for a minute.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from gym_compose.engine.targets.deployed_stack import DeployedStack, ServiceState


def dead_server_logs(stack: DeployedStack, dead: Sequence[ServiceState]) -> list[str]:
    """`  last log lines of SERVICE:` and its indented tail, for each distinct dead service that
    may still have a log (a missing one has none)."""
    services = list(dict.fromkeys(state.service for state in dead if state.state != "missing"))
    if not services:
        return []
    with ThreadPoolExecutor(max_workers=len(services), thread_name_prefix="log-tail") as pool:
        tails = list(pool.map(stack.log_tail, services))
    lines = []
    for service, tail in zip(services, tails, strict=True):
        lines.append(f"  last log lines of {service}:")
        lines.extend(tail or ["      (none)"])
    return lines
