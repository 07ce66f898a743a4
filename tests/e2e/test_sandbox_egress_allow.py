"""Egress allow-lists on the real engine (docs/sandboxes.md, "Egress allow-lists"): a python_sandbox
server whose sandboxes may reach `pkgs.allowed.test` and `*.mirror.allowed.test` only. A small HTTP
server of the test's own stands on the project's egress network, the proxy's way out, under those
names and under `refused.test` (network aliases, so the proxy resolves them as it would pypi.org).

From a sandbox leased through the real client API: the allowed names answer through the proxy
(plain HTTP, and CONNECT on 443); a refused name and an address get the proxy's 403 with its
message, and the test server sees no request for them; nothing on the egress network is reachable
directly, not even the proxy's own address there, and no outside name resolves in the sandbox;
the project is as unreachable as from an `internal` sandbox (tests/support/sandbox_reach.py)."""

from __future__ import annotations

import json

import pytest

from tests.e2e import PROJECT_PREFIX
from tests.support.egress_allow import (
    ALLOWED,
    CONFIG,
    REFUSED,
    check_allowed_and_refused,
    check_phases,
    in_sandbox,
    requests_seen,
    start_index_server,
)
from tests.support.sandbox_reach import check_reach, start_stack
from tests.support.sandboxes import gym_compose, inspect, labelled, run

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("egress-allow")
    project = f"{PROJECT_PREFIX}-allow"
    index = None
    try:
        started = start_stack(cwd, project, config_text=CONFIG)
        index = start_index_server(project)
        yield started, index
    finally:
        if index:
            run("docker", "rm", "-f", index, timeout=120)
        gym_compose("down", "-p", project, cwd=cwd)


def test_allowed_names_answer_through_the_proxy_and_refused_ones_get_its_403(stack):
    check_allowed_and_refused(*stack)


def test_nothing_beyond_the_proxy_is_reachable_directly_and_no_outside_name_resolves(stack):
    reach, index = stack
    egress_network = f"{reach.project}-sandbox-egress"
    index_address = inspect(index)[0]["NetworkSettings"]["Networks"][egress_network]["IPAddress"]
    proxy_address = reach.address("reach-allowlist-egress-proxy", "sandbox-egress")
    before = len(requests_seen(index))
    seen = in_sandbox(reach, {"direct": [f"{index_address}:80", f"{index_address}:443", f"{proxy_address}:8888"],
                              "connect": [f"{index_address}:443"], "http": [index_address],
                              "resolve": [ALLOWED, REFUSED, "exfil.example.com", "reach-allowlist-egress-proxy"]})
    assert set(seen["direct"].values()) == {"unreachable"}, seen  # the sandbox network has no route out
    assert seen["connect"][f"{index_address}:443"][0] == "HTTP/1.1 403 Filtered", seen  # the proxy names hosts only
    assert seen["http"][index_address][0] == 403, seen
    for name in (ALLOWED, REFUSED, "exfil.example.com"):  # the proxy resolves; the sandbox asks no one outside
        assert str(seen["resolve"][name]).startswith("unresolved"), seen
    assert isinstance(seen["resolve"]["reach-allowlist-egress-proxy"], list), seen  # its own network's names do
    assert len(requests_seen(index)) == before
    for sandbox in inspect(*labelled("container", reach.project, "io.gym-compose.sandbox")):
        assert sandbox["HostConfig"]["Dns"] == ["127.0.0.1"]
        assert sorted(sandbox["NetworkSettings"]["Networks"]) == [f"{reach.project}-sbx-reach-allowlist"]
    sandbox_network = inspect_network(f"{reach.project}-sbx-reach-allowlist")
    assert sandbox_network["Internal"] is True
    assert inspect_network(egress_network)["Internal"] is False


def inspect_network(name: str) -> dict:
    done = run("docker", "network", "inspect", name, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)[0]


def test_nothing_of_the_project_answers_an_allow_listed_sandbox(stack):
    reach, _ = stack
    check_reach(reach, "allowlist")


def test_the_proxy_runs_unprivileged_and_logs_the_refusals(stack):
    reach, _ = stack
    proxy = reach.container("reach-allowlist-egress-proxy")
    (details,) = inspect(proxy)
    assert details["Config"]["User"] == "65534:65534" and details["HostConfig"]["ReadonlyRootfs"] is True
    assert details["HostConfig"]["CapDrop"] == ["ALL"] and not details["HostConfig"]["CapAdd"]
    assert sorted(details["NetworkSettings"]["Networks"]) == [f"{reach.project}-sandbox-egress",
                                                               f"{reach.project}-sbx-reach-allowlist"]
    logged = run("docker", "logs", proxy, timeout=60)
    logs = logged.stdout + logged.stderr
    assert 'Proxying refused on filtered domain "refused.test"' in logs, logs[-3000:]


def test_a_sandbox_moved_to_another_phase_reaches_that_phases_hosts_alone(stack):
    reach, _ = stack
    check_phases(reach)
    proxy = reach.container("reach-allowlist-egress-proxy-verify")
    (details,) = inspect(proxy)
    assert sorted(details["NetworkSettings"]["Networks"]) == [f"{reach.project}-sandbox-egress",
                                                               f"{reach.project}-sbx-reach-allowlist-verify"]
    assert inspect_network(f"{reach.project}-sbx-reach-allowlist-verify")["Internal"] is True
    server = inspect(reach.container("reach-allowlist"))[0]
    assert f"{reach.project}-sbx-reach-allowlist-verify" not in server["NetworkSettings"]["Networks"]
