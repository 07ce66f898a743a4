"""Render a `Stack` as a standalone compose project: compose.yaml plus the files it needs.

The output runs with plain `docker compose -f DIR/compose.yaml up` on any machine that has the
images; gym-compose is not needed on the host to run it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gym_compose.paths import PROJECT_ROOT
from gym_compose.plan import (
    COLLECTOR_SERVICE,
    HEAD_SERVICE,
    PROJECT_LABEL,
    Service,
    Stack,
)

TEMPLATES_DIR = PROJECT_ROOT / "compose_templates"
NETWORK = "gym"
COMPOSE_FILE = "compose.yaml"
STEADY_HEALTHCHECK = {"interval": "30s", "start_interval": "1s"}


@dataclass(frozen=True)
class RenderOptions:
    """What the target engine supports."""

    # Docker Engine 25+ (API 1.44) probes every start_interval during start-up, which lets the
    # steady-state healthcheck interval be long (low idle CPU) without slowing the start.
    healthcheck_start_interval: bool = False
    # The Docker socket the sandbox broker mounts: (host path, its group id, rootless engine).
    docker_socket: tuple[str, int | None, bool] | None = None


@dataclass(frozen=True)
class CollectorRun:
    """One collection run: rows in (read-only), artifacts out, collector arguments."""

    input_file: Path
    output_dir: Path
    args: list[str] = field(default_factory=list)
    user: str = "10001:10001"  # who writes the artifacts; never root (see evaluation.collector_user)


def load_template(name: str) -> dict[str, Any]:
    with open(TEMPLATES_DIR / f"{name}.yaml", encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


def compose_model(stack: Stack, images: dict[str, str], collector: CollectorRun | None = None,
                  options: RenderOptions = RenderOptions()) -> dict[str, Any]:
    """The compose project as a dict. `images` maps service name -> image tag (and "base")."""
    network_yaml = yaml.safe_dump(stack.network_config, sort_keys=False)
    host_yaml = yaml.safe_dump(stack.host_config, sort_keys=False)
    labels = {PROJECT_LABEL: stack.project}
    services = {
        service.name: _engine_service(service, images, labels) if service.role == "engine"
        else _server_service(stack, service, images, network_yaml, host_yaml, labels, options)
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
        from gym_compose.sandbox_stack.render import add_sandboxes

        add_sandboxes(model, stack, images, services[HEAD_SERVICE], options.docker_socket)
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
        from gym_compose.sandbox_stack.render import write_secrets

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
    options: RenderOptions,
) -> dict[str, Any]:
    spec = load_template("server")
    spec["image"] = images.get(service.name, images["base"])
    spec["labels"] = {
        **labels,
        "io.gym-compose.role": service.role,
        **({"io.gym-compose.instance": service.instance} if service.instance else {}),
    }
    environment = {
        "NEMO_GYM_CONFIG_DICT": network_yaml,
        "NEMO_GYM_CONFIG_PATH": service.instance or "head_server",
        "GYM_COMPOSE_BIND_HOST": "0.0.0.0",
    }
    if service.role == "head":
        environment["GYM_COMPOSE_HEAD_VIEW"] = host_yaml
    spec["healthcheck"] = copy.deepcopy(spec["healthcheck"])
    spec["healthcheck"]["test"] = [*spec["healthcheck"]["test"], str(service.port)]
    spec["healthcheck"]["start_period"] = f"{_start_period_seconds(stack, service)}s"
    if options.healthcheck_start_interval:
        spec["healthcheck"].update(STEADY_HEALTHCHECK)
    if service.published_port:
        spec["ports"] = [f"{stack.options.bind_address}:{service.published_port}:{service.port}"]
    if service.secrets:
        spec["secrets"] = list(service.secrets)
    spec["networks"] = [NETWORK]
    if service.role == "model":  # so a model endpoint on the host is http://host.docker.internal:PORT
        spec["extra_hosts"] = ["host.docker.internal:host-gateway"]
    overrides = dict(service.docker)
    environment.update({str(k): str(v) for k, v in (overrides.pop("environment", None) or {}).items()})
    spec["environment"] = environment
    spec.update(overrides)
    return spec


def _engine_service(service: Service, images: dict[str, str], labels: dict) -> dict[str, Any]:
    """An inference engine from its own image: runs as that image wants (root, writable), with
    the GPUs and cache the plan gave it; no config, no secrets."""
    spec: dict[str, Any] = {"image": images.get(service.name, service.image), "restart": "no",
                            "labels": {**labels, "io.gym-compose.role": "engine"},
                            "security_opt": ["no-new-privileges:true"], "stop_grace_period": "30s"}
    spec.update(copy.deepcopy(service.compose))
    spec["networks"] = [NETWORK]
    return spec


def _collector_service(
    stack: Stack, base_image: str, network_yaml: str, labels: dict, run: CollectorRun
) -> dict[str, Any]:
    spec = load_template("collector")
    spec["image"] = base_image
    spec["labels"] = {**labels, "io.gym-compose.role": "collector"}
    spec["user"] = run.user
    # the project names the collector in its run-folder lock, for whoever finds the folder busy
    spec["environment"] = {"NEMO_GYM_CONFIG_DICT": network_yaml, "GYM_COMPOSE_PROJECT": stack.project}
    spec["volumes"] = [
        {"type": "bind", "source": str(run.input_file.resolve()), "target": "/input/rows.jsonl", "read_only": True},
        {"type": "bind", "source": str(run.output_dir.resolve()), "target": "/results"},
    ]
    spec["command"] = ["--input", "/input/rows.jsonl", "--output-dir", "/results", *run.args]
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

    def represent_str(self, data: str):  # type: ignore[override]
        style = "|" if "\n" in data else None
        return self.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_ComposeDumper.add_representer(str, _ComposeDumper.represent_str)
