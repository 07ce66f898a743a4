"""What the broker may create: the per-server sandbox policy the plan hands it, and the requests
it accepts. Pure data, shared by the host (which writes the policy) and the broker (which reads
it and refuses anything outside it)."""

from __future__ import annotations

import fnmatch
import re
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gym_compose.contract import EGRESS_DEFAULT_PHASE as DEFAULT_PHASE
from gym_compose.contract import PROJECT_LABEL, ROLE_LABEL, SANDBOX_LABEL
from gym_compose.contract import SANDBOX_SERVER_LABEL as SERVER_LABEL

__all__ = ["PROJECT_LABEL", "ROLE_LABEL", "SANDBOX_LABEL", "SERVER_LABEL"]  # what every sandbox carries

# "allowlist": the sandbox network is internal and the server's egress proxy reaches the named
# hosts only (the declaration's `network: {egress: {allow: [...]}}`); not a string users write.
NetworkPolicy = Literal["none", "internal", "egress", "allowlist"]
NETWORK_POLICIES: tuple[str, ...] = ("none", "internal", "egress")

# Docker's default capabilities minus the risky ones (NET_RAW, MKNOD, SETFCAP): what a sandbox
# may get back after `cap_drop: ALL` (a SWE image that runs apt or chowns files as root needs some).
ALLOWED_CAPABILITIES = frozenset({"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
                                  "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "AUDIT_WRITE"})

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([bkmgt]?)i?b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(value: Any) -> int:
    """Bytes of a Docker-style size: 536870912, "512m", "1g", "1.5G"."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, (int, float)):
        return int(value)
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"not a size: {value!r} (use e.g. 512m or 2g)")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def format_size(size: int) -> str:
    """The short Docker-style form of a byte count: 536870912 -> "512m"."""
    for unit, factor in (("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}b"


class SandboxPolicy(BaseModel):
    """One server's sandboxes, resolved by the plan: the broker creates nothing outside this."""

    model_config = ConfigDict(extra="forbid")

    server: str  # the instance name (callers authenticate as it)
    image: str  # the declared image, resolved to a local tag
    allowed_images: list[str] = Field(default_factory=list)  # further images or glob patterns (per-task images)
    # Per-task images the plan built: the name a lease asks for -> the local, content-hashed tag.
    image_aliases: dict[str, str] = Field(default_factory=dict)
    pull: bool = False  # pull an allowed image the engine lacks when a lease asks for it
    cpus: float = 1.0
    memory_bytes: int = 512 << 20
    pids: int = 256
    workdir: str = "/work"
    # sandbox_config names workdir: a lease that names none works there, not in its image's WORKDIR
    workdir_declared: bool = False
    read_only: bool = False
    workdir_size_bytes: int = 256 << 20  # the work folder's tmpfs size when read_only
    network: NetworkPolicy = "internal"
    network_name: Optional[str] = None  # the plan's network for internal/egress/allowlist
    egress_allow: list[str] = Field(default_factory=list)  # allowlist: the hosts its proxy lets through
    proxy_url: Optional[str] = None  # allowlist: the proxy, as the sandbox's HTTP(S)_PROXY (filled in by render)
    # allowlist: the named phases (egress.phases): their hosts, and (filled in by render) their
    # networks and proxies (a phase with no host has no proxy)
    egress_phases: dict[str, list[str]] = Field(default_factory=dict)
    phase_networks: dict[str, str] = Field(default_factory=dict)
    phase_proxy_urls: dict[str, str] = Field(default_factory=dict)
    ttl_s: float = 14400.0
    timeout_s: float = 180.0
    ready_timeout_s: float = 300.0
    warm_pool: int = 0
    warm_spare_s: float = 0.0  # > 0: a session's first cold lease of a task image starts a spare for it, kept this long
    max_output_bytes: int = 1 << 20
    env: dict[str, str] = Field(default_factory=dict)
    user: Optional[str] = None
    shell: Optional[str] = None  # None: bash when the image has it (NeMo Gym's choice), else sh
    cap_add: list[str] = Field(default_factory=list)
    metadata: dict[str, str] = Field(default_factory=dict)

    def phase_network(self, phase: Optional[str]) -> Optional[str]:
        """The network of a sandbox in `phase` (None for a phase that names no host: no network)."""
        return self.network_name if phase in (None, DEFAULT_PHASE) else self.phase_networks.get(phase)

    def phase_proxy_url(self, phase: Optional[str]) -> Optional[str]:
        return self.proxy_url if phase in (None, DEFAULT_PHASE) else self.phase_proxy_urls.get(phase)

    def phase_refusal(self, phase: Optional[str]) -> Optional[str]:
        """Why a sandbox cannot be in `phase` (None: it can; None and "default" are the default phase)."""
        if phase in (None, DEFAULT_PHASE) or phase in self.egress_phases:
            return None
        declared = ", ".join([DEFAULT_PHASE, *self.egress_phases])
        return (f"phase {phase!r} is not declared for {self.server}'s sandboxes (declared: {declared}); "
                "name it in sandbox_config network.egress.phases")

    def allows_image(self, image: str) -> bool:
        return (image == self.image or image in self.image_aliases
                or any(fnmatch.fnmatchcase(image, pattern) for pattern in self.allowed_images))

    def resolve_image(self, image: str) -> str:
        """The local image a lease for `image` starts (a planned task image's tag, else itself)."""
        return self.image_aliases.get(image, image)

    @property
    def memory(self) -> str:
        return format_size(self.memory_bytes)


class BrokerSettings(BaseModel):
    """Everything the broker is told at start (environment variable GYM_COMPOSE_SANDBOX_POLICY)."""

    model_config = ConfigDict(extra="forbid")

    project: str
    servers: dict[str, SandboxPolicy]
    max_live: Optional[int] = None  # None: derived from the engine's cores and memory
    max_starting: Optional[int] = None  # None: derived from the engine's cores
    idle_timeout_s: float = 3600.0
    max_snapshots: int = 64  # sandbox snapshots at once (images on the engine's disk)
    image_cache_bytes: Optional[int] = None  # the pulled task images kept at once (None: no budget; image_cache.py)
    pull_stall_s: float = 120.0  # a task image's pull with no progress for this long fails (docker_backend.py)
    # Swarm publishes ports on every interface of the node, which an egress sandbox reaches: before
    # such a sandbox is leased, a helper container of `netns_image` (the broker's own, with nft)
    # refuses these ports from inside it (launch.closed_ports_helper; docs/sandboxes.md).
    closed_node_ports: list[int] = Field(default_factory=list)
    netns_image: Optional[str] = None


FORBIDDEN_PROVIDER_OPTIONS = ("volumes", "run_args", "mounts", "privileged", "network", "network_mode", "devices",
                              "cap_add", "security_opt", "extra_run_args", "binds", "pid", "ipc", "userns")


class LeaseRequest(BaseModel):
    """POST /v1/sandboxes. Unknown fields (privileged, mounts, network, ...) are refused."""

    model_config = ConfigDict(extra="forbid")

    image: Optional[str] = None
    workdir: Optional[str] = None
    env: dict[str, str] = Field(default_factory=dict)
    metadata: dict[str, str] = Field(default_factory=dict)
    ttl_s: Optional[float] = None
    ready_timeout_s: Optional[float] = None
    cpu: Optional[float] = None
    memory_mib: Optional[int] = None
    provider_options: dict[str, Any] = Field(default_factory=dict)
    snapshot: Optional[str] = None  # start from this snapshot of the caller's (not with `image`)
    phase: Optional[str] = None  # start in this egress phase (None: the default one)

    @field_validator("env", "metadata", mode="before")
    @classmethod
    def _strings(cls, value: Any) -> Any:
        return _as_strings(value)


def _as_strings(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    return value


MAX_FORKS = 64  # sandboxes one fork call may ask for


class ForkRequest(BaseModel):
    """POST /v1/sandboxes/{id}/fork and /v1/snapshots/{id}/fork: `n` sandboxes from one snapshot."""

    model_config = ConfigDict(extra="forbid")

    n: int = Field(1, ge=1, le=MAX_FORKS)
    snapshot: Optional[str] = None  # the sandbox route: fork this snapshot of it instead of taking a new one
    env: dict[str, str] = Field(default_factory=dict)
    metadata: dict[str, str] = Field(default_factory=dict)
    ready_timeout_s: Optional[float] = None
    phase: Optional[str] = None  # the forks' egress phase (None: the default one)

    @field_validator("env", "metadata", mode="before")
    @classmethod
    def _strings(cls, value: Any) -> Any:
        return _as_strings(value)


class CheckpointRequest(BaseModel):
    """POST /v1/sandboxes/{id}/checkpoint: snapshot the sandbox as checkpoint `key`, with `state`."""

    model_config = ConfigDict(extra="forbid")

    key: str
    state: Any = None


class CheckpointKey(BaseModel):
    """POST /v1/sandboxes/{id}/checkpoint/restore and .../checkpoint/forget."""

    model_config = ConfigDict(extra="forbid")

    key: str


class PhaseRequest(BaseModel):
    """POST /v1/sandboxes/{id}/phase: move a sandbox to another egress phase."""

    model_config = ConfigDict(extra="forbid")

    phase: str


class RestoreRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    snapshot: str


class ExecRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str
    cwd: Optional[str] = None
    env: dict[str, str] = Field(default_factory=dict)
    timeout_s: Optional[float] = None  # None: the server's declared default
    user: Optional[str] = None
    max_output_bytes: Optional[int] = None


def refusal(policy: SandboxPolicy, request: LeaseRequest, image: str) -> Optional[str]:
    """Why the broker must refuse this lease (None: allowed)."""
    if not policy.allows_image(image):
        allowed = ", ".join([policy.image, *policy.allowed_images, *(sorted(policy.image_aliases)[:5])])
        return (f"image {image!r} is not in the plan for {policy.server} (allowed: {allowed}); "
                f"declare it in the server's sandbox_config (image, or allowed_images for per-task images)")
    forbidden = sorted(key for key in request.provider_options if key in FORBIDDEN_PROVIDER_OPTIONS)
    if forbidden:
        return (f"provider_options {', '.join(forbidden)} refused: gym-compose sandboxes never get host mounts, "
                "extra privileges, devices or other networks")
    if request.cpu is not None and request.cpu > policy.cpus:
        return (f"cpu {request.cpu} exceeds the plan's limit for {policy.server} ({policy.cpus}); "
                "raise sandbox_config cpus")
    if request.memory_mib is not None and request.memory_mib << 20 > policy.memory_bytes:
        return (f"memory {request.memory_mib} MiB exceeds the plan's limit for {policy.server} ({policy.memory}); "
                "raise sandbox_config memory")
    return None
