"""Docker Swarm for one stack: `docker stack deploy` of the rendered project, and the collector as
a one-off job service. The swarm target of `engine.targets.deployed_stack.DeployedStack`.

A task with a healthcheck stays `starting` until its container is healthy, so `docker stack ps`
(what Swarm knows on every node) tells both state and health. The collector runs as a
`replicated-job` service placed on this node (the manager the CLI talks to), so that its bind
mounts are this machine's run folder and rows: that is how results reach the host's results
folder. It has no stdin; stopping it removes the service, whose SIGTERM the collector treats as
its lease ending (rollouts in flight stay pending for --resume).
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gym_compose.contract import PROJECT_LABEL, ROLE_LABEL
from gym_compose.engine.clock import SYSTEM_CLOCK, Clock
from gym_compose.engine.docker_cli import DockerProcess, DockerTimeout, indented_tail, run_docker, start_docker
from gym_compose.engine.targets.deployed_stack import (
    Leftovers,
    ServiceState,
    StackCheck,
    StackNotHealthy,
    check_servers,
)
from gym_compose.errors import EngineFailure, UserError

STACK_LABEL = "com.docker.stack.namespace"
WAIT_POLL_SECONDS = 1.0
LOG_DRAIN_SECONDS = 10.0  # at most, after a job ended, for its log stream to bring its last lines
LOG_SETTLED_SECONDS = 1.0  # a log that stood still this long after the job ended holds all it said
LOG_SETTLE_POLL_SECONDS = 0.2
DEPLOY_TIMEOUT_SECONDS = 300
REMOVE_WAIT_SECONDS = 90
LOG_TAIL_LINES = 15
LOG_TAIL_TIMEOUT_SECONDS = 15
FINISHED = ("complete", "failed", "shutdown", "rejected", "orphaned", "remove")
EXIT_CODE = re.compile(r"non-zero exit \((\d+)\)")


def swarm_state() -> str:
    """`active`, `inactive`, `pending`, `error`, `locked`: the engine's swarm mode."""
    result = run_docker(["info", "--format", "{{.Swarm.LocalNodeState}}"], timeout=30, retries=2)
    return result.stdout.strip()


def require_swarm() -> None:
    state = swarm_state()
    if state != "active":
        raise EngineFailure(f"this Docker engine is not a swarm manager (swarm state: {state or 'unknown'})",
                            hint="make it one with `docker swarm init --advertise-addr 127.0.0.1` (compose "
                            "projects keep working), or join it to a swarm as a manager")


def node_id() -> str:
    return run_docker(["info", "--format", "{{.Swarm.NodeID}}"], timeout=30, retries=2).stdout.strip()


@dataclass(frozen=True)
class SwarmStack:
    name: str
    compose_file: Path | None = None  # the rendered stack.yaml (collector.yaml beside it)
    clock: Clock = field(default=SYSTEM_CLOCK, compare=False, repr=False)
    sandbox_backend: str | None = "docker"  # the broker's node's engine, as under compose

    @property
    def rendered_file(self) -> Path | None:
        return self.compose_file

    def service_name(self, service: str) -> str:
        return f"{self.name}_{service}"

    def up(self, wait_timeout: float, services: Sequence[str] | None = None) -> None:
        """Deploy the stack and wait until every task of every service is running (healthy)."""
        if self.compose_file is None:
            raise UserError(f"stack {self.name!r} has no rendered stack file")
        result = run_docker(["stack", "deploy", "--compose-file", str(self.compose_file), "--prune",
                             "--resolve-image", "never", self.name], timeout=DEPLOY_TIMEOUT_SECONDS, check=False)
        if not result.ok:
            raise StackNotHealthy("the stack could not be deployed:", indented_tail(result.stderr or result.stdout, 10))
        deadline = self.clock.monotonic() + wait_timeout
        expected = set(services or [])
        while True:
            states = [s for s in self.ps() if not s.one_off]
            dead = [s for s in states if s.state == "exited"]
            if dead:
                raise StackNotHealthy(f"{', '.join(sorted({s.service for s in dead}))} stopped during start-up:",
                                      self.failure_report(dead))
            running = {s.service for s in states}
            if states and expected <= running and all(s.serving for s in states) and self._all_replicas_up():
                return
            if self.clock.monotonic() > deadline:
                waiting = [s for s in states if not s.serving]
                raise StackNotHealthy(f"not healthy within {wait_timeout:.0f} s:", self.failure_report(waiting))
            self.clock.sleep(WAIT_POLL_SECONDS)

    def _all_replicas_up(self) -> bool:
        for row in self._services():
            running, _, wanted = str(row.get("Replicas", "")).partition("/")
            # more running than wanted: a lost node's tasks count as running until it returns
            if not wanted or not running.isdigit() or int(running) < int(wanted.split(" ")[0]):
                return False
        return True

    def _services(self) -> list[dict[str, Any]]:
        result = run_docker(["service", "ls", "--filter", f"label={PROJECT_LABEL}={self.name}",
                             "--format", "{{json .}}"], timeout=30, retries=2)
        return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]

    def ps(self) -> list[ServiceState]:
        """One row per current task (the latest of each replica slot), the collector job included."""
        return self._states(*self._task_rows())

    def _states(self, services: dict[str, dict[str, Any]], rows: list[dict[str, Any]]) -> list[ServiceState]:
        states: dict[str, ServiceState] = {}
        for row in rows:
            name = str(row.get("Name", ""))
            service_row = services.get(name.split(".")[0])
            if service_row is None:
                continue  # an earlier task of the same slot (`\_ NAME`)
            job = str(service_row.get("Mode", "")).endswith("job")
            states.setdefault(name, _task_state(self.name, row, str(service_row.get("Ports", "")), job))
        return sorted(states.values(), key=lambda s: (s.one_off, s.service, s.container))

    def _task_rows(self) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
        """The stack's services by name, and `docker service ps` rows of all their tasks, newest of each slot first."""
        services = {row["Name"]: row for row in self._services()}
        if not services:
            return services, []
        result = run_docker(["service", "ps", "--no-trunc", "--format", "{{json .}}", *services],
                            timeout=30, retries=2, check=False)
        return services, [json.loads(line) for line in result.stdout.splitlines() if line.strip().startswith("{")]

    def _lost_tasks(self, services: dict[str, dict[str, Any]], rows: list[dict[str, Any]]) -> list[ServiceState]:
        """Server tasks Swarm gave up with their node: the node is down, the task's desired state is
        shutdown and its last report says running. Swarm may already run a replacement, but
        requests in flight to the lost one never answer."""
        orphaned = [row for row in rows if str(row.get("DesiredState", "")).lower() == "shutdown"
                    and str(row.get("CurrentState", "")).lower().startswith("running")]
        if not orphaned:
            return []
        down = {str(node.get("Hostname")) for node in _nodes() if str(node.get("Status", "")).lower() == "down"}
        lost = []
        for row in orphaned:
            name = str(row.get("Name", "")).removeprefix("\\_").strip()
            service_row = services.get(name.split(".")[0])
            if service_row is None or str(service_row.get("Mode", "")).endswith("job") or row.get("Node") not in down:
                continue
            lost.append(ServiceState(service=name[len(self.name) + 1:].rsplit(".", 1)[0],
                                     container=f"{name}.{row.get('ID', '')}", state="lost", health="", exit_code=0,
                                     node=str(row.get("Node", ""))))
        return lost

    def quick_states(self) -> list[ServiceState]:
        return self.ps()

    def follow_service_log(self, service: str, out: IO[str]) -> None:
        return None  # the service may run on another node; its log is not followed

    def check_stack(self, services: Sequence[str]) -> StackCheck:
        rows = self._task_rows()
        states = self._states(*rows)
        check = check_servers(states, services)
        dead = {s.service for s in check.dead}
        # a replica that died counts, even when another of the same service still runs; so does
        # one lost with its node, even when its replacement already runs
        extra = [s for s in states if not s.one_off and s.state == "exited" and s.service not in dead]
        return StackCheck(dead=[*check.dead, *extra, *self._lost_tasks(*rows)], paused=check.paused,
                          empty=check.empty)

    def log_tail(self, service: str) -> list[str]:
        try:
            result = run_docker(["service", "logs", "--raw", "--tail", str(LOG_TAIL_LINES), self.service_name(service)],
                                timeout=LOG_TAIL_TIMEOUT_SECONDS, check=False)
        except DockerTimeout:  # Swarm waits for the logs of a task whose node is gone
            return [f"      (no log lines within {LOG_TAIL_TIMEOUT_SECONDS} s: is the node that ran it gone? "
                    "see `docker node ls`)"]
        return ["      " + line for line in (result.stdout + result.stderr).splitlines()[-LOG_TAIL_LINES:]]

    def describe_death(self, state: ServiceState) -> str:
        if state.state == "lost":
            return (f"server {state.service} ({state.container}) was lost with node {state.node}, which is down "
                    "(`docker node ls`); Swarm runs it elsewhere, but its rollouts in flight never answer")
        if state.state == "missing":
            return f"server {state.service} is gone"
        if state.state == "exited":
            return f"server {state.service} ({state.container}) exited (exit code {state.exit_code})"
        # a new task in the slot of one that ran: Swarm replaces a task whose node was lost
        return (f"server {state.service} ({state.container}) stopped serving: Swarm is starting it again "
                f"({state.state}); see `docker node ls` for a node that is down")

    def failure_report(self, states: Sequence[ServiceState]) -> str:
        lines = []
        for state in states:
            lines.append(f"  {state.service} ({state.container}): {state.state}"
                         + (f", health {state.health}" if state.health else ""))
            lines += self.log_tail(state.service) or ["      (no log lines)"]
        return "\n".join(lines)

    def follow_logs(self, services: Sequence[str], follow: bool, tail: str | None) -> "ServiceLogs":
        names = list(services) or [str(row["Name"])[len(self.name) + 1:] for row in self._services()]
        args = ["--follow"] if follow else []
        if tail is not None:
            args += ["--tail", tail]
        return ServiceLogs([start_docker(["service", "logs", *args, self.service_name(name)], stderr_to=sys.stderr)
                            for name in names])

    def run_one_off(self, service: str, log: IO[str], args: Sequence[str] = ()) -> "SwarmJob":
        """The collector as a job service on this node (its bind mounts are this machine's folders)."""
        from gym_compose.render.swarm import load_collector_spec

        assert self.compose_file is not None
        spec = load_collector_spec(self.compose_file)
        command = [arg for arg in [*spec.get("command", []), *args] if arg != "--host-lease"]
        create = ["service", "create", "--detach", "--name", self.service_name(service), "--mode", "replicated-job",
                  "--restart-condition", "none", "--constraint", f"node.id=={node_id()}",
                  "--network", self.service_name("gym"), "--label", f"{PROJECT_LABEL}={self.name}",
                  "--label", f"{ROLE_LABEL}={service}", "--container-label", f"{PROJECT_LABEL}={self.name}",
                  "--entrypoint", " ".join(spec["entrypoint"]), "--user", str(spec["user"]), "--init",
                  "--read-only", "--cap-drop", "ALL", "--stop-grace-period", "30s",
                  "--limit-memory", str(spec.get("mem_limit", "1g")).upper(),
                  "--limit-pids", str(spec.get("pids_limit", 256)), "--mount", "type=tmpfs,target=/tmp"]
        for key, value in spec.get("environment", {}).items():
            create += ["--env", f"{key}={value}"]
        for mount in spec.get("volumes", []):
            create += ["--mount", f"type=bind,source={mount['source']},target={mount['target']}"
                       + (",readonly" if mount.get("read_only") else "")]
        self.remove_one_off(service)  # a finished one left behind (no collector runs: the caller checked)
        result = run_docker([*create, spec["image"], *command], timeout=120, check=False)
        if not result.ok:
            raise EngineFailure(f"the collector service could not be created:\n{indented_tail(result.stderr, 10)}")
        logs = start_docker(["service", "logs", "--follow", "--raw", self.service_name(service)], stdout=log,
                            stderr_to=log)
        return SwarmJob(self, service, logs, log)

    def one_off_containers(self, service: str | None = None, running_only: bool = False) -> list[str]:
        names = [str(row["Name"]) for row in self._services() if str(row.get("Mode", "")).endswith("job")]
        if service:
            names = [name for name in names if name == self.service_name(service)]
        if running_only:
            names = [name for name in names
                     if any(s.state == "running" for s in self.ps() if s.one_off and s.container.startswith(name))]
        return names

    def remove_one_off(self, service: str | None = None) -> None:
        names = self.one_off_containers(service)
        if names:
            run_docker(["service", "rm", *names], timeout=60, check=False)
        # Swarm (20.10) keeps the container of a completed job task after its service is removed
        for name in names:
            found = run_docker(["ps", "-aq", "--filter", f"label=com.docker.swarm.service.name={name}"],
                               timeout=30, check=False).stdout.split()
            if found:
                run_docker(["rm", "-f", *found], timeout=60, check=False)

    def stop(self, grace_seconds: int) -> None:
        """Nothing to do before `down`: `docker stack rm` stops each task with its grace period."""

    def leftovers(self) -> Leftovers:
        found: dict[str, set[str]] = {"service": set(), "network": set(), "secret": set(), "config": set()}
        for kind in found:
            for label in (PROJECT_LABEL, STACK_LABEL):
                result = run_docker([kind, "ls", "--filter", f"label={label}={self.name}", "--format", "{{.Name}}"],
                                    timeout=30, retries=2)
                found[kind].update(result.stdout.split())
        containers = [name for label in (STACK_LABEL, PROJECT_LABEL) for name in run_docker(
            ["ps", "-a", "--filter", f"label={label}={self.name}", "--format", "{{.Names}}"],
            timeout=30, retries=2).stdout.split()]
        return Leftovers(sorted(found["service"] | set(containers)), sorted(found["network"]),
                         secrets=sorted(found["secret"] | found["config"]))

    def down(self) -> Leftovers:
        """`docker stack rm`, the collector job and the sandboxes; then wait until Swarm has removed
        every task, network and secret (it does so after the command returns)."""
        before = self.leftovers()
        from gym_compose.engine.targets.sandbox_containers import remove_sandboxes

        remove_sandboxes(self.name)
        self.remove_one_off()
        said = run_docker(["stack", "rm", self.name], timeout=120, retries=2, check=False)
        deadline = self.clock.monotonic() + REMOVE_WAIT_SECONDS
        after = self.leftovers()
        while after and self.clock.monotonic() < deadline:
            self.clock.sleep(WAIT_POLL_SECONDS)
            after = self.leftovers()
        if after:
            raise EngineFailure(f"stack {self.name!r} is not fully removed; still there: {after.describe()}"
                                + (f"\n{indented_tail(said.stderr, 5)}" if not said.ok else ""),
                                hint=f"see `docker stack ps {self.name}`, then run `gym-compose down -p {self.name}` "
                                "again")
        return before


def _nodes() -> list[dict[str, Any]]:
    result = run_docker(["node", "ls", "--format", "{{json .}}"], timeout=30, retries=2, check=False)
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip().startswith("{")]


def _task_state(stack: str, row: dict[str, Any], ports: str, job: bool) -> ServiceState:
    name = str(row["Name"])  # STACK_SERVICE.SLOT (a job: STACK_SERVICE.NODEID)
    service = name[len(stack) + 1:].rsplit(".", 1)[0]
    current = str(row.get("CurrentState", "")).split(" ")[0].lower()
    error = str(row.get("Error", ""))
    match = EXIT_CODE.search(error)
    if current == "running":
        state, health = "running", "healthy"
    elif current in FINISHED:
        state, health = "exited", ""
    else:  # new, pending, assigned, accepted, preparing, ready, starting
        state, health = "running" if current == "starting" else "created", "starting"
    publishers = [{"URL": "0.0.0.0", "PublishedPort": int(port)}
                  for port in re.findall(r":(\d+)->", ports)]
    return ServiceState(service=service, container=name, state=state, health=health,
                        exit_code=int(match.group(1)) if match else int(state == "exited" and current != "complete"),
                        publishers=publishers, one_off=job, node=str(row.get("Node", "")))


class ServiceLogs:
    """`docker service logs` of several services, as one running process."""

    def __init__(self, processes: list[DockerProcess]):
        self.processes = processes

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        codes = []
        for process in self.processes:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            code = process.wait(left)
            if code is None:
                return None
            codes.append(code)
        return max(codes, default=0)

    def stop(self, grace_seconds: float) -> int:
        return max((process.stop(grace_seconds) for process in self.processes), default=0)

    def tell(self, message: dict) -> None:
        pass

    def close_stdin(self) -> None:
        pass

    def check(self, engine_only: bool = False) -> None:
        for process in self.processes:
            process.check(engine_only)


class SwarmJob:
    """The collector job service, seen as a process: it has exited once its task finished."""

    def __init__(self, stack: SwarmStack, service: str, logs: DockerProcess, log: IO[str] | None = None):
        self.stack, self.service, self.logs, self.log = stack, service, logs, log
        self._code: int | None = None
        self._next_look = 0.0

    def _look(self) -> int | None:
        if self._code is None and time.monotonic() >= self._next_look:
            self._next_look = time.monotonic() + WAIT_POLL_SECONDS
            tasks = [s for s in self.stack.ps() if s.one_off and s.service == self.service]
            if tasks and tasks[0].state == "exited":
                self._code = tasks[0].exit_code
                time.sleep(1.0)  # the job's last lines on their way through the log stream
                self.stack.remove_one_off(self.service)
                self._stop_logs_once_settled()
        return self._code

    def _stop_logs_once_settled(self) -> None:
        """`service logs --follow` of a finished job never ends by itself (Engine 20.10: not even once
        its service is removed), so it is stopped once the log it writes has stood still for
        LOG_SETTLED_SECONDS, or after LOG_DRAIN_SECONDS: a wait of 10 s after every run before."""
        deadline = time.monotonic() + LOG_DRAIN_SECONDS
        size, still_since = -1, time.monotonic()
        while self.logs.wait(LOG_SETTLE_POLL_SECONDS) is None:
            now = time.monotonic()
            grown = _file_size(self.log)
            if grown != size:
                size, still_since = grown, now
            if now >= deadline or (size >= 0 and now - still_since >= LOG_SETTLED_SECONDS):
                self.logs.stop(3)
                return

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._look() is None:
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(min(0.2, WAIT_POLL_SECONDS))
        return self._code

    def stop(self, grace_seconds: float) -> int:
        self.stack.remove_one_off(self.service)
        self.logs.stop(grace_seconds)
        return self._code if self._code is not None else 143

    def tell(self, message: dict) -> None:
        """No stdin to a service: a stop request ends the job (SIGTERM: rollouts in flight stay pending)."""
        if "stop" in message:
            self.close_stdin()

    def close_stdin(self) -> None:
        """SIGTERM to the job's container (placed on this node), which the collector takes as its lease ending."""
        label = f"com.docker.swarm.service.name={self.stack.service_name(self.service)}"
        containers = run_docker(["ps", "-q", "--filter", f"label={label}"], timeout=30, check=False).stdout.split()
        if containers:
            run_docker(["kill", "--signal", "TERM", *containers], timeout=30, check=False)

    def check(self, engine_only: bool = False) -> None:
        self.logs.check(engine_only=True)


def _file_size(log: IO[str] | None) -> int:
    """Bytes in the file behind `log` (written by another process), -1 when it is not a file."""
    try:
        return os.fstat(log.fileno()).st_size if log is not None else -1
    except (OSError, ValueError, io.UnsupportedOperation):
        return -1
