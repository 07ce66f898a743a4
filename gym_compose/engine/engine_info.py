"""The engine a run used, for its manifest: Docker Engine server version and API, Compose version."""

from __future__ import annotations

import json

from gym_compose.engine import docker_cli

VERSION_TIMEOUT_S = 30


def engine_versions() -> dict[str, str | None]:
    """{"engine", "api", "os", "arch", "compose"}; a part the engine does not tell is None."""
    found: dict[str, str | None] = {"engine": None, "api": None, "os": None, "arch": None, "compose": None}
    version = docker_cli.run_docker(["version", "--format", "{{json .Server}}"], timeout=VERSION_TIMEOUT_S,
                                    retries=1, check=False)
    if version.ok:
        try:
            server = json.loads(version.stdout) or {}
        except json.JSONDecodeError:
            server = {}
        found.update(engine=server.get("Version"), api=server.get("ApiVersion"), os=server.get("Os"),
                     arch=server.get("Arch"))
    compose = docker_cli.run_docker(["compose", "version", "--short"], timeout=VERSION_TIMEOUT_S, retries=1,
                                    check=False)
    if compose.ok:
        found["compose"] = compose.stdout.strip() or None
    return found
