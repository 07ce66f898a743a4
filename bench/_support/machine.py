"""What the benchmarks read from the machine: CPU time of the whole machine, of process trees and of
containers (cgroup v1 or v2), and the engine processes that serve a container.

Only /proc and /sys are read, so measuring costs next to nothing.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy since boot (every core, idle and iowait left out)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / TICKS


def process_seconds(pid: int, with_children: bool = True) -> float:
    """CPU seconds of one process (and of its children it has waited for); 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    used = int(fields[11]) + int(fields[12])  # utime + stime
    if with_children:
        used += int(fields[13]) + int(fields[14])  # cutime + cstime
    return used / TICKS


def children_of() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(ppid, []).append(int(entry))
    return tree


def process_tree(root: int) -> list[int]:
    """`root` and every process below it, now."""
    tree, found, todo = children_of(), [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(tree.get(pid, []))
    return found


def tree_seconds(pids: list[int]) -> float:
    """CPU seconds of these processes themselves (no waited-for children: they are in the list)."""
    return sum(process_seconds(pid, with_children=False) for pid in pids)


def stop_tree(pids: list[int], first_signal: int = signal.SIGINT, grace_s: float = 60.0) -> list[int]:
    """Signal the first pid, wait for every pid to go, then SIGTERM and SIGKILL what is left (by pid)."""
    try:
        os.kill(pids[0], first_signal)
    except ProcessLookupError:
        pass
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig is not None:
            for pid in alive(pids):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + (grace_s if sig is None else 10)
        while alive(pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not alive(pids):
            return []
    return alive(pids)


def alive(pids: list[int]) -> list[int]:
    living = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            living.append(pid)
    return living


def container_seconds(container_id: str) -> float | None:
    """CPU seconds of a running container's cgroup (cgroup v1 cgroupfs/systemd, or v2); None if unknown."""
    for path in (f"/sys/fs/cgroup/cpuacct/docker/{container_id}/cpuacct.usage",
                 f"/sys/fs/cgroup/cpu,cpuacct/docker/{container_id}/cpuacct.usage",
                 f"/sys/fs/cgroup/cpuacct/system.slice/docker-{container_id}.scope/cpuacct.usage",
                 f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/cpu.stat",
                 f"/sys/fs/cgroup/docker/{container_id}/cpu.stat"):
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        if path.endswith("cpu.stat"):
            usage = next(line for line in text.splitlines() if line.startswith("usage_usec"))
            return int(usage.split()[1]) / 1e6
        return int(text) / 1e9
    return None


def shim_pids(container_ids: list[str]) -> list[int]:
    """The containerd shims that serve these containers (a healthcheck's `runc exec` is their child)."""
    wanted, found = set(container_ids), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and b"containerd-shim" in argv[0] and any(arg.decode(errors="replace") in wanted for arg in argv):
            found.append(int(entry))
    return found


def engine_daemon_pids() -> list[int]:
    """dockerd and containerd: shared by every container on the engine, so only whole-machine figures hold them."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                name = Path(f"/proc/{entry}/comm").read_text().strip()
            except OSError:
                continue
            if name in ("dockerd", "containerd"):
                found.append(int(entry))
    return found
