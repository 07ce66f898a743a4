"""Which start of which container a request comes from, so that what a dead caller held is given back.

A caller names itself `HOST@START` in the `x-gym-compose-caller` header: its hostname (the
container's) and the start time of the container's first process (`/proc/1/stat`), which every
process of one container shares and which changes when the container restarts. A server that
holds something per caller (a resources server's sessions, the broker's leases) gives back what
an earlier start of the same host held as soon as a later start calls: that process is gone, and
nobody else can close what it opened. What a request of the earlier start opens after that (one
still being served when its caller died) is given back as soon as it is opened. A restarted
agent's sessions no longer wait for the idle reaper with their sandboxes still counted against
the cap (docs/faults.md).

Callers without the header (NeMo Gym's own servers, a trainer's client) are not tracked.
"""

from __future__ import annotations

import functools
import socket
from typing import Optional

CALLER_HEADER = "x-gym-compose-caller"


@functools.cache
def this_incarnation() -> Optional[str]:
    """`HOST@START` of this process's container; None where /proc/1/stat cannot be read."""
    try:
        with open("/proc/1/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rpartition(")")[2].split()
        start = fields[19]  # field 22 of proc(5), counted after the command name's closing parenthesis
    except (OSError, IndexError):
        return None
    return f"{socket.gethostname()}@{start}"


def caller_headers() -> dict[str, str]:
    incarnation = this_incarnation()
    return {CALLER_HEADER: incarnation} if incarnation else {}


class Incarnations:
    """The latest start seen of each caller host."""

    def __init__(self) -> None:
        self._latest: dict[str, str] = {}

    def observe(self, caller: Optional[str]) -> Optional[str]:
        """Record a request from `caller`; the earlier start of the same host it replaces, if any."""
        if not caller or "@" not in caller:
            return None
        host = caller.rpartition("@")[0]
        earlier = self._latest.get(host)
        if earlier == caller:
            return None
        self._latest[host] = caller
        return earlier

    def replaced(self, caller: Optional[str]) -> bool:
        """Whether a later start of `caller`'s host has called since: what `caller` opens now (a request
        of the dead start that was still being served) has nobody to close it either."""
        if not caller or "@" not in caller:
            return False
        latest = self._latest.get(caller.rpartition("@")[0])
        return latest is not None and latest != caller
