"""The egress allow-list checks (tests/e2e/test_sandbox_egress_allow.py on compose, test_swarm.py on
Swarm): a python_sandbox server whose sandboxes may reach `pkgs.allowed.test` and
`*.mirror.allowed.test` only (in its `verify` phase `refused.test` alone, in `offline` no host), a small HTTP server of the test's own on the project's egress
network under those names and `refused.test` (network aliases, so the proxy resolves them as it
would pypi.org), and a script run in a sandbox that asks through the proxy and around it."""

from __future__ import annotations

import json
import time

from tests.support.sandbox_reach import ReachStack
from tests.support.sandboxes import run

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
        network:
          egress:
            allow: [{ALLOWED}, "*.mirror.allowed.test"]
            phases: {{verify: [{REFUSED}], offline: []}}
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
proxy = urllib.parse.urlsplit(os.environ.get("HTTPS_PROXY") or "http://no-proxy:1")
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


def start_index_server(project: str) -> str:
    """The test's own server on PROJECT-sandbox-egress, under the three names; its container id."""
    from gym_compose.engine.images.lean_images import ensure_base_image

    created = run("docker", "run", "-d", "--user", "0:0", "--network", f"{project}-sandbox-egress",
                  "--network-alias", ALLOWED, "--network-alias", WILDCARD_MATCH, "--network-alias", REFUSED,
                  "--label", f"io.gym-compose.project={project}-index", ensure_base_image(progress=lambda _: None),
                  "python", "-u", "-c", INDEX_SERVER, timeout=120)
    assert created.returncode == 0, created.stderr
    index = created.stdout.strip()
    for _ in range(120):
        if "serving" in run("docker", "logs", index, timeout=30).stdout:
            break
        time.sleep(0.5)
    return index


def in_sandbox(stack: ReachStack, targets: dict) -> dict:
    report = stack.probe("reach-allowlist", "script", CHECKS, json.dumps(targets))
    assert report["return_code"] == 0, report
    return json.loads(report["stdout"])


def requests_seen(index: str) -> list[str]:
    return [line for line in run("docker", "logs", index, timeout=60).stdout.splitlines() if line.startswith("request")]


def check_allowed_and_refused(reach: ReachStack, index: str) -> None:
    """Allowed names answer through the proxy (HTTP, a `*.` pattern, CONNECT to 443); a refused name
    and CONNECT to 80 get its 403, and the test's server sees no request for the refused name."""
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


def check_phases(reach: ReachStack) -> None:
    """A sandbox moved to `verify` reaches `refused.test` alone, through that phase's proxy, and
    not through the default phase's (which a process started before the move still names); in
    `offline` it has loopback alone; back in the default phase it reaches the default list again;
    one leased in `verify` is there from its start."""
    targets = {"http": [ALLOWED, REFUSED], "resolve": []}
    report = reach.probe("reach-allowlist", "phases", CHECKS, json.dumps(targets))
    default_proxy = report["default"]["env"]["HTTPS_PROXY"]
    assert report["moved"] == [True, False], report
    for step in ("default", "back_to_default"):
        assert report[step]["http"][ALLOWED] == [200, f"hello from {ALLOWED}"], (step, report)
        assert report[step]["http"][REFUSED][0] == 403, (step, report)
    for step in ("verify", "leased_in_verify"):
        seen = report[step]
        verify_proxy = seen["env"]["HTTPS_PROXY"]
        assert verify_proxy != default_proxy and verify_proxy.startswith("http://reach-allowlist-egress-proxy-")
        assert seen["http"][REFUSED] == [200, f"hello from {REFUSED}"], (step, report)
        status, message = seen["http"][ALLOWED]
        assert status == 403 and f"Filtered: http://{ALLOWED}/simple/" in message, (step, report)
    old = report["verify_with_the_old_proxy"]["http"]
    assert old[ALLOWED][0] == old[REFUSED][0] == "error", report  # the default proxy is off this network
    offline = report["offline"]
    assert set(offline["env"].values()) == {"", "localhost,127.0.0.1,::1"}, report
    assert [offline["http"][ALLOWED][0], offline["http"][REFUSED][0]] == ["error", "error"], report
    assert report["offline_interfaces"] == ["lo"], report
