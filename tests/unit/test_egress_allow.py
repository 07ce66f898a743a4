"""Egress allow-lists: `network: {egress: {allow: [...]}}` checked at plan time, rendered as an
internal sandbox network plus a tinyproxy service that is the one way out, and the sandbox
containers the broker makes for it (proxy environment, DNS that answers no outside name)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gym_compose.contract import SANDBOX_POLICY_ENV as POLICY_ENV
from gym_compose.errors import UserError
from gym_compose.plan.egress_allow import allowed_hosts
from gym_compose.plan.model import StackOptions
from gym_compose.plan.planner import plan_stack
from gym_compose.plan.sandbox_plan import BROKER_SERVICE, CONTROL_NETWORK, EGRESS_NETWORK
from gym_compose.render import egress_proxy
from gym_compose.render.compose import RenderOptions
from gym_compose.sandbox.broker.launch import container_config
from gym_compose.sandbox.policy import BrokerSettings, SandboxPolicy
from gym_compose.stack.lifecycle import stack_service_names
from tests.support.plans import SOCKET, sandbox_compose_model, sandbox_stack_roots
from tests.support.plans import sandbox_stack_config as config

HOSTS = ["pypi.org", "files.pythonhosted.org", "*.example.org"]
IMAGES = {"base": "gym-compose/base:abc", BROKER_SERVICE: "gym-compose/sandbox_broker:def",
          "sandbox:coder": "gym-compose/sandbox:123", egress_proxy.IMAGE_KEY: "gym-compose/egress-proxy:456"}
ALLOW = {"network": {"egress": {"allow": HOSTS}}}


@pytest.fixture
def roots(tmp_path: Path) -> list[Path]:
    return sandbox_stack_roots(tmp_path)


def model_of(data: dict, roots) -> dict:
    return sandbox_compose_model(data, roots, IMAGES)


def test_the_hosts_are_checked_and_kept_in_order_without_duplicates():
    block = {"egress": {"allow": ["PyPI.org", "files.pythonhosted.org", "pypi.org", "*.example.org"]}}
    assert allowed_hosts("s.network", block) == ["pypi.org", "files.pythonhosted.org", "*.example.org"]
    assert allowed_hosts("s.network", {"egress": {"allow": "pypi.org"}}) == ["pypi.org"]


@pytest.mark.parametrize(("block", "message"), [
    ({"egres": {"allow": ["pypi.org"]}}, r"s\.network: unknown key\(s\) egres"),
    ({}, r"s\.network has no `egress` key"),
    ({"egress": ["pypi.org"]}, r"s\.network\.egress must be a mapping"),
    ({"egress": {"allow": ["pypi.org"], "ports": [80]}}, r"s\.network\.egress: unknown key\(s\) ports"),
    ({"egress": {"allow": []}}, r"s\.network\.egress\.allow must be a non-empty list"),
    ({"egress": {"allow": ["pypi.org", "https://pypi.org"]}}, r"s\.network\.egress\.allow\[1\]: 'https://pypi.org' "
                                                              r"is not a host name \(no scheme"),
    ({"egress": {"allow": ["pypi.org:443"]}}, r"allow\[0\]: 'pypi.org:443' is not a host name"),
    ({"egress": {"allow": ["10.0.0.1"]}}, r"allow\[0\]: '10.0.0.1' is an address"),
    ({"egress": {"allow": ["::1"]}}, r"allow\[0\]: '::1' is an address"),
    ({"egress": {"allow": ["localhost"]}}, r"allow\[0\]: 'localhost' is not a host name"),
    ({"egress": {"allow": ["bad_name.org"]}}, r"allow\[0\]: 'bad_name.org' is not a host name"),
    ({"egress": {"allow": ["-a.org"]}}, r"is not a host name"),
    ({"egress": {"allow": ["a.*.org"]}}, r"is not a host name"),
    ({"egress": {"allow": ["$(id).org"]}}, r"is not a host name"),
    ({"egress": {"allow": [7]}}, r"allow\[0\] must be a host name, got 7"),
])
def test_bad_blocks_are_refused_naming_the_key(block, message):
    with pytest.raises(UserError, match=message):
        allowed_hosts("s.network", block)


def test_a_string_network_still_means_what_it_did(roots):
    for network in ("none", "internal", "egress"):
        stack = plan_stack(config({"network": network}), roots, StackOptions(project="p"))
        server = stack.sandboxes.server("coder")
        assert server.policy.network == network and server.proxy_service is None
        assert stack.sandboxes.proxy_services() == []
    with pytest.raises(UserError, match=r"coder\.sandbox_config\.network must be one of none, internal, egress"):
        plan_stack(config({"network": "allowlist"}), roots, StackOptions(project="p"))
    with pytest.raises(UserError, match=r"coder\.sandbox_config\.network\.egress\.allow\[0\]"):
        plan_stack(config({"network": {"egress": {"allow": ["http://x.org"]}}}), roots, StackOptions(project="p"))


def test_the_sandbox_network_is_internal_and_the_proxy_is_the_one_way_out(roots):
    model = model_of(config(ALLOW), roots)
    sandbox_network = model["networks"]["sbx-coder"]
    assert sandbox_network["internal"] is True and sandbox_network["driver_opts"]
    assert model["networks"][EGRESS_NETWORK] == {"name": "p-sandbox-egress", "labels": {"io.gym-compose.project": "p"}}
    proxy = model["services"]["coder-egress-proxy"]
    assert proxy["networks"] == ["sbx-coder", EGRESS_NETWORK]
    assert proxy["image"] == "gym-compose/egress-proxy:456" and proxy["user"] == "65534:65534"
    assert proxy["read_only"] is True and proxy["cap_drop"] == ["ALL"]
    assert proxy["security_opt"] == ["no-new-privileges:true"] and "cap_add" not in proxy
    assert proxy["healthcheck"]["test"] == ["CMD", "bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8888"]
    assert proxy["labels"]["io.gym-compose.role"] == "egress-proxy"
    # nothing else joins the egress network; the server still starts through the guard
    others = {name for name, service in model["services"].items()
              if EGRESS_NETWORK in service.get("networks", []) and name != "coder-egress-proxy"}
    assert others == set()
    coder = model["services"]["coder"]
    assert set(coder["networks"]) == {"gym", CONTROL_NETWORK, "sbx-coder"} and coder["command"][2].endswith("netguard")


def test_the_proxy_command_holds_the_filter_and_no_dollar_for_compose_to_interpolate(roots):
    proxy = model_of(config(ALLOW), roots)["services"]["coder-egress-proxy"]
    shell, flag, script = proxy["command"]
    assert (shell, flag) == ("bash", "-c") and "$" not in script
    assert "printf '%s\\n' pypi.org files.pythonhosted.org '*.example.org' > /tmp/allowed-hosts" in script
    for line in ("FilterDefaultDeny Yes", "FilterType fnmatch", "ConnectPort 443", "FilterURLs Off"):
        assert f"'{line}'" in script
    assert script.endswith("exec tinyproxy -d -c /tmp/tinyproxy.conf")


def test_the_broker_policy_names_the_hosts_and_the_proxy(roots):
    model = model_of(config(ALLOW), roots)
    settings = BrokerSettings.model_validate_json(model["services"][BROKER_SERVICE]["environment"][POLICY_ENV])
    policy = settings.servers["coder"]
    assert policy.network == "allowlist" and policy.network_name == "p-sbx-coder"
    assert policy.egress_allow == HOSTS and policy.proxy_url == "http://coder-egress-proxy:8888"


def test_up_starts_the_proxy_with_the_broker(roots):
    stack = plan_stack(config(ALLOW), roots, StackOptions(project="p"))
    assert stack_service_names(stack)[-2:] == [BROKER_SERVICE, "coder-egress-proxy"]


def test_an_allow_listed_sandbox_gets_the_proxy_and_resolves_no_outside_name():
    policy = SandboxPolicy(server="coder", image="img", network="allowlist", network_name="p-sbx-coder",
                           egress_allow=["pypi.org"], proxy_url="http://coder-egress-proxy:8888",
                           env={"HTTPS_PROXY": "http://elsewhere:1", "A": "1"})
    config_ = container_config("p", policy, "img", 2.0)
    env = dict(item.split("=", 1) for item in config_["Env"])
    assert env["A"] == "1"
    for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        assert env[key] == "http://coder-egress-proxy:8888"
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,127.0.0.1,::1"
    assert config_["HostConfig"]["NetworkMode"] == "p-sbx-coder" and config_["HostConfig"]["Dns"] == ["127.0.0.1"]
    for network in ("internal", "egress"):
        other = container_config("p", policy.model_copy(update={"network": network}), "img", 2.0)
        assert "Dns" not in other["HostConfig"] and "HTTP_PROXY=http://coder-egress-proxy:8888" not in other["Env"]


def test_swarm_renders_the_same_proxy_on_overlay_networks(roots):
    from gym_compose.render.swarm import swarm_model

    stack = plan_stack(config(ALLOW), roots, StackOptions(project="p", publish_all=True))
    model = swarm_model(stack, IMAGES, RenderOptions(docker_socket=SOCKET))
    assert model["networks"]["sbx-coder"] == {"driver": "overlay", "labels": {"io.gym-compose.project": "p"},
                                              "name": "p-sbx-coder", "internal": True, "attachable": True}
    assert model["networks"][EGRESS_NETWORK]["driver"] == "overlay" and "internal" not in model["networks"][EGRESS_NETWORK]
    proxy = model["services"]["coder-egress-proxy"]
    compose = model_of(config(ALLOW), roots)["services"]["coder-egress-proxy"]
    for key in ("image", "command", "user", "read_only", "cap_drop", "networks", "healthcheck"):
        assert proxy[key] == compose[key], key
    assert proxy["volumes"] == [{"type": "tmpfs", "target": "/tmp", "tmpfs": {"size": 4 << 20}}]
    assert proxy["deploy"]["replicas"] == 1 and proxy["deploy"]["resources"]["limits"]["memory"] == "128M"
    settings = BrokerSettings.model_validate_json(model["services"][BROKER_SERVICE]["environment"][POLICY_ENV])
    # allow-listed sandboxes are on an internal network: they do not reach the node's published ports
    assert settings.closed_node_ports == [] and settings.servers["coder"].proxy_url == "http://coder-egress-proxy:8888"


def test_kubernetes_renders_the_proxy_and_lets_the_sandboxes_reach_it_alone(roots):
    import kubernetes_validate

    from gym_compose.render.kubernetes import kubernetes_manifests

    stack = plan_stack(config(ALLOW), roots, StackOptions(project="p"))
    manifests, secret = kubernetes_manifests(stack, IMAGES)
    for document in [*manifests, secret]:
        kubernetes_validate.validate(document, "1.30.0", strict=True)
    named = {(m["kind"], m["metadata"]["name"]): m for m in manifests}
    deployment = named["Deployment", "coder-egress-proxy"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    compose = model_of(config(ALLOW), roots)["services"]["coder-egress-proxy"]
    assert container["image"] == "gym-compose/egress-proxy:456" and container["command"] == compose["command"]
    assert container["securityContext"] == {"runAsUser": 65534, "runAsGroup": 65534, "runAsNonRoot": True,
                                            "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                                            "capabilities": {"drop": ["ALL"]}}
    assert named["Service", "coder-egress-proxy"]["spec"]["ports"] == [{"name": "proxy", "port": 8888,
                                                                        "targetPort": 8888}]
    proxy_labels = {"app.kubernetes.io/part-of": "p", "app.kubernetes.io/name": "coder-egress-proxy"}
    sandboxes = named["NetworkPolicy", "p-sandboxes-coder"]["spec"]
    # to the proxy's port and nowhere else, not even DNS
    assert sandboxes["egress"] == [{"to": [{"podSelector": {"matchLabels": proxy_labels}}],
                                    "ports": [{"protocol": "TCP", "port": 8888}]}]
    proxy_policy = named["NetworkPolicy", "p-coder-egress-proxy"]["spec"]
    assert proxy_policy["podSelector"]["matchLabels"] == proxy_labels and proxy_policy["egress"] == [{}]
    (admitted,) = proxy_policy["ingress"]
    assert admitted["from"] == [{"podSelector": {"matchLabels": sandboxes["podSelector"]["matchLabels"]}}]


def test_a_long_server_name_leaves_the_proxy_a_name_within_the_projects_budget(roots):
    from gym_compose.contract import service_budget

    data = {"a_rather_long_instance_name_for_a_coder": config(ALLOW)["coder"], "plain": config()["plain"]}
    project = "a-project-name-of-some-length"
    stack = plan_stack(data, roots, StackOptions(project=project))
    (server,) = stack.sandboxes.servers
    assert len(server.proxy_service) == service_budget(project) and server.proxy_service.startswith(server.service[:20])


def test_an_allow_listed_pod_resolves_no_names_and_finds_its_proxy_by_the_services_variables(roots):
    import json

    import kubernetes_validate

    from gym_compose.render.kubernetes import kubernetes_manifests
    from gym_compose.sandbox.broker.pod import pod_manifest

    stack = plan_stack(config(ALLOW), roots, StackOptions(project="p"))
    manifests, _ = kubernetes_manifests(stack, IMAGES)
    (broker,) = [m for m in manifests if m["kind"] == "Deployment" and m["metadata"]["name"] == BROKER_SERVICE]
    env = {e["name"]: e.get("value") for e in broker["spec"]["template"]["spec"]["containers"][0]["env"]}
    policy = BrokerSettings.model_validate(json.loads(env[POLICY_ENV])).servers["coder"]
    url = "http://$(CODER_EGRESS_PROXY_SERVICE_HOST):$(CODER_EGRESS_PROXY_SERVICE_PORT)"
    assert policy.proxy_url == url
    pod = pod_manifest(container_config("p", policy, "img", 2.0), "p-sbx-coder-1", "coder")
    kubernetes_validate.validate(pod, "1.30.0", strict=True)
    spec = pod["spec"]
    assert spec["dnsPolicy"] == "None" and spec["dnsConfig"] == {"nameservers": ["127.0.0.1"]}
    assert spec["enableServiceLinks"] is True
    pod_env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
    assert pod_env["HTTPS_PROXY"] == pod_env["http_proxy"] == url
    # other policies keep the cluster's DNS and no service links
    internal = pod_manifest(container_config("p", policy.model_copy(update={"network": "internal"}), "img", 2.0),
                            "p-sbx-coder-2", "coder")["spec"]
    assert "dnsPolicy" not in internal and internal["enableServiceLinks"] is False
