"""The end-to-end tests' helpers: the real CLI in a subprocess, what Docker holds of a project,
the files a run wrote."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.support.ports import free_port  # noqa: F401  (the e2e tests take it from here)

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "gym_compose"]
LABEL = "io.gym-compose.project"

# Whichever test of a module that runs NeMo Gym's own code comes first builds the shared NeMo Gym
# runtime image (a ~1.3 GB venv from a fresh wheelhouse): over 600 s on a fresh 2-core CI machine.
# The mark is on every such module, so the bound holds whatever order or selection runs them.
BUILDS_NEMO_GYM_RUNTIME = pytest.mark.timeout(2400)


def gym_compose(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """`gym-compose ARGS`; one still running after `timeout` fails the test saying where it was."""
    command = [*CLI, *args]
    with subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(stuck_report(process, timeout)) from None
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def stuck_report(process: subprocess.Popen, timeout: float) -> str:
    """Kills a gym-compose command that outlived `timeout`, first asking it where each of its threads
    was (SIGUSR1: gym_compose/cli/main.py); returns that, after the end of what it had said."""
    process.send_signal(signal.SIGUSR1)
    time.sleep(3)
    process.kill()
    _, err = process.communicate(timeout=60)
    return (f"`gym-compose {process.args[3]}` did not exit within {timeout} s; its stderr, ending with where its "
            f"threads were:\n{(err or '')[-8000:]}")


def remove_project(name: str) -> None:
    """A test's clean-up: everything of the project, the broker's sandboxes and snapshots included
    (`compose down` alone leaves those, and the networks they hold)."""
    subprocess.run([*CLI, "down", "-p", name], capture_output=True, timeout=300)


def labelled(kind: str, project: str, extra: str | None = None) -> list[str]:
    """The project's containers, networks or volumes (with label `extra` too, if given). A network the
    engine refuses to remove while it lists no container on it is not counted: the engine lost one
    of its endpoints (docs/troubleshooting.md), which `down` reports and nothing can remove short
    of restarting the engine; one `network rm` removes any other empty network, which counts."""
    listing = {"container": ["ps", "-aq"], "network": ["network", "ls", "-q"], "volume": ["volume", "ls", "-q"]}[kind]
    filters = ["--filter", f"label={LABEL}={project}"] + (["--filter", f"label={extra}"] if extra else [])
    found = subprocess.run(["docker", *listing, *filters], capture_output=True, text=True, timeout=60).stdout.split()
    if kind != "network" or not found or labelled("container", project):
        return found  # a network of a stack that still has containers is never touched here
    return [name for name in found if not endpoint_lost(name)]


def endpoint_lost(network: str) -> bool:
    """Of a project whose containers are all gone: the network lists no container and still cannot be removed."""
    inspected = subprocess.run(["docker", "network", "inspect", "--format", "{{json .Containers}}", network],
                               capture_output=True, text=True, timeout=60)
    if inspected.returncode != 0 or inspected.stdout.strip() != "{}":
        return False
    removal = subprocess.run(["docker", "network", "rm", network], capture_output=True, text=True, timeout=60)
    if removal.returncode == 0:
        return False  # an empty network left behind: counted (and gone now)
    if "active endpoints" in removal.stderr:
        print(f"note: network {network} keeps an endpoint the engine lost (no container on it); not counted")
        return True
    return False


def docker_ps_all() -> str:
    """Every container of the engine, with its state and labels: what a failed "nothing left" check shows."""
    listing = ["docker", "ps", "-a", "--format", "{{.Names}}\t{{.State}}\t{{.Status}}\t{{.Labels}}"]
    return subprocess.run(listing, capture_output=True, text=True, timeout=60).stdout


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def why_rollouts_failed(run_dir: Path, most: int = 5) -> str:
    """The distinct failures in a run folder's rollouts_failures.jsonl, most common first, with their
    counts: for the message of an assertion on a failed run (the file goes with CI's machine)."""
    path = run_dir / "rollouts_failures.jsonl"
    rows = read_jsonl(path) if path.exists() else []
    failures = Counter((row.get("agent_ref", {}).get("name"), row.get("_ng_failure_type"),
                        str(row.get("_ng_failure_message"))[:600]) for row in rows)
    return "".join(f"\n{count} x {agent}: {kind}: {message}"
                   for (agent, kind, message), count in failures.most_common(most))


def only_run_dir(results: Path) -> Path:
    (run_dir,) = [p for p in results.iterdir() if p.is_dir()]
    return run_dir


def run_rows(nemo_gym: Path, project: str, tmp_path: Path, server: str) -> tuple[list[dict], str]:
    rows = nemo_gym / "resources_servers" / server / "data" / "example.jsonl"
    up = gym_compose("up", "-p", project, "--head-port", str(free_port()), "--search-dir", str(nemo_gym),
                     "--resources-server", server, "--input", str(rows), cwd=tmp_path, timeout=3000)
    assert up.returncode == 0, (up.stdout + up.stderr)[-4000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    assert labelled("container", project) == []
    rollouts = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == len(rows.read_text().splitlines())
    return rollouts, up.stdout + up.stderr
