"""What a rerun takes from the `docker:` blocks of a manifest's config.

A manifest is a file that travels (a shared results folder) and can be edited, so it gets no more
reach into this machine than a fresh `up` of this checkout's configs has: no host folder mounted,
no capability added, no root user, a read-only root file system. Settings that would widen that
are left out of the rerun, each named with the override that keeps it: what the user gives on the
rerun's own command line is theirs to give, as in any command. The other docker settings
(limits, environment, publish, ...) are kept and named, since they differ from the defaults.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from gym_compose.config.instances import server_blocks
from gym_compose.contract import SERVER_UID

DOCKER_KEY = "docker"


@dataclass(frozen=True)
class LeftOut:
    path: str  # dotted, e.g. my_server.resources_servers.my_impl.docker.cap_add
    value: Any
    why: str

    def override(self) -> str:
        """The command-line argument that gives the setting back, quoted for a shell."""
        return shlex.quote(f"++{self.path}={json.dumps(self.value)}")


def is_root_user(user: Any) -> bool:
    """`0`, `root`, `0:0`, `1000:0`, `root:root`: the user or its group is root's."""
    return any(part.strip() in ("0", "root") for part in str(user).split(":"))


def _widening(key: str, value: Any) -> str | None:
    """Why this docker setting reaches further into the machine than the defaults, or None."""
    if key == "volumes" and value:
        return "mounts host folders or volumes (a fresh `up` of this checkout mounts none)"
    if key == "cap_add" and value:
        return "adds capabilities (every server runs with all of them dropped)"
    if key == "user" and value is not None and is_root_user(value):
        return f"runs as root (servers run as {SERVER_UID}:{SERVER_UID})"
    if key == "read_only" and value is False:
        return "makes the root file system writable (it is read-only)"
    return None


def apply_rerun_policy(config: dict[str, Any]) -> tuple[list[LeftOut], list[str]]:
    """Drop, in place, the docker settings of `config` that widen a server's reach; returns
    (what was left out, `instance: key=value` for each setting kept)."""
    left_out: list[LeftOut] = []
    kept: list[str] = []
    for block in server_blocks(config):
        docker = block.spec.get(DOCKER_KEY)
        if not isinstance(docker, dict):
            continue
        path = f"{block.name}.{block.server_type}.{block.implementation}.{DOCKER_KEY}"
        for key in list(docker):
            why = _widening(key, docker[key])
            if why is not None:
                left_out.append(LeftOut(f"{path}.{key}", docker.pop(key), why))
            else:
                kept.append(f"{block.name}: {key}={json.dumps(docker[key])}")
    return left_out, kept


def policy_report(left_out: list[LeftOut], kept: list[str]) -> list[str]:
    """The lines a rerun says about it on stderr (none when the run set no docker setting)."""
    lines = []
    if left_out:
        lines.append("rerun: left out of the run's config, as a fresh `up` would not give them "
                     "(to keep one, add its argument to this command):")
        lines += [f"  {item.path}: {json.dumps(item.value)} {item.why}\n    {item.override()}" for item in left_out]
    if kept:
        lines.append("rerun: docker settings kept from the run (not the defaults): " + "; ".join(kept))
    return lines
