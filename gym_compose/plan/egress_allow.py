"""`sandbox_config.network` as a mapping: `{egress: {allow: [pypi.org, "*.pythonhosted.org"]}}`,
optionally with other lists for named phases: `{egress: {allow: [...], phases: {verify: []}}}`.

Such sandboxes sit on an internal network and reach the outside only through the project's
forward proxy for that server, which lets through the named hosts alone (docs/sandboxes.md,
"Egress allow-lists"). A sandbox starts in the default phase (`allow`); a server moves it to a
named phase, whose network and proxy are its own (sandbox_plan.py). Pure: checks the block and
gives back the host names.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from gym_compose.contract import EGRESS_DEFAULT_PHASE as DEFAULT_PHASE
from gym_compose.errors import UserError

# One DNS label: letters, digits and inner hyphens (RFC 1123), at most 63 characters.
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
MAX_HOSTS = 256
EXAMPLE = "network: {egress: {allow: [pypi.org, files.pythonhosted.org]}}"
PHASES_EXAMPLE = "network: {egress: {allow: [pypi.org], phases: {verify: []}}}"
# A phase name goes into a network's and a service's name: a short DNS label.
_PHASE = re.compile(r"^[a-z][a-z0-9]{0,11}$")
MAX_PHASES = 8


def allowed_hosts(where: str, block: Any) -> list[str]:
    """The host names of a `network:` mapping (`where` names the key in messages), in order,
    lower-cased and without duplicates."""
    if not isinstance(block, dict):
        raise UserError(f"{where} must be none, internal, egress or a mapping, got {block!r}", hint=EXAMPLE)
    unknown = sorted(str(key) for key in block if key != "egress")
    if unknown or "egress" not in block:
        raise UserError(f"{where}: unknown key(s) {', '.join(unknown)}" if unknown else f"{where} has no `egress` key",
                        hint=f"the one key is egress: {EXAMPLE}")
    egress = block["egress"]
    if not isinstance(egress, dict):
        raise UserError(f"{where}.egress must be a mapping with `allow` (a list of host names), got {egress!r}",
                        hint=EXAMPLE)
    unknown = sorted(str(key) for key in egress if key not in ("allow", "phases"))
    if unknown:
        raise UserError(f"{where}.egress: unknown key(s) {', '.join(unknown)}",
                        hint=f"the keys are allow and phases: {PHASES_EXAMPLE}")
    hosts = egress.get("allow")
    if isinstance(hosts, str):
        hosts = [hosts]
    if not isinstance(hosts, list) or not hosts:
        raise UserError(f"{where}.egress.allow must be a non-empty list of host names, got {hosts!r}",
                        hint="for no network at all use `network: none`; for any host, `network: egress`")
    return _host_list(f"{where}.egress.allow", hosts)


def phase_hosts(where: str, block: dict[str, Any]) -> dict[str, list[str]]:
    """`egress.phases` of a checked `network:` mapping: phase name -> its host names (an empty
    list: that phase reaches no host at all). {} when the block names no phases."""
    phases = block["egress"].get("phases")
    if phases is None:
        return {}
    if not isinstance(phases, dict) or not phases:
        raise UserError(f"{where}.egress.phases must be a mapping of PHASE: [HOST, ...], got {phases!r}",
                        hint=PHASES_EXAMPLE)
    if len(phases) > MAX_PHASES:
        raise UserError(f"{where}.egress.phases names {len(phases)} phases; at most {MAX_PHASES}")
    found: dict[str, list[str]] = {}
    for name, hosts in phases.items():
        key = f"{where}.egress.phases.{name}"
        if not isinstance(name, str) or not _PHASE.match(name) or name == DEFAULT_PHASE:
            raise UserError(f"{key}: {name!r} is not a phase name",
                            hint="a lower-case letter, then up to 11 letters or digits (e.g. agent, verify); "
                            f"{DEFAULT_PHASE!r} is the phase of egress.allow")
        if isinstance(hosts, dict):  # {allow: [...]}, as the top level spells it
            if sorted(hosts) != ["allow"]:
                raise UserError(f"{key} must be a list of host names or {{allow: [...]}}, got {hosts!r}",
                                hint=PHASES_EXAMPLE)
            hosts = hosts["allow"]
        if isinstance(hosts, str):
            hosts = [hosts]
        if hosts is None:
            hosts = []
        if not isinstance(hosts, list):
            raise UserError(f"{key} must be a list of host names (empty: no host), got {hosts!r}", hint=PHASES_EXAMPLE)
        found[name] = _host_list(key, hosts)
    return found


def _host_list(where: str, hosts: list[Any]) -> list[str]:
    if len(hosts) > MAX_HOSTS:
        raise UserError(f"{where} names {len(hosts)} hosts; at most {MAX_HOSTS}")
    names: list[str] = []
    for index, host in enumerate(hosts):
        name = checked_host(f"{where}[{index}]", host)
        if name not in names:
            names.append(name)
    return names


def checked_host(where: str, host: Any) -> str:
    """A host name, or `*.` and a domain (any name below it, not the domain itself), lower-cased."""
    if not isinstance(host, str):
        raise UserError(f"{where} must be a host name, got {host!r}")
    name = host.strip().lower()
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        pass
    else:
        raise UserError(f"{where}: {host!r} is an address; name hosts instead",
                        hint="the proxy matches names, so a sandbox cannot reach an address by naming it")
    if any(mark in name for mark in ("://", "/", ":", "@")):
        raise UserError(f"{where}: {host!r} is not a host name (no scheme, port, path or user)",
                        hint="e.g. pypi.org; the proxy allows HTTPS (CONNECT) on port 443 and plain HTTP")
    domain = name.removeprefix("*.")
    labels = domain.split(".")
    if len(domain) > 253 or len(labels) < 2 or not all(_LABEL.match(label) for label in labels) \
            or labels[-1].isdigit():
        raise UserError(f"{where}: {host!r} is not a host name",
                        hint="letters, digits, hyphens and dots, with a dot at least (e.g. pypi.org), "
                        "or *.DOMAIN for every name below DOMAIN")
    return name
