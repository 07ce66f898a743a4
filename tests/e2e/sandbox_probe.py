"""Run inside a server container that declared sandboxes (`docker exec -i C python - ARGS < this`):
leases sandboxes through the real client API and prints one JSON object with what it saw.

    python - isolation HOST_IP... | python - leases N | python - refusals IMAGE | python - reach JSON
    | python - script PYTHON_SOURCE ARG... | python - phases PYTHON_SOURCE TARGETS_JSON
"""

import asyncio
import json
import os
import shlex
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

from gym_compose.sandbox import AsyncSandbox, SandboxSpec
from gym_compose.sandbox.client import BROKER_ENV, TOKEN_FILE_ENV
from gym_compose.sandbox.tokens import SERVER_HEADER

CONNECT = """
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
try:
    socket.create_connection((host, port), timeout=3).close()
    print("reached")
except OSError as error:
    print("refused:", type(error).__name__, error)
"""


# Run in the sandbox: one definite answer per HOST:PORT, all at once; the timeout only bounds a
# target that never answers ("no answer"), which no assertion on a guarded target accepts.
REACH = """
import errno, socket, sys, threading
answers = {}
def connect(target):
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
        answers[target] = "reached"
    except socket.gaierror:
        answers[target] = "unresolved"
    except ConnectionRefusedError:
        answers[target] = "refused"
    except socket.timeout:
        answers[target] = "no answer"
    except OSError as error:
        unreachable = error.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH)
        answers[target] = "unreachable" if unreachable else "error " + errno.errorcode.get(error.errno, "?")
threads = [threading.Thread(target=connect, args=(t,)) for t in sys.argv[1:]]
for thread in threads: thread.start()
for thread in threads: thread.join()
for target in sys.argv[1:]: print(target, answers[target])
"""
SERVE_PORT = 9000
DEFAULT_GATEWAY = ("python3 -c \"import socket, struct; print(next((socket.inet_ntoa(struct.pack('<L', int(f[2], 16))) "
                   "for f in (l.split() for l in open('/proc/net/route')) if f[1] == '00000000'), 'none'))\"")


def listen_everywhere():
    """A listener in this (the server's) network namespace on every interface and a port of its
    own, as NeMo Gym's Ray ports are: the guard must cover what the server did not declare."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", 0))
    listener.listen(64)

    def accept():
        while True:
            try:
                listener.accept()[0].close()
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return listener


def fetch_until_served(url, seconds=60):
    """The server side's GET of a port served in the sandbox (polled while http.server starts)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return response.status
        except OSError as error:
            if time.monotonic() > deadline:
                return f"failed: {error}"
            time.sleep(0.3)


async def reach_report(spec):
    listener = listen_everywhere()
    port = listener.getsockname()[1]
    sandbox = await AsyncSandbox().start(SandboxSpec(metadata={"session": "reach"}))
    try:
        await sandbox.write_file("reach.py", REACH)
        gateway = (await sandbox.exec(DEFAULT_GATEWAY)).stdout.strip()  # the host, as the sandbox sees it
        targets = {target: target.replace("{listener}", str(port)).replace("{gateway}", gateway)
                   for target in spec["targets"]}
        seen = await sandbox.exec("python3 reach.py " + " ".join(shlex.quote(t) for t in targets.values()),
                                  timeout_s=60)
        answers = dict(line.split(" ", 1) for line in seen.stdout.splitlines())
        report = {"listener": port, "gateway": gateway, "targets": {t: answers.get(asked, seen.stderr) for t, asked in targets.items()},
                  "sandbox_networks": (await sandbox.exec("ls /sys/class/net")).stdout.split()}
        if spec.get("serve"):
            await sandbox.exec(f"python3 -m http.server {SERVE_PORT} --bind 0.0.0.0 >/dev/null 2>&1 </dev/null &")
            own_address = "python3 -c 'import socket; print(socket.gethostbyname(socket.gethostname()))'"
            address = (await sandbox.exec(own_address)).stdout.strip()
            report["sandbox_address"] = address
            report["served"] = fetch_until_served(f"http://{address}:{SERVE_PORT}/")
    finally:
        await sandbox.stop()
        listener.close()
    return report


async def run_script(script, args):
    """A Python script run with `args` in a newly leased sandbox (with the sandbox's own environment)."""
    sandbox = await AsyncSandbox().start(SandboxSpec(metadata={"session": "script"}))
    try:
        await sandbox.write_file("script.py", script)
        result = await sandbox.exec("python3 script.py " + " ".join(shlex.quote(arg) for arg in args), timeout_s=120)
        return {"stdout": result.stdout, "stderr": result.stderr, "return_code": result.return_code}
    finally:
        await sandbox.stop()


async def phase_report(script, targets):
    """`script` (egress_allow.CHECKS) run with `targets` in one sandbox as it moves from the
    default egress phase to `verify` and `offline`, and in one leased in `verify` from the start."""

    async def checks(sandbox, prefix=""):
        result = await sandbox.exec(f"{prefix}python3 checks.py {shlex.quote(targets)}", timeout_s=120)
        return json.loads(result.stdout) if result.return_code == 0 else {"failed": result.stderr}

    report = {}
    sandbox = await AsyncSandbox().start(SandboxSpec(metadata={"session": "phases"}))
    try:
        await sandbox.write_file("checks.py", script)
        report["default"] = await checks(sandbox)
        old_proxy = report["default"]["env"]["HTTPS_PROXY"]
        report["moved"] = [await sandbox.set_phase("verify"), await sandbox.set_phase("verify")]
        report["verify"] = await checks(sandbox)
        # a process that kept the default phase's proxy (as one started before the move has)
        report["verify_with_the_old_proxy"] = await checks(
            sandbox, f"env HTTP_PROXY={old_proxy} HTTPS_PROXY={old_proxy} http_proxy={old_proxy} https_proxy={old_proxy} ")
        await sandbox.set_phase("offline")
        report["offline"] = await checks(sandbox)
        report["offline_interfaces"] = (await sandbox.exec("ls /sys/class/net")).stdout.split()
        await sandbox.set_phase("default")
        report["back_to_default"] = await checks(sandbox)
    finally:
        await sandbox.stop()
    leased = await AsyncSandbox().start(SandboxSpec(metadata={"session": "phases"}, provider_options={"phase": "verify"}))
    try:
        await leased.write_file("checks.py", script)
        report["leased_in_verify"] = await checks(leased)
    finally:
        await leased.stop()
    return report


async def reach(sandbox, host, port):
    result = await sandbox.exec(f"python3 -c '{CONNECT}' {host} {port}", timeout_s=20)
    return (result.stdout or "").strip() or result.stderr


async def isolation(targets):
    sandbox = await AsyncSandbox().start(SandboxSpec(metadata={"session": "probe"}))
    try:
        answers = await asyncio.gather(*(reach(sandbox, *target.rsplit(":", 1)) for target in targets))
        report = {"targets": dict(zip(targets, answers, strict=True))}
        fork = await sandbox.exec(
            "python3 -c \"\nimport os, time\nforked = 0\nfor _ in range(1000):\n    try:\n        pid = os.fork()\n"
            "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n"
            "    forked += 1\nprint(forked)\nos.killpg(0, 9)\n\"", timeout_s=60)
        report["fork"] = {"return_code": fork.return_code, "stdout": fork.stdout, "error_type": fork.error_type}
        report["after_fork"] = (await sandbox.exec("echo alive")).stdout
        hog = await sandbox.exec("python3 -c 'x = bytearray(1 << 30); print(len(x))'", timeout_s=60)
        report["hog"] = {"return_code": hog.return_code, "error_type": hog.error_type, "reason": hog.reason}
        report["after_hog"] = (await sandbox.exec("echo alive")).stdout
        slow = await sandbox.exec("sleep 30; echo never", timeout_s=1)
        report["slow"] = {"return_code": slow.return_code, "error_type": slow.error_type, "stdout": slow.stdout}
        report["after_slow"] = (await sandbox.exec("echo alive")).stdout
        report["id"] = sandbox.sandbox_id
        report["whoami"] = (await sandbox.exec("id -u; touch /etc/x 2>&1; echo hi > /work/f && cat /work/f")).stdout
        # Make the kernel pick the agent itself when memory runs out: the sandbox dies of OOM.
        death = await sandbox.exec("echo 1000 > /proc/$PPID/oom_score_adj; python3 -c 'x = bytearray(1 << 30)'",
                                   timeout_s=60)
        report["death"] = {"error_type": death.error_type, "reason": death.reason}
        report["after_death"] = {"error_type": (await sandbox.exec("echo alive")).error_type,
                                 "status": (await sandbox.status()).value}
    finally:
        await sandbox.stop()
    return report


async def leases(count):
    sandboxes = [AsyncSandbox() for _ in range(count)]
    started = await asyncio.gather(*(s.start(SandboxSpec(metadata={"session": f"p{i}"}))
                                     for i, s in enumerate(sandboxes)), return_exceptions=True)
    errors = [repr(e) for e in started if isinstance(e, BaseException)]
    live = [s for s in sandboxes if s.sandbox_id]
    outputs = await asyncio.gather(*(s.exec(f"echo {i}") for i, s in enumerate(live)))
    stats = broker("GET", "/v1/stats")
    await asyncio.gather(*(s.stop() for s in live))
    return {"errors": errors, "ids": sorted({s.sandbox_id for s in live}),
            "outputs": [o.stdout.strip() for o in outputs], "stats": stats}


def broker(method, path, body=None, token=True, server=None):
    url = os.environ[BROKER_ENV] + path
    headers = {"content-type": "application/json"}
    if token:
        headers["authorization"] = "Bearer " + open(os.environ[TOKEN_FILE_ENV]).read().strip()
        headers[SERVER_HEADER] = server or os.environ["NEMO_GYM_CONFIG_PATH"]
    request = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                     headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return {"status": response.status, "body": json.loads(response.read() or b"null")}
    except urllib.error.HTTPError as error:
        return {"status": error.code, "body": error.read().decode()}


def refusals(foreign_image):
    asks = {
        "no_token": ("GET", "/v1/sandboxes", None, False),
        "other_server": ("GET", "/v1/sandboxes", None, True, "policy_model"),
        "foreign_image": ("POST", "/v1/sandboxes", {"image": foreign_image}),
        "privileged": ("POST", "/v1/sandboxes", {"privileged": True}),
        "bind_mount": ("POST", "/v1/sandboxes", {"provider_options": {"volumes": ["/:/host"]}}),
        "mounts_field": ("POST", "/v1/sandboxes", {"mounts": [{"type": "bind", "source": "/", "target": "/h"}]}),
        "foreign_network": ("POST", "/v1/sandboxes", {"network": "host"}),
        "foreign_network_option": ("POST", "/v1/sandboxes", {"provider_options": {"network": "bridge"}}),
    }
    report = {}
    for name, ask in asks.items():
        method, path, body, *rest = ask
        token = rest[0] if rest else True
        server = rest[1] if len(rest) > 1 else None
        answer = broker(method, path, body, token=token, server=server)
        report[name] = {"status": answer["status"], "body": str(answer["body"])[:300]}
    return report


def main():
    kind = sys.argv[1]
    if kind == "isolation":
        result = asyncio.run(isolation(sys.argv[2:]))
    elif kind == "leases":
        result = asyncio.run(leases(int(sys.argv[2])))
    elif kind == "refusals":
        result = refusals(sys.argv[2])
    elif kind == "script":
        result = asyncio.run(run_script(sys.argv[2], sys.argv[3:]))
    elif kind == "phases":
        result = asyncio.run(phase_report(sys.argv[2], sys.argv[3]))
    elif kind == "reach":
        result = asyncio.run(reach_report(json.loads(sys.argv[2])))
    else:
        raise SystemExit(f"unknown probe {kind}")
    print(json.dumps(result))


main()
