"""What a stopped or failing container left behind: its state, OOM flag, healthcheck output, log tail.

Used when a stack does not become healthy (`failure_report`) and when a server dies while it
serves (`describe_death`): each names the service with its exit code and whether the kernel
killed it for memory, then its last log lines.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gym_compose.engine.docker_cli import DockerCommandError, run_docker

if TYPE_CHECKING:
    from gym_compose.engine.targets.compose_project import ComposeProject, ServiceState

LOG_TAIL_LINES = 15
HEALTH_OUTPUT_CHARS = 300


@dataclass(frozen=True)
class ContainerDetails:
    oom_killed: bool = False
    exit_code: int | None = None
    health_output: str = ""


def inspect_container(container: str) -> ContainerDetails:
    """The engine's record of a container; empty details for one that is already gone."""
    result = run_docker(["inspect", container], timeout=30, retries=2, check=False)
    if not result.ok:
        return ContainerDetails()
    info = json.loads(result.stdout or "[]")
    if not info:
        return ContainerDetails()
    state = info[0].get("State", {})
    health_log = (state.get("Health") or {}).get("Log") or []
    return ContainerDetails(
        oom_killed=bool(state.get("OOMKilled", False)),
        exit_code=state.get("ExitCode"),
        health_output=health_log[-1].get("Output", "") if health_log else "",
    )


def logs_tail(project: ComposeProject, service: str, lines: int = LOG_TAIL_LINES) -> str:
    try:
        result = run_docker(
            [*project.compose_args(), "logs", "--no-color", "--no-log-prefix", "--tail", str(lines), service],
            timeout=30,
            retries=1,
        )
    except DockerCommandError as error:
        return f"(could not read logs: {error})"
    return (result.stdout + result.stderr).rstrip()


def describe_exit(service: str, exit_code: int | None, oom_killed: bool) -> str:
    """`server X exited (exit code 137, OOM-killed)`: what a failure row and the CLI say."""
    if exit_code is None:
        return f"server {service} is gone (its container was removed)"
    if oom_killed:
        cause = "OOM-killed: it ran out of memory; raise its `docker: memory:`"
    elif exit_code == 137:
        cause = "killed (SIGKILL), not out of memory"
    elif exit_code == 143:
        cause = "stopped (SIGTERM)"
    else:
        cause = "not OOM-killed"
    return f"server {service} exited (exit code {exit_code}, {cause})"


def describe_death(state: ServiceState) -> str:
    if state.state == "missing":
        return describe_exit(state.service, None, False)
    details = inspect_container(state.container)
    exit_code = details.exit_code if details.exit_code is not None else state.exit_code
    return describe_exit(state.service, exit_code, details.oom_killed)


def failure_report(project: ComposeProject) -> str:
    """For each service not running and healthy: state, OOM, health output and log tail."""
    lines = []
    for state in project.ps():
        if state.one_off or (state.state == "running" and state.health in ("healthy", "")):
            continue
        details = inspect_container(state.container)
        oom = " OOM-killed;" if details.oom_killed else ""
        lines.append(
            f"  - {state.service}: {state.state}"
            + (f" ({state.health})" if state.health else "")
            + (f", exit code {state.exit_code}" if state.state == "exited" else "")
            + f";{oom} last log lines:"
        )
        lines += indented_log(project, state.service)
        if details.health_output:
            lines.append(f"      healthcheck: {details.health_output.strip()[:HEALTH_OUTPUT_CHARS]}")
    return "\n".join(lines) or "  (no container of the project is left; see `docker compose logs`)"


def indented_log(project: ComposeProject, service: str) -> list[str]:
    return [f"      {line}" for line in logs_tail(project, service).splitlines()[-LOG_TAIL_LINES:]]
