"""Render a `Stack` for Docker Swarm: the compose project, in the subset `docker stack deploy` reads.

The swarm target's renderer. It starts from the compose model (render/compose.py: the same services,
config views, secrets, healthchecks and hardening) and moves what Swarm spells differently:

- limits (`mem_limit`, `cpus`, `pids_limit`) -> `deploy.resources.limits`; the `docker:` block's
  `reservations` -> `deploy.resources.reservations`, `replicas` and `placement` -> `deploy`;
- every service `endpoint_mode: dnsrr`: the service name resolves to every replica's address (DNS
  round robin). Swarm's default virtual IP needs the kernel's IPVS, which not every host has (this
  one has not), and a server's own clients pin sessions per connection anyway (docs/deploy.md);
- published ports in `mode: host` (dnsrr has no routing mesh): on the node's every interface,
  since Swarm has no host address in a port;
- `tmpfs` and `shm_size` -> tmpfs mounts; networks -> overlay (internal ones stay internal;
  sandbox networks `attachable`, because the broker starts plain containers on them);
- `restart: "no"` -> `restart_policy: on-failure`, once (RESTART_POLICY): a task lost with its
  node is rescheduled on another (with `none` Swarm leaves the slot empty). A dying server still
  fails the run, as under compose: the run's watcher sees its slot's new task not running;
- what Swarm cannot do is left out and said in docs/deploy.md: `security_opt` (no-new-privileges),
  `ipc: host`, `group_add` (the sandbox broker runs as root to reach the socket).
The collector is not part of the stack: it runs as a one-off job service (engine/swarm.py) from
the spec written beside the stack file.
"""

from __future__ import annotations

import copy
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from gym_compose.contract import PROJECT_LABEL, REPLICA_ADDRESS_ENV, SWARM_SECRET, shortened
from gym_compose.errors import UserError
from gym_compose.plan.model import COLLECTOR_SERVICE, CollectorRun, Stack
from gym_compose.plan.service_spec import GpuRequest
from gym_compose.render.compose import NETWORK, RenderOptions, compose_model, dump_yaml

STACK_FILE = "stack.yaml"
COLLECTOR_FILE = "collector.yaml"
STACK_VERSION = "3.9"
# Swarm restarts a task whose node is lost only when its policy allows a restart; one attempt
# covers a lost node without letting a server that crashes at start loop.
RESTART_POLICY = {"condition": "on-failure", "max_attempts": 1}
KEPT_KEYS = ("image", "entrypoint", "command", "user", "read_only", "init", "cap_add", "cap_drop", "environment",
             "labels", "secrets", "healthcheck", "networks", "stop_grace_period", "extra_hosts", "volumes")


def swarm_model(stack: Stack, images: dict[str, str], options: RenderOptions | None = None) -> dict[str, Any]:
    """The stack file as a dict (the collector is rendered separately, into collector.yaml)."""
    # Swarm publishes ports on every interface of the node (mode: host): egress sandboxes reach them
    compose = compose_model(stack, images, None, replace(options or RenderOptions(), publishes_on_every_interface=True))
    by_name = {service.name: service for service in stack.services}
    services = {name: _swarm_service(name, spec, by_name.get(name)) for name, spec in compose["services"].items()}
    networks = {}
    for key, network in compose["networks"].items():
        swarm_network: dict[str, Any] = {"driver": "overlay", "labels": network.get("labels", {})}
        if "name" in network:
            swarm_network["name"] = network["name"]
        if network.get("internal"):
            swarm_network["internal"] = True
        if key != NETWORK:  # the sandbox networks: the broker attaches plain containers to them
            swarm_network["attachable"] = True
        networks[key] = swarm_network
    model: dict[str, Any] = {"version": STACK_VERSION, "services": services, "networks": networks}
    if "secrets" in compose:  # Swarm names a secret PROJECT_KEY in at most 64 characters; the file keeps KEY
        model["secrets"] = {key: {**secret, "name": shortened(f"{stack.project}_{key}", SWARM_SECRET)}
                            for key, secret in compose["secrets"].items()}
    if "volumes" in compose:
        model["volumes"] = compose["volumes"]
    return model


def write_swarm_project(stack: Stack, images: dict[str, str], out_dir: Path, collector: CollectorRun | None = None,
                        options: RenderOptions | None = None) -> Path:
    """DIR/stack.yaml (with the secret files beside it, as for compose) and, with a collection,
    DIR/collector.yaml; returns the stack file."""
    from gym_compose.render.compose import write_project

    options = options or RenderOptions()
    write_project(stack, images, out_dir, None, options)  # the secret files (and a compose.yaml to read)
    model = swarm_model(stack, images, options)
    for secret in (model.get("secrets") or {}).values():  # Swarm reads them relative to the working dir
        secret["file"] = str((out_dir / secret["file"]).resolve())
    stack_file = out_dir / STACK_FILE
    text = f"# Rendered by gym-compose; deploy it with: docker stack deploy -c {STACK_FILE} {stack.project}\n"
    stack_file.write_text(text + dump_yaml(model), encoding="utf-8")
    collector_file = out_dir / COLLECTOR_FILE
    if collector is not None:
        spec = compose_model(stack, images, collector, options)["services"][COLLECTOR_SERVICE]
        collector_file.write_text(dump_yaml(spec), encoding="utf-8")
    else:
        collector_file.unlink(missing_ok=True)
    return stack_file


def load_collector_spec(stack_file: Path) -> dict[str, Any]:
    path = stack_file.parent / COLLECTOR_FILE
    if not path.is_file():
        raise UserError(f"no collector was rendered beside {stack_file}",
                        hint="start the run with `gym-compose eval run`")
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _swarm_service(name: str, spec: dict[str, Any], service) -> dict[str, Any]:
    swarm = {key: copy.deepcopy(spec[key]) for key in KEPT_KEYS if key in spec}
    if "group_add" in spec:  # the broker's right to the socket is its group, which Swarm cannot add
        swarm["user"] = "0:0"
    mounts = [_volume(item) for item in swarm.pop("volumes", [])]
    for entry in spec.get("tmpfs", []):
        target, _, size = entry.partition(":size=")
        mounts.append({"type": "tmpfs", "target": target, **({"tmpfs": {"size": _bytes(size)}} if size else {})})
    if "shm_size" in spec:
        mounts.append({"type": "tmpfs", "target": "/dev/shm", "tmpfs": {"size": _bytes(spec["shm_size"])}})
    if mounts:
        swarm["volumes"] = mounts
    ports = []
    for port in spec.get("ports", []):  # "ADDRESS:PUBLISHED:TARGET" (render/compose.py's form)
        published, target = str(port).split(":")[-2:]
        ports.append({"target": int(target), "published": int(published), "protocol": "tcp", "mode": "host"})
    if ports:
        swarm["ports"] = ports
    limits: dict[str, Any] = {}
    if "mem_limit" in spec:
        limits["memory"] = _size(spec["mem_limit"])
    if "cpus" in spec:
        limits["cpus"] = str(spec["cpus"])
    if "pids_limit" in spec:
        limits["pids"] = int(spec["pids_limit"])
    reservations: dict[str, Any] = {}
    deploy: dict[str, Any] = {"replicas": 1, "endpoint_mode": "dnsrr", "restart_policy": dict(RESTART_POLICY),
                              "labels": {PROJECT_LABEL: spec.get("labels", {}).get(PROJECT_LABEL, "")}}
    if service is not None:
        deploy["replicas"] = service.scheduling.replicas
        if service.scheduling.replicas > 1 and "environment" in swarm:  # its task name resolves on the network
            swarm["environment"][REPLICA_ADDRESS_ENV] = f"{{{{.Task.Name}}}}:{service.port}"
        if service.scheduling.placement:
            deploy["placement"] = {"constraints": list(service.scheduling.placement)}
        if service.scheduling.reserve_memory is not None:
            reservations["memory"] = _size(service.scheduling.reserve_memory)
        if service.scheduling.reserve_cpus is not None:
            reservations["cpus"] = str(service.scheduling.reserve_cpus)
        if service.limits.gpus is not None:
            reservations["generic_resources"] = _gpu_resources(service.limits.gpus, service.instance or name)
    resources = {key: value for key, value in (("limits", limits), ("reservations", reservations)) if value}
    if resources:
        deploy["resources"] = resources
    swarm["deploy"] = deploy
    return swarm


def _gpu_resources(gpus: GpuRequest, where: str) -> list[dict[str, Any]]:
    """Swarm schedules GPUs as a node's generic resource (dockerd's `node-generic-resources`)."""
    if not isinstance(gpus.count, int) or gpus.device_ids:
        raise UserError(f"{where}.docker.gpus: Swarm reserves GPUs by count (a node's generic resource)",
                        hint="e.g. gpus: 1; advertise them on each node: dockerd --node-generic-resource NVIDIA-GPU=0")
    return [{"discrete_resource_spec": {"kind": "NVIDIA-GPU", "value": gpus.count}}]


def _volume(item: Any) -> Any:
    if isinstance(item, dict):
        return item
    source, _, rest = str(item).partition(":")
    target, _, mode = rest.partition(":")
    kind = "bind" if source.startswith(("/", ".", "~")) else "volume"
    return {"type": kind, "source": source, "target": target, **({"read_only": True} if mode == "ro" else {})}


def _size(value: str | int) -> str:
    """A compose size in the stack file's form (`512m` -> `512M`)."""
    return str(value).upper() if isinstance(value, str) else str(value)


def _bytes(value: str | int) -> int:
    if isinstance(value, int):
        return value
    match = re.fullmatch(r"(\d+)\s*([kmg]?)b?", value.strip().lower())
    if not match:
        raise UserError(f"{value!r} is not a size", hint="e.g. 64m, 1g")
    return int(match.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[match.group(2)]
