"""The Engine API body of a new sandbox container, as a pure function of the plan's policy.

Whatever the request, the container is never privileged, mounts nothing from the host, drops
every capability (but the plan's allow-listed `cap_add`), cannot gain privileges, has the plan's
memory (no swap), cpu and pids limits, and joins only the plan's network for that server (or
none; with an egress allow-list, the network of the sandbox's phase). Its main process is the
agent (gym_compose/sandbox/agent.py) under Docker's init.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from gym_compose.contract import DNS_LABEL, shortened
from gym_compose.contract import EGRESS_DEFAULT_PHASE as DEFAULT_PHASE
from gym_compose.contract import SANDBOX_PHASE_LABEL as PHASE_LABEL
from gym_compose.sandbox.channel_constants import NO_PYTHON_MARKER
from gym_compose.sandbox.policy import (
    ALLOWED_CAPABILITIES,
    PROJECT_LABEL,
    ROLE_LABEL,
    SANDBOX_LABEL,
    SERVER_LABEL,
    SandboxPolicy,
)

AGENT_SOURCE = (Path(__file__).resolve().parents[1] / "agent.py").read_text(encoding="utf-8")
TMP_SIZE = "64m"
# sh picks python3 (any 3.6+) for the agent; with none, a keep-alive loop and a marker on stderr
# tell the broker to fall back to Engine API execs.
LAUNCHER = (
    'if command -v python3 >/dev/null 2>&1; then exec python3 -I -S -u -c "$1" "$2"; fi; '
    f'echo "{NO_PYTHON_MARKER}" >&2; exec sh -c "while :; do sleep 3600; done"'
)


def container_name(project: str, server: str, suffix: str) -> str:
    """PROJECT-sbx-SERVER-SUFFIX in one DNS label: a long server part is cut (contract.py), never the
    suffix that tells two sandboxes apart (a pod's name is this one, lower-cased)."""
    server_part = re.sub(r"[^a-zA-Z0-9_.-]+", "-", server).strip("-.") or "server"
    return shortened(f"{project}-sbx-{server_part}", DNS_LABEL - len(suffix) - 1) + f"-{suffix}"


def container_config(project: str, policy: SandboxPolicy, image: str, engine_cpus: float,
                     memory_bytes: int | None = None, cpus: float | None = None,
                     phase: str = DEFAULT_PHASE) -> dict[str, Any]:
    """`phase`: an allow-listed sandbox's egress phase, whose network it joins (one that names no
    host has none: the sandbox is created on the default one, and the pool detaches it before
    its start) and whose proxy its environment names."""
    memory = min(memory_bytes or policy.memory_bytes, policy.memory_bytes)
    cpu_limit = min(cpus or policy.cpus, policy.cpus, engine_cpus or policy.cpus)
    tmpfs = {"/tmp": f"rw,nosuid,nodev,size={TMP_SIZE},mode=1777"}
    if policy.read_only:
        tmpfs[policy.workdir] = f"rw,nosuid,nodev,size={policy.workdir_size_bytes},mode=1777"
    host_config: dict[str, Any] = {
        "Init": True,
        "Privileged": False,
        "Memory": memory,
        "MemorySwap": memory,
        "NanoCpus": int(cpu_limit * 1e9),
        "PidsLimit": policy.pids,
        "CapDrop": ["ALL"],
        "CapAdd": sorted(cap for cap in policy.cap_add if cap in ALLOWED_CAPABILITIES) or None,
        "SecurityOpt": ["no-new-privileges:true"],
        "ReadonlyRootfs": policy.read_only,
        "Tmpfs": tmpfs,
        "NetworkMode": _network_mode(policy, phase),
        **_allowlist_dns(policy),
        "RestartPolicy": {"Name": "no"},
        "AutoRemove": False,
        "Binds": None,
        "Mounts": None,
        "Devices": None,
        # The agent's protocol runs over stdout: a log driver would write all of it to disk.
        "LogConfig": {"Type": "none", "Config": {}},
    }
    labels = {
        PROJECT_LABEL: project,
        SANDBOX_LABEL: "1",
        SERVER_LABEL: policy.server,
        ROLE_LABEL: "sandbox",
        f"{SANDBOX_LABEL}.image": image,
        f"{SANDBOX_LABEL}.memory": policy.memory,
        **({PHASE_LABEL: phase} if policy.network == "allowlist" else {}),
    }
    return {
        "Image": image,
        "Entrypoint": ["/bin/sh", "-c", LAUNCHER, "gym-sandbox-agent", AGENT_SOURCE, f"{policy.ttl_s:g}"],
        "Cmd": None,
        "Env": [f"{key}={value}" for key, value in {**policy.env, **proxy_environment(policy, phase)}.items()],
        "WorkingDir": policy.workdir,
        "User": policy.user or "",
        "Hostname": "sandbox",
        "OpenStdin": True,
        "StdinOnce": True,  # the broker's attach closing closes stdin: the agent, and the sandbox, end
        "AttachStdin": True,
        "AttachStdout": True,
        "AttachStderr": True,
        "Tty": False,
        "Labels": labels,
        "HostConfig": host_config,
    }


def _network_mode(policy: SandboxPolicy, phase: str) -> str:
    if policy.network == "none" or not policy.network_name:
        return "none"
    # a phase with no network: the default one until the pool detaches it (a container created
    # with "none" could never join a network later, when it moves to another phase)
    return policy.phase_network(phase) or policy.network_name


def proxy_environment(policy: SandboxPolicy, phase: str = DEFAULT_PHASE) -> dict[str, str]:
    """An allow-listed sandbox's proxy in `phase`, in both spellings (tools read one or the other);
    they win over the declared env and a command's own, which must not point it elsewhere. A phase
    that names no host sets them empty: no proxy (nothing would answer)."""
    if policy.network != "allowlist":
        return {}
    local = "localhost,127.0.0.1,::1"
    url = policy.phase_proxy_url(phase) or ""
    return {"HTTP_PROXY": url, "HTTPS_PROXY": url, "http_proxy": url, "https_proxy": url,
            "NO_PROXY": local, "no_proxy": local}


def _allowlist_dns(policy: SandboxPolicy) -> dict[str, Any]:
    """An allow-listed sandbox resolves the names of its own network (its proxy) and nothing else:
    the engine's DNS forwards every other name to this server, the sandbox's own loopback, where
    nothing answers, so no query leaves the sandbox's namespace (not even through a host's
    loopback resolver, which the engine otherwise asks from the host's namespace)."""
    return {"Dns": ["127.0.0.1"]} if policy.network == "allowlist" else {}


CLOSED_PORTS_TABLE = "gym_compose_sandbox_out"


def closed_ports_helper(project: str, server: str, sandbox_container: str, image: str,
                        ports: list[int]) -> dict[str, Any]:
    """The Engine API body of a one-shot container in a sandbox's network namespace that installs
    rules refusing new TCP connections from the sandbox to `ports` at any address but its own
    (the node's published ports, under Swarm on every interface). Root with NET_ADMIN alone, in
    the broker's image, which has nft; the sandbox itself never holds NET_ADMIN, so it cannot undo them."""
    table = f"inet {CLOSED_PORTS_TABLE}"
    script = (f"add table {table}; add chain {table} output {{ type filter hook output priority filter - 10; "
              f"policy accept; }}; add rule {table} output oifname != \"lo\" tcp dport "
              f"{{ {', '.join(str(port) for port in sorted(set(ports)))} }} reject with tcp reset")
    return {
        "Image": image,
        "Entrypoint": ["nft"],
        "Cmd": [script],
        "User": "0:0",
        # the sandbox's labels too: a helper left by a broker that died mid-start goes with the sandboxes
        "Labels": {PROJECT_LABEL: project, SANDBOX_LABEL: "1", SERVER_LABEL: server, ROLE_LABEL: "sandbox-netns"},
        "HostConfig": {
            "NetworkMode": f"container:{sandbox_container}",
            "CapDrop": ["ALL"],
            "CapAdd": ["NET_ADMIN"],
            "SecurityOpt": ["no-new-privileges:true"],
            "ReadonlyRootfs": True,
            "Privileged": False,
            "Binds": None,
            "Mounts": None,
            "AutoRemove": False,
        },
    }
