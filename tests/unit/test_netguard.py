"""The network guard's parts that need no kernel: which interface is the sandbox side, the nft
script, the user it becomes, its arguments, and failing closed before the server starts. The
rules themselves are shown on the real engine (tests/e2e/test_sandbox_reach.py)."""

from __future__ import annotations

import ipaddress
from types import SimpleNamespace

import pytest

from gym_compose.server import netguard


def interfaces(**found: str) -> dict[str, ipaddress.IPv4Interface]:
    return {name: ipaddress.IPv4Interface(value) for name, value in found.items()}


def test_the_sandbox_side_is_the_interface_whose_network_holds_the_alias():
    local = interfaces(lo="127.0.0.1/8", eth0="172.20.0.5/16", eth1="172.21.0.3/16", eth2="172.22.0.2/16")
    assert netguard.sandbox_side_interfaces(["172.21.0.3"], local) == ["eth1"]
    # replicas of one server share the alias (Swarm): every address is on the same network
    assert netguard.sandbox_side_interfaces(["172.21.0.3", "172.21.0.9"], local) == ["eth1"]
    assert netguard.sandbox_side_interfaces(["10.9.0.1"], local) == []
    assert netguard.sandbox_side_interfaces(["127.0.0.1"], local) == []  # never loopback


def test_the_ruleset_replaces_its_own_table_and_refuses_only_new_connections_from_that_side():
    script = netguard.ruleset(["eth1", "eth2"])
    lines = [line.strip() for line in script.splitlines()]
    table = f"inet {netguard.TABLE}"
    assert lines[:3] == [f"add table {table}", f"delete table {table}", f"table {table} {{"]  # one atomic batch
    assert "type filter hook input priority filter - 10; policy accept;" in lines
    rules = [line for line in lines if line.startswith("iifname")]
    assert rules == ['iifname { "eth1", "eth2" } ct state established,related accept',
                     'iifname { "eth1", "eth2" } meta l4proto tcp reject with tcp reset',
                     'iifname { "eth1", "eth2" } reject with icmpx type admin-prohibited']


def fake_passwd(monkeypatch, users: dict[str, tuple[int, int]], groups: dict[str, int] | None = None) -> None:
    entries = {name: SimpleNamespace(pw_name=name, pw_uid=uid, pw_gid=gid) for name, (uid, gid) in users.items()}

    def by_uid(uid):
        found = [entry for entry in entries.values() if entry.pw_uid == uid]
        if not found:
            raise KeyError(uid)
        return found[0]

    def by_name(name):
        return entries[name]

    monkeypatch.setattr(netguard.pwd, "getpwuid", by_uid)
    monkeypatch.setattr(netguard.pwd, "getpwnam", by_name)
    monkeypatch.setattr(netguard.grp, "getgrnam", lambda name: SimpleNamespace(gr_gid=(groups or {})[name]))
    monkeypatch.setattr(netguard.os, "getgrouplist", lambda name, gid: [gid, *(g for g in (groups or {}).values())])


def test_the_user_is_read_as_the_engine_reads_it(monkeypatch):
    fake_passwd(monkeypatch, {"server": (10001, 10001), "root": (0, 0)}, {"extra": 42})
    assert netguard.target_ids("10001:10001") == (10001, 10001, [42, 10001])
    assert netguard.target_ids("server") == (10001, 10001, [42, 10001])
    assert netguard.target_ids("server:extra") == (10001, 42, [42])
    assert netguard.target_ids("4321") == (4321, 0, [0])  # no passwd entry: gid 0, as Docker does
    assert netguard.target_ids("4321:77") == (4321, 77, [77])
    with pytest.raises(netguard.GuardError, match="user 'nobody-here' is not in this image"):
        netguard.target_ids("nobody-here")
    with pytest.raises(netguard.GuardError, match="group 'nogroup' is not in this image"):
        netguard.target_ids("10001:nogroup")


def test_arguments():
    args = netguard.parse_args(["--sandbox-side", "a", "--user", "1:1", "--keep-cap", "cap_chown", "--keep-cap=KILL",
                                "--", "python", "-m", "gym_compose.server"])
    assert (args.sandbox_side, args.user, args.keep_cap) == ("a", "1:1", ["CHOWN", "KILL"])
    assert args.command == ["python", "-m", "gym_compose.server"]
    with pytest.raises(SystemExit):
        netguard.parse_args(["--sandbox-side", "a", "--user", "1", "--"])


def test_it_fails_closed_naming_the_reason_and_never_starts_the_server(monkeypatch, capsys):
    started = []
    monkeypatch.setattr(netguard.os, "execvp", lambda *args: started.append(args))
    monkeypatch.setattr(netguard, "resolve", lambda alias: ["172.21.0.3"])
    monkeypatch.setattr(netguard, "local_interfaces", lambda: interfaces(eth0="172.20.0.5/16"))
    argv = ["--sandbox-side", "side", "--user", "10001:10001", "--", "python", "-m", "gym_compose.server"]
    with pytest.raises(SystemExit) as exit_code:
        netguard.main(argv)
    assert exit_code.value.code == 2 and started == []
    assert "no interface of this container is on the network of 'side' (172.21.0.3)" in capsys.readouterr().err

    monkeypatch.setattr(netguard, "local_interfaces", lambda: interfaces(eth1="172.21.0.3/16"))
    monkeypatch.setattr(netguard.subprocess, "run",
                        lambda *a, **k: SimpleNamespace(returncode=1, stderr="Operation not permitted", stdout=""))
    with pytest.raises(SystemExit):
        netguard.main(argv)
    assert "`nft -f -` failed (exit 1): Operation not permitted" in capsys.readouterr().err and started == []

    def no_nft(*args, **kwargs):
        raise FileNotFoundError("nft")

    monkeypatch.setattr(netguard.subprocess, "run", no_nft)
    with pytest.raises(SystemExit):
        netguard.main(argv)
    assert "`nft` is not in this image" in capsys.readouterr().err and started == []


def test_it_starts_the_server_only_after_the_rules_and_the_drop(monkeypatch, capsys):
    steps = []
    monkeypatch.setattr(netguard, "resolve", lambda alias: ["172.21.0.3"])
    monkeypatch.setattr(netguard, "local_interfaces", lambda: interfaces(eth0="172.20.0.5/16", eth1="172.21.0.3/16"))
    monkeypatch.setattr(netguard, "install_rules", lambda names: steps.append(("rules", list(names))))
    monkeypatch.setattr(netguard, "drop_privileges", lambda user, keep: steps.append(("drop", user, list(keep))))
    monkeypatch.setattr(netguard.os, "execvp", lambda file, args: steps.append(("exec", list(args))))
    netguard.main(["--sandbox-side", "side", "--user", "server", "--keep-cap", "CHOWN", "--", "srv", "--flag"])
    assert steps == [("rules", ["eth1"]), ("drop", "server", ["CHOWN"]), ("exec", ["srv", "--flag"])]
    assert "(eth1) are refused" in capsys.readouterr().err


def test_the_alias_is_asked_until_it_resolves(monkeypatch):
    failures = [2]  # the engine's DNS does not know the container yet, twice

    def getaddrinfo(host, port, family, kind):
        if failures[0]:
            failures[0] -= 1
            raise netguard.socket.gaierror(-2, "Name or service not known")
        return [(family, kind, 6, "", ("172.21.0.3", 0))]

    monkeypatch.setattr(netguard.socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(netguard.time, "sleep", lambda s: None)
    assert netguard.resolve("side") == ["172.21.0.3"] and failures == [0]
    failures[0] = 1
    with pytest.raises(netguard.GuardError, match="'side' does not resolve"):
        netguard.resolve("side", timeout_s=0)


def test_the_guards_capabilities_are_the_contracts_and_the_kernels_numbers():
    from gym_compose.contract import NETGUARD_CAPABILITIES

    assert sorted(netguard.GUARD_CAPABILITIES) == sorted(NETGUARD_CAPABILITIES)
    assert netguard.GUARD_CAPABILITIES == {"NET_ADMIN": 12, "SETGID": 6, "SETPCAP": 8, "SETUID": 7}


def test_the_guard_imports_only_the_standard_library_and_the_contract():  # it runs in every server image
    import ast
    from pathlib import Path

    tree = ast.parse(Path(netguard.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= {"__future__", "argparse", "ctypes", "fcntl", "grp", "ipaddress", "os", "pwd", "socket",
                        "struct", "subprocess", "sys", "time", "collections.abc", "gym_compose.contract"}
