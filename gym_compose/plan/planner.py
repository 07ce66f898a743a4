"""The stack: what runs, as a pure function of the merged config. No Docker, no files.

`plan_stack` turns a merged NeMo Gym config into a `Stack`: one `Service` per server instance,
plus the head and the collector, the two config views (in-network for containers, host view for
clients outside the network) and the secrets pulled out of the config. The plan is
target-neutral: it speaks gym-compose's words (limits, overrides, mounts, probes; see
`service_spec`), and each target's renderer maps them to its own (render/compose.py: compose keys).
Its data types are in `plan.model`.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import re
from pathlib import Path
from secrets import token_hex
from typing import Any

from gym_compose.config import find_implementation_dir, instances
from gym_compose.config.instances import without_entrypoint
from gym_compose.config.redact import is_secret_key
from gym_compose.config.run_dirs import in_containers
from gym_compose.contract import (
    HEAD_INSTANCE,
    HEAD_PORT,
    HEAD_ROLE,
    INFERENCE_ROLE,
    MAX_PROJECT,
    MCP_REQUIREMENT,
    RESOURCES_SERVERS,
    ROLE_BY_SERVER_TYPE,
    SECRET_PREFIX,
    SERVER_PORT,
    dns_safe,
    project_too_long,
    service_budget,
    shortened,
)
from gym_compose.errors import UserError
from gym_compose.plan.inference_servers import LOCAL_VLLM, VLLM_PORT, inference_base_url, local_vllm_server
from gym_compose.plan.model import COLLECTOR_SERVICE, HEAD_SERVICE, Service, Stack, StackOptions, session_key_secret
from gym_compose.plan.referenced_files import referenced_paths
from gym_compose.plan.runtime_choice import LEAN, NEMO_GYM, RuntimeChoice, choose_runtime, search_root_of
from gym_compose.plan.sandbox_names import declares_sandboxes
from gym_compose.plan.service_spec import Limits, Overrides, read_docker_block


def service_name(instance_name: str, project: str = "gym-compose") -> str:
    """A DNS-safe service name for an instance name, short enough for every name a target makes
    of it and the project (contract.py); a longer one is cut and ends in a hash of the instance name."""
    name = dns_safe(instance_name)
    if not name:
        raise UserError(f"server instance name {instance_name!r} has no letters or digits")
    return shortened(name, service_budget(project), original=instance_name)


TIMEOUT_KEYS = ("server_spinup_timeout_seconds", "model_endpoint_readiness_timeout_seconds")


def plan_stack(data: dict[str, Any], roots: list[Path], options: StackOptions = StackOptions()) -> Stack:
    for key in TIMEOUT_KEYS:
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
            raise UserError(f"{key} must be a number of seconds (0 or more), got {value!r}",
                            hint=f"e.g. ++{key}=120")
    too_long = project_too_long(options.project)
    if too_long:
        raise UserError(too_long, hint=f"use a project name of at most {MAX_PROJECT} characters (-p NAME)")
    found = instances(data)
    if not found:
        data_blocks = [f"{b.name}.{b.server_type}.{b.implementation}" for b in without_entrypoint(data)]
        raise UserError(
            "No server instances are configured, so there is nothing to run"  # NeMo Gym's words
            + (f" ({', '.join(data_blocks)}: a server type but no 'entrypoint', so config data, not a server)"
               if data_blocks else ""),
            hint="select some, e.g. --resources-server example_single_tool_call, or --benchmark NAME; an overlay "
                 "goes after the config it changes (--config base.yaml --config overlay.yaml)",
        )
    services: list[Service] = []
    taken: dict[str, str] = {}
    for instance in found:
        name = service_name(instance.name, options.project)
        if name in (HEAD_SERVICE, COLLECTOR_SERVICE):
            name = f"{name}-server"
        if name in taken:
            raise UserError(
                f"instances {taken[name]!r} and {instance.name!r} map to the same service name {name!r}",
                hint="rename one of them",
            )
        taken[name] = instance.name
        docker_block = read_docker_block(instance.name, instance.spec.get("docker"))
        source_dir = source_dir_of(instance, roots, docker_block.runtime)
        choice = choose_runtime(source_dir, docker_block.runtime, instance.server_type)
        mcp = instance.server_type == RESOURCES_SERVERS and instance.spec.get("expose_tools_over_mcp") is True
        services.append(
            Service(
                name=name,
                role=ROLE_BY_SERVER_TYPE[instance.server_type],
                instance=instance.name,
                implementation=instance.implementation,
                source_dir=source_dir,
                limits=docker_block.limits,
                overrides=_writable_for_nemo_gym(docker_block.overrides, choice.runtime),
                scheduling=docker_block.scheduling,
                runtime=choice.runtime,
                runtime_reason=choice.reason,
                siblings=choice.siblings,
                referenced_paths=_referenced_paths(instance, source_dir, choice),
                extra_requirements=(MCP_REQUIREMENT,) if mcp and choice.runtime == LEAN else (),
            )
        )
        if options.publish_all or docker_block.publish or mcp:  # /mcp is for harnesses outside the stack too
            services[-1].published_port = options.head_port + sum(1 for s in services if s.published_port) + 1

    network_config, secrets = _extract_secrets(copy.deepcopy(data))
    host_config = copy.deepcopy(network_config)
    network_config = in_containers(network_config)  # the host's cache_dir means nothing in a container
    for service in services:
        spec = _instance_spec(network_config, service)
        spec["host"], spec["port"] = service.name, SERVER_PORT
        host_spec = _instance_spec(host_config, service)
        if service.published_port:
            host_spec["host"], host_spec["port"] = options.host_view_address, service.published_port
        else:
            host_spec["host"], host_spec["port"] = service.name, SERVER_PORT
        # The runtime reads secrets of its own block only, so that is all a container gets.
        service.secrets = sorted(_secret_refs(spec))
    # A secret no container mounts (e.g. top-level policy_api_key once interpolated into the
    # model's block) is not written anywhere; its placeholder stays in the config.
    mounted = {name for service in services for name in service.secrets}
    secrets = {name: value for name, value in secrets.items() if name in mounted}
    for service in services:  # replicas share a session-cookie key (server/session_forwarding.py)
        if service.scheduling.replicas > 1:
            key_name = session_key_secret(service.name)
            secrets[key_name] = token_hex(32)
            service.secrets.append(key_name)
    inference, volumes = _inference_servers(services, network_config, host_config, service_budget(options.project))
    network_config[HEAD_INSTANCE] = {"host": HEAD_SERVICE, "port": HEAD_PORT}
    host_config[HEAD_INSTANCE] = {"host": options.host_view_address, "port": options.head_port}

    # No depends_on: every container starts at once, and the head's own readiness waits for all
    # servers to be ready, so "head healthy" means "stack ready" (the collector depends on it).
    head = Service(name=HEAD_SERVICE, role=HEAD_ROLE, port=HEAD_PORT, published_port=options.head_port)
    sandboxes = None
    if any(declares_sandboxes(instance.spec) for instance in instances(data)):  # else no pydantic import
        from gym_compose.plan.sandbox_declaration import PROVIDER_NAME
        from gym_compose.plan.sandbox_plan import plan_sandboxes

        sandboxes = plan_sandboxes(data, services, roots, service_budget(options.project))
        for name in sandboxes.options.default_blocks if sandboxes else ():
            for config in (network_config, host_config):
                config.setdefault(name, {PROVIDER_NAME: {}})
    return Stack(
        project=options.project,
        services=[head, *services, *inference],
        network_config=network_config,
        host_config=host_config,
        secrets=secrets,
        options=options,
        volumes=volumes,
        sandboxes=sandboxes,
    )


def _referenced_paths(instance, source_dir: Path | None, choice: RuntimeChoice) -> tuple[str, ...]:
    """What a NeMo Gym-runtime server's config names under its checkout (only that image has one)."""
    if source_dir is None or choice.runtime != NEMO_GYM:
        return ()
    root = search_root_of(source_dir, instance.server_type)
    if root is None:
        return ()
    own = source_dir.resolve().relative_to(root.resolve()).as_posix()
    return referenced_paths(instance.spec, root, (own, *choice.siblings))


def _writable_for_nemo_gym(overrides: Overrides, runtime: str) -> Overrides:
    """A NeMo Gym-runtime server writes into its own folder as in a checkout (swebench_pro's
    `logs/run_evaluation/`), so its root filesystem is not read-only unless its `docker:` block says
    so; its image gives the server's user its code under /srv/gym."""
    if runtime == NEMO_GYM and overrides.read_only is None:
        return dataclasses.replace(overrides, read_only=False)
    return overrides


def _inference_servers(services: list[Service], network_config: dict[str, Any], host_config: dict[str, Any],
                       name_budget: int) -> tuple[list[Service], dict[str, str]]:
    """An inference service per local_vllm_model instance; the instance's base_url points at it."""
    inference: list[Service] = []
    volumes: dict[str, str] = {}
    start_period = int(network_config.get("server_spinup_timeout_seconds", 600)) + int(
        network_config.get("model_endpoint_readiness_timeout_seconds", 600))
    for service in services:
        if service.implementation != LOCAL_VLLM:
            continue
        spec = _instance_spec(network_config, service)
        server = local_vllm_server(str(service.instance), service.name, spec, max(start_period, 1), name_budget)
        if any(existing.name == server.name for existing in [*services, *inference]):
            raise UserError(f"the inference service {server.name!r} of {service.instance!r} clashes with an instance's "
                            "service name", hint="rename one of them")
        for config in (network_config, host_config):
            _instance_spec(config, service)["base_url"] = inference_base_url(server)
        spec.setdefault("api_key", "EMPTY")
        inference.append(Service(name=server.name, role=INFERENCE_ROLE, port=VLLM_PORT, image=server.image,
                                 command=server.command, overrides=Overrides(environment=server.environment),
                                 limits=Limits(gpus=server.gpus), mounts=server.mounts, probe=server.probe,
                                 host_ipc=server.host_ipc))
        volumes.update(server.volumes)
    return inference, volumes


def source_dir_of(instance, roots: list[Path], requested_runtime: str | None = None) -> Path | None:
    """The folder of an instance's own code; None runs a built-in implementation."""
    from gym_compose.plan.runtime_choice import NEMO_GYM
    from gym_compose.server.builtin import BUILTIN_IMPLEMENTATIONS

    entrypoint = instance.spec.get("entrypoint", "app.py")
    # Built-ins win over a folder of the same name: a NeMo Gym checkout given with --search-dir
    # holds its own simple_agent/openai_model/vllm_model/..., which import NeMo Gym internals.
    # `docker.runtime: nemo_gym` asks for that folder's code instead, on the NeMo Gym runtime.
    if instance.implementation in BUILTIN_IMPLEMENTATIONS:
        if requested_runtime != NEMO_GYM:
            return None
        found = find_implementation_dir(instance.server_type, instance.implementation, roots)
        if found is not None and found.parent.name == instance.server_type and (found / entrypoint).is_file():
            return found
        raise UserError(
            f"instance {instance.name!r}: docker.runtime: nemo_gym asks for NeMo Gym's own "
            f"{instance.implementation!r}, but no search root holds "
            f"{instance.server_type}/{instance.implementation}/{entrypoint}",
            hint="add a NeMo Gym checkout (or its unpacked wheel) with --search-dir, or drop docker.runtime "
                 "to run gym-compose's built-in implementation",
        )
    found = find_implementation_dir(instance.server_type, instance.implementation, roots)
    if found is not None and (found / entrypoint).is_file():
        return found
    tried = ", ".join(str(root) for root in roots)
    raise UserError(
        f"instance {instance.name!r}: no code found for implementation {instance.implementation!r}",
        hint=f"expected server_images/{instance.implementation}/ or "
        f"{instance.server_type}/{instance.implementation}/ holding "
        f"{entrypoint} under one of: {tried} (add roots with --search-dir)",
    )


def _instance_spec(config: dict[str, Any], service: Service) -> dict[str, Any]:
    assert service.instance is not None  # a server of the config, not the head or an inference service
    server_types = config[service.instance]
    (server_type,) = [key for key in server_types if key in ROLE_BY_SERVER_TYPE]
    return server_types[server_type][service.implementation]


def _extract_secrets(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """Replace every secret value by `secret://NAME`; return the config and NAME -> value."""
    secrets: dict[str, str] = {}

    def walk(node: Any, path: list[str]) -> Any:
        if isinstance(node, dict):
            return {key: walk(value, [*path, str(key)]) for key, value in node.items()}
        if isinstance(node, list):
            return [walk(value, [*path, str(i)]) for i, value in enumerate(node)]
        is_secret = path and is_secret_key(path[-1]) and node is not None and not isinstance(node, bool)
        if is_secret and str(node) and not str(node).startswith(SECRET_PREFIX):
            name = _secret_name(path, secrets)
            secrets[name] = str(node)
            return SECRET_PREFIX + name
        return node

    return walk(config, []), secrets


def _secret_name(path: list[str], taken: dict[str, str]) -> str:
    """A file name for the secret at `path`; two paths that read alike get different names."""
    name = re.sub(r"[^a-zA-Z0-9_.-]+", "_", ".".join(path))
    if name in taken:
        name += "-" + hashlib.sha256(".".join(path).encode()).hexdigest()[:8]
    return name


def _secret_refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        return set().union(*(_secret_refs(value) for value in node.values())) if node else set()
    if isinstance(node, list):
        return set().union(*(_secret_refs(value) for value in node)) if node else set()
    if isinstance(node, str) and node.startswith(SECRET_PREFIX):
        return {node[len(SECRET_PREFIX):]}
    return set()
