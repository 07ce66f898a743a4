"""Render a `Stack` as a standalone compose project: compose.yaml plus the files it needs.

The compose target's renderer: the one place that maps the plan's words (limits, overrides,
mounts, probes) to compose keys. Role defaults are YAML in compose_templates/. The output runs
with plain `docker compose -f DIR/compose.yaml up` on any machine that has the images;
gym-compose is not needed on the host to run it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gym_compose.contract import (
    BIND_ALL,
    BIND_HOST_ENV,
    COLLECTOR_INPUT,
    COLLECTOR_RESULTS,
    COLLECTOR_ROLE,
    CONFIG_DICT_ENV,
    CONFIG_PATH_ENV,
    HEAD_INSTANCE,
    HEAD_ROLE,
    HEAD_VIEW_ENV,
    INFERENCE_ROLE,
    INSTANCE_LABEL,
    PROJECT_ENV,
    PROJECT_LABEL,
    ROLE_LABEL,
    ROOT_READY_ENV,
    RUNTIME_LABEL,
    SECRETS_DIR,
    SESSION_KEY_FILE_ENV,
)
from gym_compose.plan.model import COLLECTOR_SERVICE, HEAD_SERVICE, CollectorRun, Service, Stack, session_key_secret
from gym_compose.plan.runtime_choice import NEMO_GYM
from gym_compose.plan.service_spec import GpuRequest, Limits, Mount, Overrides, Probe
from gym_compose.render.templates import load_template, role_defaults

NETWORK = "gym"
COMPOSE_FILE = "compose.yaml"
# Default limits of a server on the NeMo Gym runtime. NeMo Gym starts a Ray cluster in every server
# that does not declare `ray_enabled = False`; on 2 CPUs that cluster alone is ~420 processes and
# threads and ~740 MB. Under the lean runtime's 256 pids Ray's dashboard cannot start its modules,
# ray.init waits 60 s for it and then may give up on the raylet (docs/nemo-gym-runtime.md).
NEMO_GYM_LIMITS = {"mem_limit": "2g", "pids_limit": 4096}


@dataclass(frozen=True)
class RenderOptions:
    """What the target engine supports."""

    # The Docker socket the sandbox broker mounts: (host path, its group id, rootless engine).
    docker_socket: tuple[str, int | None, bool] | None = None
    # The target publishes ports on every interface of the node (Swarm), where egress sandboxes
    # reach them: the broker refuses them from inside each such sandbox (docs/sandboxes.md).
    publishes_on_every_interface: bool = False


def compose_model(stack: Stack, images: dict[str, str], collector: CollectorRun | None = None,
                  options: RenderOptions = RenderOptions()) -> dict[str, Any]:
    """The compose project as a dict. `images` maps service name -> image tag (and "base")."""
    network_yaml = yaml.safe_dump(stack.network_config, sort_keys=False)
    host_yaml = yaml.safe_dump(stack.host_config, sort_keys=False)
    labels = {PROJECT_LABEL: stack.project}
    services = {
        service.name: _engine_service(service, images, labels) if service.role == INFERENCE_ROLE
        else _server_service(stack, service, images, network_yaml, host_yaml, labels)
        for service in stack.services
    }
    if collector is not None:
        services[COLLECTOR_SERVICE] = _collector_service(stack, images["base"], network_yaml, labels, collector)
    model: dict[str, Any] = {
        "name": stack.project,
        "services": services,
        "networks": {NETWORK: {"labels": dict(labels)}},
    }
    if stack.secrets:
        model["secrets"] = {name: {"file": f"./secrets/{name}"} for name in sorted(stack.secrets)}
    if stack.volumes:  # caches kept across runs: created by `up` (docker volume create NAME), never removed
        model["volumes"] = {key: {"name": name, "external": True} for key, name in sorted(stack.volumes.items())}
    if stack.sandboxes is not None:
        from gym_compose.render.sandbox_services import add_sandboxes

        add_sandboxes(model, stack, images, services[HEAD_SERVICE], options.docker_socket,
                      options.publishes_on_every_interface)
    return model


def write_project(
    stack: Stack, images: dict[str, str], out_dir: Path, collector: CollectorRun | None = None,
    options: RenderOptions = RenderOptions(),
) -> Path:
    """Write compose.yaml and its secret files into out_dir; returns the compose file's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    secrets_dir = out_dir / "secrets"
    if stack.secrets:
        secrets_dir.mkdir(exist_ok=True)
        # The files must be readable by the containers' non-root user (compose bind-mounts each
        # file as it is), so it is this folder's mode that keeps other host users out.
        secrets_dir.chmod(0o700)
        for name, value in stack.secrets.items():
            path = secrets_dir / name
            path.write_text(value, encoding="utf-8")
            path.chmod(0o644)
    if stack.sandboxes is not None:
        from gym_compose.render.sandbox_services import write_secrets

        write_secrets(stack, out_dir)
    compose_file = out_dir / COMPOSE_FILE
    text = "# Rendered by gym-compose; run it with: docker compose -f compose.yaml up --wait\n"
    for name in sorted(set(stack.volumes.values())):
        text += f"# It uses the volume {name}, kept across runs: create it once with `docker volume create {name}`\n"
    text += dump_yaml(compose_model(stack, images, collector, options))
    tmp = compose_file.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(compose_file)
    return compose_file


def dump_yaml(model: dict[str, Any]) -> str:
    return yaml.dump(model, Dumper=_ComposeDumper, sort_keys=False, width=100, allow_unicode=True)


def _server_service(
    stack: Stack, service: Service, images: dict[str, str], network_yaml: str, host_yaml: str, labels: dict,
) -> dict[str, Any]:
    spec = load_template("server")
    spec.update(role_defaults(service.role))
    spec["image"] = images.get(service.name, images["base"])
    spec["labels"] = {
        **labels,
        ROLE_LABEL: service.role,
        **({INSTANCE_LABEL: service.instance} if service.instance else {}),
        RUNTIME_LABEL: service.runtime,
    }
    environment = {
        CONFIG_DICT_ENV: network_yaml,
        CONFIG_PATH_ENV: service.instance or HEAD_INSTANCE,
        BIND_HOST_ENV: BIND_ALL,
    }
    if service.role == HEAD_ROLE:
        environment[HEAD_VIEW_ENV] = host_yaml
        root_ready = [s.instance for s in stack.services if s.runtime == NEMO_GYM and s.instance]
        if root_ready:
            environment[ROOT_READY_ENV] = ",".join(root_ready)
    spec["healthcheck"] = copy.deepcopy(spec["healthcheck"])
    # a NeMo Gym-runtime server has no gym-compose readiness route: any answer on `/` will do
    root_probe = ["--root"] if service.runtime == NEMO_GYM else []
    spec["healthcheck"]["test"] = [*spec["healthcheck"]["test"], *root_probe, str(service.port)]
    spec["healthcheck"]["start_period"] = f"{_start_period_seconds(stack, service)}s"
    if service.published_port:
        spec["ports"] = [f"{stack.options.bind_address}:{service.published_port}:{service.port}"]
    if service.secrets:
        spec["secrets"] = list(service.secrets)
    spec["networks"] = [NETWORK]
    if service.scheduling.replicas > 1:  # compose runs one; swarm and kubernetes run them all
        environment[SESSION_KEY_FILE_ENV] = f"{SECRETS_DIR}/{session_key_secret(service.name)}"
    environment.update(service.overrides.environment)
    spec["environment"] = environment
    if service.runtime == NEMO_GYM:
        spec.update(NEMO_GYM_LIMITS)
    spec.update(limit_fields(service.limits))
    spec.update(override_fields(service.overrides))
    return spec


def limit_fields(limits: Limits) -> dict[str, Any]:
    """The plan's limits as compose service fields (only those the plan sets)."""
    fields: dict[str, Any] = {}
    for key, value in (("mem_limit", limits.memory), ("cpus", limits.cpus), ("pids_limit", limits.pids),
                       ("shm_size", limits.shm)):
        if value is not None:
            fields[key] = value
    if limits.gpus is not None:
        fields["deploy"] = gpu_reservation(limits.gpus)
    return fields


def gpu_reservation(gpus: GpuRequest) -> dict[str, Any]:
    """`deploy.resources.reservations.devices`: how Compose reserves GPUs."""
    device: dict[str, Any] = {"driver": gpus.driver}
    if gpus.count is not None:
        device["count"] = gpus.count
    if gpus.device_ids:
        device["device_ids"] = list(gpus.device_ids)
    if gpus.options is not None:
        device["options"] = gpus.options
    device["capabilities"] = list(gpus.capabilities)
    return {"resources": {"reservations": {"devices": [device]}}}


def override_fields(overrides: Overrides) -> dict[str, Any]:
    """A server's `docker:` overrides (besides environment) as compose fields; each replaces the default."""
    fields: dict[str, Any] = {}
    if overrides.user is not None:
        fields["user"] = overrides.user
    if overrides.read_only is not None:
        fields["read_only"] = overrides.read_only
    for key, values in (("cap_add", overrides.cap_add), ("volumes", overrides.volumes),
                        ("extra_hosts", overrides.extra_hosts)):
        if values:
            fields[key] = list(values)
    return fields


def mount_fields(mount: Mount) -> dict[str, Any]:
    fields: dict[str, Any] = {"type": mount.kind, "source": mount.source, "target": mount.target}
    if mount.read_only:
        fields["read_only"] = True
    return fields


def healthcheck_fields(probe: Probe) -> dict[str, Any]:
    return {"test": ["CMD", *probe.command], "interval": f"{probe.interval_s}s", "timeout": f"{probe.timeout_s}s",
            "retries": probe.retries, "start_period": f"{probe.start_period_s}s"}


def _engine_service(service: Service, images: dict[str, str], labels: dict) -> dict[str, Any]:
    """An inference engine from its own image: runs as that image wants (root, writable), with
    the GPUs and cache the plan gave it; no config, no secrets."""
    spec = load_template("engine")
    spec["image"] = images.get(service.name, service.image)
    spec["labels"] = {**labels, ROLE_LABEL: INFERENCE_ROLE}
    if service.command:
        spec["command"] = list(service.command)
    if service.overrides.environment:
        spec["environment"] = dict(service.overrides.environment)
    if service.mounts:
        spec["volumes"] = [mount_fields(mount) for mount in service.mounts]
    if service.host_ipc:
        spec["ipc"] = "host"
    spec.update(limit_fields(service.limits))
    if service.probe is not None:
        spec["healthcheck"] = healthcheck_fields(service.probe)
    spec["networks"] = [NETWORK]
    return spec


def _collector_service(
    stack: Stack, base_image: str, network_yaml: str, labels: dict, run: CollectorRun
) -> dict[str, Any]:
    spec = load_template("collector")
    spec["image"] = base_image
    spec["labels"] = {**labels, ROLE_LABEL: COLLECTOR_ROLE}
    spec["user"] = run.user
    # the project names the collector in its run-folder lock, for whoever finds the folder busy
    spec["environment"] = {CONFIG_DICT_ENV: network_yaml, PROJECT_ENV: stack.project}
    spec["volumes"] = [
        mount_fields(Mount("bind", str(run.input_file.resolve()), COLLECTOR_INPUT, read_only=True)),
        mount_fields(Mount("bind", str(run.output_dir.resolve()), COLLECTOR_RESULTS)),
    ]
    spec["command"] = ["--input", COLLECTOR_INPUT, "--output-dir", COLLECTOR_RESULTS, *run.args]
    spec["depends_on"] = {HEAD_SERVICE: {"condition": "service_healthy"}}
    spec["networks"] = [NETWORK]
    return spec


def _start_period_seconds(stack: Stack, service: Service) -> int:
    spinup = int(stack.network_config.get("server_spinup_timeout_seconds", 600))
    if service.role == "model":
        spinup += int(stack.network_config.get("model_endpoint_readiness_timeout_seconds", 600))
    return max(spinup, 1)


def wait_timeout_seconds(stack: Stack) -> int:
    """How long `up --wait` may take: the slowest service's start period plus a margin."""
    return max(_start_period_seconds(stack, service) for service in stack.services) + 10


class _ComposeDumper(yaml.SafeDumper):
    """Multi-line strings (the config YAML in env vars) as readable literal blocks."""

    def represent_str(self, data: str) -> yaml.ScalarNode:
        style = "|" if "\n" in data else None
        return self.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_ComposeDumper.add_representer(str, _ComposeDumper.represent_str)
