"""The sandbox part of a stack: which servers lease sandboxes, with what policy, on which networks.

A stack with no server that declares sandboxes gets nothing (no broker, no networks). Otherwise:
one broker service on the sandbox control network (internal), which only the declaring servers
also join; per declaring server a sandbox network (internal, or with egress when asked) shared by
that server and its sandboxes only; per server a token (see gym_compose/sandbox/tokens.py). A
server whose sandboxes have an egress allow-list also gets a forward proxy service on its (internal)
sandbox network and the project's egress network, the one way out (render/egress_proxy.py), and per
named phase of that list (`egress.phases`) that names hosts a network of the phase's own, internal,
that only the sandboxes in that phase and the phase's proxy join (the broker moves a sandbox between
them; its server stays on the default one); in a phase that names no host a sandbox has no network.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from gym_compose.config import instances as config_instances
from gym_compose.contract import DNS_LABEL, image_registry, shortened
from gym_compose.contract import EGRESS_DEFAULT_PHASE as DEFAULT_PHASE
from gym_compose.errors import UserError
from gym_compose.plan.sandbox_names import BROKER_PORT, BROKER_SERVICE, declares_sandboxes  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    from gym_compose.plan.model import Service
    from gym_compose.plan.sandbox_declaration import BrokerOptions, TaskImageFolder
    from gym_compose.sandbox.policy import SandboxPolicy

CONTROL_NETWORK = "sandbox-control"
EGRESS_NETWORK = "sandbox-egress"  # the egress proxies' way out (none of the servers or sandboxes join it)
TASK_IMAGE_KEY = "task-image:"


@dataclass(frozen=True)
class EgressPhase:
    """One phase of an allow-listed server's sandboxes: the network its sandboxes are on and the
    proxy on it, which lets `hosts` through. A phase that names no host has neither: its sandboxes
    are on no network (loopback alone)."""

    phase: str
    network_key: Optional[str]
    proxy_service: Optional[str]
    hosts: tuple[str, ...]


@dataclass
class ServerSandboxes:
    instance: str
    service: str
    policy: SandboxPolicy  # image and network_name filled in by render
    image: Optional[str] = None  # a named image
    build: Optional[Path] = None  # a build folder
    implementation: str = ""
    task_images: Optional[TaskImageFolder] = None  # per-task images to build (leases ask for them by alias)
    name_budget: int = DNS_LABEL  # the characters a service name of the project may have

    def task_image_key(self, alias: str) -> str:
        """The key of one built task image in the stack's images map."""
        return f"{TASK_IMAGE_KEY}{self.instance}:{alias}"

    @property
    def image_key(self) -> str:
        """The key of this server's sandbox image in the stack's images map."""
        return f"sandbox:{self.instance}"

    @property
    def network_key(self) -> Optional[str]:
        return None if self.policy.network == "none" else f"sbx-{self.service}"

    @property
    def proxy_service(self) -> Optional[str]:
        """The service of this server's egress proxy (sandboxes with an allow-list only)."""
        if self.policy.network != "allowlist":
            return None
        return shortened(f"{self.service}-egress-proxy", self.name_budget)

    def egress_phases(self) -> list[EgressPhase]:
        """The default phase (the sandbox network, `allow`) and the named ones (allow-lists only)."""
        if self.proxy_service is None or self.network_key is None:
            return []
        phases = [EgressPhase(DEFAULT_PHASE, self.network_key, self.proxy_service, tuple(self.policy.egress_allow))]
        for name, hosts in self.policy.egress_phases.items():
            if not hosts:
                phases.append(EgressPhase(name, None, None, ()))
                continue
            proxy = shortened(f"{self.service}-egress-proxy-{name}", self.name_budget)
            phases.append(EgressPhase(name, f"{self.network_key}-{name}", proxy, tuple(hosts)))
        return phases

    def named_egress_phases(self) -> list[EgressPhase]:
        """The phases `egress.phases` names (all but the default one)."""
        return self.egress_phases()[1:]


@dataclass
class SandboxPlan:
    servers: list[ServerSandboxes]
    options: BrokerOptions
    notices: list[str] = field(default_factory=list)

    def proxy_services(self) -> list[str]:
        """Every egress proxy of the plan, the named phases' included."""
        return [phase.proxy_service for server in self.servers for phase in server.egress_phases()
                if phase.proxy_service]

    def server(self, instance: str) -> Optional[ServerSandboxes]:
        return next((s for s in self.servers if s.instance == instance), None)

    def pulled_registries(self) -> list[str]:
        """The registries the broker may pull from: those of the images and patterns of every server
        whose sandboxes are pulled on demand (the broker gets the host's credentials for these only)."""
        return sorted({image_registry(pattern) for server in self.servers if server.policy.pull
                       for pattern in [*([server.image] if server.image else []), *server.policy.allowed_images]})


def plan_sandboxes(data: dict[str, Any], services: list["Service"],
                   roots: Sequence[Path] = (), name_budget: int = DNS_LABEL) -> Optional[SandboxPlan]:
    """`name_budget`: the characters a service name may have in this project (contract.service_budget)."""
    by_instance = {service.instance: service for service in services if service.instance}
    found = config_instances(data)
    if not any(declares_sandboxes(instance.spec) for instance in found):
        return None
    # Imported only now: the declarations import the sandbox client (asyncio, pydantic models),
    # a cost of every `up`'s start for stacks that lease no sandboxes (docs/performance.md).
    from gym_compose.plan.sandbox_declaration import broker_options, declaration_of

    servers: list[ServerSandboxes] = []
    notices: list[str] = []
    for instance in found:
        service = by_instance.get(instance.name)
        if service is None:
            continue
        declaration = declaration_of(instance, service.source_dir, roots)
        if declaration is None:
            continue
        if service.name in (BROKER_SERVICE, CONTROL_NETWORK):
            raise UserError(f"instance {instance.name!r} maps to the service name {service.name!r}, which the sandbox "
                            "broker uses", hint="rename the instance")
        notices.extend(declaration.notices)
        server = ServerSandboxes(instance=instance.name, service=service.name, policy=declaration.policy,
                                 image=declaration.image, build=declaration.build,
                                 implementation=instance.implementation, task_images=declaration.task_images,
                                 name_budget=name_budget)
        taken = {*(s.name for s in services), BROKER_SERVICE, CONTROL_NETWORK, EGRESS_NETWORK,
                 *(proxy for other in servers for proxy in [p.proxy_service for p in other.egress_phases()] if proxy)}
        for proxy in (phase.proxy_service for phase in server.egress_phases()):
            if proxy in taken:
                raise UserError(f"instance {instance.name!r}'s sandbox egress proxy would be the service "
                                f"{proxy!r}, which is taken", hint="rename the instance")
        servers.append(server)
    if not servers:
        return None
    options = broker_options(data, [i for i in found if i.name in {s.instance for s in servers}])
    return SandboxPlan(servers=servers, options=options, notices=[*options.notices, *notices])
