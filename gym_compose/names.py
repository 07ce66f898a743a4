"""Generated names that fit every target's limits by themselves.

A server's service name is a host name on the stack's network (one DNS label: 63 characters),
and each target builds longer names from it and the project name:

- compose: the container `PROJECT-SERVICE-1` (also a DNS alias on the network);
- Swarm: the service `PROJECT_SERVICE` (at most 63 characters; its tasks `PROJECT_SERVICE.N.ID`
  resolve on the network), secrets `PROJECT_KEY` (at most 64);
- Kubernetes: the Service and Deployment `SERVICE` (a DNS label), label values (63), other
  objects `PROJECT-...` (the Job's name is a label value too: 63; the rest 253).

So a service name gets `service_budget(project)` characters: what is left of 63 once
`PROJECT-` and `-1` are around it. A name longer than its budget keeps its first characters and
ends in a hash of the whole original name (`shortened`): the same input always gives the same
name, and two different inputs stay different. The full instance name stays in the instance label
(`io.gym-compose.instance`; a Kubernetes annotation) and `gym-compose ps` shows it.

Standard library only: the sandbox broker (inside its container) names its sandboxes with it too.
"""

from __future__ import annotations

import hashlib
import re

DNS_LABEL = 63  # RFC 1035: one label of a host name; also a Swarm service, a Kubernetes label value
SWARM_SECRET = 64  # a Swarm secret or config name, its stack prefix included
HASH_CHARS = 8
REPLICA_SUFFIX = "-1"  # compose's container name ends in the replica's number
LONGEST_FIXED_SERVICE = "sandbox-broker"  # the longest service name gym-compose itself gives
# A project name must leave the longest fixed service name its whole budget.
MAX_PROJECT = DNS_LABEL - len("-") - len(REPLICA_SUFFIX) - len(LONGEST_FIXED_SERVICE)


def dns_safe(name: str) -> str:
    """Lower case letters, digits and single `-` (other characters become `-`); may be empty."""
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")


def shortened(name: str, limit: int, original: str | None = None) -> str:
    """`name` if it has at most `limit` characters, else its start, `-` and a hash of `original`
    (default: `name`) in exactly `limit` characters."""
    if len(name) <= limit:
        return name
    if limit < HASH_CHARS + 2:
        raise ValueError(f"no name fits in {limit} characters")
    digest = hashlib.sha256((original if original is not None else name).encode()).hexdigest()[:HASH_CHARS]
    start = name[:limit - HASH_CHARS - 1].rstrip("-_.")
    return f"{start}-{digest}" if start else digest


def service_budget(project: str) -> int:
    """Characters a service name of `project` may have: `PROJECT-SERVICE-1` in one DNS label."""
    return min(DNS_LABEL, DNS_LABEL - len(project) - len("-") - len(REPLICA_SUFFIX))


def project_too_long(project: str) -> str | None:
    """Why `project` leaves too little room for service names, or None when it does not."""
    if len(project) <= MAX_PROJECT:
        return None
    return (f"project name {project!r} has {len(project)} characters, too many for the names made from it: a "
            f"container is PROJECT-SERVICE-1 and a Swarm service PROJECT_SERVICE, each at most {DNS_LABEL} "
            f"characters (a DNS label), which leaves {max(service_budget(project), 0)} for the service "
            f"{LONGEST_FIXED_SERVICE!r} of {len(LONGEST_FIXED_SERVICE)}")


def was_shortened(service: str, instance: str) -> bool:
    """Whether `service` is not simply the instance name made DNS-safe (then `ps` shows the instance)."""
    return service != dns_safe(instance)
