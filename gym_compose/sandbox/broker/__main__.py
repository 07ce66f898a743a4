"""`python -m gym_compose.sandbox.broker`: serve the project's sandbox broker.

Environment: GYM_COMPOSE_SANDBOX_POLICY (the plan's BrokerSettings as JSON), the project secret in
GYM_COMPOSE_SECRETS_DIR (default /run/secrets)/sandbox_broker_token, the registry credentials it
pulls with in .../sandbox_registry_auth (optional; registry_auth.py), the Docker socket at
GYM_COMPOSE_DOCKER_SOCKET (default /var/run/docker.sock), GYM_COMPOSE_BIND_HOST and
GYM_COMPOSE_SANDBOX_BROKER_PORT (default 0.0.0.0:8000). GYM_COMPOSE_SANDBOX_BACKEND=kubernetes
manages sandbox pods through the Kubernetes API instead (kubernetes_backend.py; no Docker socket).
The names are the contract's (gym_compose/contract.py).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from gym_compose.contract import (
    BIND_ALL,
    BIND_HOST_ENV,
    LOG_LEVEL_ENV,
    SANDBOX_BACKEND_ENV,
    SANDBOX_BROKER_PORT,
    SANDBOX_BROKER_PORT_ENV,
    SANDBOX_BROKER_SECRET,
    SANDBOX_POLICY_ENV,
    SANDBOX_REGISTRY_AUTH_SECRET,
    SECRETS_DIR,
    SECRETS_DIR_ENV,
)

if TYPE_CHECKING:
    from gym_compose.sandbox.broker.backend import SandboxBackend


def main() -> None:
    logging.basicConfig(level=os.environ.get(LOG_LEVEL_ENV, "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from gym_compose.net.web import ErrorBoundary, serve
    from gym_compose.sandbox.broker.app import build_app
    from gym_compose.sandbox.broker.docker_backend import DockerBackend
    from gym_compose.sandbox.broker.pool import SandboxPool
    from gym_compose.sandbox.policy import BrokerSettings

    kind = os.environ.get(SANDBOX_BACKEND_ENV, "docker")
    if kind not in ("docker", "kubernetes"):
        sys.exit(f"sandbox broker: unknown backend {kind!r} in {SANDBOX_BACKEND_ENV} (docker or kubernetes)")
    try:
        settings = BrokerSettings.model_validate_json(os.environ.get(SANDBOX_POLICY_ENV) or "")
    except ValidationError as error:
        sys.exit(f"sandbox broker: {SANDBOX_POLICY_ENV} is not a valid policy: {error}")
    secrets_dir = Path(os.environ.get(SECRETS_DIR_ENV, SECRETS_DIR))
    secret_file = secrets_dir / SANDBOX_BROKER_SECRET
    try:
        secret = secret_file.read_text().strip()
    except OSError as error:
        sys.exit(f"sandbox broker: cannot read the project secret {secret_file}: {error.strerror}")
    if not secret:
        sys.exit(f"sandbox broker: the project secret {secret_file} is empty")
    backend: SandboxBackend
    if kind == "kubernetes":
        from gym_compose.sandbox.broker.broker_errors import BackendError
        from gym_compose.sandbox.broker.kubernetes_backend import KubernetesBackend

        try:
            backend = KubernetesBackend()
        except BackendError as error:
            sys.exit(f"sandbox broker: {error}")
    else:
        from gym_compose.sandbox.broker.registry_auth import load_registry_auth

        docker = DockerBackend(registry_auth=load_registry_auth(secrets_dir / SANDBOX_REGISTRY_AUTH_SECRET),
                               pull_stall_s=settings.pull_stall_s)
        if not os.access(docker.socket_path, os.R_OK | os.W_OK):
            sys.exit(f"sandbox broker: no access to the Docker socket {docker.socket_path} "
                     f"(uid {os.getuid()}, groups {os.getgroups()}); the compose file's group_add must name its group")
        backend = docker
    app = ErrorBoundary(build_app(SandboxPool(backend, settings), secret), "sandbox-broker")
    serve(app, os.environ.get(BIND_HOST_ENV, BIND_ALL),
          int(os.environ.get(SANDBOX_BROKER_PORT_ENV, SANDBOX_BROKER_PORT)), log_level="info")


if __name__ == "__main__":
    main()
