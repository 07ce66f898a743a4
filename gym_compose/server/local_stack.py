"""Start a config's servers as local processes, the way the containers start them.

For protocol tests and the benchmark: every instance runs `python -m gym_compose.server` with
NEMO_GYM_CONFIG_DICT / NEMO_GYM_CONFIG_PATH on 127.0.0.1 and a free port; waits are bounded.
"""

from __future__ import annotations

import copy
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Optional

import yaml

from gym_compose.server.context import HEAD_INSTANCE, SERVER_TYPES
from gym_compose.server.healthcheck import is_ready


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def server_instance_names(config: dict[str, Any]) -> list[str]:
    return [name for name, entry in config.items()
            if isinstance(entry, dict) and any(kind in entry for kind in SERVER_TYPES)]


def with_local_addresses(config: dict[str, Any]) -> dict[str, Any]:
    """A copy of the config where the head and every instance have host 127.0.0.1 and a free port."""
    config = copy.deepcopy(config)
    config[HEAD_INSTANCE] = {"host": "127.0.0.1", "port": free_port()}
    for name in server_instance_names(config):
        for kind in SERVER_TYPES:
            if kind in config[name]:
                spec = next(iter(config[name][kind].values()))
                spec["host"], spec["port"] = "127.0.0.1", free_port()
    return config


@dataclass
class LocalStack:
    config: dict[str, Any]
    server_dirs: dict[str, Path] = field(default_factory=dict)  # instance -> GYM_COMPOSE_SERVER_DIR
    extra_env: dict[str, str] = field(default_factory=dict)
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    log_dir: Optional[Path] = None
    log_files: dict[str, IO[bytes]] = field(default_factory=dict)  # instance -> its open log, closed by stop()

    def port(self, name: str) -> int:
        if name == HEAD_INSTANCE:
            return int(self.config[HEAD_INSTANCE]["port"])
        entry = self.config[name]
        kind = next(kind for kind in SERVER_TYPES if kind in entry)
        return int(next(iter(entry[kind].values()))["port"])

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port(name)}"

    def start(self, timeout: float = 30.0) -> "LocalStack":
        config_yaml = yaml.safe_dump(self.config, sort_keys=False)
        for name in [HEAD_INSTANCE, *server_instance_names(self.config)]:
            env = {**os.environ, **self.extra_env, "NEMO_GYM_CONFIG_DICT": config_yaml,
                   "NEMO_GYM_CONFIG_PATH": name, "GYM_COMPOSE_LOG_LEVEL": self.extra_env.get("GYM_COMPOSE_LOG_LEVEL", "WARNING")}
            env.pop("GYM_COMPOSE_SERVER_DIR", None)
            if name in self.server_dirs:
                env["GYM_COMPOSE_SERVER_DIR"] = str(self.server_dirs[name])
            output: int | IO[bytes] = subprocess.DEVNULL
            if self.log_dir is not None:
                output = self.log_files[name] = open(self.log_dir / f"{name}.log", "wb")  # noqa: SIM115 - stop() closes it
            self.processes[name] = subprocess.Popen(
                [sys.executable, "-m", "gym_compose.server"], env=env, stdout=output, stderr=subprocess.STDOUT,
            )
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = set(self.processes)
        while pending:
            for name in list(pending):
                process = self.processes[name]
                if process.poll() is not None:
                    raise RuntimeError(f"server {name} exited with {process.returncode} before it was ready"
                                       + self._log_tail(name))
                if is_ready(self.port(name), timeout=1.0):
                    pending.discard(name)
            if pending and time.monotonic() > deadline:
                raise TimeoutError(f"servers not ready after {timeout:.0f} s: {sorted(pending)}"
                                   + "".join(self._log_tail(name) for name in pending))
            if pending:
                time.sleep(0.05)

    def _log_tail(self, name: str) -> str:
        if self.log_dir is None:
            return ""
        path = self.log_dir / f"{name}.log"
        return f"\n--- {name} log ---\n" + (path.read_text(errors="replace")[-3000:] if path.exists() else "")

    def stop(self, grace: float = 5.0) -> None:
        try:
            for process in self.processes.values():
                if process.poll() is None:
                    process.terminate()
            deadline = time.monotonic() + grace
            for process in self.processes.values():
                try:
                    process.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=5)
        finally:
            for log in self.log_files.values():
                log.close()
            self.log_files.clear()

    def __enter__(self) -> "LocalStack":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
