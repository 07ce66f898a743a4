"""What the benchmarks read from the machine: CPU time of the whole machine, of process trees and of
containers (cgroup v1 or v2), and the engine processes that serve a container.

Only /proc and /sys are read, so measuring costs next to nothing.
"""

from __future__ import annotations

import os
import signal
import threading
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


# The engine's own processes, by the name the kernel gives them (`comm`, at most 15 characters).
# None of them is another's child but containerd, which lives as long as dockerd, so no time is counted
# twice. A shim's reaped children are left out: they are its `runc` calls but also the container's
# init, whose time (with its own reaped children's) the containers' cgroup counter holds already.
ENGINE_PROCESSES = {"dockerd": "dockerd", "containerd": "containerd", "containerd-shim": "containerd-shim",
                    "containerd-shi": "containerd-shim", "fuse-overlayfs": "fuse-overlayfs"}
CGROUP_ROOTS = ("/sys/fs/cgroup/cpuacct/docker", "/sys/fs/cgroup/cpu,cpuacct/docker", "/sys/fs/cgroup/docker")
MEMORY_ROOT = "/sys/fs/cgroup/memory/docker"


def containers_total_seconds() -> float | None:
    """CPU seconds of every container the engine ran since boot: the parent cgroup's counter (cgroup v1
    keeps what removed children used; v2 does too), so sandboxes that are gone still count."""
    for root in CGROUP_ROOTS:
        for name, scale in (("cpuacct.usage", 1e9), ("cpu.stat", 1e6)):
            try:
                text = Path(root, name).read_text()
            except OSError:
                continue
            if name == "cpu.stat":
                text = next(line for line in text.splitlines() if line.startswith("usage_usec")).split()[1]
            return int(text) / scale
    return None


def live_container_ids() -> set[str]:
    """Ids of the engine's running containers, from the cgroup folders (no docker client started)."""
    for root in (MEMORY_ROOT, *CGROUP_ROOTS):
        try:
            return {entry for entry in os.listdir(root) if len(entry) == 64}
        except OSError:
            continue
    return set()


def _engine_ticks() -> dict[int, tuple[str, int, int]]:
    """pid -> (engine process kind, own ticks, reaped children's ticks) for every engine process now."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            head, tail = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)
        except OSError:
            continue
        kind = ENGINE_PROCESSES.get(head.split("(", 1)[1])
        if kind is not None:
            fields = tail.split()
            found[int(entry)] = (kind, int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14]))
    return found


class EngineCpu(threading.Thread):
    """Where the machine's CPU went during a window: every container (the cgroup counter), the engine's
    processes (dockerd, containerd, the shims, fuse-overlayfs; dockerd's and containerd's with the
    children they reaped) and the rest of the machine (the shims' `runc` calls among it).

    /proc is read every `interval` s: an engine process that starts and ends between two reads is
    not seen (the shims and fuse-overlayfs mounts outlive their container; a reaped one stays
    readable until the init process reaps it), and one that ends keeps the time of its last read.
    What no counter holds is in "rest of the machine" (`runc`, the benchmark's own clients, the
    kernel's threads)."""

    def __init__(self, interval: float = 0.5):
        super().__init__(daemon=True)
        self.interval = interval
        self.stopping = threading.Event()
        self.first: dict[int, tuple[str, int, int]] = {}
        self.last: dict[int, tuple[str, int, int]] = {}

    def start(self) -> None:
        self.machine0, self.containers0 = machine_busy_seconds(), containers_total_seconds() or 0.0
        self.first = _engine_ticks()
        self.last = dict(self.first)
        super().start()

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            self.last.update(_engine_ticks())

    def stop(self) -> dict[str, float]:
        """CPU seconds by kind over the window: machine, containers, each engine process kind (dockerd's
        and containerd's with their reaped children), rest."""
        self.stopping.set()
        self.join()
        self.last.update(_engine_ticks())
        used = {"machine": machine_busy_seconds() - self.machine0,
                "containers": (containers_total_seconds() or 0.0) - self.containers0}
        for pid, (kind, own, reaped) in self.last.items():
            _, own0, reaped0 = self.first.get(pid, (kind, 0, 0))
            ticks = own - own0 + (reaped - reaped0 if kind in ("dockerd", "containerd") else 0)
            used[kind] = used.get(kind, 0.0) + ticks / TICKS
        used["rest of the machine"] = used["machine"] - sum(s for k, s in used.items() if k != "machine")
        return used


def container_memory_bytes(container_id: str) -> int:
    """What `docker stats` shows as a container's memory (cgroup v1: usage less inactive page cache); 0 once gone."""
    folder = Path(MEMORY_ROOT, container_id)
    try:
        usage = int((folder / "memory.usage_in_bytes").read_text())
        stat = dict(line.split() for line in (folder / "memory.stat").read_text().splitlines())
    except (OSError, ValueError):
        return 0
    return max(usage - int(stat.get("total_inactive_file", 0)), 0)


def runs_command(container_id: str, marker: bytes) -> bool | None:
    """Whether one of the container's processes has `marker` in its command line; None while it has
    no process to read (created, not started yet, or gone)."""
    for root in (MEMORY_ROOT, *CGROUP_ROOTS):
        try:
            pids = Path(root, container_id, "cgroup.procs").read_text().split()
        except OSError:
            continue
        commands = []
        for pid in pids:
            try:
                commands.append(Path(f"/proc/{pid}/cmdline").read_bytes())
            except OSError:
                continue
        if any(marker in command for command in commands):
            return True
        # `runc init` is the container's first process until it runs the image's entry point
        return None if not commands or any(command.startswith(b"runc") for command in commands) else False
    return None
