"""Egress phases: `network: {egress: {allow: [...], phases: {verify: [...], offline: []}}}` checked
at plan time; each phase that names hosts rendered as a network of its own with its own proxy (a
phase that names none has neither), the broker's policy naming them, and the sandbox containers
and pods the broker makes in a phase."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym_compose.contract import SANDBOX_POLICY_ENV as POLICY_ENV
from gym_compose.errors import UserError
from gym_compose.plan.egress_allow import MAX_PHASES, phase_hosts
from gym_compose.plan.model import StackOptions
from gym_compose.plan.planner import plan_stack
from gym_compose.plan.sandbox_plan import BROKER_SERVICE, CONTROL_NETWORK, EGRESS_NETWORK
from gym_compose.render import egress_proxy
from gym_compose.render.compose import RenderOptions
from gym_compose.sandbox.broker.launch import container_config
from gym_compose.sandbox.policy import BrokerSettings
from gym_compose.stack.lifecycle import stack_service_names
from tests.support.plans import SOCKET, sandbox_compose_model, sandbox_stack_roots
from tests.support.plans import sandbox_stack_config as config

IMAGES = {"base": "gym-compose/base:abc", BROKER_SERVICE: "gym-compose/sandbox_broker:def",
          "sandbox:coder": "gym-compose/sandbox:123", egress_proxy.IMAGE_KEY: "gym-compose/egress-proxy:456"}
PHASED = {"network": {"egress": {"allow": ["pypi.org"],
                                 "phases": {"verify": ["files.example.org"], "offline": []}}}}


@pytest.fixture
def roots(tmp_path: Path) -> list[Path]:
    return sandbox_stack_roots(tmp_path)


def block(phases) -> dict:
    return {"egress": {"allow": ["pypi.org"], "phases": phases}}


def test_phases_name_their_hosts_in_any_spelling_the_top_level_takes():
    assert phase_hosts("s.network", {"egress": {"allow": ["pypi.org"]}}) == {}
    found = phase_hosts("s.network", block({"verify": ["A.example.org", "a.example.org"], "build": "pypi.org",
                                            "run": {"allow": ["*.example.org"]}, "offline": [], "quiet": None}))
    assert found == {"verify": ["a.example.org"], "build": ["pypi.org"], "run": ["*.example.org"],
                     "offline": [], "quiet": []}


@pytest.mark.parametrize(("phases", "message"), [
    ([], r"s\.network\.egress\.phases must be a mapping of PHASE"),
    ({}, r"s\.network\.egress\.phases must be a mapping of PHASE"),
    ({"default": []}, r"phases\.default: 'default' is not a phase name"),
    ({"Verify": []}, r"'Verify' is not a phase name"),
    ({"ver-ify": []}, r"'ver-ify' is not a phase name"),
    ({"averylongphase": []}, r"'averylongphase' is not a phase name"),
    ({"9lives": []}, r"'9lives' is not a phase name"),
    ({"verify": {"hosts": ["pypi.org"]}}, r"phases\.verify must be a list of host names or \{allow"),
    ({"verify": 3}, r"phases\.verify must be a list of host names \(empty: no host\)"),
    ({"verify": ["pypi.org", "http://x.org"]}, r"phases\.verify\[1\]: 'http://x.org' is not a host name"),
    ({f"p{i}": [] for i in range(MAX_PHASES + 1)}, rf"names {MAX_PHASES + 1} phases; at most {MAX_PHASES}"),
])
def test_bad_phases_are_refused_naming_the_key(phases, message):
    with pytest.raises(UserError, match=message):
        phase_hosts("s.network", block(phases))


def test_a_plan_with_a_bad_phase_names_the_server(roots):
    with pytest.raises(UserError, match=r"coder\.sandbox_config\.network\.egress\.phases\.verify\[0\]"):
        plan_stack(config({"network": block({"verify": ["10.0.0.1"]})}), roots, StackOptions(project="p"))


def test_each_phase_with_hosts_has_its_own_network_and_proxy_and_the_server_joins_neither(roots):
    model = sandbox_compose_model(config(PHASED), roots, IMAGES)
    verify_network = model["networks"]["sbx-coder-verify"]
    assert verify_network["name"] == "p-sbx-coder-verify"
    assert verify_network["internal"] is True and verify_network["driver_opts"]
    assert not any("offline" in name for name in model["networks"])  # a phase with no host: no network
    verify = model["services"]["coder-egress-proxy-verify"]
    assert verify["networks"] == ["sbx-coder-verify", EGRESS_NETWORK]
    assert "printf '%s\\n' files.example.org > /tmp/allowed-hosts" in verify["command"][2]
    default = model["services"]["coder-egress-proxy"]
    assert default["networks"] == ["sbx-coder", EGRESS_NETWORK] and "files.example.org" not in default["command"][2]
    assert set(model["services"]["coder"]["networks"]) == {"gym", CONTROL_NETWORK, "sbx-coder"}
    assert not any(name.endswith("-offline") for name in model["services"])


def test_the_broker_policy_names_each_phases_network_and_proxy(roots):
    model = sandbox_compose_model(config(PHASED), roots, IMAGES)
    settings = BrokerSettings.model_validate_json(model["services"][BROKER_SERVICE]["environment"][POLICY_ENV])
    policy = settings.servers["coder"]
    assert policy.egress_phases == {"verify": ["files.example.org"], "offline": []}
    assert policy.phase_networks == {"verify": "p-sbx-coder-verify"}
    assert policy.phase_proxy_urls == {"verify": "http://coder-egress-proxy-verify:8888"}
    assert policy.phase_network("default") == policy.phase_network(None) == "p-sbx-coder"
    assert policy.phase_network("offline") is None and policy.phase_refusal("offline") is None
    assert "not declared" in policy.phase_refusal("build")


def test_up_starts_every_phases_proxy(roots):
    stack = plan_stack(config(PHASED), roots, StackOptions(project="p"))
    assert stack.sandboxes.proxy_services() == ["coder-egress-proxy", "coder-egress-proxy-verify"]
    assert stack_service_names(stack)[-3:] == [BROKER_SERVICE, "coder-egress-proxy", "coder-egress-proxy-verify"]


def test_a_phase_proxy_whose_name_is_taken_is_refused(roots):
    data = config(PHASED)
    data["coder_egress_proxy_verify"] = {"resources_servers": {"plain_impl": {"entrypoint": "app.py"}}}
    with pytest.raises(UserError, match="egress proxy would be the service 'coder-egress-proxy-verify', which is taken"):
        plan_stack(data, roots, StackOptions(project="p"))


def test_swarm_renders_each_phase_network_as_an_attachable_internal_overlay(roots):
    from gym_compose.render.swarm import swarm_model

    stack = plan_stack(config(PHASED), roots, StackOptions(project="p", publish_all=True))
    model = swarm_model(stack, IMAGES, RenderOptions(docker_socket=SOCKET))
    assert model["networks"]["sbx-coder-verify"] == {"driver": "overlay", "labels": {"io.gym-compose.project": "p"},
                                                     "name": "p-sbx-coder-verify", "internal": True,
                                                     "attachable": True}
    assert model["services"]["coder-egress-proxy-verify"]["networks"] == ["sbx-coder-verify", EGRESS_NETWORK]


def test_kubernetes_lets_each_phases_pods_reach_their_proxy_alone(roots):
    import kubernetes_validate

    from gym_compose.render.kubernetes import kubernetes_manifests

    stack = plan_stack(config(PHASED), roots, StackOptions(project="p"))
    manifests, secret = kubernetes_manifests(stack, IMAGES)
    for document in [*manifests, secret]:
        kubernetes_validate.validate(document, "1.30.0", strict=True)
    named = {(m["kind"], m["metadata"]["name"]): m for m in manifests}
    assert ("Deployment", "coder-egress-proxy-verify") in named and ("Service", "coder-egress-proxy-verify") in named
    sandboxes = named["NetworkPolicy", "p-sandboxes-coder"]["spec"]
    owner = sandboxes["podSelector"]["matchLabels"]
    assert sandboxes["egress"] == [] and sandboxes["policyTypes"] == ["Ingress", "Egress"]  # by itself: nothing out
    for phase, proxy in (("default", "coder-egress-proxy"), ("verify", "coder-egress-proxy-verify")):
        in_phase = {**owner, "gym-compose.io/sandbox-phase": phase}
        proxy_labels = {"app.kubernetes.io/part-of": "p", "app.kubernetes.io/name": proxy}
        own = named["NetworkPolicy", f"p-sandboxes-coder-{phase}"]["spec"]
        assert own["podSelector"]["matchLabels"] == in_phase and own["policyTypes"] == ["Egress"]
        assert own["egress"] == [{"to": [{"podSelector": {"matchLabels": proxy_labels}}],
                                  "ports": [{"protocol": "TCP", "port": 8888}]}]
        (admitted,) = named["NetworkPolicy", f"p-{proxy}"]["spec"]["ingress"]
        assert admitted["from"] == [{"podSelector": {"matchLabels": in_phase}}]
    assert ("NetworkPolicy", "p-sandboxes-coder-offline") not in named  # no policy adds a way out

    (broker,) = [m for m in manifests if m["kind"] == "Deployment" and m["metadata"]["name"] == BROKER_SERVICE]
    env = {e["name"]: e.get("value") for e in broker["spec"]["template"]["spec"]["containers"][0]["env"]}
    policy = BrokerSettings.model_validate(json.loads(env[POLICY_ENV])).servers["coder"]
    assert policy.phase_proxy_urls == {
        "verify": "http://$(CODER_EGRESS_PROXY_VERIFY_SERVICE_HOST):$(CODER_EGRESS_PROXY_VERIFY_SERVICE_PORT)"}


def test_a_sandbox_is_made_on_its_phases_network_with_its_phases_proxy(roots):
    from gym_compose.sandbox.broker.pod import pod_manifest

    model = sandbox_compose_model(config(PHASED), roots, IMAGES)
    policy = BrokerSettings.model_validate_json(
        model["services"][BROKER_SERVICE]["environment"][POLICY_ENV]).servers["coder"]
    for phase, network, proxy in (("default", "p-sbx-coder", "http://coder-egress-proxy:8888"),
                                  ("verify", "p-sbx-coder-verify", "http://coder-egress-proxy-verify:8888"),
                                  ("offline", "p-sbx-coder", "")):  # offline: detached by the pool before its start
        made = container_config("p", policy, "img", 2.0, phase=phase)
        env = dict(item.split("=", 1) for item in made["Env"])
        assert made["HostConfig"]["NetworkMode"] == network and env["HTTPS_PROXY"] == env["http_proxy"] == proxy
        assert made["Labels"]["io.gym-compose.sandbox.phase"] == phase
        assert pod_manifest(made, "p-sbx-coder-1", "coder")["metadata"]["labels"][
            "gym-compose.io/sandbox-phase"] == phase
    plain = container_config("p", policy.model_copy(update={"network": "internal"}), "img", 2.0)
    assert "io.gym-compose.sandbox.phase" not in plain["Labels"]
    assert "gym-compose.io/sandbox-phase" not in pod_manifest(plain, "p-sbx-coder-2", "coder")["metadata"]["labels"]


def test_kubernetes_policies_evaluated_let_a_pod_reach_its_phases_proxy_and_nothing_else(roots):
    from gym_compose.render.kubernetes import kubernetes_manifests
    from gym_compose.sandbox.broker.pod import pod_manifest
    from tests.support.network_policies import allowed, connects

    stack = plan_stack(config(PHASED), roots, StackOptions(project="p"))
    manifests, _ = kubernetes_manifests(stack, IMAGES)
    policies = [m for m in manifests if m["kind"] == "NetworkPolicy"]
    pods = {m["metadata"]["name"]: {"namespace": "ns", "labels": m["spec"]["template"]["metadata"]["labels"]}
            for m in manifests if m["kind"] in ("Deployment", "Job")}
    policy = stack.sandboxes.server("coder").policy.model_copy(update={"image": "img"})
    proxies = {"default": "coder-egress-proxy", "verify": "coder-egress-proxy-verify", "offline": None}
    assert {"coder", "head", "sandbox-broker", *filter(None, proxies.values())} <= set(pods)
    kube_dns = {"namespace": "kube-system", "labels": {"k8s-app": "kube-dns"}}
    for phase, own_proxy in proxies.items():
        sandbox = {"namespace": "ns", "labels": pod_manifest(container_config("p", policy, "img", 2.0, phase=phase),
                                                             f"sbx-{phase}", "coder")["metadata"]["labels"]}
        for name, pod in pods.items():
            assert connects(policies, sandbox, pod) == (name == own_proxy), (phase, name)
            assert connects(policies, pod, sandbox) == (name == "coder"), (phase, name)  # its server reaches in
        assert not allowed(policies, "Egress", sandbox, kube_dns), phase
        assert not allowed(policies, "Egress", sandbox, {"namespace": "elsewhere", "labels": {}}), phase
