"""`python -m gym_compose.sandbox.broker`: serve the project's sandbox broker.

Environment: GYM_COMPOSE_SANDBOX_POLICY (the plan's BrokerSettings as JSON), the project secret in
GYM_COMPOSE_SECRETS_DIR (default /run/secrets)/sandbox_broker_token, the Docker socket at
GYM_COMPOSE_DOCKER_SOCKET (default /var/run/docker.sock), GYM_COMPOSE_BIND_HOST and
GYM_COMPOSE_SANDBOX_BROKER_PORT (default 0.0.0.0:8000). GYM_COMPOSE_SANDBOX_BACKEND=kubernetes
manages sandbox pods through the Kubernetes API instead (kubernetes.py; no Docker socket).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gym_compose.contract import BIND_ALL, BIND_HOST_ENV, LOG_LEVEL_ENV, SECRETS_DIR, SECRETS_DIR_ENV

POLICY_ENV = "GYM_COMPOSE_SANDBOX_POLICY"
BACKEND_ENV = "GYM_COMPOSE_SANDBOX_BACKEND"  # docker (compose, swarm) | kubernetes (pods, kubernetes.py)
PORT_ENV = "GYM_COMPOSE_SANDBOX_BROKER_PORT"
BROKER_PORT = 8000


def main() -> None:
    logging.basicConfig(level=os.environ.get(LOG_LEVEL_ENV, "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from gym_compose.net.web import ErrorBoundary, serve
    from gym_compose.sandbox.broker.app import build_app
    from gym_compose.sandbox.broker.docker_backend import Engine
    from gym_compose.sandbox.broker.pool import SandboxPool
    from gym_compose.sandbox.policy import BrokerSettings
    from gym_compose.sandbox.tokens import BROKER_SECRET

    backend = os.environ.get(BACKEND_ENV, "docker")
    if backend not in ("docker", "kubernetes"):
        sys.exit(f"sandbox broker: unknown backend {backend!r} in {BACKEND_ENV} (docker or kubernetes)")
    try:
        settings = BrokerSettings.model_validate_json(os.environ.get(POLICY_ENV) or "")
    except ValidationError as error:
        sys.exit(f"sandbox broker: {POLICY_ENV} is not a valid policy: {error}")
    secret_file = Path(os.environ.get(SECRETS_DIR_ENV, SECRETS_DIR)) / BROKER_SECRET
    try:
        secret = secret_file.read_text().strip()
    except OSError as error:
        sys.exit(f"sandbox broker: cannot read the project secret {secret_file}: {error.strerror}")
    if not secret:
        sys.exit(f"sandbox broker: the project secret {secret_file} is empty")
    if backend == "kubernetes":
        from gym_compose.sandbox.broker.docker_backend import EngineError
        from gym_compose.sandbox.broker.kubernetes_backend import KubernetesEngine

        try:
            engine: Any = KubernetesEngine()
        except EngineError as error:
            sys.exit(f"sandbox broker: {error}")
    else:
        engine = Engine()
        if not os.access(engine.socket_path, os.R_OK | os.W_OK):
            sys.exit(f"sandbox broker: no access to the Docker socket {engine.socket_path} "
                     f"(uid {os.getuid()}, groups {os.getgroups()}); the compose file's group_add must name its group")
    app = ErrorBoundary(build_app(SandboxPool(engine, settings), secret), "sandbox-broker")
    serve(app, os.environ.get(BIND_HOST_ENV, BIND_ALL), int(os.environ.get(PORT_ENV, BROKER_PORT)),
          log_level="info")


if __name__ == "__main__":
    main()
