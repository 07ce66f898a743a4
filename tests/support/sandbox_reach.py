"""The sandbox reach checks (tests/e2e/test_sandbox_reach.py on compose, test_swarm.py on Swarm):
from inside a sandbox of each network policy, nothing of the project answers; the server still
reaches a port served in its sandbox."""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

from tests.support.sandboxes import PROBE, free_port, gym_compose, inspect, run

POLICIES = ("none", "internal", "egress")
CONFIG = "".join(f"""
reach_{policy}:
  resources_servers:
    python_sandbox:
      entrypoint: app.py
      domain: coding
      sandbox_config: {{network: {policy}, memory: 128m, warm_pool: 1, shell: /bin/sh}}
""" for policy in POLICIES)
DEFINITE = ("refused", "unreachable", "unresolved")  # a connect that fails at once, for a reason
SERVER_USER = "10001:10001"
SERVER_STATUS = (  # /proc/PID/status of the server process (the guard exec()ed it), run in its container
    "import glob\nfor path in glob.glob('/proc/[0-9]*/cmdline'):\n"
    "    if open(path, 'rb').read().split(b'\\0')[:3] == [b'python', b'-m', b'gym_compose.server']:\n"
    "        print(open(path[:-7] + 'status').read())")


@dataclass
class ReachStack:
    project: str
    head_port: int
    compose: bool = True  # else a swarm stack

    def container(self, service: str) -> str:
        if self.compose:
            return run("docker", "compose", "-p", self.project, "ps", "-q", service, timeout=60).stdout.strip()
        listed = run("docker", "ps", "-q", "--filter", f"label=com.docker.swarm.service.name={self.project}_{service}",
                     timeout=60).stdout.split()
        assert len(listed) == 1, listed
        return listed[0]

    def networks(self, service: str) -> dict[str, str]:
        """network name -> the service's address on it."""
        found = inspect(self.container(service))[0]["NetworkSettings"]["Networks"]
        return {name: network["IPAddress"] for name, network in found.items()}

    def address(self, service: str, network_suffix: str) -> str:
        (address,) = [ip for name, ip in self.networks(service).items() if name.endswith(network_suffix)]
        return address

    def probe(self, service: str, *args: str) -> dict:
        # as the server's user, in the server container's network namespace: what the server sees
        done = run("docker", "exec", "-i", "-u", SERVER_USER, self.container(service), "python", "-", *args,
                   input=PROBE.read_text(), timeout=600)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


def start_stack(cwd: Path, project: str, *target: str, config_text: str = CONFIG) -> ReachStack:
    config = cwd / "reach.yaml"
    config.write_text(config_text)
    head_port = free_port()
    up = gym_compose("up", "-d", "-p", project, "--head-port", str(head_port), "--config", str(config), *target,
                     cwd=cwd, timeout=1200)
    assert up.returncode == 0, up.stderr[-4000:]
    return ReachStack(project, head_port, compose=not target)


def targets_for(stack: ReachStack, policy: str) -> dict[str, str]:
    """What code in a sandbox of `reach-<policy>` tries, by name and by address."""
    own = f"reach-{policy}"
    targets = {
        "own server by name": f"{own}:8000",
        "own server, another port, by name": f"{own}:{{listener}}",
        "own server by its sandbox-side alias": "gym-compose-sandbox-side:8000",
        "another server by name": "reach-internal:8000" if policy != "internal" else "reach-egress:8000",
        "model by name": "policy-model:8000",
        "broker by name": "sandbox-broker:8000",
        "head by name": "head:11000",
    }
    if policy != "none":  # the server's address on the network it shares with its sandboxes
        side = stack.address(own, f"sbx-{own}")
        targets.update({"own server by its sandbox-side address": f"{side}:8000",
                        "own server, another port, by its sandbox-side address": f"{side}:{{listener}}"})
    if policy != "egress":
        # Addresses on the other networks: no route from an internal sandbox (nor from one with no
        # network). An egress sandbox's packets to them are dropped by the engine's inter-network
        # isolation instead, with no answer at all, so they are not asked here (docs/sandboxes.md).
        targets.update({"own server by its project address": f"{stack.address(own, '_gym')}:8000",
                        "model by address": f"{stack.address('policy-model', '_gym')}:8000",
                        "head by address": f"{stack.address('head', '_gym')}:11000",
                        "broker by address": f"{stack.address('sandbox-broker', 'sandbox-control')}:8000"})
    if policy != "none":  # the head's published port, on the host (the sandbox's default gateway)
        targets["head's published port, on the host"] = f"{{gateway}}:{stack.head_port}"
    return targets


class HostListener:
    """A listener on every host interface: what an egress sandbox may reach, an internal one not."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(("0.0.0.0", 0))
        self.socket.listen(16)
        self.port = self.socket.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            try:
                self.socket.accept()[0].close()
            except OSError:
                return


def check_reach(stack: ReachStack, policy: str) -> dict:
    """Probe from a sandbox of `reach-<policy>`; assert nothing of the project answers it."""
    own = f"reach-{policy}"
    targets = targets_for(stack, policy)
    host = HostListener()
    try:
        if policy != "none":
            targets["a host service"] = f"{{gateway}}:{host.port}"
        report = stack.probe(own, "reach", json.dumps({"targets": list(targets.values()), "serve": policy != "none"}))
    finally:
        host.socket.close()
    seen = {name: report["targets"][target] for name, target in targets.items()}
    if policy == "egress":  # its own way out stays open
        assert seen.pop("a host service") == "reached", seen
    assert all(answer in DEFINITE for answer in seen.values()), json.dumps(seen, indent=1)
    if policy == "none":
        assert report["sandbox_networks"] == ["lo"]
        assert set(seen.values()) <= {"unreachable", "unresolved"}
    else:
        # the guard refuses at once what reaches the server's sandbox side, whatever the port
        for name in ("own server by its sandbox-side address", "own server, another port, by its sandbox-side address",
                     "own server by name", "own server by its sandbox-side alias"):
            assert seen[name] == "refused", (name, seen)
        assert report["served"] == 200, report  # the server -> sandbox direction stays open
    return report
