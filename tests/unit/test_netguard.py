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


def test_the_closed_ruleset_refuses_new_connections_everywhere_but_loopback():
    lines = [line.strip() for line in netguard.ruleset(None).splitlines()]
    chain = lines[lines.index("type filter hook input priority filter - 10; policy accept;") + 1:-2]
    assert chain == ['iifname "lo" accept', "ct state established,related accept",
                     "meta l4proto tcp reject with tcp reset", "reject with icmpx type admin-prohibited"]


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


ARGV = ["--sandbox-side", "side", "--user", "10001:10001", "--", "python", "-m", "gym_compose.server"]


def record(monkeypatch, steps: list, addresses: list[str]) -> None:
    monkeypatch.setattr(netguard, "resolve_now", lambda alias: addresses)
    monkeypatch.setattr(netguard, "local_interfaces", lambda: interfaces(eth0="172.20.0.5/16", eth1="172.21.0.3/16"))
    monkeypatch.setattr(netguard, "install_rules", lambda script: steps.append(("rules", script)))
    monkeypatch.setattr(netguard, "start_helper", lambda alias, pid, timeout: steps.append(("helper", alias, timeout)))
    monkeypatch.setattr(netguard, "drop_privileges", lambda user, keep: steps.append(("drop", user, list(keep))))
    monkeypatch.setattr(netguard.os, "execvp", lambda file, args: steps.append(("exec", list(args))))


def test_it_starts_the_server_only_after_the_rules_and_the_drop(monkeypatch, capsys):
    steps: list = []
    record(monkeypatch, steps, ["172.21.0.3"])
    netguard.main(["--sandbox-side", "side", "--user", "server", "--keep-cap", "CHOWN", "--", "srv", "--flag"])
    assert steps == [("rules", netguard.ruleset(["eth1"])), ("drop", "server", ["CHOWN"]),
                     ("exec", ["srv", "--flag"])]
    assert "(eth1) are refused" in capsys.readouterr().err


def test_an_alias_not_known_yet_closes_every_interface_and_leaves_the_helper_to_narrow_it(monkeypatch, capsys):
    steps: list = []
    record(monkeypatch, steps, [])  # Swarm: the task's names resolve once it is healthy
    netguard.main(["--sandbox-side", "side", "--user", "10001:10001", "--resolve-timeout", "660", "--", "srv"])
    assert steps == [("rules", netguard.ruleset(None)), ("helper", "side", 660.0), ("drop", "10001:10001", []),
                     ("exec", ["srv"])]
    assert "refused on every interface until 'side' resolves" in capsys.readouterr().err


def test_it_fails_closed_naming_the_reason_and_never_starts_the_server(monkeypatch, capsys):
    started = []
    monkeypatch.setattr(netguard.os, "execvp", lambda *args: started.append(args))
    monkeypatch.setattr(netguard, "resolve_now", lambda alias: ["172.21.0.3"])
    monkeypatch.setattr(netguard, "local_interfaces", lambda: interfaces(eth0="172.20.0.5/16"))
    with pytest.raises(SystemExit) as exit_code:
        netguard.main(ARGV)
    assert exit_code.value.code == 2 and started == []
    assert "no interface of this container is on the network of 'side' (172.21.0.3)" in capsys.readouterr().err

    monkeypatch.setattr(netguard, "local_interfaces", lambda: interfaces(eth1="172.21.0.3/16"))
    monkeypatch.setattr(netguard.subprocess, "run",
                        lambda *a, **k: SimpleNamespace(returncode=1, stderr="Operation not permitted", stdout=""))
    with pytest.raises(SystemExit):
        netguard.main(ARGV)
    assert "`nft -f -` failed (exit 1): Operation not permitted" in capsys.readouterr().err and started == []

    def no_nft(*args, **kwargs):
        raise FileNotFoundError("nft")

    monkeypatch.setattr(netguard.subprocess, "run", no_nft)
    monkeypatch.setattr(netguard, "resolve_now", lambda alias: [])  # the closed table needs nft too
    with pytest.raises(SystemExit):
        netguard.main(ARGV)
    assert "`nft` is not in this image" in capsys.readouterr().err and started == []


def test_the_helper_narrows_the_table_once_the_alias_resolves(monkeypatch, capsys):
    answers = [[], [], ["172.21.0.3"]]  # unknown twice (the task not healthy yet), then known
    installed, killed = [], []
    monkeypatch.setattr(netguard, "resolve_now", lambda alias: answers.pop(0))
    monkeypatch.setattr(netguard.time, "sleep", lambda seconds: None)
    monkeypatch.setattr(netguard, "local_interfaces", lambda: interfaces(eth0="172.20.0.5/16", eth1="172.21.0.3/16"))
    monkeypatch.setattr(netguard, "install_rules", installed.append)
    monkeypatch.setattr(netguard.os, "kill", lambda pid, sig: killed.append((pid, sig)))
    netguard.narrow_when_resolved("side", 4242, timeout_s=600)
    assert installed == [netguard.ruleset(["eth1"])] and killed == [] and answers == []
    assert "(eth1) are refused; the other interfaces are open again" in capsys.readouterr().err


def test_the_helper_kills_the_server_when_the_side_cannot_be_closed(monkeypatch, capsys):
    killed, installed = [], []
    monkeypatch.setattr(netguard, "resolve_now", lambda alias: [])
    monkeypatch.setattr(netguard, "install_rules", installed.append)
    monkeypatch.setattr(netguard.os, "kill", lambda pid, sig: killed.append((pid, sig)))
    netguard.narrow_when_resolved("side", 4242, timeout_s=0)
    assert killed == [(4242, netguard.signal.SIGKILL)] and installed == []
    assert "the server is stopped: cannot close its sandbox side: the sandbox-side alias 'side' did not resolve in " \
           "0 s" in capsys.readouterr().err
    monkeypatch.setattr(netguard, "resolve_now", lambda alias: ["10.9.0.1"])  # on none of its interfaces
    monkeypatch.setattr(netguard, "local_interfaces", lambda: interfaces(eth0="172.20.0.5/16"))
    clock = iter(range(0, 10_000, 100))
    monkeypatch.setattr(netguard.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(netguard.time, "sleep", lambda seconds: None)
    netguard.narrow_when_resolved("side", 4242, timeout_s=600)
    assert killed[-1] == (4242, netguard.signal.SIGKILL) and installed == []
    assert "no interface of this container came up on the network of 'side' (10.9.0.1) in 600 s" \
        in capsys.readouterr().err


def test_the_helper_waits_for_the_interface_when_the_alias_resolves_first(monkeypatch, capsys):
    """`docker network connect`: the engine's DNS may answer before the new interface has its address."""
    views = [interfaces(eth0="172.20.0.5/16"), interfaces(eth0="172.20.0.5/16"),
             interfaces(eth0="172.20.0.5/16", eth1="172.21.0.3/16")]
    installed, killed = [], []
    monkeypatch.setattr(netguard, "resolve_now", lambda alias: ["172.21.0.3"])
    monkeypatch.setattr(netguard, "local_interfaces", lambda: views.pop(0))
    monkeypatch.setattr(netguard.time, "sleep", lambda seconds: None)
    monkeypatch.setattr(netguard, "install_rules", installed.append)
    monkeypatch.setattr(netguard.os, "kill", lambda pid, sig: killed.append((pid, sig)))
    netguard.narrow_when_resolved("side", 4242, timeout_s=600)
    assert installed == [netguard.ruleset(["eth1"])] and killed == [] and views == []
    assert "(eth1) are refused; the other interfaces are open again" in capsys.readouterr().err


def test_the_guards_capabilities_are_the_contracts_and_the_kernels_numbers():
    from gym_compose.contract import NETGUARD_CAPABILITIES

    assert sorted(netguard.GUARD_CAPABILITIES) == sorted(NETGUARD_CAPABILITIES)
    assert netguard.GUARD_CAPABILITIES == {"KILL": 5, "NET_ADMIN": 12, "SETGID": 6, "SETPCAP": 8, "SETUID": 7}


def test_the_guard_imports_only_the_standard_library_and_the_contract():  # it runs in every server image
    import ast
    from pathlib import Path

    tree = ast.parse(Path(netguard.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= {"__future__", "argparse", "ctypes", "fcntl", "grp", "ipaddress", "os", "pwd", "socket",
                        "signal", "struct", "subprocess", "sys", "time", "collections.abc", "gym_compose.contract"}
