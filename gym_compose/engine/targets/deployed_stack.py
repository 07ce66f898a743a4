"""A deployed stack, whatever runs it: the interface every deployment target implements.

The host-side commands (up, down, ps, logs, `eval run`) drive a stack only through
`DeployedStack`, so that a target is a module of the engine and nothing else changes:

- `compose_project.ComposeProject`: Docker Compose, the default and the reference;
- `swarm_stack.SwarmStack`: Docker Swarm (the same compose model through `docker stack deploy`);
- `local_processes.LocalProcesses`: one local process per server, for tests and benchmarks (no
  Docker, no isolation, no limits).

Kubernetes is rendered only (manifests from the same plan, applied with kubectl). The targets
the CLI offers are the rows of `registry.TARGETS`. Each target has its own renderer from the plan
(`gym_compose.plan.model.Stack`, target-neutral): only that renderer knows the target's words
(compose keys, manifest fields, process environments).
The sandbox broker is the one service whose *backend* changes per target (compose: the Docker
API through the engine's socket; Kubernetes: pods through a namespace-scoped service account);
`sandbox_backend` names it, or is None where a target runs no sandboxes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from gym_compose.errors import StackFailure

EXITED_STATES = ("exited", "dead", "removing")


@dataclass(frozen=True)
class ServiceState:
    """One service (a container, a process) as the target sees it now."""

    service: str
    container: str  # what the target calls it: a container name, a process id
    state: str  # running | exited | created | paused | missing | ...
    health: str  # healthy | unhealthy | starting | "" (no healthcheck)
    exit_code: int
    publishers: list[dict] = field(default_factory=list)  # Compose's `Publishers` rows
    one_off: bool = False  # a one-off run (the collector), not a server
    runtime: str = ""  # lean | nemo_gym (a server's RUNTIME_LABEL); "" when not a server of ours
    node: str = ""  # the swarm node running it; "" on one machine

    @property
    def serving(self) -> bool:
        return self.state == "running" and self.health in ("healthy", "")

    @property
    def published(self) -> list[str]:
        return sorted(
            {f"{p['URL'] or '0.0.0.0'}:{p['PublishedPort']}" for p in self.publishers if p.get("PublishedPort")}
        )


@dataclass(frozen=True)
class StackCheck:
    """The servers of a stack seen at one moment: those that died, those paused, whether any is left."""

    dead: list[ServiceState] = field(default_factory=list)
    paused: list[str] = field(default_factory=list)
    empty: bool = False

    @property
    def lost(self) -> set[str]:
        """The tasks lost with a swarm node (state `lost`), by container name."""
        return {state.container for state in self.dead if state.state == "lost"}

    def since(self, lost_before: set[str]) -> "StackCheck":
        """This check without the tasks that were lost already at an earlier one: a watch that
        begins after a node loss (a --resume) is not stopped by it."""
        dead = [state for state in self.dead if not (state.state == "lost" and state.container in lost_before)]
        return StackCheck(dead=dead, paused=self.paused, empty=self.empty)


@dataclass(frozen=True)
class Leftovers:
    """What of a stack exists: containers (processes; swarm: services), networks, volumes, and
    (swarm) secrets and configs."""

    containers: list[str]
    networks: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.containers or self.networks or self.volumes or self.secrets)

    def count(self) -> str:
        """`5 containers, 1 network`."""
        counts = [(len(self.containers), "container"), (len(self.networks), "network"), (len(self.volumes), "volume"),
                  (len(self.secrets), "secret")]
        return ", ".join(f"{n} {kind}{'s' if n != 1 else ''}" for n, kind in counts if n)

    def describe(self) -> str:
        parts = [f"{kind} {', '.join(names)}" for kind, names in
                 (("containers", self.containers), ("networks", self.networks), ("volumes", self.volumes),
                  ("secrets", self.secrets)) if names]
        return "; ".join(parts)


class StackNotHealthy(StackFailure):
    def __init__(self, message: str, report: str):
        super().__init__(
            f"{message}\n{report}",
            hint="the stack was removed; the lines above are each failing service's last words. "
            "Fix the cause and run the command again",
        )


def check_servers(states: Sequence[ServiceState], services: Sequence[str]) -> StackCheck:
    """Which of `services` died, are paused, or are gone, from one listing of the stack."""
    by_service = {s.service: s for s in states if not s.one_off}
    if not by_service:
        return StackCheck(empty=True)
    dead, paused = [], []
    for service in services:
        state = by_service.get(service)
        if state is None:
            dead.append(ServiceState(service, "", "missing", "", 0))
        elif state.state == "paused":
            paused.append(service)
        elif state.state != "running":
            dead.append(state)
    return StackCheck(dead=dead, paused=paused)


class RunningProcess(Protocol):
    """A long-running process the host owns: a log follower, the one-off collector."""

    def wait(self, timeout: float | None = None) -> int | None: ...

    def stop(self, grace_seconds: float) -> int: ...

    def tell(self, message: dict) -> None: ...

    def close_stdin(self) -> None: ...

    def check(self, engine_only: bool = False) -> None: ...


class DeployedStack(Protocol):
    """One stack on one target: start and wait, look, follow, collect, stop, remove."""

    @property
    def name(self) -> str: ...

    @property
    def sandbox_backend(self) -> str | None: ...

    @property
    def rendered_file(self) -> Path | None:
        """The file the stack was deployed from (compose.yaml, the swarm's stack.yaml), copied
        into a run folder; None where there is none."""
        ...

    def up(self, wait_timeout: float, services: Sequence[str] | None = None) -> None:
        """Start every server and wait until all serve; raise StackNotHealthy (with each failing
        service's last words) when one exits during start-up or the wait runs out."""
        ...

    def ps(self) -> list[ServiceState]: ...

    def quick_states(self) -> list[ServiceState]:
        """`ps` as cheaply as the target can answer it (compose: one `docker ps`): the table `up`
        prints, the checks before a run."""
        ...

    def check_stack(self, services: Sequence[str]) -> StackCheck: ...

    def follow_logs(self, services: Sequence[str], follow: bool, tail: str | None) -> RunningProcess: ...

    def follow_service_log(self, service: str, out: IO[str]) -> RunningProcess | None:
        """`service`'s log lines from the moment of this call, without prefixes, written to `out` until stopped;
        None where the target does not follow one service's log (then nothing was started)."""
        ...

    def log_tail(self, service: str) -> list[str]:
        """The service's last log lines, indented for an error message."""
        ...

    def describe_death(self, state: ServiceState) -> str:
        """`server X exited (exit code 137, OOM-killed ...)`."""
        ...

    def run_one_off(self, service: str, log: IO[str], args: Sequence[str] = ()) -> RunningProcess:
        """Start the one-off collector; it stops when its stdin closes (its lease)."""
        ...

    def one_off_containers(self, service: str | None = None, running_only: bool = False) -> list[str]: ...

    def remove_one_off(self, service: str | None = None) -> None: ...

    def stop(self, grace_seconds: int) -> None: ...

    def down(self) -> Leftovers:
        """Remove everything of the stack; returns what was there. Raises UserError naming
        whatever is still there afterwards."""
        ...
