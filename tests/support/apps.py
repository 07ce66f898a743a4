"""A server object's finished app under Starlette's TestClient, as the runtime serves it."""

from __future__ import annotations

from starlette.testclient import TestClient

from gym_compose.server.context import ServerContext
from gym_compose.server.runtime import finish_app


def client_for(server, server_type: str, implementation: str) -> TestClient:
    context = ServerContext(name=server.config.name, server_type=server_type, implementation=implementation,
                            spec={}, global_config={}, bind_host="127.0.0.1", port=0)
    return TestClient(finish_app(server.setup_webserver(), context, server), raise_server_exceptions=False)
