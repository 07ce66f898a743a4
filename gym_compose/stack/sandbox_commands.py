"""`gym-compose ps` (its sandbox table), `gym-compose sandbox exec|shell` (docker exec, for debugging)
and `gym-compose sandbox snapshot|fork|restore|pause|resume|snapshots` (the broker's API, with the
project secret, from inside the broker's container)."""

from __future__ import annotations

import sys

from gym_compose.engine.targets.sandbox_containers import (
    SandboxContainer,
    broker_call,
    broker_leases,
    exec_in_sandbox,
    list_sandboxes,
)
from gym_compose.errors import UserError
from gym_compose.plan.sandbox_names import BROKER_SERVICE

SHELL = "if command -v bash >/dev/null 2>&1; then exec bash; else exec sh; fi"


def print_sandboxes(project: str) -> None:
    sandboxes = list_sandboxes(project)
    if not sandboxes:
        return
    leases = broker_leases(project, BROKER_SERVICE)
    rows = [("SANDBOX", "SERVER", "IMAGE", "AGE", "STATE", "SESSION")]
    for sandbox in sandboxes:
        lease = leases.get(sandbox.name, {})
        state = lease.get("state") or sandbox.state
        rows.append((sandbox.name, sandbox.server, sandbox.image, _age(sandbox.age_s), state,
                     str(lease.get("session") or "-")))
    print()
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def find_sandbox(project: str, name: str | None) -> SandboxContainer:
    """A sandbox by container name, a unique prefix or suffix, or its session; the only one when unnamed."""
    sandboxes = [s for s in list_sandboxes(project) if s.state in ("running", "paused")]
    if not sandboxes:
        raise UserError(f"project {project!r} has no running sandbox",
                        hint="start a stack whose servers declare sandboxes; `gym-compose ps` lists them")
    if name is None:
        if len(sandboxes) == 1:
            return sandboxes[0]
        raise UserError(f"project {project!r} has {len(sandboxes)} sandboxes; name one",
                        hint="see `gym-compose ps -p " + project + "`")
    exact = [s for s in sandboxes if name in (s.name, s.container_id)]
    if exact:
        return exact[0]
    leases = broker_leases(project, BROKER_SERVICE)
    matching = [s for s in sandboxes if s.name.startswith(name) or s.name.endswith(name)
                or s.container_id.startswith(name) or leases.get(s.name, {}).get("session") == name]
    if len(matching) == 1:
        return matching[0]
    if not matching:
        raise UserError(f"no running sandbox of project {project!r} matches {name!r}",
                        hint="`gym-compose ps -p " + project + "` lists them")
    raise UserError(f"{name!r} matches {len(matching)} sandboxes: {', '.join(s.name for s in matching)}")


def sandbox_exec(project: str, name: str | None, command: list[str]) -> int:
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UserError("no command given", hint="e.g. gym-compose sandbox exec SANDBOX -- ls -la")
    sandbox = find_sandbox(project, name)
    return exec_in_sandbox(sandbox.name, command, interactive=sys.stdin.isatty() and sys.stdout.isatty())


def sandbox_shell(project: str, name: str | None) -> int:
    sandbox = find_sandbox(project, name)
    return exec_in_sandbox(sandbox.name, ["sh", "-c", SHELL], interactive=sys.stdin.isatty())


def _broker(project: str, method: str, path: str, body: dict | None = None) -> dict:
    answer = broker_call(project, BROKER_SERVICE, method, path, body)
    if answer is None:
        raise UserError(f"the sandbox broker of project {project!r} is not running or did not answer",
                        hint=f"`gym-compose ps -p {project}` shows its state; `gym-compose logs sandbox-broker` why")
    status, reply = answer
    if status >= 400:
        raise UserError(f"the sandbox broker refused ({status}): {reply.get('error') or reply}")
    return reply


def sandbox_snapshot(project: str, name: str | None) -> int:
    sandbox = find_sandbox(project, name)
    taken = _broker(project, "POST", f"/v1/sandboxes/{sandbox.name}/snapshot")
    print(f"{taken['snapshot_id']}  {taken['image']}  of {sandbox.name} in {taken['took_s']:.2f} s")
    return 0


def sandbox_fork(project: str, name: str | None, count: int, snapshot: str | None) -> int:
    """Fork sandbox `name` ('-': the only one), or, with no name, the snapshot."""
    body: dict = {"n": count}
    if name is not None:
        sandbox = find_sandbox(project, None if name == "-" else name)
        if snapshot:
            body["snapshot"] = snapshot
        forked = _broker(project, "POST", f"/v1/sandboxes/{sandbox.name}/fork", body)
    else:
        forked = _broker(project, "POST", f"/v1/snapshots/{snapshot}/fork", body)
    print(f"snapshot {forked['snapshot_id']}:")
    for fork in forked["forks"]:
        print(f"  {fork['sandbox_id']}  started in {fork.get('lease_s', fork['start_s']):.2f} s")
    print("the forks are leased to the snapshot's server; `gym-compose down` (or the broker's idle timeout) "
          "removes them")
    return 0


def sandbox_restore(project: str, name: str | None, snapshot: str) -> int:
    sandbox = find_sandbox(project, name)
    restored = _broker(project, "POST", f"/v1/sandboxes/{sandbox.name}/restore", {"snapshot": snapshot})
    print(f"{sandbox.name} restored to {snapshot} in {restored['took_s']:.2f} s (its processes were ended)")
    return 0


def sandbox_pause(project: str, name: str | None, resume: bool = False) -> int:
    sandbox = find_sandbox(project, name)
    done = _broker(project, "POST", f"/v1/sandboxes/{sandbox.name}/{'resume' if resume else 'pause'}")
    verb = "resumed" if resume else "paused"
    print(f"{sandbox.name} {verb}" if done.get("changed") else f"{sandbox.name} was already {done.get('state')}")
    return 0


def sandbox_phase(project: str, name: str | None, phase: str) -> int:
    sandbox = find_sandbox(project, name)
    moved = _broker(project, "POST", f"/v1/sandboxes/{sandbox.name}/phase", {"phase": phase})
    print(f"{sandbox.name} moved from egress phase {moved['previous']} to {moved['phase']} in {moved['took_s']:.2f} s"
          if moved.get("changed") else f"{sandbox.name} was already in egress phase {moved['phase']}")
    return 0


def print_snapshots(project: str) -> int:
    snapshots = _broker(project, "GET", "/v1/snapshots")["snapshots"]
    if not snapshots:
        print(f"project {project!r} has no sandbox snapshots")
        return 0
    rows = [("SNAPSHOT", "SERVER", "OF SANDBOX", "IMAGE")]
    rows += [(s["snapshot_id"], s["server"], s["source"], s["image"]) for s in snapshots]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return 0


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
