"""What a service of the plan asks of its target, in gym-compose's words (pure; no Docker).

A server's `docker:` config block is read here into `Limits` (memory, cpus, pids, shm, gpus) and
`Overrides` (user, capabilities, file system, environment, mounts, extra hosts). The plan carries
these; only a target's renderer maps them to its own words (compose: `mem_limit`, `pids_limit`,
`deploy.resources.reservations.devices`, ...; Kubernetes would use `resources.limits`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gym_compose.config.redact import is_secret_key
from gym_compose.errors import UserError

LIMIT_KEYS = ("memory", "cpus", "pids", "shm_size", "gpus")
OVERRIDE_KEYS = ("user", "cap_add", "read_only", "environment", "volumes", "extra_hosts")
SCHEDULING_KEYS = ("replicas", "placement", "reservations")  # swarm and kubernetes; compose runs one
PUBLISH_KEY = "publish"
RUNTIME_KEY = "runtime"  # lean | nemo_gym | auto (gym_compose/plan/runtime_choice.py)
RUNTIME_VALUES = ("auto", "lean", "nemo_gym")


@dataclass(frozen=True)
class GpuRequest:
    """GPUs a service reserves: a count (or "all") or device ids, of one driver."""

    count: int | str | None = None  # a positive count, or "all"
    device_ids: tuple[str, ...] = ()
    driver: str = "nvidia"
    capabilities: tuple[str, ...] = ("gpu",)
    options: dict[str, Any] | None = None


@dataclass(frozen=True)
class Limits:
    """Resource limits; None keeps the role's default (compose_templates/)."""

    memory: str | int | None = None  # "2g", or bytes
    cpus: float | str | None = None
    pids: int | None = None
    shm: str | int | None = None  # size of /dev/shm
    gpus: GpuRequest | None = None


@dataclass(frozen=True)
class Mount:
    """A volume (kept by the target: a model cache) or a host folder, mounted into a service."""

    kind: str  # "volume" | "bind"
    source: str  # the volume's key in the plan's `volumes`, or a host path
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class Overrides:
    """What a server's `docker:` block changes besides limits; None keeps the role's default."""

    user: str | None = None
    cap_add: tuple[str, ...] = ()
    read_only: bool | None = None
    environment: dict[str, str] = field(default_factory=dict)
    volumes: tuple[Any, ...] = ()  # compose's short or long volume syntax, passed through
    extra_hosts: tuple[str, ...] = ()


@dataclass(frozen=True)
class Probe:
    """A readiness check a service runs itself (an engine's own image has no gym-compose probe)."""

    command: tuple[str, ...]
    interval_s: int = 10
    timeout_s: int = 5
    retries: int = 3
    start_period_s: int = 0


def parse_gpus(value: Any, where: str) -> GpuRequest:
    """`gpus: all`, a count, a list of device ids, or a mapping with count or device_ids (and
    optionally driver, capabilities, options)."""
    if value == "all" or (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        return GpuRequest(count=value)
    if isinstance(value, list) and value and all(isinstance(item, (str, int)) for item in value):
        return GpuRequest(device_ids=tuple(str(item) for item in value))
    if isinstance(value, dict) and ("count" in value) != ("device_ids" in value):
        return GpuRequest(
            count=value.get("count"),
            device_ids=tuple(str(item) for item in value.get("device_ids") or ()),
            driver=str(value.get("driver", "nvidia")),
            capabilities=tuple(value.get("capabilities") or ("gpu",)),
            options=value.get("options"),
        )
    raise UserError(f"{where}: gpus must be `all`, a positive count, a list of device ids, or a mapping with "
                    f"count or device_ids; got {value!r}", hint="e.g. gpus: 1, or gpus: [\"0\", \"1\"]")


@dataclass(frozen=True)
class Scheduling:
    """Where and how many: read by the targets that schedule across machines (swarm, kubernetes).
    Compose runs one container per service on this machine and ignores it."""

    replicas: int = 1
    placement: tuple[str, ...] = ()  # swarm constraints: `node.labels.gpu==true`, `node.role==manager`
    reserve_memory: str | int | None = None  # what the scheduler sets aside (kubernetes: requests)
    reserve_cpus: float | str | None = None


@dataclass(frozen=True)
class DockerBlock:
    """A server's `docker:` config block, read."""

    limits: Limits = Limits()
    overrides: Overrides = Overrides()
    publish: bool = False
    scheduling: Scheduling = Scheduling()
    runtime: str | None = None  # None or "auto": chosen from the server's imports


def read_scheduling(instance_name: str, block: dict[str, Any]) -> Scheduling:
    replicas = block.get("replicas", 1)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise UserError(f"{instance_name}: docker.replicas must be a whole number of 1 or more, got {replicas!r}",
                        hint="e.g. docker: {replicas: 3}")
    placement = block.get("placement") or []
    if isinstance(placement, str):
        placement = [placement]
    if not isinstance(placement, list) or not all(isinstance(item, str) and item.strip() for item in placement):
        raise UserError(f"{instance_name}: docker.placement must be a list of constraints, got {placement!r}",
                        hint='e.g. placement: ["node.labels.gpu==true"]')
    reservations = block.get("reservations") or {}
    if not isinstance(reservations, dict) or set(reservations) - {"memory", "cpus"}:
        raise UserError(f"{instance_name}: docker.reservations must be a mapping with memory and/or cpus, "
                        f"got {reservations!r}", hint="e.g. reservations: {memory: 1g, cpus: 0.5}")
    return Scheduling(replicas=replicas, placement=tuple(item.strip() for item in placement),
                      reserve_memory=reservations.get("memory"), reserve_cpus=reservations.get("cpus"))


def read_docker_block(instance_name: str, block: Any, extra_keys: tuple[str, ...] = ()) -> DockerBlock:
    """Check and read a server's `docker:` block; `extra_keys` are allowed and read elsewhere."""
    if block is None:
        return DockerBlock()
    if not isinstance(block, dict):
        raise UserError(f"{instance_name}: `docker` must be a mapping, got {block!r}")
    allowed = {*LIMIT_KEYS, *OVERRIDE_KEYS, *SCHEDULING_KEYS, PUBLISH_KEY, RUNTIME_KEY, *extra_keys}
    unknown = set(block) - allowed
    if unknown:
        raise UserError(
            f"{instance_name}: unknown key(s) in `docker`: {', '.join(sorted(unknown))}",
            hint=f"allowed: {', '.join(sorted(allowed))}",
        )
    environment = block.get("environment") or {}
    if not isinstance(environment, dict):
        raise UserError(f"{instance_name}: docker.environment must be a mapping of NAME: value")
    leaked = sorted(key for key in environment if is_secret_key(key))
    if leaked:
        raise UserError(
            f"{instance_name}: docker.environment would put secret(s) {', '.join(leaked)} into environment "
            "variables and compose.yaml",
            hint="put the value in the server's own config block under a key such as `api_key`: it then "
            "travels as a compose secret and the server reads it from its config",
        )
    limits = Limits(
        memory=block.get("memory"),
        cpus=block.get("cpus"),
        pids=block.get("pids"),
        shm=block.get("shm_size"),
        gpus=parse_gpus(block["gpus"], f"{instance_name}.docker") if block.get("gpus") is not None else None,
    )
    overrides = Overrides(
        user=block.get("user"),
        cap_add=tuple(block.get("cap_add") or ()),
        read_only=block.get("read_only"),
        environment={str(key): str(value) for key, value in environment.items()},
        volumes=tuple(block.get("volumes") or ()),
        extra_hosts=tuple(block.get("extra_hosts") or ()),
    )
    runtime = block.get(RUNTIME_KEY)
    if runtime is not None and runtime not in RUNTIME_VALUES:
        raise UserError(f"{instance_name}: docker.runtime must be one of {', '.join(RUNTIME_VALUES)}, got {runtime!r}",
                        hint="e.g. ++" + instance_name + ".<server_type>.<implementation>.docker.runtime=nemo_gym")
    return DockerBlock(limits, overrides, bool(block.get(PUBLISH_KEY)), read_scheduling(instance_name, block),
                       None if runtime == "auto" else runtime)
