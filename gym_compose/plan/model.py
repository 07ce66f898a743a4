"""The plan's data: a `Stack` of `Service`s, the options it was planned with, and one
collection run's inputs (`CollectorRun`). A leaf: what render, engine and runs read of a plan,
without the planner.

The plan is target-neutral: a `Service` speaks gym-compose's words (limits, overrides, mounts,
probes; `service_spec`), and each target's renderer maps them to its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from gym_compose.contract import HEAD_PORT, SERVER_PORT, SERVER_USER, SESSION_KEY_SECRET
from gym_compose.plan.runtime_choice import LEAN
from gym_compose.plan.service_spec import Limits, Mount, Overrides, Probe, Scheduling

if TYPE_CHECKING:
    from gym_compose.plan.sandbox_plan import SandboxPlan

HEAD_SERVICE = "head"
COLLECTOR_SERVICE = "collector"


@dataclass(frozen=True)
class StackOptions:
    project: str = "gym-compose"
    head_port: int = HEAD_PORT
    publish_all: bool = False
    bind_address: str = "127.0.0.1"  # the host address the head and published servers bind
    # the address the host view names for them (what clients dial); None: the bind address, or
    # 127.0.0.1 when that is every interface (a trainer passes its node's IP: NeMo Gym's default_host)
    advertise_host: str | None = None

    @property
    def host_view_address(self) -> str:
        if self.advertise_host:
            return self.advertise_host
        return "127.0.0.1" if self.bind_address in ("0.0.0.0", "::", "") else self.bind_address


@dataclass
class Service:
    name: str
    role: str  # head | environment | agent | model | resources | engine
    instance: str | None = None
    implementation: str | None = None
    source_dir: Path | None = None  # folder with the implementation's app.py; None: base image
    port: int = SERVER_PORT
    published_port: int | None = None
    secrets: list[str] = field(default_factory=list)
    limits: Limits = Limits()  # the config's `docker:` block; None fields keep the role's default
    overrides: Overrides = Overrides()
    # an inference engine runs from a ready-made image (pulled, not built), as that image wants:
    image: str | None = None
    command: list[str] = field(default_factory=list)
    mounts: list[Mount] = field(default_factory=list)
    probe: Probe | None = None
    host_ipc: bool = False
    scheduling: Scheduling = Scheduling()  # replicas, placement, reservations (swarm, kubernetes)
    # lean (gym_compose.server on the base image) | nemo_gym (the real package; runtime_choice.py)
    runtime: str = LEAN
    runtime_reason: str = "built-in implementation"
    siblings: tuple[str, ...] = ()  # other servers of its search root its code imports (server_type/name)
    referenced_paths: tuple[str, ...] = ()  # files of its search root its config names (referenced_files.py)
    # requirement lines its image adds to the folder's own (an instance serving /mcp: MCP_REQUIREMENT)
    extra_requirements: tuple[str, ...] = ()


@dataclass
class Stack:
    project: str
    services: list[Service]
    network_config: dict[str, Any]  # NEMO_GYM_CONFIG_DICT inside containers
    host_config: dict[str, Any]  # what the head serves to clients on the host
    secrets: dict[str, str]  # secret name -> value, written to files, never into compose.yaml
    options: StackOptions
    volumes: dict[str, str] = field(default_factory=dict)  # compose key -> docker volume kept across runs
    sandboxes: Optional["SandboxPlan"] = None  # servers that lease sandboxes (plan/sandbox_plan.py)

    def service(self, name: str) -> Service:
        return next(s for s in self.services if s.name == name)


@dataclass(frozen=True)
class CollectorRun:
    """One collection run: rows in (read-only), artifacts out, collector arguments."""

    input_file: Path
    output_dir: Path
    args: list[str] = field(default_factory=list)
    user: str = SERVER_USER  # who writes the artifacts; never root (see runs.run_folders.collector_user)


def session_key_secret(service: str) -> str:
    """The secret holding the session-cookie key a server's replicas share."""
    return f"{SESSION_KEY_SECRET}.{service}"
