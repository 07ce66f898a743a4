"""A rendered compose service (the collector) as one `docker run` command line.

`docker compose run` loads the project and checks dependencies and networks before it creates
the container, most of its time (docs/performance.md); the collector starts once per run, so that
is the largest fixed cost of `eval run`. The service stays in the compose file as the one
description of the container (a person can still `docker compose --profile collect run
collector`); this module reads it and says the same with `docker run`, with the labels Compose
puts on a one-off container, so that `compose ps`, `down` and the one-collector-per-project check
see it as before.

Only the keys the collector's template uses are translated; any other key is an error, so a
template change cannot silently be dropped here.
"""

from __future__ import annotations

import csv
import io
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from gym_compose.contract import COLLECTOR_ROLE, ENVIRONMENT_SERVERS, ROLE_BY_SERVER_TYPE, ROLE_LABEL

COMPOSE_PROJECT_LABEL = "com.docker.compose.project"
ONE_OFF_LABEL = "com.docker.compose.oneoff"
SERVICE_LABEL = "com.docker.compose.service"

# Keys with nothing to say to `docker run`: the profile only keeps `up` from starting the service,
# the head's health is checked by `eval run` before the collector starts (require_running /
# start_servers), and `restart: "no"` is docker run's default.
_IGNORED = {"profiles", "depends_on", "restart"}
_FLAGS = {"read_only": "--read-only", "init": "--init"}
_REPEATED = {"cap_drop": "--cap-drop", "security_opt": "--security-opt", "tmpfs": "--tmpfs"}
_VALUED = {"user": "--user", "mem_limit": "--memory", "pids_limit": "--pids-limit"}


class UnsupportedServiceKey(ValueError):
    pass


def one_off_name(project: str, service: str) -> str:
    """A container name in Compose's own one-off style, unique per run."""
    return f"{project}-{service}-run-{secrets.token_hex(6)}"


def docker_run_args(project: str, service: str, spec: Mapping[str, Any], networks: Mapping[str, Any],
                    args: Sequence[str] = (), network_of: str | None = None) -> list[str]:
    """`docker run` arguments (without `docker`) for one attached, stdin-piped, removed-on-exit
    run of `service`; `networks` is the compose file's top-level `networks`; `args` replace the
    service's command when given. `network_of`: a running container on the same networks whose
    network namespace the run joins instead of the engine making it its own endpoints
    (`network_holder`)."""
    run = ["run", "--rm", "--interactive", "--pull", "never", "--name", one_off_name(project, service)]
    labels = {**(spec.get("labels") or {}), COMPOSE_PROJECT_LABEL: project, SERVICE_LABEL: service,
              ONE_OFF_LABEL: "True"}
    for key, value in labels.items():
        run += ["--label", f"{key}={value}"]
    entrypoint: list[str] = []
    for key, value in spec.items():
        if key in _IGNORED or key in ("labels", "image", "command"):
            continue
        if key in _FLAGS:
            run += [_FLAGS[key]] if value else []
        elif key in _REPEATED:
            for item in value:
                run += [_REPEATED[key], str(item)]
        elif key in _VALUED:
            run += [_VALUED[key], str(value)]
        elif key == "stop_grace_period":
            run += ["--stop-timeout", str(_seconds(str(value)))]
        elif key == "environment":
            for name, setting in _environment(value).items():
                run += ["--env", f"{name}={setting}"]
        elif key == "volumes":
            for volume in value:
                run += ["--mount", _mount(volume)]
        elif key == "networks":
            if network_of is not None:
                run += ["--network", f"container:{network_of}"]
                continue
            for network in value:
                run += ["--network", _network_name(project, network, networks)]
        elif key == "entrypoint":
            entrypoint = [value] if isinstance(value, str) else list(value)
        else:
            raise UnsupportedServiceKey(f"service {service!r}: `{key}` has no `docker run` translation here")
    if entrypoint:
        run += ["--entrypoint", entrypoint[0]]
    command = list(args) if args else list(spec.get("command") or [])
    return [*run, spec["image"], *entrypoint[1:], *command]


def network_holder(project: str, service: str, services: Mapping[str, Any]) -> str | None:
    """The container whose network namespace a one-off run of `service` (the collector) can join:
    the stack's one environment server, when it is on exactly the run's networks. The collector
    talks to no other server, so it loses the network only when that server is gone, when it loses
    its rollouts anyway; joining spares the engine making the run its own endpoint, address and
    DNS (docs/performance.md). None
    (own endpoints, as Compose would) when there are several environment servers or the networks
    differ, so a run never reaches a network it is not given."""
    spec = services[service]
    if (spec.get("labels") or {}).get(ROLE_LABEL) != COLLECTOR_ROLE:
        return None
    holders = [name for name, other in services.items()
               if (other.get("labels") or {}).get(ROLE_LABEL) == ROLE_BY_SERVER_TYPE[ENVIRONMENT_SERVERS]]
    if len(holders) != 1:
        return None
    holder = services[holders[0]]
    if "network_mode" in spec or "network_mode" in holder or not spec.get("networks") \
            or list(holder.get("networks") or []) != list(spec["networks"]) \
            or (holder.get("deploy") or {}).get("replicas", 1) != 1:
        return None
    return holder.get("container_name") or f"{project}-{holders[0]}-1"


def _environment(value: Any) -> dict[str, str]:
    if isinstance(value, Mapping):
        return {str(k): "" if v is None else str(v) for k, v in value.items()}
    return dict(item.partition("=")[::2] for item in value)


def _mount(volume: Mapping[str, Any]) -> str:
    """A long-syntax compose volume as `--mount` CSV (quoted, so paths may hold commas)."""
    if volume.get("type") != "bind":
        raise UnsupportedServiceKey(f"volume {volume!r}: only bind mounts are translated")
    fields = ["type=bind", f"source={volume['source']}", f"target={volume['target']}"]
    if volume.get("read_only"):
        fields.append("readonly")
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(fields)
    return out.getvalue()


def _network_name(project: str, key: str, networks: Mapping[str, Any]) -> str:
    """Compose names a project's network `<project>_<key>` unless the file gives it a `name`."""
    declared = networks.get(key) or {}
    return str(declared.get("name") or f"{project}_{key}")


def _seconds(duration: str) -> int:
    """A compose duration such as `5s`, `1m30s` or `10` in whole seconds."""
    total, number = 0.0, ""
    units = {"h": 3600, "m": 60, "s": 1}
    for char in duration.strip():
        if char.isdigit() or char == ".":
            number += char
        elif char in units and number:
            total += float(number) * units[char]
            number = ""
        else:
            raise UnsupportedServiceKey(f"stop_grace_period {duration!r} is not a duration such as 5s")
    return round(total + (float(number) if number else 0))
