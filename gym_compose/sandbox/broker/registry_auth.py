"""The registry credentials the broker pulls with: the host's `docker login` for each registry the
plan's pulled images come from, handed over as a compose secret (JSON: registry -> {username,
password}; contract.SANDBOX_REGISTRY_AUTH_SECRET). The Docker Engine keeps no credentials of its
own: a client sends them with each pull, so without these a private registry answers 401."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Optional

from gym_compose.contract import image_registry

LOG = logging.getLogger("gym_compose.sandbox.broker")
DENIED = ("unauthorized", "authentication required", "no basic auth credentials", "denied", "401")


def load_registry_auth(path: Path) -> dict[str, dict[str, str]]:
    """The credentials file's entries; none when it is absent, empty or unreadable (said once)."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return {}
    if not text:
        return {}
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as error:
        LOG.warning("registry credentials %s are not JSON (%s); pulling without credentials", path, error)
        return {}
    if not isinstance(entries, dict):
        return {}
    return {str(host): {"username": str(entry.get("username", "")), "password": str(entry.get("password", ""))}
            for host, entry in entries.items() if isinstance(entry, dict)}


def auth_for(entries: dict[str, dict[str, str]], image: str) -> Optional[dict[str, str]]:
    return entries.get(image_registry(image))


def pull_failure(image: str, message: str, had_credentials: bool) -> str:
    """The engine's pull error, with what to do when the registry wants credentials."""
    if not any(word in message.lower() for word in DENIED):
        return message
    registry = image_registry(image)
    if had_credentials:
        return (f"{message} (registry {registry} refused the credentials of the host's `docker login "
                f"{registry}`: log in again with an account that may pull it)")
    return (f"{message} (registry {registry} needs credentials: run `docker login {registry}` on the host "
            "that runs gym-compose, then start the run again)")
