"""The forward proxy of a server whose sandboxes have an egress allow-list (docs/sandboxes.md,
"Egress allow-lists"): Debian's tinyproxy, configured at start from the plan's host names.

tinyproxy matches a request's host name against the filter before it resolves anything, so a
refused name costs no DNS query and no connection (HTTP 403 with the message below). Its files are
written into the container's /tmp by its command, each line a shell literal of checked host names
and fixed text: nothing in it is a `$`, which compose and `docker stack deploy` would interpolate.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

PROXY_PORT = 8888
IMAGE_KEY = "egress-proxy"  # the proxy image in a stack's images map
PROXY_ROLE = "egress-proxy"
CONFIG_FILE = "/tmp/tinyproxy.conf"
FILTER_FILE = "/tmp/allowed-hosts"
ERROR_FILE = "/tmp/refused.html"
PROXY_USER = "65534:65534"  # nobody: tinyproxy needs no root to listen above 1024
# Sent for every refusal (tinyproxy fills in the braces): a filtered name, an address, a CONNECT
# to a port other than 443.
REFUSAL = ("gym-compose egress proxy: {cause}: {url} ({detail}). This sandbox reaches only the hosts of its "
           "server's sandbox_config network.egress.allow, by name: HTTPS (CONNECT) on port 443, plain HTTP.")


def proxy_url(service: str) -> str:
    return f"http://{service}:{PROXY_PORT}"


def service_link_url(service: str) -> str:
    """The proxy's URL for a Kubernetes pod that resolves no names: the address from the Service's
    environment variables (service links), which Kubernetes puts into a `$(VAR)` of an env value."""
    variable = re.sub(r"[^A-Z0-9]", "_", service.upper())
    return f"http://$({variable}_SERVICE_HOST):$({variable}_SERVICE_PORT)"


def tinyproxy_config() -> list[str]:
    """tinyproxy's configuration: the filter denies every host it does not list (fnmatch
    patterns, so `*.example.org` works as written; matched as written, case included: the plan
    lower-cases the list); CONNECT only to 443; no Via header naming it."""
    return [
        f"Port {PROXY_PORT}",
        "Listen 0.0.0.0",
        "Timeout 600",
        "MaxClients 256",
        "LogLevel Connect",
        "DisableViaHeader Yes",
        "XTinyproxy No",
        f'Filter "{FILTER_FILE}"',
        "FilterURLs Off",
        "FilterType fnmatch",
        "FilterDefaultDeny Yes",
        "ConnectPort 443",
        f'ErrorFile 403 "{ERROR_FILE}"',
    ]


def proxy_command(hosts: list[str]) -> list[str]:
    """The container's command: write the configuration, the filter and the refusal, then run
    tinyproxy in the foreground (its log on stderr)."""
    def written(lines: list[str], path: str) -> str:
        return "printf '%s\\n' " + " ".join(shlex.quote(line) for line in lines) + f" > {path}"

    script = " && ".join([written(tinyproxy_config(), CONFIG_FILE), written(hosts, FILTER_FILE),
                          written([REFUSAL], ERROR_FILE), f"exec tinyproxy -d -c {CONFIG_FILE}"])
    assert "$" not in script  # hosts are checked names (plan/egress_allow.py); the rest is fixed text
    return ["bash", "-c", script]


def healthcheck_command() -> list[str]:
    """Ready once tinyproxy accepts connections (bash's /dev/tcp: the image has no other client)."""
    return ["CMD", "bash", "-c", f"exec 3<>/dev/tcp/127.0.0.1/{PROXY_PORT}"]


def compose_service(image: str, hosts: list[str], networks: list[str], labels: dict[str, str],
                    healthcheck: dict[str, Any]) -> dict[str, Any]:
    """The proxy as a compose service: unprivileged, read-only, on its server's sandbox network
    and the project's egress network only (`healthcheck` gives the timings; its test is ours)."""
    return {
        "image": image,
        "command": proxy_command(hosts),
        "user": PROXY_USER,
        "read_only": True,
        "tmpfs": ["/tmp:size=4m"],
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
        "init": True,
        "restart": "no",
        "stop_grace_period": "5s",
        "mem_limit": "128m",
        "pids_limit": 320,  # a thread per client (MaxClients 256)
        "labels": labels,
        "networks": list(networks),
        "healthcheck": {**healthcheck, "test": healthcheck_command()},
    }
