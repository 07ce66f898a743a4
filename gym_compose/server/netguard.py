"""Close the sandbox side of a server's network, drop every privilege, then start the server.

    python -m gym_compose.server.netguard --sandbox-side ALIAS --user USER [--keep-cap CAP]
        [--resolve-timeout S] -- COMMAND...

The command of a server container that shares a network with its sandboxes (sandbox policy
`internal` or `egress`; docs/sandboxes.md, "What a sandbox can reach"). The container starts as
root with only NET_ADMIN, KILL, SETPCAP, SETUID and SETGID. This program

1. resolves ALIAS, the network alias the server has on its sandbox network only (the engine's DNS
   answers the server's own address there), and finds the interface that network is on;
2. installs, with one atomic `nft -f -`, an `inet` table whose input hook rejects every new
   connection arriving on that interface (TCP with a reset, anything else with an ICMP error,
   IPv4 and IPv6), while replies to the server's own connections into its sandboxes pass;
3. drops its capabilities from the bounding set, sets no-new-privileges, becomes USER (supplementary
   groups as the engine would give them), checks that no capability of its own is left, and
   exec()s COMMAND.

Swarm's DNS knows a task's names, aliases included, only once the task is healthy, which needs the
server running. When ALIAS does not resolve at once, the table first rejects new connections on
every interface but loopback (where the healthcheck asks), the server starts, and a helper left
behind as root narrows the table to the sandbox side as soon as ALIAS resolves.

So nothing listening in the container (the server's API, a NeMo Gym server's Ray ports, anything
a server starts) answers a sandbox at any moment, and the server cannot undo the rules. A failure
ends the container with the reason on stderr (before the server starts, or, in the helper, by
killing it): the guard fails closed. Standard library only (it runs in every server image, the
NeMo Gym runtime's included).
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import grp
import ipaddress
import os
import pwd
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Sequence

from gym_compose.contract import NETGUARD_CAPABILITIES

TABLE = "gym_compose_sandbox_side"
# The capabilities the container is given for this program alone, by number (linux/capability.h).
CAPABILITY_NUMBERS = {"KILL": 5, "SETGID": 6, "SETUID": 7, "SETPCAP": 8, "NET_ADMIN": 12}
GUARD_CAPABILITIES = {name: CAPABILITY_NUMBERS[name] for name in NETGUARD_CAPABILITIES}
RESOLVE_TIMEOUT_S = 900.0  # --resolve-timeout's default; the renderer passes the server's start period
RESOLVE_POLL_S = 0.5
NFT_TIMEOUT_S = 30.0
PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
SIOCGIFADDR = 0x8915
SIOCGIFNETMASK = 0x891B
LINUX_CAPABILITY_VERSION_3 = 0x20080522


class GuardError(Exception):
    """Why the server was not started (or was stopped)."""


def sandbox_side_interfaces(addresses: Sequence[str], interfaces: dict[str, ipaddress.IPv4Interface]) -> list[str]:
    """The interfaces whose network holds one of `addresses` (the alias may name several replicas)."""
    wanted = [ipaddress.ip_address(address) for address in addresses]
    return sorted(name for name, interface in interfaces.items()
                  if name != "lo" and any(address in interface.network for address in wanted))


def ruleset(interfaces: Sequence[str] | None) -> str:
    """The nft script refusing new connections from the sandbox-side `interfaces`, or (None) from
    every interface but loopback. It replaces this program's table in one batch."""
    if interfaces is None:
        rules = ['iifname "lo" accept', "ct state established,related accept",
                 "meta l4proto tcp reject with tcp reset", "reject with icmpx type admin-prohibited"]
    else:
        names = "iifname { " + ", ".join(f'"{name}"' for name in interfaces) + " }"
        rules = [f"{names} ct state established,related accept", f"{names} meta l4proto tcp reject with tcp reset",
                 f"{names} reject with icmpx type admin-prohibited"]
    return "\n".join([
        f"add table inet {TABLE}",
        f"delete table inet {TABLE}",
        f"table inet {TABLE} {{",
        "  chain input {",
        "    type filter hook input priority filter - 10; policy accept;",
        *(f"    {rule}" for rule in rules),
        "  }",
        "}",
        "",
    ])


def resolve_now(alias: str) -> list[str]:
    """The alias's IPv4 addresses, or [] while the engine's DNS does not know it."""
    try:
        found = socket.getaddrinfo(alias, None, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror:
        return []
    return sorted({str(entry[4][0]) for entry in found})


def local_interfaces() -> dict[str, ipaddress.IPv4Interface]:
    """Each interface's IPv4 address and network (ioctl; the images have no `ip`)."""
    found = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                address = socket.inet_ntoa(fcntl.ioctl(sock.fileno(), SIOCGIFADDR, request)[20:24])
                netmask = socket.inet_ntoa(fcntl.ioctl(sock.fileno(), SIOCGIFNETMASK, request)[20:24])
            except OSError:  # no IPv4 address on it
                continue
            found[name] = ipaddress.IPv4Interface(f"{address}/{netmask}")
    return found

def close_sandbox_side(alias: str, addresses: Sequence[str]) -> list[str]:
    """Install the rules for the interface(s) on the alias's network; returns their names."""
    interfaces = sandbox_side_interfaces(addresses, local_interfaces())
    if not interfaces:
        raise GuardError(f"no interface of this container is on the network of {alias!r} ({', '.join(addresses)})")
    install_rules(ruleset(interfaces))
    return interfaces


def install_rules(script: str) -> None:
    try:
        done = subprocess.run(["nft", "-f", "-"], input=script, capture_output=True, text=True,
                              timeout=NFT_TIMEOUT_S)
    except FileNotFoundError:
        raise GuardError("`nft` is not in this image; the server images' base has the nftables package "
                         "(rebuild the images with this gym-compose)") from None
    except subprocess.TimeoutExpired:
        raise GuardError(f"`nft -f -` did not finish in {NFT_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        raise GuardError(f"`nft -f -` failed (exit {done.returncode}): {done.stderr.strip() or done.stdout.strip()}"
                         " (the container needs NET_ADMIN, and the engine's kernel nf_tables)")


def narrow_when_resolved(alias: str, server_pid: int, timeout_s: float) -> None:
    """The helper's work, as root, the server running behind the closed table: narrow the table to
    the sandbox side once the alias resolves; if it never does, or the rules fail, say why and
    kill the server, so that the container ends with the reason."""
    deadline = time.monotonic() + timeout_s
    try:
        # The engine's DNS may answer the alias of a network connected later before the
        # container's interface on it has its address: wait for both, every interface closed.
        while not (interfaces := sandbox_side_interfaces(addresses := resolve_now(alias), local_interfaces())):
            if time.monotonic() >= deadline:
                if addresses:
                    raise GuardError(f"no interface of this container came up on the network of {alias!r} "
                                     f"({', '.join(addresses)}) in {timeout_s:.0f} s")
                raise GuardError(f"the sandbox-side alias {alias!r} did not resolve in {timeout_s:.0f} s; the server "
                                 "container must have it on its sandbox network only (rendered by gym-compose)")
            time.sleep(RESOLVE_POLL_S)
        install_rules(ruleset(interfaces))
    except (GuardError, OSError) as error:
        print(f"gym-compose: the server is stopped: cannot close its sandbox side: {error}", file=sys.stderr,
              flush=True)
        os.kill(server_pid, signal.SIGKILL)
        return
    print(f"gym-compose: new connections from the sandbox network ({', '.join(interfaces)}) are refused; "
          "the other interfaces are open again", file=sys.stderr, flush=True)


def start_helper(alias: str, server_pid: int, timeout_s: float) -> None:
    """Leave `narrow_when_resolved` running in a grandchild, which the container's init adopts."""
    child = os.fork()
    if child == 0:
        try:
            if os.fork() == 0:
                narrow_when_resolved(alias, server_pid, timeout_s)
        finally:
            os._exit(0)
    os.waitpid(child, 0)


def target_ids(user: str) -> tuple[int, int, list[int]]:
    """(uid, gid, supplementary groups) for a `user:` value, as the Docker engine reads it:
    NAME or UID, optionally :GROUP or :GID; a uid without a passwd entry has gid 0."""
    name, _, group = user.partition(":")
    try:
        entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except KeyError:
        if not name.isdigit():
            raise GuardError(f"user {name!r} is not in this image's /etc/passwd") from None
        entry = None
    uid = int(name) if name.isdigit() else entry.pw_uid  # type: ignore[union-attr]
    if group:
        try:
            gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
        except KeyError:
            raise GuardError(f"group {group!r} is not in this image's /etc/group") from None
    else:
        gid = entry.pw_gid if entry is not None else 0
    groups = os.getgrouplist(entry.pw_name, gid) if entry is not None else [gid]
    return uid, gid, sorted(set(groups))


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, argument: int) -> None:
    if _libc().prctl(option, ctypes.c_ulong(argument), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        raise GuardError(f"prctl({option}, {argument}): {os.strerror(ctypes.get_errno())}")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _clear_capabilities(numbers: Sequence[int]) -> None:
    """Remove capabilities from this process's effective, permitted and inheritable sets (a root
    server keeps the rest, as the engine would have given it)."""
    header, data = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    libc = _libc()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise GuardError(f"capget: {os.strerror(ctypes.get_errno())}")
    for number in numbers:
        word, bit = divmod(number, 32)
        mask = ~(1 << bit) & 0xFFFFFFFF
        data[word].effective &= mask
        data[word].permitted &= mask
        data[word].inheritable &= mask
    if libc.capset(ctypes.byref(header), data) != 0:
        raise GuardError(f"capset: {os.strerror(ctypes.get_errno())}")


def _capability_sets() -> dict[str, int]:
    with open("/proc/self/status", encoding="ascii") as status:
        return {key: int(value, 16) for key, _, value in (line.partition(":\t") for line in status)
                if key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}


def drop_privileges(user: str, keep: Sequence[str]) -> None:
    """Become `user` with none of the guard's capabilities left anywhere (but those in `keep`, the
    server's own `cap_add`), and no way to gain privileges on exec."""
    uid, gid, groups = target_ids(user)
    dropped = [number for name, number in GUARD_CAPABILITIES.items() if name not in keep]
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    # SETPCAP last: dropping from the bounding set needs it.
    for number in sorted(dropped, key=lambda n: n == GUARD_CAPABILITIES["SETPCAP"]):
        _prctl(PR_CAPBSET_DROP, number)
    os.setgroups(groups)
    os.setgid(gid)
    os.setuid(uid)  # to a non-root uid: the kernel clears every capability set
    if dropped:
        _clear_capabilities(dropped)  # a root server: setuid(0) cleared nothing
    left = _capability_sets()
    mask = sum(1 << number for number in dropped)
    held = {key: value & mask for key, value in left.items() if value & mask}
    if held or os.getuid() != uid or os.geteuid() != uid or os.getegid() != gid:
        raise GuardError(f"dropping privileges left {held or 'other ids'} (uid {os.getuid()}, gid {os.getgid()})")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m gym_compose.server.netguard", description=__doc__.split("\n")[0])
    parser.add_argument("--sandbox-side", required=True, metavar="ALIAS",
                        help="the server's network alias on its sandbox network only")
    parser.add_argument("--user", required=True, help="who the server runs as: UID[:GID] or NAME[:GROUP]")
    parser.add_argument("--keep-cap", action="append", default=[], metavar="CAP",
                        help="a capability the server's own config adds (kept for a root server)")
    parser.add_argument("--resolve-timeout", type=float, default=RESOLVE_TIMEOUT_S, metavar="S",
                        help="how long the alias may take to resolve (Swarm: until the server is healthy)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- and the server's command")
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        parser.error("no command after --")
    args.keep_cap = [cap.upper().removeprefix("CAP_") for cap in args.keep_cap]
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        addresses = resolve_now(args.sandbox_side)
        if addresses:
            interfaces = close_sandbox_side(args.sandbox_side, addresses)
            said = f"new connections from the sandbox network ({', '.join(interfaces)}) are refused"
        else:
            install_rules(ruleset(None))
            start_helper(args.sandbox_side, os.getpid(), args.resolve_timeout)
            said = (f"new connections are refused on every interface until {args.sandbox_side!r} resolves "
                    "(on Swarm: once the server is healthy)")
        drop_privileges(args.user, args.keep_cap)
    except (GuardError, OSError) as error:
        print(f"gym-compose: the server was not started: cannot close its sandbox side: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"gym-compose: {said}", file=sys.stderr, flush=True)
    try:
        os.execvp(args.command[0], args.command)
    except OSError as error:
        print(f"gym-compose: cannot start {args.command[0]!r}: {error}", file=sys.stderr)
        raise SystemExit(127) from None


if __name__ == "__main__":
    main()
