"""Late-bound model upstreams: replace a running model server's base URLs (no restart).

The model server answers `PUT /_gym_compose/upstreams` (`contract.UPSTREAMS_PATH`; vllm_model
has it); the host reaches it at its published address. URLs on the host's loopback mean nothing
inside a container, so they are rewritten to `host.docker.internal` (model servers resolve it to
the host through Compose's `host-gateway`); the endpoint must then listen on an address containers
reach (0.0.0.0 or the bridge), not only on 127.0.0.1.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import httpx

from gym_compose.contract import UPSTREAMS_PATH
from gym_compose.errors import UserError

HOST_FROM_CONTAINERS = "host.docker.internal"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "0.0.0.0")


def reachable_from_containers(url: str) -> str:
    """`url` with a loopback host replaced by the host's name inside the containers."""
    parts = urlsplit(url)
    if parts.hostname not in LOOPBACK_NAMES:
        return url
    netloc = HOST_FROM_CONTAINERS + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def put_upstreams(instance: str, server_url: str, urls: list[str], timeout: float = 30.0) -> list[str]:
    """Replace the base URLs of the model server `instance` at `server_url`; returns the URLs it now uses."""
    if not urls or not all(isinstance(url, str) and url for url in urls):
        raise UserError(f"set_model_urls({instance!r}, ...): give a non-empty list of base URLs",
                        hint="e.g. ['http://10.0.0.5:8000/v1']")
    body = {"base_url": [reachable_from_containers(url) for url in urls]}
    try:
        answer = httpx.put(server_url + UPSTREAMS_PATH, json=body, timeout=timeout)
    except httpx.HTTPError as error:
        raise UserError(f"cannot reach model server {instance!r} at {server_url}: {error or type(error).__name__}",
                        hint="is the stack running? (`gym-compose ps -p PROJECT`)") from None
    if answer.status_code in (404, 405):
        raise UserError(f"model server {instance!r} has no late-bound upstreams ({server_url}{UPSTREAMS_PATH} "
                        f"answered {answer.status_code})",
                        hint="vllm_model has them (e.g. configs/vllm_model/vllm_model_for_training.yaml); for another "
                             "model server, restart the stack with the new URLs")
    if answer.status_code != 200:
        raise UserError(f"model server {instance!r} refused the base URLs {body['base_url']}: "
                        f"{answer.text[:500]}", hint="give http(s) URLs, e.g. http://HOST:PORT/v1")
    return list(answer.json()["base_url"])
