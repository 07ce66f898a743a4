"""The head server: config discovery for clients outside the servers (trainers, collectors)."""

from __future__ import annotations

from typing import Any

import yaml
from starlette.applications import Starlette
from starlette.routing import Route

from gym_compose.net.web import json_response
from gym_compose.server.context import HEAD_INSTANCE, SERVER_TYPES, ServerContext


def server_instances(config: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per server instance: name, server_type, implementation, host, port, url, and its own keys."""
    instances = []
    for name, entry in config.items():
        if name == HEAD_INSTANCE or not isinstance(entry, dict):
            continue
        for server_type in SERVER_TYPES:
            implementations = entry.get(server_type)
            if not isinstance(implementations, dict) or len(implementations) != 1:
                continue
            implementation, spec = next(iter(implementations.items()))
            spec = spec or {}
            if "entrypoint" not in spec:
                continue  # config data shaped like a server, as NeMo Gym reads it
            host, port = spec.get("host"), spec.get("port")
            instances.append({
                **{key: value for key, value in spec.items() if key not in ("host", "port")},
                "name": name,
                "server_type": server_type,
                "implementation": implementation,
                "host": host,
                "port": port,
                "url": f"http://{host}:{port}" if host and port is not None else None,
            })
    return instances


def build_head_app(view: dict[str, Any]) -> Starlette:
    config_yaml = yaml.safe_dump(view, sort_keys=False)
    instances = server_instances(view)

    async def root(request):
        return json_response({"status": "ok"})

    async def global_config_dict_yaml(request):
        return json_response(config_yaml)

    async def list_instances(request):
        return json_response(instances)

    return Starlette(routes=[
        Route("/", root, methods=["GET"]),
        Route("/global_config_dict_yaml", global_config_dict_yaml, methods=["GET"]),
        Route("/server_instances", list_instances, methods=["GET"]),
    ])


def run_head(context: ServerContext) -> None:
    from gym_compose.server.runtime import run_app

    run_app(build_head_app(context.head_view), context)
