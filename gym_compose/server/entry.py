"""`python -m gym_compose.server`: start the server the environment names (see docs/architecture.md)."""

from __future__ import annotations

import importlib
import logging
import os
import runpy
import sys
import threading
from pathlib import Path

from gym_compose.contract import LOG_LEVEL_ENV
from gym_compose.server.context import ServerConfigError, ServerContext, load_context
from gym_compose.server.runtime import set_current_context

LOG = logging.getLogger("gym_compose.server")


def _serve_builtin(reference: str) -> None:
    module_name, _, attribute = reference.partition(":")
    server_cls = getattr(importlib.import_module(module_name), attribute)
    server_cls.run_webserver()


def _entrypoint_path(context: ServerContext) -> Path:
    server_dir = context.server_dir
    if server_dir is None:
        raise ServerConfigError(
            f"{context.implementation!r} is not a built-in implementation and GYM_COMPOSE_SERVER_DIR is not set"
        )
    entrypoint = server_dir / str(context.spec.get("entrypoint") or "app.py")
    if not entrypoint.is_file():
        raise ServerConfigError(f"entrypoint {entrypoint} does not exist")
    return entrypoint


def _serve_entrypoint(context: ServerContext) -> None:
    """Run a NeMo Gym-style app.py as __main__: its `X.run_webserver()` serves through this runtime."""
    from gym_compose.net.web import resume_gc
    from gym_compose.server import compat
    from gym_compose.server.base import BaseServer

    compat.install()
    # An app.py that serves by itself (its own uvicorn.run, not run_webserver) never reaches
    # web.serve, which turns GC back on: a minute is far past any start.
    timer = threading.Timer(60.0, resume_gc)
    timer.daemon = True
    timer.start()
    entrypoint = _entrypoint_path(context)
    sys.path.insert(0, str(entrypoint.parent))
    compat.register_own_package(context.server_type, context.implementation, entrypoint.parent)
    served = {"done": False}
    original = BaseServer.run_webserver.__func__  # type: ignore[attr-defined]

    def run_and_remember(cls):
        served["done"] = True
        original(cls)

    BaseServer.run_webserver = classmethod(run_and_remember)  # type: ignore[method-assign,assignment]
    namespace = runpy.run_path(str(entrypoint), run_name="__main__")
    if served["done"]:
        return
    # An app.py without a __main__ block: serve the one server class it defines.
    candidates = [
        value for value in namespace.values()
        if isinstance(value, type) and issubclass(value, BaseServer) and value.__module__ == "__main__"
        and not getattr(value, "__abstractmethods__", None)
    ]
    if len(candidates) != 1:
        raise ServerConfigError(
            f"{entrypoint} neither called run_webserver() nor defines exactly one server class "
            f"(found {[c.__name__ for c in candidates]})"
        )
    candidates[0].run_webserver()


def main() -> None:
    logging.basicConfig(
        level=os.environ.get(LOG_LEVEL_ENV, "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # httpx logs every request at INFO; the readiness polls alone would fill `docker compose logs`
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        context = load_context()
    except ServerConfigError as error:
        print(f"gym-compose server: {error}", file=sys.stderr)
        sys.exit(2)
    set_current_context(context)
    if context.is_head:
        from gym_compose.server.head import run_head

        run_head(context)
        return
    from gym_compose.server.builtin import BUILTIN_IMPLEMENTATIONS

    reference = BUILTIN_IMPLEMENTATIONS.get(context.implementation)
    has_own_entrypoint = context.server_dir is not None and (
        context.server_dir / str(context.spec.get("entrypoint") or "app.py")
    ).is_file()
    try:
        if reference is not None and not has_own_entrypoint:
            _serve_builtin(reference)
        else:
            _serve_entrypoint(context)
    except ServerConfigError as error:
        print(f"gym-compose server {context.name}: {error}", file=sys.stderr)
        sys.exit(2)
