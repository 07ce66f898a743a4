"""The sandbox API's value types, with NeMo Gym 0.7's names and fields (`nemo_gym.sandbox`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class SandboxStatus(str, Enum):
    STARTING = "starting"
    RUNNING = "running"
    PAUSED = "paused"
    STOPPED = "stopped"
    ERROR = "error"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class SandboxResources:
    """A resource request; gym-compose applies cpu and memory_mib (within the plan's limits)."""

    cpu: float | None = None
    memory_mib: int | None = None
    disk_gib: int | None = None
    gpu: int | None = None
    gpu_type: str | None = None

    @classmethod
    def from_mapping(cls, resources: Mapping[str, Any] | None) -> "SandboxResources":
        if resources is None:
            return cls()
        unknown = set(resources) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown sandbox resource keys: {', '.join(sorted(unknown))}; "
                             f"expected: {', '.join(sorted(cls.__dataclass_fields__))}")

        def number(key: str, kind):
            return kind(resources[key]) if resources.get(key) is not None else None

        return cls(cpu=number("cpu", float), memory_mib=number("memory_mib", int), disk_gib=number("disk_gib", int),
                   gpu=number("gpu", int), gpu_type=number("gpu_type", str))


@dataclass(frozen=True)
class SandboxSpec:
    """What to start. `image=None` takes the image the server declared in its `sandbox_config`."""

    image: str | None = None
    ttl_s: int | float | None = None
    ready_timeout_s: int | float | None = None
    workdir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    resources: SandboxResources | Mapping[str, Any] = field(default_factory=SandboxResources)
    entrypoint: list[str] | None = None
    provider_options: dict[str, Any] = field(default_factory=dict)
    ports: tuple[int, ...] | list[int] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not isinstance(self.resources, SandboxResources):
            object.__setattr__(self, "resources", SandboxResources.from_mapping(self.resources))
        ports = []
        for port in self.ports:
            if isinstance(port, bool) or not isinstance(port, (int, str)) or not 1 <= int(port) <= 65535:
                raise ValueError(f"invalid sandbox TCP port: {port!r}")
            ports.append(int(port))
        object.__setattr__(self, "ports", tuple(ports))


@dataclass
class SandboxHandle:
    sandbox_id: str
    provider_name: str
    raw: Any = None


@dataclass(frozen=True)
class SandboxExecResult:
    """A command's outcome. `error_type` is None when the command ran to its own exit code;
    "timeout" (killed at its time limit), "oom" (killed by the sandbox's memory limit) or
    "sandbox" (the sandbox is dead or unreachable) otherwise, and `reason` (gym-compose) says it in
    words, e.g. "sandbox OOM-killed (memory 512m)"."""

    stdout: str | None
    stderr: str | None
    return_code: int
    error_type: str | None = None
    reason: str | None = None


ExecResult = SandboxExecResult


@dataclass(frozen=True)
class SandboxSnapshot:
    """A sandbox's filesystem as the broker keeps it (gym-compose): fork sandboxes from it, or
    restore one to it. Not in it: processes, memory, `/tmp` (see docs/sandboxes.md)."""

    snapshot_id: str
    image: str = ""
    source: str = ""  # the sandbox it was taken of
    took_s: float = 0.0


class SandboxError(RuntimeError):
    """A sandbox operation that could not be done (not a command that failed)."""


class SandboxCreateError(SandboxError):
    """No sandbox could be started (refused by the plan, cap reached, image missing, ...)."""


class SandboxCreateVerificationError(SandboxCreateError):
    """A sandbox started but its agent never answered."""


class SandboxDeadError(SandboxError):
    """The sandbox is gone: it was OOM-killed, exited, or its time-to-live ran out."""


class SandboxPtyError(SandboxError):
    pass
