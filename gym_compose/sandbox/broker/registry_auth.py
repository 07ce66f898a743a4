"""The registry credentials the broker pulls with: the host's `docker login` for each registry the
plan's pulled images come from, handed over as a compose secret (JSON: registry -> {username,
password}; contract.SANDBOX_REGISTRY_AUTH_SECRET). The Docker Engine keeps no credentials of its
own: a client sends them with each pull, so without these a private registry answers 401."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Optional

from gym_compose.contract import image_registry

LOG = logging.getLogger("gym_compose.sandbox.broker")
# The engine's words for a refused pull, as whole words: a layer's digest in the message (hex) may
# hold "401" anywhere (sha256:9ccdfeb75e74bd295c771401...).
DENIED = re.compile(r"\b(?:unauthorized|authentication required|no basic auth credentials|denied|401)\b")


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


# the engine's words for a pull's other known failures, and what to do about each
PULL_CAUSES = (
    ("verification failed", "a layer the registry sent does not match its digest: a corrupt blob in the registry "
                            "or a proxy that rewrites what passes; push the image again or pull around the proxy"),
    ("no space left on device", "the engine's disk is full: free space (docker system prune), or lower the sandbox "
                                "setting image_cache_gib so fewer pulled images are kept"),
    ("manifest unknown", "the registry has no such tag or digest: check the row's image name, or skip its rows "
                         "(--skip-missing-images)"),
    ("not found", "the registry has no such image: check the row's image name, or skip its rows "
                  "(--skip-missing-images)"),
    ("unexpected eof", "the connection to the registry broke off mid-layer and the engine's retries did not "
                       "get through; the next lease pulls it again, resuming the layers already on the engine"),
    ("connection refused", "nothing answers at the registry's address: is the registry up, and reachable from "
                           "the engine's host?"),
)


def pull_failure(image: str, message: str, had_credentials: bool) -> str:
    """The engine's pull error, with what to do about it (credentials, digests, disk, a lost registry)."""
    lowered = message.lower()
    if not DENIED.search(lowered):
        cause = next((advice for words, advice in PULL_CAUSES if words in lowered), None)
        return f"{message} ({cause})" if cause else message
    registry = image_registry(image)
    if had_credentials:
        return (f"{message} (registry {registry} refused the credentials of the host's `docker login "
                f"{registry}`: log in again with an account that may pull it)")
    return (f"{message} (registry {registry} needs credentials: run `docker login {registry}` on the host "
            "that runs gym-compose, then start the run again)")
