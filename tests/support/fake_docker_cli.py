"""A `docker` that is a shell script: each test says what it answers (`case` lines); the calls are
logged. For the engine code that runs the CLI (compose, swarm, one-offs)."""

from __future__ import annotations

from gym_compose.engine import docker_cli


def install_fake_docker(tmp_path, monkeypatch):
    """engine(case_lines) installs a fake docker; returns a function giving the calls made so far."""
    script = tmp_path / "docker"
    log = tmp_path / "calls"
    monkeypatch.setattr(docker_cli, "DOCKER", str(script))
    monkeypatch.setattr(docker_cli, "RETRY_DELAYS_S", (0.01,))

    def install(cases: str) -> callable:
        script.write_text(f'#!/bin/sh\necho "$*" >> {log}\ncase "$*" in\n{cases}\n*) ;;\nesac\n')
        script.chmod(0o755)
        return lambda: log.read_text().splitlines() if log.exists() else []

    return install
