"""What model-written code in a sandbox can reach, on the real engine (docs/sandboxes.md, "What a
sandbox can reach"): one stack with a python_sandbox server per network policy (none, internal,
egress). From inside a sandbox of each, no server API, no other port of its own server, no
broker and no head answers, by name or by address: each connect is refused, has no route or
does not resolve. The server still reaches a port served in its sandbox, and an egress sandbox
still reaches the outside (here: a listener on the host)."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.e2e import PROJECT_PREFIX
from tests.support.sandbox_reach import POLICIES, SERVER_STATUS, SERVER_USER, check_reach, start_stack
from tests.support.sandboxes import SANDBOX_LABEL, gym_compose, inspect, labelled, run

pytestmark = pytest.mark.docker

@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("reach")
    project = f"{PROJECT_PREFIX}-reach"
    try:
        yield start_stack(cwd, project)
    finally:
        gym_compose("down", "-p", project, cwd=cwd)


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


GUARD_CAPS = [arg for cap in ("KILL", "NET_ADMIN", "SETGID", "SETPCAP", "SETUID") for arg in ("--cap-add", cap)]


def guarded(image: str, network: str, *guard_args: str, command: tuple[str, ...], alias: bool = True,
            detach: bool = False) -> subprocess.CompletedProcess:
    """The guard in a container of `image`, as the renderer starts it: root with its capabilities only."""
    return run("docker", "run", *(["-d"] if detach else ["--rm"]), "--network", network,
               *(["--network-alias", "side"] if alias else []), "--user", "0:0", "--cap-drop", "ALL", *GUARD_CAPS,
               "--cap-add", "CHOWN", "--security-opt", "no-new-privileges:true", "--read-only", "--init",
               "--label", f"io.gym-compose.project={PROJECT_PREFIX}-reach-guard",
               image, "python", "-m", "gym_compose.server.netguard", "--sandbox-side", "side", *guard_args, "--",
               *command, timeout=120)


def connect_from(image: str, network: str, address: str, port: int) -> str:
    """A connect from another container on `network`: reached, refused or what else it met."""
    done = run("docker", "run", "--rm", "--network", network, image, "python", "-c",
               "import socket, sys\ntry:\n"
               "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()\n"
               "    print('reached')\nexcept OSError as error:\n    print(type(error).__name__)",
               address, str(port), timeout=120)
    return done.stdout.strip() or done.stderr


def test_the_guard_leaves_a_root_server_only_its_own_capabilities_and_fails_closed():
    from gym_compose.engine.images.lean_images import ensure_base_image

    image = ensure_base_image(progress=lambda line: None)
    network = f"{PROJECT_PREFIX}-reach-guard"
    run("docker", "network", "create", network, timeout=60)
    show = ("sh", "-c", "id -u; grep -E '^Cap(Eff|Prm|Bnd|Inh|Amb)' /proc/self/status; nft list ruleset")
    try:
        root = guarded(image, network, "--user", "0:0", "--keep-cap", "CHOWN", command=show)
        lines = root.stdout.splitlines()
        assert lines[0] == "0", root.stdout + root.stderr
        sets = dict(line.split(":\t") for line in lines[1:6])
        assert sets["CapEff"] == sets["CapPrm"] == sets["CapBnd"] == "0000000000000001", sets  # CAP_CHOWN alone
        assert sets["CapInh"] == sets["CapAmb"] == "0000000000000000", sets
        assert "Operation not permitted" in root.stderr  # a root server can neither read nor undo the rules
        assert "new connections from the sandbox network (eth0) are refused" in root.stderr
        # an alias that never resolves: the table stays closed, and the server is killed, saying why
        lost = guarded(image, network, "--user", "10001:10001", "--resolve-timeout", "2",
                       command=("sh", "-c", "id -u; sleep 120"), alias=False)
        assert lost.returncode == 137 and lost.stdout.split() == ["10001"], lost.stdout + lost.stderr
        assert "refused on every interface until 'side' resolves" in lost.stderr
        assert "the server is stopped: cannot close its sandbox side: the sandbox-side alias 'side' did not " \
               "resolve in 2 s" in lost.stderr
    finally:
        run("docker", "network", "rm", network, timeout=60)


LOOPBACK_GET = ("import time, urllib.request\nfor _ in range(240):\n    try:\n"
                "        print(urllib.request.urlopen('http://127.0.0.1:8000/', timeout=30).status)\n        break\n"
                "    except OSError:\n        time.sleep(0.25)")  # while http.server starts


def test_a_server_whose_alias_resolves_late_is_closed_everywhere_until_then():
    """The Swarm path (its DNS answers once the task is healthy), on the compose engine: the
    alias comes with a network connected later; until then every interface refuses, then only
    that network's does."""
    from gym_compose.engine.images.lean_images import ensure_base_image

    image = ensure_base_image(progress=lambda line: None)
    first, side = f"{PROJECT_PREFIX}-reach-late-a", f"{PROJECT_PREFIX}-reach-late-b"
    for network in (first, side):
        run("docker", "network", "create", network, timeout=60)
    started = guarded(image, first, "--user", "10001:10001", "--resolve-timeout", "300",
                      command=("python", "-m", "http.server", "8000"), alias=False, detach=True)
    container = started.stdout.strip()
    try:
        assert started.returncode == 0, started.stderr
        address = inspect(container)[0]["NetworkSettings"]["Networks"][first]["IPAddress"]
        serving = run("docker", "exec", container, "python", "-c", LOOPBACK_GET, timeout=120)
        assert serving.stdout.strip() == "200", serving.stderr  # it runs, answering on loopback alone
        assert connect_from(image, first, address, 8000) == "ConnectionRefusedError"
        connected = run("docker", "network", "connect", "--alias", "side", side, container, timeout=60)
        assert connected.returncode == 0, connected.stderr
        for _ in range(240):  # the helper polls the alias every 0.5 s
            if "the other interfaces are open again" in run("docker", "logs", container, timeout=60).stderr:
                break
            time.sleep(0.5)
        logs = run("docker", "logs", container, timeout=60).stderr
        assert "(eth1) are refused; the other interfaces are open again" in logs, logs
        assert connect_from(image, first, address, 8000) == "reached"
        side_address = inspect(container)[0]["NetworkSettings"]["Networks"][side]["IPAddress"]
        assert connect_from(image, side, side_address, 8000) == "ConnectionRefusedError"
    finally:
        run("docker", "rm", "-f", container, timeout=60)
        for network in (first, side):
            run("docker", "network", "rm", network, timeout=60)
