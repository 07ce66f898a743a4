"""The engine a run used, for its manifest: Docker Engine server version and API, Compose version."""

from __future__ import annotations

import json
from typing import Optional

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


def insecure_registry(host: str) -> bool:
    """Whether the engine pulls from `host` over plain HTTP: a registry named in its
    `insecure-registries` (IndexConfigs with Secure false), or an address in its insecure CIDRs
    (127.0.0.0/8 always)."""
    import ipaddress

    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    name = name.strip("[]")
    if name == "localhost":
        return True
    answer = docker_cli.run_docker(["info", "--format", "{{json .RegistryConfig}}"], timeout=VERSION_TIMEOUT_S,
                                   retries=1, check=False)
    try:
        config = json.loads(answer.stdout) if answer.ok else {}
    except json.JSONDecodeError:
        config = {}
    config = config or {}
    index = (config.get("IndexConfigs") or {}).get(host) or {}
    if index and index.get("Secure") is False:
        return True
    cidrs = config.get("InsecureRegistryCIDRs") or ["127.0.0.0/8"]
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    return any(address in ipaddress.ip_network(cidr, strict=False) for cidr in cidrs)


def engine_room() -> Optional[tuple[int, int, Optional[int]]]:
    """(memory bytes, cores, free bytes of its data root or None where this host cannot see that
    folder: a remote engine) of the engine, or None when it does not answer."""
    import shutil

    answer = docker_cli.run_docker(["info", "--format", "{{json .}}"], timeout=VERSION_TIMEOUT_S, retries=1,
                                   check=False)
    try:
        info = json.loads(answer.stdout) if answer.ok else None
    except json.JSONDecodeError:
        info = None
    if not isinstance(info, dict) or not info.get("MemTotal"):
        return None
    free = None
    root = str(info.get("DockerRootDir") or "")
    local = docker_cli.run_docker(["context", "inspect", "--format", "{{.Endpoints.docker.Host}}"],
                                  timeout=VERSION_TIMEOUT_S, retries=1, check=False)
    if root and local.ok and local.stdout.strip().startswith("unix://"):
        try:
            free = shutil.disk_usage(root).free
        except OSError:
            free = None
    return int(info["MemTotal"]), int(info.get("NCPU") or 1), free
