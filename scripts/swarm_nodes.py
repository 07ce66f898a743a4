"""Extra Docker engines on this machine, joined as swarm workers: a multi-node swarm without VMs.

    python scripts/swarm_nodes.py up [--nodes 2]     # make the engine a manager, start and join the nodes
    python scripts/swarm_nodes.py kill NODE         # kill a node's engine and containers, cut its link
    python scripts/swarm_nodes.py down              # remove the nodes, their data and the swarm
    python scripts/swarm_nodes.py down --keep-swarm # remove the nodes only: the engine stays the manager

Node N is a `dockerd` of its own (data root /var/lib/gymnodeN, exec root, pidfile and socket
under /run/gymnodeN, cgroup parent gymnodeN, hostname gymnodeN) in its own network namespace
`gymnodeN`, linked by a veth pair to a host bridge `gymsw0` (198.18.231.0/24; the host is .1,
node N is .(N+1)). The host's engine is the manager and advertises 198.18.231.1. Node N's
engine answers on unix:///run/gymnodeN/docker.sock (`gym-compose up --node-engine` copies the
images there). Root only.

Why not Docker-in-Docker: this machine's engine cannot start `--privileged` containers ("unable
to apply caps"), and a second daemon on the host needs no container at all. The daemon is entered
into its namespace with `nsenter --net`, not `ip netns exec`: the latter remounts /sys in a new
mount namespace, which hides the cgroup mounts ("Devices cgroup isn't mounted").
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

BRIDGE = "gymsw0"
# In 198.18.0.0/15 (RFC 2544, set aside for network tests), outside the engine's default pools for its own
# networks (172.17-31.0.0/16, 192.168.0.0/16 in /20s; overlays 10.0.0.0/8): 192.168.231.0/24 collided
# with a 192.168.224.0/20 network the engine gave a compose project while the nodes were up.
SUBNET = "198.18.231"
MANAGER_ADDRESS = f"{SUBNET}.1"
STATE = Path("/run/gymnodes.json")  # what `up` made, so that `down` removes exactly that
NODE_CONFIG = {"storage-driver": "fuse-overlayfs", "mtu": 1400, "log-driver": "json-file",
               "log-opts": {"max-size": "10m", "max-file": "3"}}
START_TIMEOUT_S = 60

SBIN_FOLDERS = ("/usr/local/sbin", "/usr/sbin", "/sbin")


def sh(*args: str, check: bool = True, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and result.returncode != 0:
        sys.exit(f"`{' '.join(args)}` failed: {result.stderr.strip() or result.stdout.strip()}")
    return result


def node_name(n: int) -> str:
    return f"gymnode{n}"


def socket(n: int) -> str:
    return f"unix:///run/{node_name(n)}/docker.sock"


def node_docker(n: int, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return sh("docker", "-H", socket(n), *args, **kwargs)


def load_state() -> dict:
    return json.loads(STATE.read_text()) if STATE.exists() else {"nodes": [], "swarm_initialised": False}


def save_state(state: dict) -> None:
    STATE.write_text(json.dumps(state))


def swarm_state() -> tuple[str, str]:
    info = sh("docker", "info", "--format", "{{.Swarm.LocalNodeState}} {{.Swarm.NodeAddr}}").stdout.split()
    return info[0], (info[1] if len(info) > 1 else "")


def routes_into_subnet() -> list[str]:
    """Routes other than the default one that cover an address of SUBNET or lie within it."""
    prefix = f"{SUBNET}.0/24"
    found = sh("ip", "-o", "route", "show", "match", prefix).stdout.splitlines()
    found += sh("ip", "-o", "route", "show", "root", prefix).stdout.splitlines()
    return sorted({line.strip() for line in found if line.strip() and not line.startswith("default")})


def make_bridge() -> None:
    if sh("ip", "link", "show", BRIDGE, check=False).returncode != 0:
        taken = routes_into_subnet()
        if taken:  # its containers would be cut off from this host
            sys.exit(f"the nodes' subnet {SUBNET}.0/24 overlaps a route of this machine: {'; '.join(taken)}; "
                     "remove what owns it (`docker network ls`, `ip route`) or change SUBNET in this script")
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
        sh("ip", "addr", "add", f"{MANAGER_ADDRESS}/24", "dev", BRIDGE)
        sh("ip", "link", "set", BRIDGE, "up")
    # node-to-node traffic is bridged, and bridged traffic passes the FORWARD chain (policy DROP)
    rule = ["FORWARD", "-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT"]
    if sh("iptables", "-C", *rule, check=False).returncode != 0:
        sh("iptables", "-I", *rule)


def start_node(n: int) -> None:
    name, address = node_name(n), f"{SUBNET}.{n + 1}"
    sh("ip", "netns", "add", name)
    sh("ip", "link", "add", f"gymv{n}", "type", "veth", "peer", "name", "eth0", "netns", name)
    sh("ip", "link", "set", f"gymv{n}", "master", BRIDGE, "up")
    sh("ip", "-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
    sh("ip", "-n", name, "link", "set", "eth0", "up")
    sh("ip", "-n", name, "link", "set", "lo", "up")
    sh("ip", "-n", name, "route", "add", "default", "via", MANAGER_ADDRESS)
    run = Path(f"/run/{name}")
    run.mkdir(parents=True, exist_ok=True)
    config = run / "daemon.json"
    config.write_text(json.dumps(NODE_CONFIG))
    log = open(f"/tmp/{name}-dockerd.log", "w")
    # A swarm worker pulls a task's image by tag before it starts it, even when it holds the image; in
    # the node's namespace the registry's name only times out (20 s per task). The nodes hold the
    # images (`up --node-engine` copies them): a worker of this engine uses its own without asking.
    daemon = (f"hostname {name} && exec nsenter --net=/run/netns/{name} env DOCKER_SERVICE_PREFER_OFFLINE_IMAGE=1 "
              f"dockerd --config-file {config} "
              f"--data-root /var/lib/{name} --exec-root {run}/exec --pidfile {run}/dockerd.pid "
              f"-H {socket(n)} --cgroup-parent {name} --bip 172.31.{n}.1/24")
    subprocess.Popen(["unshare", "--uts", "sh", "-c", daemon], stdout=log, stderr=subprocess.STDOUT,
                     stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while node_docker(n, "info", "--format", "{{.ID}}", check=False, timeout=10).returncode != 0:
        if time.monotonic() > deadline:
            sys.exit(f"{name}'s dockerd did not start within {START_TIMEOUT_S} s: see /tmp/{name}-dockerd.log")
        time.sleep(1)


def up(count: int) -> None:
    state = load_state()
    swarm, address = swarm_state()
    make_bridge()
    if swarm == "inactive":
        sh("docker", "swarm", "init", "--advertise-addr", MANAGER_ADDRESS)
        state["swarm_initialised"] = True
    elif address != MANAGER_ADDRESS:
        sys.exit(f"this engine is already in a swarm advertising {address}; the nodes need it to advertise "
                 f"{MANAGER_ADDRESS}: leave that swarm first (`docker swarm leave --force`)")
    token = sh("docker", "swarm", "join-token", "-q", "worker").stdout.strip()
    for n in range(1, count + 1):
        if n in state["nodes"]:
            continue
        state["nodes"].append(n)
        save_state(state)
        start_node(n)
        node_docker(n, "swarm", "join", "--advertise-addr", f"{SUBNET}.{n + 1}", "--token", token,
                    f"{MANAGER_ADDRESS}:2377")
    save_state(state)
    print(sh("docker", "node", "ls").stdout, end="")


def node_pids(n: int) -> list[int]:
    """The node's dockerd, its containerd, and every process of its containers."""
    pids: set[int] = set()
    pidfile = Path(f"/run/{node_name(n)}/dockerd.pid")
    if pidfile.exists():
        daemon = int(pidfile.read_text())
        pids.add(daemon)
        children = sh("pgrep", "-P", str(daemon), check=False).stdout.split()
        pids.update(int(p) for p in children)
    for procs in Path("/sys/fs/cgroup/pids", node_name(n)).glob("**/cgroup.procs"):
        pids.update(int(p) for p in procs.read_text().split())
    shims = sh("pgrep", "-f", f"containerd-shim.*/run/{node_name(n)}/", check=False).stdout.split()
    pids.update(int(p) for p in shims)
    return sorted(pids)


def kill(n: int) -> None:
    """As if the machine died: no clean leave, the manager finds out by missed heartbeats."""
    sh("ip", "link", "set", f"gymv{n}", "down", check=False)
    for pid in node_pids(n):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def down(keep_swarm: bool = False) -> None:
    """Removes the nodes, then (unless keep_swarm) the swarm `up` made and the bridge. Leaving a swarm
    takes name resolution from the engine's existing networks (Engine 20.10; docs/troubleshooting.md),
    which keep_swarm puts off."""
    state = load_state()
    for n in state["nodes"]:
        node_docker(n, "swarm", "leave", "--force", check=False, timeout=30)
        kill(n)
        time.sleep(1)
        for mount in sorted(sh("awk", f"$5 ~ /{node_name(n)}/ {{print $5}}", "/proc/self/mountinfo",
                               check=False).stdout.split(), reverse=True):
            sh("umount", "-l", mount, check=False)
        sh("ip", "link", "del", f"gymv{n}", check=False)
        sh("ip", "netns", "del", node_name(n), check=False)
        sh("rm", "-rf", f"/var/lib/{node_name(n)}", f"/run/{node_name(n)}", check=False, timeout=300)
    if state["nodes"]:
        for line in sh("docker", "node", "ls", "--format", "{{.ID}} {{.Hostname}}", check=False).stdout.splitlines():
            node_id, _, host = line.partition(" ")
            if host.startswith("gymnode"):
                sh("docker", "node", "rm", "--force", node_id, check=False)
    state["nodes"] = []
    if keep_swarm:
        save_state(state)
        return
    if state["swarm_initialised"]:
        sh("docker", "swarm", "leave", "--force", check=False)
    sh("iptables", "-D", "FORWARD", "-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT", check=False)
    sh("ip", "link", "del", BRIDGE, check=False)
    STATE.unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("up").add_argument("--nodes", type=int, default=2)
    commands.add_parser("kill").add_argument("node", type=int)
    commands.add_parser("down").add_argument("--keep-swarm", action="store_true",
                                             help="remove the nodes only; this engine stays the manager")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces, a bridge, further dockerd)")
    # iptables, ip and dockerd live in the sbin folders, which a PATH outside a login shell may lack
    folders = os.environ.get("PATH", "").split(os.pathsep)
    os.environ["PATH"] = os.pathsep.join(folders + [f for f in SBIN_FOLDERS if f not in folders])
    if args.command == "up":
        up(args.nodes)
    elif args.command == "kill":
        kill(args.node)
    else:
        down(args.keep_swarm)


if __name__ == "__main__":
    main()
