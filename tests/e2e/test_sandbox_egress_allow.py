"""Egress allow-lists on the real engine (docs/sandboxes.md, "Egress allow-lists"): a python_sandbox
server whose sandboxes may reach `pkgs.allowed.test` and `*.mirror.allowed.test` only. A small HTTP
server of the test's own stands on the project's egress network, the proxy's way out, under those
names and under `refused.test` (network aliases, so the proxy resolves them as it would pypi.org).

From a sandbox leased through the real client API: the allowed names answer through the proxy
(plain HTTP, and CONNECT on 443); a refused name and an address get the proxy's 403 with its
message, and the test server sees no request for them; nothing on the egress network is reachable
directly, not even the proxy's own address there, and no outside name resolves in the sandbox;
the project is as unreachable as from an `internal` sandbox (tests/support/sandbox_reach.py)."""

from __future__ import annotations

import json
import time

import pytest

from tests.e2e import PROJECT_PREFIX
from tests.support.sandbox_reach import ReachStack, check_reach, start_stack
from tests.support.sandboxes import gym_compose, inspect, labelled, run

pytestmark = pytest.mark.docker

ALLOWED = "pkgs.allowed.test"
WILDCARD_MATCH = "a.mirror.allowed.test"
REFUSED = "refused.test"
CONFIG = f"""
reach_allowlist:
  resources_servers:
    python_sandbox:
      entrypoint: app.py
      domain: coding
      sandbox_config:
        memory: 128m
        warm_pool: 1
        shell: /bin/sh
        network: {{egress: {{allow: [{ALLOWED}, "*.mirror.allowed.test"]}}}}
"""
# The test's own server on the egress side: answers every request on 80 and 443 with the Host it
# was asked for, and prints one line per request (its log is what reached it).
INDEX_SERVER = """
import http.server, socketserver, sys, threading
class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("hello from " + str(self.headers.get("Host"))).encode()
        print("request", self.headers.get("Host"), self.path, flush=True)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
for port in (80, 443):
    threading.Thread(target=Server(("0.0.0.0", port), Answer).serve_forever, daemon=True).start()
print("serving", flush=True)
threading.Event().wait()
"""
# Run in a sandbox: each check's answer in one JSON object.
CHECKS = """
import errno, json, os, socket, sys, time, urllib.error, urllib.parse, urllib.request
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
targets = json.loads(sys.argv[1])
out = {"env": {key: os.environ.get(key) for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy",
                                                   "NO_PROXY", "no_proxy")}}

def get(url):
    try:
        with urllib.request.urlopen(url, timeout=20) as response:  # through http_proxy, as pip would
            return [response.status, response.read().decode()]
    except urllib.error.HTTPError as error:
        return [error.code, error.read().decode()]
    except OSError as error:
        return ["error", repr(error)]

def tunnel(host_port):
    # CONNECT, then a plain HTTP request through the tunnel (no TLS needed to show the tunnel)
    with socket.create_connection((proxy.hostname, proxy.port), timeout=20) as s:
        s.sendall(f"CONNECT {host_port} HTTP/1.1\\r\\nHost: {host_port}\\r\\n\\r\\n".encode())
        head = b""
        while b"\\r\\n\\r\\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                break
            head += chunk
        status = head.split(b"\\r\\n", 1)[0].decode()
        if " 200 " not in status:
            rest = head.split(b"\\r\\n\\r\\n", 1)[-1]
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                rest += chunk
            return [status, rest.decode(errors="replace")]
        s.sendall(f"GET /tunnel HTTP/1.0\\r\\nHost: {host_port.rsplit(':', 1)[0]}\\r\\n\\r\\n".encode())
        answer = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            answer += chunk
        return [status, answer.decode(errors="replace").split("\\r\\n\\r\\n", 1)[-1]]

def connect(host, port):
    try:
        socket.create_connection((host, port), timeout=5).close()
        return "reached"
    except socket.gaierror:
        return "unresolved"
    except ConnectionRefusedError:
        return "refused"
    except socket.timeout:
        return "no answer"
    except OSError as error:
        unreachable = error.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH)
        return "unreachable" if unreachable else "error " + errno.errorcode.get(error.errno, "?")

def resolve(name):
    started = time.monotonic()
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(name, 80)})
    except socket.gaierror as error:
        return f"unresolved: {error} after {time.monotonic() - started:.1f} s"

out["http"] = {name: get(f"http://{name}/simple/") for name in targets.get("http", [])}
out["connect"] = {target: tunnel(target) for target in targets.get("connect", [])}
out["direct"] = {target: connect(*target.rsplit(":", 1)) for target in targets.get("direct", [])}
out["resolve"] = {name: resolve(name) for name in targets.get("resolve", [])}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("egress-allow")
    project = f"{PROJECT_PREFIX}-allow"
    index = None
    try:
        started = start_stack(cwd, project, config_text=CONFIG)
        from gym_compose.engine.images.lean_images import ensure_base_image

        egress_network = f"{project}-sandbox-egress"
        created = run("docker", "run", "-d", "--user", "0:0", "--network", egress_network,
                      "--network-alias", ALLOWED, "--network-alias", WILDCARD_MATCH, "--network-alias", REFUSED,
                      "--label", f"io.gym-compose.project={project}-index", ensure_base_image(progress=lambda _: None),
                      "python", "-u", "-c", INDEX_SERVER, timeout=120)
        assert created.returncode == 0, created.stderr
        index = created.stdout.strip()
        for _ in range(120):
            if "serving" in run("docker", "logs", index, timeout=30).stdout:
                break
            time.sleep(0.5)
        yield started, index
    finally:
        if index:
            run("docker", "rm", "-f", index, timeout=120)
        gym_compose("down", "-p", project, cwd=cwd)


def in_sandbox(stack: ReachStack, targets: dict) -> dict:
    report = stack.probe("reach-allowlist", "script", CHECKS, json.dumps(targets))
    assert report["return_code"] == 0, report
    return json.loads(report["stdout"])


def requests_seen(index: str) -> list[str]:
    return [line for line in run("docker", "logs", index, timeout=60).stdout.splitlines() if line.startswith("request")]


def test_allowed_names_answer_through_the_proxy_and_refused_ones_get_its_403(stack):
    reach, index = stack
    seen = in_sandbox(reach, {"http": [ALLOWED, WILDCARD_MATCH, REFUSED],
                              "connect": [f"{ALLOWED}:443", f"{REFUSED}:443", f"{ALLOWED}:80"]})
    proxy = "http://reach-allowlist-egress-proxy:8888"
    assert seen["env"] == {"HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "http_proxy": proxy, "https_proxy": proxy,
                           "NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1"}
    assert seen["http"][ALLOWED] == [200, f"hello from {ALLOWED}"], seen
    assert seen["http"][WILDCARD_MATCH] == [200, f"hello from {WILDCARD_MATCH}"], seen
    assert seen["connect"][f"{ALLOWED}:443"] == ["HTTP/1.0 200 Connection established", f"hello from {ALLOWED}"]
    status, message = seen["http"][REFUSED]
    assert status == 403 and "gym-compose egress proxy: Filtered: http://refused.test/simple/" in message, seen
    assert "network.egress.allow" in message
    status, message = seen["connect"][f"{REFUSED}:443"]
    assert status == "HTTP/1.1 403 Filtered" and "refused.test:443" in message, seen
    status, message = seen["connect"][f"{ALLOWED}:80"]  # CONNECT goes to 443 alone
    assert status == "HTTP/1.1 403 Access violation" and "gym-compose egress proxy" in message, seen
    # what reached the test's server: the allowed requests, nothing for the refused name
    hosts = [line.split()[1] for line in requests_seen(index)]
    assert REFUSED not in " ".join(hosts) and ALLOWED in hosts and WILDCARD_MATCH in hosts, hosts


def test_nothing_beyond_the_proxy_is_reachable_directly_and_no_outside_name_resolves(stack):
    reach, index = stack
    egress_network = f"{reach.project}-sandbox-egress"
    index_address = inspect(index)[0]["NetworkSettings"]["Networks"][egress_network]["IPAddress"]
    proxy_address = reach.address("reach-allowlist-egress-proxy", "sandbox-egress")
    before = len(requests_seen(index))
    seen = in_sandbox(reach, {"direct": [f"{index_address}:80", f"{index_address}:443", f"{proxy_address}:8888"],
                              "connect": [f"{index_address}:443"], "http": [index_address],
                              "resolve": [ALLOWED, REFUSED, "exfil.example.com", "reach-allowlist-egress-proxy"]})
    assert set(seen["direct"].values()) == {"unreachable"}, seen  # the sandbox network has no route out
    assert seen["connect"][f"{index_address}:443"][0] == "HTTP/1.1 403 Filtered", seen  # the proxy names hosts only
    assert seen["http"][index_address][0] == 403, seen
    for name in (ALLOWED, REFUSED, "exfil.example.com"):  # the proxy resolves; the sandbox asks no one outside
        assert str(seen["resolve"][name]).startswith("unresolved"), seen
    assert isinstance(seen["resolve"]["reach-allowlist-egress-proxy"], list), seen  # its own network's names do
    assert len(requests_seen(index)) == before
    for sandbox in inspect(*labelled("container", reach.project, "io.gym-compose.sandbox")):
        assert sandbox["HostConfig"]["Dns"] == ["127.0.0.1"]
        assert sorted(sandbox["NetworkSettings"]["Networks"]) == [f"{reach.project}-sbx-reach-allowlist"]
    sandbox_network = inspect_network(f"{reach.project}-sbx-reach-allowlist")
    assert sandbox_network["Internal"] is True
    assert inspect_network(egress_network)["Internal"] is False


def inspect_network(name: str) -> dict:
    done = run("docker", "network", "inspect", name, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)[0]


def test_nothing_of_the_project_answers_an_allow_listed_sandbox(stack):
    reach, _ = stack
    check_reach(reach, "allowlist")


def test_the_proxy_runs_unprivileged_and_logs_the_refusals(stack):
    reach, _ = stack
    proxy = reach.container("reach-allowlist-egress-proxy")
    (details,) = inspect(proxy)
    assert details["Config"]["User"] == "65534:65534" and details["HostConfig"]["ReadonlyRootfs"] is True
    assert details["HostConfig"]["CapDrop"] == ["ALL"] and not details["HostConfig"]["CapAdd"]
    assert sorted(details["NetworkSettings"]["Networks"]) == [f"{reach.project}-sandbox-egress",
                                                               f"{reach.project}-sbx-reach-allowlist"]
    logged = run("docker", "logs", proxy, timeout=60)
    logs = logged.stdout + logged.stderr
    assert 'Proxying refused on filtered domain "refused.test"' in logs, logs[-3000:]
