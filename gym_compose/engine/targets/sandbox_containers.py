"""A project's sandbox containers, seen from the host: list, remove, open a command or shell in one.

Sandboxes are made by the project's broker, not by Compose, so `compose down` alone does not know
them; they carry the project label and the sandbox label, which is how these functions (and
`down`, `down --all`) find them.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Optional
from urllib.parse import urlsplit

from gym_compose.contract import BROKER_PULLED_PATTERN, PROJECT_LABEL, ROLE_LABEL, SECRETS_DIR, SNAPSHOT_LABEL
from gym_compose.engine.docker_cli import run_docker, run_docker_attached
from gym_compose.plan.sandbox_names import BROKER_PORT

# gym_compose.sandbox (its client: asyncio, pydantic models) is imported where used: `up` asks
# docker_socket() and `down` remove_sandboxes() of every stack, most of which lease no sandboxes.

DEFAULT_SOCKET = "/var/run/docker.sock"
BROKER_STOP_GRACE_S = 30  # its own removal of many sandboxes on a busy engine; it exits as soon as done
REMOVAL_WAIT_S = 30


@dataclass(frozen=True)
class SandboxContainer:
    name: str
    container_id: str
    server: str
    image: str
    state: str  # running | exited | ...
    created_at: float  # unix time

    @property
    def age_s(self) -> float:
        return max(0.0, datetime.now(timezone.utc).timestamp() - self.created_at)


def docker_socket() -> Optional[tuple[str, Optional[int], bool]]:
    """The local engine's socket for the broker to mount: (path, group id, rootless), or None when
    the engine is remote (DOCKER_HOST over tcp/ssh), which the broker cannot reach by a socket."""
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        return None
    path = urlsplit(host).path if host else DEFAULT_SOCKET
    try:
        info = os.stat(path)
    except OSError:
        return (path, None, False)
    return (path, info.st_gid, info.st_uid != 0)


def list_sandboxes(project: str) -> list[SandboxContainer]:
    from gym_compose.sandbox.policy import SANDBOX_LABEL, SERVER_LABEL

    result = run_docker(["ps", "-a", "--no-trunc", "--filter", f"label={PROJECT_LABEL}={project}",
                         "--filter", f"label={SANDBOX_LABEL}", "--format", "{{json .}}"], timeout=30, retries=2)
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    if not rows:
        return []
    inspected = run_docker(["inspect", *(row["ID"] for row in rows)], timeout=60, retries=2, check=False)
    details = {item["Id"]: item for item in json.loads(inspected.stdout or "[]")} if inspected.ok else {}
    found = []
    for row in rows:
        item: dict = next((value for key, value in details.items() if key.startswith(row["ID"])), {})
        labels = (item.get("Config") or {}).get("Labels") or {}
        found.append(SandboxContainer(
            name=row.get("Names", ""), container_id=row["ID"], server=labels.get(SERVER_LABEL, "?"),
            image=labels.get(f"{SANDBOX_LABEL}.image") or row.get("Image", ""),
            state=(item.get("State") or {}).get("Status") or row.get("State", ""),
            created_at=_timestamp(item.get("Created")),
        ))
    return sorted(found, key=lambda s: (s.server, s.created_at))


def remove_sandboxes(project: str) -> int:
    """Stop the project's broker (it removes its sandboxes as it stops, and starts no more), then
    force-remove any sandbox left: before `compose down`, which cannot remove a network that
    sandboxes are still attached to."""
    from gym_compose.sandbox.policy import SANDBOX_LABEL

    brokers = _labelled(project, f"{ROLE_LABEL}=sandbox-broker", running_only=True)
    if brokers:
        run_docker(["stop", "--time", str(BROKER_STOP_GRACE_S), *brokers], timeout=BROKER_STOP_GRACE_S + 60,
                   check=False)
    states = _labelled_states(project, SANDBOX_LABEL)
    found = len(states)
    # Those the engine is removing already (the broker's removals outlive a broker stopped by
    # force) are waited for, not removed a second time: two removals of one container at once can
    # leave the engine an endpoint on the network that no container holds, and the network then
    # cannot be removed until the engine restarts (Engine 20.10).
    others = [container for container, state in states.items() if state != "removing"]
    if others:
        run_docker(["rm", "--force", "--volumes", *others], timeout=120, retries=2, check=False)
    deadline = time.monotonic() + REMOVAL_WAIT_S
    while any(state == "removing" for state in states.values()) and time.monotonic() < deadline:
        time.sleep(0.5)
        states = _labelled_states(project, SANDBOX_LABEL)
    remove_snapshots(project)
    return found


def pulled_task_images(project: str) -> list[str]:
    """The task images the project's brokers pulled, from their logs (read before `down` removes
    them): images that were on the engine before, built ones and `build --pull`'s are not there."""
    images: set[str] = set()
    for broker in _labelled(project, f"{ROLE_LABEL}=sandbox-broker"):
        logs = run_docker(["logs", broker], timeout=60, check=False)
        images.update(re.findall(BROKER_PULLED_PATTERN, f"{logs.stdout}\n{logs.stderr}", re.MULTILINE))
    return sorted(images)


@dataclass
class ImageRemoval:
    removed: list[str] = field(default_factory=list)
    in_use: dict[str, str] = field(default_factory=dict)  # image -> the engine's reason
    gone: list[str] = field(default_factory=list)  # removed already (the image budget) or by hand


def remove_task_images(images: list[str]) -> ImageRemoval:
    """`docker image rm` each, without force: an image a container (of any project) uses stays."""
    outcome = ImageRemoval()
    for image in images:
        result = run_docker(["image", "rm", image], timeout=120, check=False)
        said = (result.stderr or result.stdout).strip()
        if result.ok:
            outcome.removed.append(image)
        elif "no such image" in said.lower():
            outcome.gone.append(image)
        else:
            outcome.in_use[image] = said.splitlines()[-1] if said else f"exit {result.returncode}"
    return outcome


def snapshot_images(project: str) -> list[str]:
    """The ids of the project's sandbox snapshot images (the broker's `docker commit`s)."""
    result = run_docker(["image", "ls", "-q", "--no-trunc", "--filter", f"label={PROJECT_LABEL}={project}",
                         "--filter", f"label={SNAPSHOT_LABEL}"], timeout=30, retries=2, check=False)
    return sorted(set(result.stdout.split())) if result.ok else []


def remove_snapshots(project: str) -> int:
    """Remove the snapshots the broker left (it removes its own as it stops; a killed one cannot)."""
    images = snapshot_images(project)
    if images:
        run_docker(["image", "rm", "--force", *images], timeout=120, retries=2, check=False)
    return len(images)


def _labelled_states(project: str, label: str) -> dict[str, str]:
    """container id -> its state (created, running, exited, removing, ...)."""
    result = run_docker(["ps", "-a", "--filter", f"label={PROJECT_LABEL}={project}", "--filter", f"label={label}",
                         "--format", "{{.ID}} {{.State}}"], timeout=30, retries=2)
    return dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)


def _labelled(project: str, label: str, running_only: bool = False) -> list[str]:
    result = run_docker(["ps", "-q", *([] if running_only else ["-a"]), "--filter", f"label={PROJECT_LABEL}={project}",
                         "--filter", f"label={label}"], timeout=30, retries=2)
    return result.stdout.split()


def broker_leases(project: str, broker_service: str) -> dict[str, dict]:
    """sandbox id -> the broker's view (state, session) from the running broker; {} when it is not up."""
    answer = broker_call(project, broker_service, "GET", "/v1/sandboxes")
    if answer is None:
        return {}
    try:
        return {entry["sandbox_id"]: entry for entry in answer[1]["sandboxes"]}
    except (KeyError, TypeError):
        return {}


BROKER_CALL = """import json,sys,urllib.error as e,urllib.request as u
t=open(%r).read().strip()
m,p,b=sys.argv[1],sys.argv[2],sys.argv[3]
r=u.Request('http://127.0.0.1:%d'+p,method=m,data=b.encode() if b else None,
 headers={'Authorization':'Bearer '+t,'Content-Type':'application/json'})
try:
 s=u.urlopen(r,timeout=%d)
except e.HTTPError as x:
 s=x
print(json.dumps({'status':s.status if hasattr(s,'status') else s.code,'body':s.read().decode()}))
"""
BROKER_CALL_TIMEOUT_S = 900


def broker_call(project: str, broker_service: str, method: str, path: str,
                body: Optional[dict] = None) -> Optional[tuple[int, dict]]:
    """One call to the project's running broker with the project secret, from inside its container
    (it listens on the internal control network only): (HTTP status, JSON body), or None when the
    broker is not running or did not answer."""
    from gym_compose.sandbox.tokens import BROKER_SECRET

    script = BROKER_CALL % (f"{SECRETS_DIR}/{BROKER_SECRET}", BROKER_PORT, BROKER_CALL_TIMEOUT_S)
    result = run_docker(["compose", "-p", project, "exec", "-T", broker_service, "python", "-c", script, method,
                         path, json.dumps(body) if body is not None else ""],
                        timeout=BROKER_CALL_TIMEOUT_S + 30, check=False)
    if not result.ok:
        return None
    try:
        answer = json.loads(result.stdout.strip().splitlines()[-1])
        return int(answer["status"]), (json.loads(answer["body"]) if answer["body"] else {})
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def exec_in_sandbox(container: str, argv: list[str], interactive: bool) -> int:
    """`docker exec` into a sandbox with the terminal attached (a debugging door, not the agent's path)."""
    return run_docker_attached(["exec", *(["-i", "-t"] if interactive else ["-i"]), container, *argv])


def _timestamp(created: Optional[str]) -> float:
    if not created:
        return 0.0
    text = created.rstrip("Z")
    if "." in text:
        head, fraction = text.split(".", 1)
        text = f"{head}.{fraction[:6]}"
    try:
        return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return 0.0
