"""Start a server on the NeMo Gym runtime the way `gym env start` starts it.

`python -m gym_compose.server.nemo_gym_launch` is the command of NeMo Gym-runtime containers
(docs/nemo-gym-runtime.md). NeMo Gym 0.7's CLI runs each server as `python <entrypoint>` with
the server's folder as working directory and first on PYTHONPATH, and hands it the merged config
in NEMO_GYM_CONFIG_DICT (YAML, with the defaults its parser adds) and its instance name in
NEMO_GYM_CONFIG_PATH. This does the same, after three container matters: the server's own
`secret://NAME` values are read from the mounted secrets, it binds every interface, and the
parser's defaults NeMo Gym's server code reads are filled in. A server with sandboxes gets its
`sandbox_provider` block pointed at the broker (`gym_compose.sandbox.nemo_gym_routing`). Then it exec()s the entrypoint:
the server process is NeMo Gym's own code, nothing of gym-compose in it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import yaml

from gym_compose.contract import (
    BIND_ALL,
    CONFIG_DICT_ENV,
    CONFIG_PATH_ENV,
    CONTAINER_CACHE_DIR,
    CONTAINER_WORK_ROOT,
    NEMO_GYM_SEARCH_ROOT,
    SERVER_DIR_ENV,
)
from gym_compose.contract import SANDBOX_BROKER_ENV as BROKER_ENV
from gym_compose.sandbox.nemo_gym_routing import route_to_broker
from gym_compose.server.context import (
    SECRETS_DIR,
    SECRETS_DIR_ENV,
    ServerConfigError,
    instance_block,
    resolve_secrets,
)

SEARCH_ROOT = NEMO_GYM_SEARCH_ROOT  # a NeMo Gym checkout's layout: <server_type>/<implementation>/
WORK_ROOT = CONTAINER_WORK_ROOT  # the only writable place in a read-only container
# What NeMo Gym 0.7's config parser adds before it hands the config to a server process.
PARSER_DEFAULTS: dict[str, Any] = {
    "dry_run": False,
    "skip_venv_if_present": True,
    "head_server_deps": [],
    "disallowed_ports": [],
    "port_range_low": 10001,
    "port_range_high": 20000,
    "server_spinup_timeout_seconds": 600,
    "model_endpoint_readiness_timeout_seconds": 600,
    "results_dir": str(Path(WORK_ROOT, "results")),
    "cache_dir": CONTAINER_CACHE_DIR,
    "uv_cache_dir": str(Path(WORK_ROOT, "cache", "uv")),
    "uv_venv_dir": str(Path(WORK_ROOT, "venvs")),
    "use_absolute_ip": False,
}


def launch_environment(environ: dict[str, str]) -> tuple[Path, dict[str, str], list[str]]:
    """The working directory, environment and argv NeMo Gym's CLI would start this server with."""
    if CONFIG_DICT_ENV not in environ or CONFIG_PATH_ENV not in environ:
        raise ServerConfigError(f"both {CONFIG_DICT_ENV} and {CONFIG_PATH_ENV} must be set")
    name = environ[CONFIG_PATH_ENV]
    config = yaml.safe_load(environ[CONFIG_DICT_ENV])
    if not isinstance(config, dict):
        raise ServerConfigError(f"{CONFIG_DICT_ENV} must be a YAML mapping")
    server_type, implementation, spec = instance_block(config, name)
    spec = resolve_secrets(spec, Path(environ.get(SECRETS_DIR_ENV, SECRETS_DIR)))
    spec["host"] = BIND_ALL  # peers still find it by the service name in their own copy
    if environ.get(BROKER_ENV):  # the plan gave this server sandboxes: NeMo Gym's provider is the broker
        notice = route_to_broker(config, spec)
        if notice:
            print(notice, file=sys.stderr, flush=True)
    config[name][server_type][implementation] = spec
    for key, value in PARSER_DEFAULTS.items():
        config.setdefault(key, value)
    config.setdefault("python_version", "%d.%d.%d" % sys.version_info[:3])
    server_dir = Path(environ.get(SERVER_DIR_ENV) or Path(SEARCH_ROOT, server_type, implementation))
    entrypoint = str(spec.get("entrypoint") or "app.py")
    if not (server_dir / entrypoint).is_file():
        raise ServerConfigError(f"entrypoint {server_dir / entrypoint} does not exist")
    python_path = [str(server_dir), SEARCH_ROOT, *filter(None, environ.get("PYTHONPATH", "").split(":"))]
    child = {**environ, CONFIG_DICT_ENV: yaml.safe_dump(config, sort_keys=False),
             "PYTHONPATH": ":".join(dict.fromkeys(python_path))}
    for directory in ("results", "cache", "home"):
        Path(WORK_ROOT, directory).mkdir(parents=True, exist_ok=True)
    return server_dir, child, [sys.executable, entrypoint]


def main() -> None:
    try:
        server_dir, environ, argv = launch_environment(dict(os.environ))
    except ServerConfigError as error:
        print(f"gym-compose nemo_gym launcher: {error}", file=sys.stderr)
        sys.exit(2)
    os.chdir(server_dir)
    os.execve(argv[0], argv, environ)


if __name__ == "__main__":
    main()
