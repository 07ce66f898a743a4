"""The host's `docker login` credentials for the registries a run pulls from.

The Docker Engine stores no registry credentials: the Docker CLI keeps them (in
`$DOCKER_CONFIG/config.json`, default `~/.docker/config.json`: `auths` entries, or a credential
helper named by `credHelpers` / `credsStore`) and sends them with each pull. The sandbox broker
pulls through the Engine API, so it is handed the credentials of the registries its plan pulls
from (and of those only), as a compose secret it reads at start (sandbox/broker/registry_auth.py).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path
from typing import Optional

from gym_compose.contract import DOCKER_HUB, DOCKER_HUB_ALIASES, SANDBOX_REGISTRY_AUTH_SECRET

HELPER_TIMEOUT_S = 20
DOCKER_HUB_KEY = "https://index.docker.io/v1/"  # how the CLI names Docker Hub in config.json


def docker_config_file() -> Path:
    return Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker") / "config.json"


def registry_credentials(registry: str, config_file: Optional[Path] = None) -> Optional[tuple[str, str]]:
    """(username, password) the CLI holds for `registry` ('docker.io' for Docker Hub), or None."""
    path = config_file or docker_config_file()
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(config, dict):
        return None
    keys = [DOCKER_HUB_KEY, *DOCKER_HUB_ALIASES] if registry == DOCKER_HUB else [registry]
    helpers = config.get("credHelpers") or {}
    for key in keys:
        helper = helpers.get(key) if isinstance(helpers, dict) else None
        if helper:
            return _from_helper(str(helper), key)
    auths = config.get("auths") or {}
    for name, entry in (auths.items() if isinstance(auths, dict) else []):
        if _registry_of_key(str(name)) in keys and isinstance(entry, dict):
            found = _from_entry(entry)
            if found:
                return found
    if config.get("credsStore"):
        for key in keys:
            found = _from_helper(str(config["credsStore"]), key)
            if found:
                return found
    return None


def write_registry_auth(secrets_dir: Path, registries: list[str]) -> list[str]:
    """Write the broker's credentials file for `registries`; returns those it has credentials for."""
    entries = {}
    for registry in registries:
        found = registry_credentials(registry)
        if found:
            entries[registry] = {"username": found[0], "password": found[1]}
    path = secrets_dir / SANDBOX_REGISTRY_AUTH_SECRET
    path.write_text(json.dumps(entries), encoding="utf-8")
    path.chmod(0o644)  # readable by the broker's user; the secrets folder (0700) keeps others out
    return sorted(entries)


def _registry_of_key(key: str) -> str:
    """`https://index.docker.io/v1/` -> `index.docker.io`; `127.0.0.1:5000` stays."""
    host = key.removeprefix("https://").removeprefix("http://").split("/", 1)[0]
    return DOCKER_HUB_KEY if host in DOCKER_HUB_ALIASES else host


def _from_entry(entry: dict) -> Optional[tuple[str, str]]:
    if entry.get("auth"):
        try:
            user, _, password = base64.b64decode(str(entry["auth"])).decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        return (user, password) if user else None
    if entry.get("username") and entry.get("password"):
        return str(entry["username"]), str(entry["password"])
    return None


def _from_helper(helper: str, key: str) -> Optional[tuple[str, str]]:
    try:
        answer = subprocess.run([f"docker-credential-{helper}", "get"], input=key, capture_output=True, text=True,
                                timeout=HELPER_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if answer.returncode != 0:
        return None
    try:
        found = json.loads(answer.stdout)
    except json.JSONDecodeError:
        return None
    if isinstance(found, dict) and found.get("Username") and found.get("Secret"):
        return str(found["Username"]), str(found["Secret"])
    return None
