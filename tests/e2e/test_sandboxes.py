"""End-to-end sandboxes on the real engine: the python_sandbox example, isolation, limits, the
broker's refusals, 32 leases at once, 200 rollouts at 32 in parallel, and no leftovers after
`down`, Ctrl-C or a killed `gym-compose`. Most checks share one stack (sandboxes on their
server's internal network); the leak checks start their own."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e import PROJECT_PREFIX
from tests.support.model_gate import calls_held, gated
from tests.support.sandboxes import CLI, PROBE, SANDBOX_LABEL, free_port, gym_compose, inspect, labelled, run

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
ROWS = REPO / "server_images" / "python_sandbox" / "data" / "example.jsonl"
INTERNAL = ["--resources-server", "python_sandbox",
            "++python_sandbox.resources_servers.python_sandbox.sandbox_config.network=internal",
            "++python_sandbox.resources_servers.python_sandbox.sandbox_provider=sandbox",
            "++sandbox.docker.exec.default_timeout_s=180"]


def leftovers(project: str) -> dict[str, list[str]]:
    return {kind: found for kind in ("container", "network", "volume") if (found := labelled(kind, project))}


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def example_rows() -> list[dict]:
    return [json.loads(line) for line in ROWS.read_text().splitlines()]


@dataclass
class Stack:
    project: str
    head_port: int
    workdir: Path

    def container(self, service: str) -> str:
        return run("docker", "compose", "-p", self.project, "ps", "-q", service, timeout=60).stdout.strip()

    def probe(self, *args: str) -> dict:
        done = run("docker", "exec", "-i", self.container("python-sandbox"), "python", "-", *args,
                   input=PROBE.read_text(), timeout=600)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def collect(self, rows: Path, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
        results = self.workdir / "results"
        before = set(results.glob("*")) if results.exists() else set()
        done = gym_compose("eval", "run", "--no-serve", "-p", self.project, "--head-port", str(self.head_port),
                           *INTERNAL, "--input", str(rows), "--results-dir", str(results), *extra, cwd=self.workdir)
        (run_dir,) = set(results.glob("*")) - before
        return done, run_dir


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("sandboxes")
    project, head_port = f"{PROJECT_PREFIX}-sandboxes", free_port()
    up = gym_compose("up", "-d", "-p", project, "--head-port", str(head_port), *INTERNAL, cwd=workdir)
    assert up.returncode == 0, up.stderr
    assert "sandbox provider 'docker' (top-level `sandbox:`) runs as gym-compose sandboxes" in up.stderr
    yield Stack(project, head_port, workdir)
    gym_compose("down", "-p", project, cwd=workdir)


def rollouts(run_dir: Path, name: str = "rollouts.jsonl") -> list[dict]:
    path = run_dir / name
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_example_scores_one_with_the_oracle_and_zero_with_the_adversary(stack):
    oracle, oracle_dir = stack.collect(write_rows(stack.workdir / "oracle.jsonl", example_rows()))
    assert oracle.returncode == 0, oracle.stderr
    assert [row["reward"] for row in rollouts(oracle_dir)] == [1.0] * 5
    adversary_rows = example_rows()
    for row in adversary_rows:
        row["responses_create_params"]["metadata"]["gym_mock_mode"] = "adversary"
    adversary, adversary_dir = stack.collect(write_rows(stack.workdir / "adversary.jsonl", adversary_rows))
    assert adversary.returncode == 0, adversary.stderr
    assert [row["reward"] for row in rollouts(adversary_dir)] == [0.0] * 5


def test_an_oom_killed_rollout_is_a_failure_row_with_the_reason_and_the_run_goes_on(stack):
    rows = example_rows()[:2]
    hog = {**rows[0], "code": "x = bytearray(1 << 30)\nprint(len(x))", "expected_answer": str(1 << 30)}
    done, run_dir = stack.collect(write_rows(stack.workdir / "oom.jsonl", [*rows, hog]))
    assert done.returncode == 1, done.stderr  # some rollouts failed
    assert [row["reward"] for row in rollouts(run_dir)] == [1.0, 1.0]
    (failure,) = rollouts(run_dir, "rollouts_failures.jsonl")
    assert "sandbox OOM-killed (memory 256m)" in failure["_ng_failure_response_body"]


def test_sandbox_isolation_limits_and_survival(stack, tmp_path):
    network = f"{stack.project}-sbx-python-sandbox"
    gateway = json.loads(run("docker", "network", "inspect", network, timeout=60).stdout)[0]["IPAM"]["Config"][0]["Gateway"]
    model_ip = next(iter(inspect(stack.container("policy-model"))[0]["NetworkSettings"]["Networks"].values()))["IPAddress"]
    broker_ip = next(iter(inspect(stack.container("sandbox-broker"))[0]["NetworkSettings"]["Networks"].values()))["IPAddress"]
    image = inspect(stack.container("policy-model"))[0]["Config"]["Image"]
    other = f"{PROJECT_PREFIX}-sandboxes-other"
    run("docker", "network", "create", other, timeout=60)
    listener = socket.socket()
    listener.bind(("0.0.0.0", 0))
    listener.listen()

    def accept_until_closed() -> None:
        for _ in range(100):
            try:
                listener.accept()[0].close()
            except OSError:  # the test closed the listener
                return

    threading.Thread(target=accept_until_closed, daemon=True).start()
    try:
        started = run("docker", "run", "-d", "--rm", "--name", other, "--network", other, image,
                      "python", "-m", "http.server", "8000", timeout=120)
        assert started.returncode == 0, started.stderr
        other_ip = inspect(other)[0]["NetworkSettings"]["Networks"][other]["IPAddress"]
        targets = {"own server": "python-sandbox:8000", "model by name": "policy-model:8000",
                   "model by address": f"{model_ip}:8000", "broker by name": "sandbox-broker:8000",
                   "broker by address": f"{broker_ip}:8000", "internet": "1.1.1.1:443",
                   "another project": f"{other_ip}:8000", "host service": f"{gateway}:{listener.getsockname()[1]}"}
        report = stack.probe("isolation", *targets.values())
    finally:
        listener.close()
        run("docker", "rm", "-f", other, timeout=60)
        run("docker", "network", "rm", other, timeout=60)
    seen = {name: report["targets"][target] for name, target in targets.items()}
    # its own server refuses it too (the network guard; every target and policy: test_sandbox_reach.py)
    assert seen.pop("own server").startswith("refused: ConnectionRefusedError")
    assert all(answer.startswith("refused") for answer in seen.values()), seen
    assert report["fork"]["return_code"] != 0 and int(report["fork"]["stdout"]) < 128  # pids limit 128
    assert report["hog"] == {"return_code": 137, "error_type": "oom", "reason": "sandbox OOM-killed (memory 256m)"}
    assert report["slow"]["error_type"] == "timeout"
    assert report["after_fork"] == report["after_hog"] == report["after_slow"] == "alive\n"
    assert report["whoami"].splitlines()[0] == "10002" and "Read-only file system" in report["whoami"]
    assert report["death"] == {"error_type": "sandbox", "reason": "sandbox OOM-killed (memory 256m)"}
    assert report["after_death"] == {"error_type": "sandbox", "status": "stopped"}


def test_broker_refuses_what_the_plan_does_not_allow(stack):
    report = stack.probe("refusals", inspect(stack.container("policy-model"))[0]["Config"]["Image"])
    statuses = {name: answer["status"] for name, answer in report.items()}
    assert statuses == {"no_token": 401, "other_server": 401, "foreign_image": 403, "privileged": 422,
                        "bind_mount": 403, "mounts_field": 422, "foreign_network": 422,
                        "foreign_network_option": 403}, report


def test_only_the_broker_holds_the_docker_socket_and_no_sandbox_is_privileged(stack):
    containers = inspect(*labelled("container", stack.project))
    holders = [c["Config"]["Labels"].get("io.gym-compose.role") for c in containers
               if any("docker.sock" in (mount.get("Source") or "") for mount in c["Mounts"])]
    assert holders == ["sandbox-broker"]
    sandboxes = [c for c in containers if SANDBOX_LABEL in c["Config"]["Labels"]]
    assert sandboxes, "the warm pool should hold sandboxes"
    for sandbox in sandboxes:
        host = sandbox["HostConfig"]
        assert not host["Privileged"] and not host.get("Binds") and host["CapDrop"] == ["ALL"]
        assert all(mount["Type"] != "bind" for mount in sandbox["Mounts"])
        assert list(sandbox["NetworkSettings"]["Networks"]) == [f"{stack.project}-sbx-python-sandbox"]


def test_32_sandboxes_leased_at_once(stack):
    report = stack.probe("leases", "32")
    assert report["errors"] == [] and len(report["ids"]) == 32
    assert report["outputs"] == [str(i) for i in range(32)]
    assert report["stats"]["body"]["peak_leased"] >= 32


def test_200_rollouts_at_32_in_parallel_without_a_failure(stack):
    rows = (example_rows() * 40)[:200]
    done, run_dir = stack.collect(write_rows(stack.workdir / "many.jsonl", rows), "--num-samples-in-parallel", "32")
    assert done.returncode == 0, done.stderr
    assert rollouts(run_dir, "rollouts_failures.jsonl") == []
    assert [row["reward"] for row in rollouts(run_dir)] == [1.0] * 200


def test_ps_lists_sandboxes_and_sandbox_exec_runs_in_one(stack):
    ps = gym_compose("ps", "-p", stack.project, cwd=stack.workdir)
    assert ps.returncode == 0, ps.stderr
    lines = ps.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("SANDBOX"))
    sandboxes = [line.split() for line in lines[header + 1:] if line.strip()]
    assert sandboxes and all(row[1] == "python_sandbox" and row[4] in ("warm", "leased") for row in sandboxes)
    ran = gym_compose("sandbox", "exec", "-p", stack.project, sandboxes[0][0], "--", "sh", "-c", "id -u; pwd",
                      cwd=stack.workdir)
    assert ran.returncode == 0 and ran.stdout.split() == ["10002", "/work"], ran.stderr


def test_down_removes_every_sandbox_and_network(stack):
    assert labelled("container", stack.project, SANDBOX_LABEL)
    down = gym_compose("down", "-p", stack.project, cwd=stack.workdir)
    assert down.returncode == 0, down.stderr
    assert leftovers(stack.project) == {}


def start_collection(project: str, workdir: Path) -> subprocess.Popen:
    """A run that cannot finish by itself: the model answers 20 calls (two a rollout), then holds."""
    rows = write_rows(workdir / "rows.jsonl", (example_rows() * 40)[:200])
    return subprocess.Popen([*CLI, "up", "-p", project, "--head-port", str(free_port()), "--resources-server",
                             "python_sandbox", "--input", str(rows), "--results-dir", str(workdir / "results"),
                             "--num-samples-in-parallel", "8", gated(20)],
                            cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_for_rollouts(process: subprocess.Popen, project: str, workdir: Path, timeout: float = 600) -> None:
    """Until rollouts have finished and the model holds the next ones (the run is in its middle)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read()
        progress = list((workdir / "results").glob("*/progress.json"))
        if progress:
            try:
                if json.loads(progress[0].read_text()).get("done", 0) >= 3 and calls_held(project):
                    return
            except json.JSONDecodeError:
                pass
        time.sleep(0.5)
    raise AssertionError("no rollout finished in time")


def test_ctrl_c_mid_run_leaves_nothing(tmp_path):
    project = f"{PROJECT_PREFIX}-sandboxes-int"
    process = start_collection(project, tmp_path)
    try:
        wait_for_rollouts(process, project, tmp_path)
        assert labelled("container", project, SANDBOX_LABEL)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=300) == 130
        assert leftovers(project) == {}
    finally:
        if process.poll() is None:
            process.kill()
        gym_compose("down", "-p", project, cwd=tmp_path)


def test_killed_gym_compose_then_down_leaves_nothing(tmp_path):
    project = f"{PROJECT_PREFIX}-sandboxes-kill"
    process = start_collection(project, tmp_path)
    try:
        wait_for_rollouts(process, project, tmp_path)
        process.kill()  # SIGKILL: no clean-up of its own
        process.wait(timeout=60)
        assert labelled("container", project, SANDBOX_LABEL), "the stack outlives a killed gym-compose"
        down = gym_compose("down", "-p", project, cwd=tmp_path)
        assert down.returncode == 0, down.stderr
        assert leftovers(project) == {}
    finally:
        gym_compose("down", "-p", project, cwd=tmp_path)


def test_a_servers_sandbox_build_folder_is_built_from_the_default_sandbox_image_once(tmp_path):
    from gym_compose.engine.images.lean_images import ensure_base_image
    from gym_compose.engine.images.sandbox_images import ensure_default_sandbox_image, ensure_sandbox_build

    folder = tmp_path / "sandbox_image"
    folder.mkdir()
    (folder / "Dockerfile").write_text("ARG SANDBOX_IMAGE\nFROM ${SANDBOX_IMAGE}\nRUN echo built > /work/marker\n")
    base = ensure_base_image(progress=lambda line: None)
    default = ensure_default_sandbox_image(base, progress=lambda line: None)
    messages: list[str] = []
    tag = ensure_sandbox_build(folder, f"e2e-{tmp_path.name}", base, default, progress=messages.append)
    try:
        assert any(line.startswith("building sandbox image") for line in messages)
        shown = run("docker", "run", "--rm", tag, "sh", "-c", "id -u; cat /work/marker", timeout=120)
        assert shown.stdout.split() == ["10002", "built"], shown.stderr
        again: list[str] = []
        assert ensure_sandbox_build(folder, f"e2e-{tmp_path.name}", base, default, progress=again.append) == tag
        assert again == [f"sandbox image {tag} is up to date"]
    finally:
        run("docker", "rmi", tag, timeout=120)


def test_an_image_without_python_runs_commands_by_engine_api_exec(tmp_path):
    import asyncio

    from gym_compose.engine.images.lean_images import ensure_base_image
    from gym_compose.engine.images.sandbox_images import ensure_default_sandbox_image, ensure_sandbox_build
    from gym_compose.sandbox.broker.channel import FallbackChannel
    from gym_compose.sandbox.broker.docker_backend import DockerBackend
    from gym_compose.sandbox.broker.pool import SandboxPool
    from gym_compose.sandbox.policy import BrokerSettings, ExecRequest, LeaseRequest, SandboxPolicy

    folder = tmp_path / "no_python"
    folder.mkdir()
    (folder / "Dockerfile").write_text(
        "ARG SANDBOX_IMAGE\nFROM ${SANDBOX_IMAGE}\nUSER root\n"
        "RUN for d in $(echo $PATH | tr : ' '); do rm -f $d/python3 $d/python3.*; done\nUSER 10002\n")
    base = ensure_base_image(progress=lambda line: None)
    image = ensure_sandbox_build(folder, f"e2e-{tmp_path.name}", base, ensure_default_sandbox_image(base, print), print)
    policy = SandboxPolicy(server="s", image=image, network="none", memory_bytes=128 << 20)

    async def scenario():
        pool = SandboxPool(DockerBackend(), BrokerSettings(project=f"{PROJECT_PREFIX}-nopython-{tmp_path.name[-6:]}",
                                                    servers={"s": policy}))
        await pool.open()
        try:
            sandbox, _ = await pool.lease("s", LeaseRequest())
            ran = await pool.exec(sandbox, ExecRequest(command="command -v python3 || echo none; exit 3"))
            slow = await pool.exec(sandbox, ExecRequest(command="sleep 30", timeout_s=1))
            await pool.write_file(sandbox, "f.txt", b"bytes", None, 1 << 20)
            read = await pool.read_file(sandbox, "f.txt", 1 << 20, 1 << 20)
            return isinstance(sandbox.channel, FallbackChannel), ran, slow, read
        finally:
            await pool.close()

    try:
        fallback, ran, slow, read = asyncio.run(scenario())
        assert fallback
        assert (ran["return_code"], ran["stdout"]) == (3, "none\n")
        assert slow["error_type"] == "timeout" and read == b"bytes"
    finally:
        run("docker", "rmi", image, timeout=120)
