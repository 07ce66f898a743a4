"""The local-process target: every server of a stack as a process on this machine, no Docker.

Each instance runs `python -m gym_compose.server` exactly as its container would (the same
environment variables from `gym_compose.contract`), bound to 127.0.0.1 on a free port; the
collector runs as `python -m gym_compose.collect`. It implements `engine.targets.deployed_stack.DeployedStack`,
so the host-side commands, the protocol tests and the benchmarks drive it the way they drive a
compose project. No isolation: limits, images and networks do not apply, and it runs neither
inference-engine images nor sandboxes. Every wait is bounded.
"""

from __future__ import annotations

import copy
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import yaml

from gym_compose.child_process import ChildProcess
from gym_compose.contract import (
    CONFIG_DICT_ENV,
    CONFIG_PATH_ENV,
    HEAD_INSTANCE,
    INFERENCE_ROLE,
    LISTEN_FD_ENV,
    LOG_LEVEL_ENV,
    PROJECT_ENV,
    SECRETS_DIR_ENV,
    SERVER_DIR_ENV,
    SERVER_TYPES,
)
from gym_compose.engine.clock import SYSTEM_CLOCK, Clock
from gym_compose.engine.targets.deployed_stack import (
    Leftovers,
    ServiceState,
    StackCheck,
    StackNotHealthy,
    check_servers,
)
from gym_compose.engine.targets.postmortem import LOG_TAIL_LINES, describe_exit
from gym_compose.errors import UserError
from gym_compose.server.healthcheck import is_ready

LOCALHOST = "127.0.0.1"
READY_POLL_SECONDS = 0.05
COLLECTOR = "collector"

if TYPE_CHECKING:
    from gym_compose.plan.model import CollectorRun, Stack


# Ports handed out by free_port and not yet given to a server, each held by a listening socket:
# a probe closed before the server binds would leave the port to any other process (a parallel test's
# server, or an outgoing connection's ephemeral port) until the server binds it ("address already in
# use"). The server inherits the socket itself (LISTEN_FD_ENV), so there is no such gap.
_HELD: dict[int, socket.socket] = {}
_HELD_LOCK = threading.Lock()


def free_port() -> int:
    """A free port on 127.0.0.1, held for this process until a server started here takes it."""
    listener = _listening_socket(0)
    port = listener.getsockname()[1]
    with _HELD_LOCK:
        _HELD[port] = listener
    return port


def _listening_socket(port: int) -> socket.socket:
    listener = socket.socket()
    # As uvicorn binds its own: a server started again on the port of one that died binds while the
    # dead one's connections are still closing. A listening socket still keeps every other bind out.
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((LOCALHOST, port))
        listener.listen(4096)
    except OSError:
        listener.close()
        raise
    return listener


def listener_for(port: int) -> socket.socket:
    """The held socket of `port`, or (a server started again) a new one bound to it."""
    with _HELD_LOCK:
        held = _HELD.pop(port, None)
    if held is not None:
        return held
    try:
        return _listening_socket(port)
    except OSError as error:
        raise UserError(f"port {port} of this local stack was taken while its server was down: {error}",
                        hint="run the stack again: it picks new free ports") from None


def release_ports(ports: Sequence[int]) -> None:
    """Give back held ports that no server took (a stack torn down before it started)."""
    with _HELD_LOCK:
        held = [_HELD.pop(port) for port in ports if port in _HELD]
    for listener in held:
        listener.close()


def server_instance_names(config: dict[str, Any]) -> list[str]:
    return [name for name, entry in config.items()
            if isinstance(entry, dict) and any(kind in entry for kind in SERVER_TYPES)]


def with_local_addresses(config: dict[str, Any]) -> dict[str, Any]:
    """A copy of the config where the head and every instance have host 127.0.0.1 and a free port."""
    config = copy.deepcopy(config)
    config[HEAD_INSTANCE] = {"host": LOCALHOST, "port": free_port()}
    for name in server_instance_names(config):
        for kind in SERVER_TYPES:
            if kind in config[name]:
                spec = next(iter(config[name][kind].values()))
                spec["host"], spec["port"] = LOCALHOST, free_port()
    return config


class LocalProcess(ChildProcess):
    """A process we started (the collector, a log follower): the target's `RunningProcess`."""

    def check(self, engine_only: bool = False) -> None:
        code = self.poll()
        if code and not engine_only:
            raise UserError(f"local process {self._popen.args!r} exited with {code}")


class LogFollower:
    """`logs` for local processes: copies the log files' new lines to a stream until stopped."""

    def __init__(self, paths: list[Path], out: IO[str], follow: bool, tail: int | None):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._copy, args=(paths, out, follow, tail), daemon=True)
        self._thread.start()

    def _copy(self, paths: list[Path], out: IO[str], follow: bool, tail: int | None) -> None:
        handles = []
        for path in paths:
            handle = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115 - closed below
            lines = handle.readlines()
            out.writelines(lines[-tail:] if tail is not None and tail > 0 else ([] if tail == 0 else lines))
            handles.append(handle)
        out.flush()
        try:
            while follow and not self._stop.wait(READY_POLL_SECONDS * 4):
                for handle in handles:
                    out.writelines(handle.readlines())
                out.flush()
        finally:
            for handle in handles:
                handle.close()

    def wait(self, timeout: float | None = None) -> int | None:
        self._thread.join(timeout)
        return None if self._thread.is_alive() else 0

    def stop(self, grace_seconds: float) -> int:
        self._stop.set()
        self._thread.join(grace_seconds)
        return 0

    def tell(self, message: dict) -> None:
        return None

    def close_stdin(self) -> None:
        return None

    def check(self, engine_only: bool = False) -> None:
        return None


@dataclass
class LocalProcesses:
    """One stack as local processes; `config` is the in-network config with local addresses."""

    config: dict[str, Any]
    server_dirs: dict[str, Path] = field(default_factory=dict)  # instance -> GYM_COMPOSE_SERVER_DIR
    extra_env: dict[str, str] = field(default_factory=dict)
    log_dir: Path | None = None
    name: str = "local"
    services: dict[str, str] = field(default_factory=dict)  # service name -> instance; default: the instance names
    collector: CollectorRun | None = None
    secrets_dir: Path | None = None
    clock: Clock = field(default=SYSTEM_CLOCK, repr=False)
    sandbox_backend: str | None = None  # no sandboxes: nothing here isolates them
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)  # instance -> its process
    log_files: dict[str, IO[bytes]] = field(default_factory=dict)  # instance -> its open log, closed by stop()
    one_offs: list[LocalProcess] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.services:
            self.services = {name: name for name in [HEAD_INSTANCE, *server_instance_names(self.config)]}

    @classmethod
    def for_stack(cls, stack: Stack, log_dir: Path, collector: CollectorRun | None = None,
                  extra_env: dict[str, str] | None = None) -> LocalProcesses:
        """The local target's renderer: the plan's in-network config with local addresses, each
        server's code folder, and its secrets as files (limits do not apply here)."""
        engines = [s.name for s in stack.services if s.role == INFERENCE_ROLE]
        if engines:
            raise UserError(f"the local-process target runs no inference engine images: {', '.join(engines)}",
                            hint="use the compose target, or point the model at an endpoint that is up")
        if stack.sandboxes is not None:  # its sandbox_backend is None: nothing here would isolate them
            leasing = ", ".join(server.instance for server in stack.sandboxes.servers)
            raise UserError(f"the local-process target runs no sandboxes, which {leasing} lease",
                            hint="use the compose target (its sandbox broker starts them through the engine)")
        log_dir.mkdir(parents=True, exist_ok=True)
        secrets_dir = None
        if stack.secrets:
            secrets_dir = log_dir / "secrets"
            secrets_dir.mkdir(mode=0o700, exist_ok=True)
            for secret, value in stack.secrets.items():
                (secrets_dir / secret).write_text(value, encoding="utf-8")
        services = {s.name: s.instance or HEAD_INSTANCE for s in stack.services}
        return cls(config=with_local_addresses(stack.network_config),
                   server_dirs={s.instance: s.source_dir for s in stack.services if s.instance and s.source_dir},
                   extra_env=dict(extra_env or {}), log_dir=log_dir, name=stack.project, services=services,
                   collector=collector, secrets_dir=secrets_dir)

    # --- addresses (tests and benchmarks call these by instance name) ---------------------------
    def port(self, name: str) -> int:
        name = self.services.get(name, name)
        if name == HEAD_INSTANCE:
            return int(self.config[HEAD_INSTANCE]["port"])
        entry = self.config[name]
        kind = next(kind for kind in SERVER_TYPES if kind in entry)
        return int(next(iter(entry[kind].values()))["port"])

    def url(self, name: str) -> str:
        return f"http://{LOCALHOST}:{self.port(name)}"

    def _service(self, instance: str) -> str:
        return next((service for service, inst in self.services.items() if inst == instance), instance)

    def _instance(self, service: str) -> str:
        return self.services.get(service, service)

    # --- DeployedStack -----------------------------------------------------------------------------
    def up(self, wait_timeout: float, services: Sequence[str] | None = None) -> None:
        config_yaml = yaml.safe_dump(self.config, sort_keys=False)
        instances = [self._instance(s) for s in services] if services else list(self.services.values())
        for name in instances:
            if name in self.processes and self.processes[name].poll() is None:
                continue
            env = {**os.environ, **self.extra_env, CONFIG_DICT_ENV: config_yaml, CONFIG_PATH_ENV: name,
                   LOG_LEVEL_ENV: self.extra_env.get(LOG_LEVEL_ENV, "WARNING")}
            env.pop(SERVER_DIR_ENV, None)
            if name in self.server_dirs:
                env[SERVER_DIR_ENV] = str(self.server_dirs[name])
            if self.secrets_dir is not None:
                env[SECRETS_DIR_ENV] = str(self.secrets_dir)
            output: int | IO[bytes] = subprocess.DEVNULL
            if self.log_dir is not None:
                output = self.log_files[name] = open(self.log_dir / f"{name}.log", "wb")  # noqa: SIM115 - stop() closes it
            # The server accepts on this socket; the copy here is closed at once, so a server that
            # dies leaves its port refusing connections, as a stopped container's does.
            with listener_for(self.port(name)) as listener:
                env[LISTEN_FD_ENV] = str(listener.fileno())
                self.processes[name] = subprocess.Popen(
                    [sys.executable, "-m", "gym_compose.server"], env=env, stdout=output,
                    stderr=subprocess.STDOUT, pass_fds=(listener.fileno(),),
                )
        self._wait_ready(instances, wait_timeout)

    def _wait_ready(self, instances: list[str], timeout: float) -> None:
        deadline = self.clock.monotonic() + timeout
        pending = set(instances)
        while pending:
            exited = sorted(name for name in pending if self.processes[name].poll() is not None)
            if exited:
                raise StackNotHealthy(f"{', '.join(self._service(n) for n in exited)} stopped during start-up:",
                                      self.failure_report())
            pending -= {name for name in pending if is_ready(self.port(name), timeout=1.0)}
            if pending and self.clock.monotonic() > deadline:
                raise StackNotHealthy(f"not healthy within {timeout:.0f} s:", self.failure_report())
            if pending:
                self.clock.sleep(READY_POLL_SECONDS)

    def ps(self) -> list[ServiceState]:
        states = []
        for instance, process in self.processes.items():
            code = process.poll()
            if code is None:
                health = "healthy" if is_ready(self.port(instance), timeout=1.0) else "starting"
                states.append(ServiceState(self._service(instance), str(process.pid), "running", health, 0))
            else:  # a process killed by signal N reads as a container's exit code, 128 + N
                states.append(ServiceState(self._service(instance), str(process.pid), "exited", "",
                                           128 - code if code < 0 else code))
        for one_off in self.one_offs:
            code = one_off.wait(0)
            states.append(ServiceState(COLLECTOR, str(one_off.pid), "running" if code is None else "exited", "",
                                       code or 0, one_off=True))
        return states

    @property
    def rendered_file(self) -> Path | None:
        return None  # nothing is rendered: the processes are started from the plan

    def quick_states(self) -> list[ServiceState]:
        return self.ps()

    def follow_service_log(self, service: str, out: IO[str]) -> None:
        return None

    def check_stack(self, services: Sequence[str]) -> StackCheck:
        return check_servers(self.ps(), services)

    def follow_logs(self, services: Sequence[str], follow: bool, tail: str | None) -> LogFollower:
        if self.log_dir is None:
            raise UserError("this local stack keeps no logs", hint="give it a log_dir")
        names = [self._instance(s) for s in services] or list(self.processes)
        lines = None if tail in (None, "all") else int(tail)
        return LogFollower([self.log_dir / f"{name}.log" for name in names], sys.stdout, follow, lines)

    def log_tail(self, service: str) -> list[str]:
        if self.log_dir is None:
            return []
        path = self.log_dir / f"{self._instance(service)}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return [f"      {line}" for line in text.splitlines()[-LOG_TAIL_LINES:]]

    def describe_death(self, state: ServiceState) -> str:
        if state.state == "missing":
            return describe_exit(state.service, None, False)
        return describe_exit(state.service, state.exit_code, oom_killed=False)

    def failure_report(self) -> str:
        lines = []
        for state in self.ps():
            if state.one_off or state.serving:
                continue
            lines.append(f"  - {state.service}: {state.state}" + (f" ({state.health})" if state.health else "")
                         + (f", exit code {state.exit_code}" if state.state == "exited" else "") + "; last log lines:")
            lines += self.log_tail(state.service)
        return "\n".join(lines) or "  (no process of the stack is left)"

    def run_one_off(self, service: str, log: IO[str], args: Sequence[str] = ()) -> LocalProcess:
        if service != COLLECTOR or self.collector is None:
            raise UserError(f"no one-off run {service!r} in this local stack", hint="give it a CollectorRun")
        run = self.collector
        env = {**os.environ, **self.extra_env, CONFIG_DICT_ENV: yaml.safe_dump(self.config, sort_keys=False),
               PROJECT_ENV: self.name}
        argv = [sys.executable, "-m", "gym_compose.collect", "--input", str(run.input_file),
                "--output-dir", str(run.output_dir), *run.args, *args]
        process = LocalProcess(subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=log, stderr=log,
                                                start_new_session=True))
        self.one_offs.append(process)
        return process

    def one_off_containers(self, service: str | None = None, running_only: bool = False) -> list[str]:
        return [str(p.pid) for p in self.one_offs if not running_only or p.wait(0) is None]

    def remove_one_off(self, service: str | None = None) -> None:
        for process in self.one_offs:
            process.stop(0.5, signal.SIGKILL)
        self.one_offs.clear()

    def stop(self, grace_seconds: float = 5.0) -> None:
        try:
            for process in self.processes.values():
                if process.poll() is None:
                    process.terminate()
            deadline = self.clock.monotonic() + grace_seconds
            for process in self.processes.values():
                try:
                    process.wait(timeout=max(0.1, deadline - self.clock.monotonic()))
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=5)
        finally:
            for log in self.log_files.values():
                log.close()
            self.log_files.clear()

    def down(self) -> Leftovers:
        before = Leftovers(sorted(self._service(name) for name, p in self.processes.items() if p.poll() is None)
                           + [str(p.pid) for p in self.one_offs if p.wait(0) is None])
        self.remove_one_off()
        self.stop()
        self.processes.clear()
        release_ports([self.port(service) for service in self.services])
        return before

    # --- as a context manager, for tests and benchmarks ------------------------------------------------
    def start(self, timeout: float = 30.0) -> LocalProcesses:
        """`up`, removing what started when the start fails."""
        try:
            self.up(timeout)
        except BaseException:
            self.down()
            raise
        return self

    def __enter__(self) -> LocalProcesses:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.down()
