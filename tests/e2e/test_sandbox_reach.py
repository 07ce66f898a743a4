"""What model-written code in a sandbox can reach, on the real engine (docs/sandboxes.md, "What a
sandbox can reach"): one stack with a python_sandbox server per network policy (none, internal,
egress). From inside a sandbox of each, no server API, no other port of its own server, no
broker and no head answers, by name or by address: each connect is refused, has no route or
does not resolve. The server still reaches a port served in its sandbox, and an egress sandbox
still reaches the outside (here: a listener on the host)."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e import PROJECT_PREFIX
from tests.e2e.test_sandboxes import PROBE, SANDBOX_LABEL, free_port, gym_compose, inspect, labelled, run

pytestmark = pytest.mark.docker

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


def start_stack(cwd: Path, project: str, *target: str) -> ReachStack:
    config = cwd / "reach.yaml"
    config.write_text(CONFIG)
    head_port = free_port()
    up = gym_compose("up", "-d", "-p", project, "--head-port", str(head_port), "--config", str(config), *target,
                     cwd=cwd, timeout=1200)
    assert up.returncode == 0, up.stderr[-4000:]
    return ReachStack(project, head_port, compose=not target)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("reach")
    project = f"{PROJECT_PREFIX}-reach"
    try:
        yield start_stack(cwd, project)
    finally:
        gym_compose("down", "-p", project, cwd=cwd)


def targets_for(stack: ReachStack, policy: str, gateway: str | None) -> dict[str, str]:
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
    if gateway is not None:  # the head's published port, on the host's side of the egress network
        targets["head's published port, on the host"] = f"{gateway}:{stack.head_port}"
    return targets


def gateway_of(network: str) -> str:
    (found,) = json.loads(run("docker", "network", "inspect", network, timeout=60).stdout)
    return found["IPAM"]["Config"][0]["Gateway"]


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


def check_reach(stack: ReachStack, policy: str, network_suffix: str = "") -> dict:
    """Probe from a sandbox of `reach-<policy>`; assert nothing of the project answers it."""
    own = f"reach-{policy}"
    gateway = gateway_of(f"{stack.project}-sbx-{own}") if policy == "egress" else None
    targets = targets_for(stack, policy, gateway)
    host = HostListener()
    try:
        if gateway is not None:
            targets["a host service (egress allows it)"] = f"{gateway}:{host.port}"
        report = stack.probe(own, "reach", json.dumps({"targets": list(targets.values()), "serve": policy != "none"}))
    finally:
        host.socket.close()
    seen = {name: report["targets"][target] for name, target in targets.items()}
    if gateway is not None:
        assert seen.pop("a host service (egress allows it)") == "reached", seen
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


@pytest.mark.parametrize("policy", POLICIES)
def test_nothing_of_the_project_answers_a_sandbox(stack, policy):
    check_reach(stack, policy)


def test_sandboxes_are_on_their_servers_network_only_and_servers_run_unprivileged(stack):
    containers = inspect(*labelled("container", stack.project, SANDBOX_LABEL))
    networks = {c["Config"]["Labels"]["io.gym-compose.sandbox.server"]: sorted(c["NetworkSettings"]["Networks"])
                for c in containers}
    assert networks == {"reach_none": ["none"], "reach_internal": [f"{stack.project}-sbx-reach-internal"],
                        "reach_egress": [f"{stack.project}-sbx-reach-egress"]}, networks
    for policy in ("internal", "egress"):
        status = run("docker", "exec", "-u", SERVER_USER, stack.container(f"reach-{policy}"), "python", "-c",
                     SERVER_STATUS, timeout=60).stdout
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        assert fields["Uid"].split() == ["10001"] * 4 and fields["Gid"].split() == ["10001"] * 4, status
        assert {fields[key] for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")} == {"0000000000000000"}
        assert fields["NoNewPrivs"] == "1"


def guarded_run(image: str, network: str, *guard_args: str, alias: bool = True) -> subprocess.CompletedProcess:
    """The guard in a container of `image`, as the renderer starts it: root, only its capabilities."""
    caps = [arg for cap in ("NET_ADMIN", "SETGID", "SETPCAP", "SETUID", "CHOWN") for arg in ("--cap-add", cap)]
    return run("docker", "run", "--rm", "--network", network, *(["--network-alias", "side"] if alias else []),
               "--user", "0:0", "--cap-drop", "ALL", *caps, "--security-opt", "no-new-privileges:true", "--read-only",
               image, "python", "-m", "gym_compose.server.netguard", "--sandbox-side", "side", *guard_args, "--",
               "sh", "-c", "id -u; grep -E '^Cap(Eff|Prm|Bnd|Inh|Amb)' /proc/self/status; nft list ruleset",
               timeout=120)


def test_the_guard_leaves_a_root_server_only_its_own_capabilities_and_fails_closed(tmp_path):
    from gym_compose.engine.images import ensure_base_image

    image = ensure_base_image(progress=lambda line: None)
    network = f"{PROJECT_PREFIX}-reach-guard"
    run("docker", "network", "create", network, timeout=60)
    try:
        root = guarded_run(image, network, "--user", "0:0", "--keep-cap", "CHOWN")
        lines = root.stdout.splitlines()
        assert lines[0] == "0", root.stdout + root.stderr
        sets = dict(line.split(":\t") for line in lines[1:6])
        assert set(sets.values()) - {"0000000000000000"} <= {"0000000000000001"}  # CAP_CHOWN (bit 0) alone
        assert sets["CapEff"] == sets["CapBnd"] == "0000000000000001" and sets["CapAmb"] == "0000000000000000"
        assert "Operation not permitted" in root.stderr  # the root server cannot read (or undo) the rules
        assert "new connections from the sandbox network (eth0) are refused" in root.stderr
        lost = guarded_run(image, network, "--user", "10001:10001", alias=False)
        assert lost.returncode == 2 and lost.stdout == "", lost.stdout
        assert "the server was not started: cannot close its sandbox side: the sandbox-side alias 'side' does not " \
               "resolve" in lost.stderr
    finally:
        run("docker", "network", "rm", network, timeout=60)
