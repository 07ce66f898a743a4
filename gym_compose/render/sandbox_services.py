"""The compose side of a sandbox plan: the broker service, the sandbox networks, each declaring
server's extra networks, environment and token, the egress proxies of allow-listed sandboxes
(render/egress_proxy.py) and the networks of their named phases, and the secret files (the project secret is kept
across re-renders of a running stack, so a second `eval run --no-serve` does not change tokens;
the broker's registry credentials, when it pulls, are written by the engine layer afterwards)."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from gym_compose.contract import (
    BIND_ALL,
    BIND_HOST_ENV,
    DNS_LABEL,
    NEMO_GYM_SERVER_COMMAND,
    NETGUARD_CAPABILITIES,
    NETGUARD_COMMAND,
    PROJECT_LABEL,
    ROLE_LABEL,
    SANDBOX_SIDE_ALIAS,
    SECRETS_DIR,
    SERVER_COMMAND,
    SERVER_USER,
    shortened,
)
from gym_compose.contract import SANDBOX_BROKER_ENV as BROKER_ENV
from gym_compose.contract import SANDBOX_POLICY_ENV as POLICY_ENV
from gym_compose.contract import SANDBOX_REGISTRY_AUTH_SECRET as REGISTRY_AUTH_SECRET
from gym_compose.contract import SANDBOX_TOKEN_FILE_ENV as TOKEN_FILE_ENV
from gym_compose.plan.runtime_choice import NEMO_GYM
from gym_compose.plan.sandbox_plan import BROKER_PORT, BROKER_SERVICE, CONTROL_NETWORK, EGRESS_NETWORK
from gym_compose.render import egress_proxy
from gym_compose.render.egress_proxy import proxy_url
from gym_compose.sandbox.policy import BrokerSettings
from gym_compose.sandbox.tokens import BROKER_SECRET, server_secret_name, server_token

if TYPE_CHECKING:
    from gym_compose.plan.model import Stack

# An internal bridge still gives the host an address on it (the gateway), through which any host
# service listening on all interfaces would be reachable; with no address on the bridge it is not.
NO_HOST_ADDRESS = {"com.docker.network.bridge.inhibit_ipv4": "true"}
SOCKET_TARGET = "/var/run/docker.sock"


def network_name_of(project: str, key: str) -> str:
    """The engine's name of a sandbox network: PROJECT-KEY, in one DNS label (contract.py)."""
    return shortened(f"{project}-{key}", DNS_LABEL)


def broker_settings(stack: "Stack", images: dict[str, str], publishes_on_every_interface: bool = False
                    ) -> BrokerSettings:
    plan = stack.sandboxes
    assert plan is not None  # called for a stack whose servers lease sandboxes
    servers = {}
    for server in plan.servers:
        image = images.get(server.image_key) or server.image or server.image_key
        network_name = network_name_of(stack.project, server.network_key) if server.network_key else None
        prefix = server.task_image_key("")
        aliases = {key[len(prefix):]: tag for key, tag in images.items() if key.startswith(prefix)}
        proxy = {"proxy_url": proxy_url(server.proxy_service)} if server.proxy_service else {}
        named = server.named_egress_phases()
        phases = {"phase_networks": {phase.phase: network_name_of(stack.project, phase.network_key)
                                     for phase in named if phase.network_key},
                  "phase_proxy_urls": {phase.phase: proxy_url(phase.proxy_service)
                                       for phase in named if phase.proxy_service}}
        servers[server.instance] = server.policy.model_copy(update={"image": image, "network_name": network_name,
                                                                   "image_aliases": aliases, **proxy, **phases})
    closed: dict[str, Any] = {}
    if publishes_on_every_interface and any(s.policy.network == "egress" for s in plan.servers):
        # the node's published ports, which egress sandboxes reach through the node
        published = {stack.options.head_port, *(s.published_port for s in stack.services if s.published_port)}
        closed = {"closed_node_ports": sorted(published),
                  "netns_image": images.get(BROKER_SERVICE, images.get("base"))}
    return BrokerSettings(project=stack.project, servers=servers, max_live=plan.options.max_live,
                          max_starting=plan.options.max_starting, idle_timeout_s=plan.options.idle_timeout_s,
                          max_snapshots=plan.options.max_snapshots,
                          image_cache_bytes=(int(plan.options.image_cache_gib * (1 << 30))
                                             if plan.options.image_cache_gib is not None else None),
                          pull_stall_s=plan.options.pull_stall_s, **closed)


def add_sandboxes(model: dict[str, Any], stack: "Stack", images: dict[str, str], server_spec: dict[str, Any],
                  socket: Optional[tuple[str, Optional[int], bool]] = None,
                  publishes_on_every_interface: bool = False) -> None:
    """Add the broker, networks and secrets to a rendered compose model (in place).

    `server_spec` is a rendered server service to take the hardening defaults from; `socket` is
    (host socket path, its group id, whether the engine is rootless) from the engine;
    `publishes_on_every_interface` says the target publishes ports on every interface of the node."""
    plan = stack.sandboxes
    assert plan is not None  # called for a stack whose servers lease sandboxes
    labels = {PROJECT_LABEL: stack.project}
    networks = model.setdefault("networks", {})
    networks[CONTROL_NETWORK] = {"name": network_name_of(stack.project, CONTROL_NETWORK), "internal": True,
                                 "driver_opts": dict(NO_HOST_ADDRESS), "labels": dict(labels)}
    for server in plan.servers:
        service = model["services"][server.service]
        extra = [CONTROL_NETWORK] + ([server.network_key] if server.network_key else [])
        service["networks"] = [*service.get("networks", []), *extra]
        if server.network_key:
            internal = server.policy.network != "egress"
            networks[server.network_key] = {"name": network_name_of(stack.project, server.network_key),
                                            "internal": internal,
                                            **({"driver_opts": dict(NO_HOST_ADDRESS)} if internal else {}),
                                            "labels": dict(labels)}
            guard_sandbox_side(service, server.network_key, stack.service(server.service).runtime)
        for phase in server.egress_phases():
            if phase.network_key is None or phase.proxy_service is None:
                continue  # a phase that names no host: no network (the broker detaches its sandboxes)
            if phase.network_key != server.network_key:  # a named phase's network: its sandboxes and its proxy
                networks[phase.network_key] = {"name": network_name_of(stack.project, phase.network_key),
                                               "internal": True, "driver_opts": dict(NO_HOST_ADDRESS),
                                               "labels": dict(labels)}
            networks[EGRESS_NETWORK] = {"name": network_name_of(stack.project, EGRESS_NETWORK),
                                        "labels": dict(labels)}
            model["services"][phase.proxy_service] = egress_proxy.compose_service(
                images.get(egress_proxy.IMAGE_KEY, egress_proxy.IMAGE_KEY), list(phase.hosts),
                [phase.network_key, EGRESS_NETWORK], {**labels, ROLE_LABEL: egress_proxy.PROXY_ROLE},
                {key: value for key, value in server_spec["healthcheck"].items() if key != "test"})
        secret = server_secret_name(server.instance)
        service["secrets"] = sorted({*service.get("secrets", []), secret})
        service.setdefault("environment", {}).update({
            BROKER_ENV: f"http://{BROKER_SERVICE}:{BROKER_PORT}", TOKEN_FILE_ENV: f"{SECRETS_DIR}/{secret}"})
    model["services"][BROKER_SERVICE] = _broker_service(stack, images, server_spec, labels, socket,
                                                        publishes_on_every_interface)
    declared = model.setdefault("secrets", {})
    for name in [BROKER_SECRET, *(server_secret_name(s.instance) for s in plan.servers),
                 *([REGISTRY_AUTH_SECRET] if plan.pulled_registries() else [])]:
        declared[name] = {"file": f"./secrets/{name}"}


def guard_sandbox_side(service: dict[str, Any], network_key: str, runtime: str) -> None:
    """Start a server that shares `network_key` with its sandboxes through the network guard
    (gym_compose/server/netguard.py): as root with only the guard's capabilities, an alias on
    that network alone to find it by, and its own user (and `cap_add`) handed to the guard,
    which refuses every new connection from that side, drops to that user and starts the server.
    Under Swarm the same service (render_swarm.py keeps these keys)."""
    assert "command" not in service  # a server's command is its image's CMD, spelled in the contract
    user = str(service.get("user") or SERVER_USER)
    own_capabilities = sorted({str(cap).upper().removeprefix("CAP_") for cap in service.get("cap_add") or ()})
    server_command = NEMO_GYM_SERVER_COMMAND if runtime == NEMO_GYM else SERVER_COMMAND
    service["user"] = "0:0"
    service["cap_drop"] = ["ALL"]
    service["cap_add"] = sorted({*own_capabilities, *NETGUARD_CAPABILITIES})
    # Swarm's DNS answers the alias once the server is healthy: it may take the start period
    start_period = str(service["healthcheck"]["start_period"]).removesuffix("s")
    service["command"] = [*NETGUARD_COMMAND, "--sandbox-side", SANDBOX_SIDE_ALIAS, "--user", user,
                          *(f"--keep-cap={cap}" for cap in own_capabilities),
                          f"--resolve-timeout={int(start_period) + 60}", "--", *server_command]
    networks: dict[str, Any] = {name: {} for name in service["networks"]}
    networks[network_key] = {"aliases": [SANDBOX_SIDE_ALIAS]}
    service["networks"] = networks


def _broker_service(stack: "Stack", images: dict[str, str], server_spec: dict[str, Any], labels: dict[str, str],
                    socket: Optional[tuple[str, Optional[int], bool]], publishes_on_every_interface: bool
                    ) -> dict[str, Any]:
    path, gid, rootless = socket or (SOCKET_TARGET, None, False)
    settings = broker_settings(stack, images, publishes_on_every_interface)
    healthcheck = dict(server_spec["healthcheck"])
    healthcheck["test"] = [*healthcheck["test"][:-1], str(BROKER_PORT)]
    from gym_compose.render.templates import load_template

    spec: dict[str, Any] = load_template("sandbox_broker")
    spec.update({
        "image": images.get(BROKER_SERVICE, images.get("base")),
        # The socket's group is the one right the broker needs; without a known group (a rootless or
        # remote engine's socket) it runs as the container's root, which such engines map to a user.
        "user": SERVER_USER if gid is not None and not rootless else "0:0",
        "labels": {**labels, ROLE_LABEL: "sandbox-broker"},
        "environment": {POLICY_ENV: json.dumps(settings.model_dump(mode="json"), separators=(",", ":")),
                        BIND_HOST_ENV: BIND_ALL},
        "volumes": [{"type": "bind", "source": path, "target": SOCKET_TARGET}],
        "secrets": [BROKER_SECRET, *([REGISTRY_AUTH_SECRET] if stack.sandboxes and stack.sandboxes.pulled_registries()
                                     else [])],
        "networks": [CONTROL_NETWORK],
        "healthcheck": healthcheck,
    })
    if gid is not None and not rootless:
        spec["group_add"] = [str(gid)]
    return spec


def write_secrets(stack: "Stack", out_dir: Path) -> None:
    """The project secret (reused when the folder already holds one) and each server's token."""
    plan = stack.sandboxes
    assert plan is not None  # called for a stack whose servers lease sandboxes
    folder = out_dir / "secrets"
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    secret_file = folder / BROKER_SECRET
    project_secret = secret_file.read_text().strip() if secret_file.is_file() else ""
    if not project_secret:
        project_secret = secrets.token_hex(32)
        _write(secret_file, project_secret)
    for server in plan.servers:
        _write(folder / server_secret_name(server.instance), server_token(project_secret, server.instance))
    auth_file = folder / REGISTRY_AUTH_SECRET
    if plan.pulled_registries() and not auth_file.is_file():
        _write(auth_file, "{}")  # no credentials; the engine layer writes the host's (engine/registry_login.py)


def _write(path: Path, value: str) -> None:
    path.write_text(value, encoding="utf-8")
    path.chmod(0o644)  # readable by the containers' users; the folder (0700) keeps others out
